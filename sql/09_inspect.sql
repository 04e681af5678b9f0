-- Inspection ------------------------------------------------------------------
--
-- What a person or a program asks of the queue: counts per type and status,
-- one job, pages of jobs; and what a producer does to its own jobs after
-- the enqueue: cancel them, or wait for their end.

create function pyjobq._history_counts()
returns table (job_type smallint, status int, jobs bigint, exact boolean)
language sql
stable
set search_path = pg_catalog, pyjobq, pg_temp
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
  with ended_counts as (
    -- DEAD and CANCELLED grow with history too: each type's counted through
    -- job_dead_cancelled_idx up to 10001 entries, no further.
    select t.job_type, e.status,
           (select count(*)
              from (select 1
                      from pyjobq.job_history j
                     where j.status in (4, 5)  -- the index's predicate, for the planner
                       and j.job_type = t.job_type
                       and j.status = e.status
                     limit 10001) as k) as jobs
      from pyjobq.job_type t
     cross join (values (4), (5)) as e(status)
  ), size as (
    -- The history's rows now, partition by partition: rows per page at the
    -- partition's last ANALYZE times its pages now, or, before its first
    -- ANALYZE, the server's count of its live rows.
    select coalesce(sum(p.bytes), 0) <= 1048576 as small,
           coalesce(sum(p.bytes), 0) / current_setting('block_size')::int as pages,
           coalesce(sum(case when c.reltuples >= 0 and c.relpages > 0
                             then c.reltuples / c.relpages * (p.bytes / current_setting('block_size')::int)
                             else pg_stat_get_live_tuples(c.oid)
                        end), 0) as rows
      from pg_partition_tree('pyjobq.job_history') t
      join pg_class c on c.oid = t.relid
     cross join lateral (select pg_relation_size(c.oid) as bytes) p
     where t.isleaf
  ), done_counted as (
    -- A table of at most 1 MiB (a few thousand jobs) is cheap to read: exact.
    select j.job_type, count(*) as jobs
      from pyjobq.job_history j
     where j.status = 3
       and (select z.small from size z)
     group by j.job_type
  ), stats as (
    select s.most_common_vals as vals, s.most_common_freqs as freqs
      from pg_stats_ext s
     where s.statistics_schemaname = 'pyjobq'
       and s.statistics_name = 'job_type_status_stats'
       and s.most_common_freqs is not null
  ), listed as (
    -- Each (type, status)'s share of the rows in the sample of the last ANALYZE.
    select s.vals[i][1]::int as job_type, s.vals[i][2]::int as status, s.freqs[i] as freq
      from stats s
     cross join lateral generate_subscripts(s.freqs, 1) as i
  ), sample as materialized (
    -- Larger and never analyzed: about 32 of its pages, the same ones at every
    -- call while it does not grow. The condition is checked before the scan.
    select j.job_type, j.status
      from pyjobq.job_history j
           tablesample system ((select least(100, 100.0 * 32 / greatest(z.pages, 1)) from size z)) repeatable (0)
     where not (select z.small from size z)
       and not exists (select from stats)
  ), shares as (
    select l.job_type, l.status, l.freq from listed l
    union all
    select m.job_type, 3, count(*)::double precision / (select count(*) from sample)
      from sample m
     where m.status = 3
     group by m.job_type
  ), known as (
    -- History rows counted exactly now whose (type, status) has no share.
    select coalesce(sum(k.jobs), 0) as jobs
      from ended_counts k
     where k.jobs <= 10000
       and not exists (select from shares h where (h.job_type, h.status) = (k.job_type, k.status))
  ), estimated as (
    -- Not small: a share times the rows now. A type whose DONE jobs have no
    -- share (too few to be in the sample) gets, split with the others without
    -- one, the rows that no share and no exact count accounts for.
    select h.job_type, h.status, round(h.freq * z.rows)::bigint as jobs
      from shares h
     cross join size z
     where h.status in (3, 4, 5)
    union all
    select t.job_type, 3,
           greatest(0, round(((1 - (select coalesce(sum(h.freq), 0) from shares h)) * z.rows - k.jobs)
                             / count(*) over ()))::bigint
      from pyjobq.job_type t
     cross join size z
     cross join known k
     where not exists (select from shares h where h.job_type = t.job_type and h.status = 3)
  )
  select t.job_type, s.status,
         case when s.status in (4, 5) and e.jobs <= 10000 then e.jobs
              -- More than 10000 DEAD or CANCELLED: the estimate, but at least what was counted.
              when s.status in (4, 5) then greatest(coalesce(de.jobs, 0), e.jobs)
              when z.small then coalesce(dc.jobs, 0)
              else coalesce(de.jobs, 0)
         end,
         (s.status in (4, 5) and e.jobs <= 10000) or (s.status = 3 and z.small)
    from pyjobq.job_type t
   cross join (values (3), (4), (5)) as s(status)
   cross join size z
    left join ended_counts e on e.job_type = t.job_type and e.status = s.status
    left join done_counted dc on dc.job_type = t.job_type and s.status = 3
    left join estimated de on de.job_type = t.job_type and de.status = s.status and not z.small
$$;

comment on function pyjobq._history_counts() is
  'job_counts of the ended jobs: for every job type and DONE, DEAD and CANCELLED, how many (exact: whether '
  'counted rather than estimated). DEAD and CANCELLED are counted up to 10000 a type, then estimated; DONE is '
  'counted while the history is at most 1 MiB, then estimated from the statistics of its last ANALYZE, or '
  'from a sample of 32 pages before its first.';

create function pyjobq.job_counts()
returns table (
  job_type int,
  job_type_name text,
  status int,
  status_name text,
  jobs bigint,
  oldest_due_seconds double precision,
  expired_leases bigint,
  exact boolean
)
language sql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
-- PENDING, RUNNING, DEAD and CANCELLED through partial indexes whatever the
-- statistics say, so the cost follows the jobs in those states, never the
-- DONE history; plain index scans, which stop at a LIMIT (a bitmap scan reads
-- every matching entry first).
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
  -- (select pyjobq.clock_now()): read once, not once per row.
  with exact_counts as (
    select j.job_type, 1 as status, count(*) as jobs,
           min(j.run_after) filter (where j.run_after <= (select pyjobq.clock_now())) as oldest_due,
           null::bigint as expired_leases
      from pyjobq.job j
     where j.status = 1
     group by j.job_type
    union all
    select j.job_type, 2, count(*), null, count(*) filter (where j.lease_until < (select pyjobq.clock_now()))
      from pyjobq.job j
     where j.lease_until is not null  -- the RUNNING jobs exactly: job_running_has_lease
     group by j.job_type
    union all
    select j.job_type, 6, count(*), null, null
      from pyjobq.job j
     where j.status = 6
     group by j.job_type
  )
  select t.job_type::int,
         t.name::text,
         s.status,
         s.status_name,
         case when s.status in (1, 2, 6) then coalesce(c.jobs, 0) else h.jobs end,
         case when s.status = 1 then
           coalesce(extract(epoch from pyjobq.clock_now() - c.oldest_due)::double precision, 0)
         end,
         case when s.status = 2 then coalesce(c.expired_leases, 0) end,
         s.status in (1, 2, 6) or h.exact
    from pyjobq.job_type t
   cross join (select g.status, pyjobq._status_name(g.status) as status_name
                 from generate_series(1, 6) as g(status)) as s
    left join exact_counts c on c.job_type = t.job_type and c.status = s.status
    left join pyjobq._history_counts() h on h.job_type = t.job_type and h.status = s.status
   where t.job_type <> all ((select pyjobq._denied_types('observe'))::smallint[])  -- evaluated once
   order by t.job_type, s.status
$$;

comment on function pyjobq.job_counts() is
  'Jobs per registered type and status (zero rows included), with health figures: for PENDING, the age in '
  'seconds of the oldest due job (0 when none is due); for RUNNING, how many leases expired without being reaped. '
  'PENDING, RUNNING and WAITING are exact and read through indexes; so are DEAD and CANCELLED up to 10000 per type, '
  'beyond which they are at least 10001, from the statistics of the last ANALYZE (exact false). DONE is exact '
  'while the history is at most 1 MiB; beyond, it is an estimate from the statistics of the last ANALYZE of '
  'job_history (before the first, from about 32 pages of it), and exact is false.';

create function pyjobq.job_get(p_job_id uuid)
returns table (
  job_id uuid,
  job_type int,
  job_type_name text,
  status int,
  status_name text,
  priority int,
  attempts int,
  max_attempts int,
  payload jsonb,
  result jsonb,
  last_error text,
  dedupe_key text,
  run_after timestamptz,
  lease_until timestamptz,
  worker_id text,
  run_started_at timestamptz,
  finished_at timestamptz,
  created_at timestamptz,
  updated_at timestamptz,
  metadata jsonb,
  waiting_on int,
  batch_id uuid,
  snoozes int,
  progress jsonb,
  tries int
)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  perform pyjobq._check_observe(p_job_id);
  -- No job is an empty result, not an error: a pruned job is simply gone.
  return query
  select j.job_id, j.job_type::int, t.name::text, j.status::int,
         pyjobq._status_name(j.status),
         j.priority::int, j.attempts::int, j.max_attempts::int, j.payload, j.result, j.last_error,
         j.dedupe_key::text, j.run_after, j.lease_until, j.worker_id::text, j.run_started_at,
         case when j.status in (3, 4, 5) then j.updated_at end, j.created_at, j.updated_at, j.metadata,
         j.waiting_on, j.batch_id, a.snoozes::int, a.progress, (j.attempts - j.attempts_refunded)::int
    from pyjobq.job_all j
    join pyjobq.job_type t on t.job_type = j.job_type
    -- What only a job yet to end keeps.
    left join pyjobq.job a on a.job_id = j.job_id
   where j.job_id = p_job_id;
end;
$$;

comment on function pyjobq.job_get(uuid) is
  'One job as a person needs it to see what happened: type, status, priority, attempts, payload, result, '
  'last_error, dedupe key, run_after, its lease and worker while RUNNING, when its last attempt started '
  '(run_started_at) and when it ended (DONE, DEAD or CANCELLED), the metadata of its enqueue, how many parents it '
  'still waits for (waiting_on; null without parents: job_dependencies lists them), its batch, and, while it is '
  'yet to end, how many times it snoozed and the progress its handler last reported (job_progress; null once it '
  'ended), and the tries it spent of max_attempts (tries: attempts counts every claim since it was enqueued, '
  'tries those since its last redrive, less the ones given back by a release, a snooze or a wait). No row when '
  'there is no such job (never enqueued, or pruned).';

-- The smallest id _new_job_ids gives a job created at p_at: ids are
-- time-ordered, so a creation range is an id range of job_pkey.
create function pyjobq._job_id_floor(p_at timestamptz)
returns uuid
language plpgsql
immutable
strict
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  return (lpad(to_hex(greatest(floor(extract(epoch from p_at) * 1000), 0)::bigint & 281474976710655), 12, '0')
          || '00000000000000000000')::uuid;
end;
$$;

comment on function pyjobq._job_id_floor(timestamptz) is
  'The smallest job id that _new_job_ids gives a job created at p_at (to the millisecond, not before 1970).';

-- The job ids a page of job_list lies between (ids follow the time a job was
-- created): from the creation times asked for, and, for the next page, after
-- the last id of the one before (keyset pagination).
create function pyjobq._list_range(
  p_created_after timestamptz,
  p_created_before timestamptz,
  p_oldest_first boolean,
  p_after uuid,
  out from_id uuid,
  out to_id uuid
)
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  perform pyjobq._check_time('p_created_after', p_created_after, pyjobq.clock_now());
  perform pyjobq._check_time('p_created_before', p_created_before, pyjobq.clock_now());
  from_id := coalesce(pyjobq._job_id_floor(p_created_after), '00000000-0000-0000-0000-000000000000');
  to_id := coalesce(pyjobq._job_id_floor(p_created_before), 'ffffffff-ffff-ffff-ffff-ffffffffffff');
  if p_after is not null and p_oldest_first then
    from_id := greatest(from_id, p_after);
  elsif p_after is not null then
    to_id := least(to_id, p_after);
  end if;
end;
$$;

comment on function pyjobq._list_range(timestamptz, timestamptz, boolean, uuid) is
  'The range of job ids [from_id, to_id) a page of job_list reads: created after p_created_after and before '
  'p_created_before (checked: 22023), and past p_after in the order asked for (p_oldest_first).';

-- job_list's filters checked, in this order; a null p_status or p_job_type is
-- every one.
create function pyjobq._check_list_args(p_limit int, p_status int, p_job_type int, p_dedupe_key text,
                                        p_error text)
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  perform pyjobq._check_range('p_limit', p_limit, 1, 1000),
          pyjobq._check_range('p_status', coalesce(p_status, 1), 1, 6),
          case when p_job_type is not null then pyjobq._check_job_type(p_job_type) end,
          pyjobq._check_text('p_dedupe_key', p_dedupe_key, 200, true),
          pyjobq._check_text('p_error', p_error, 200, true);
end;
$$;

comment on function pyjobq._check_list_args(int, int, int, text, text) is
  'Raises 22004/22023 for a job_list argument out of its range: p_limit 1..1000, p_status 1..6, p_job_type a '
  'registered type, p_dedupe_key and p_error at most 200 characters.';

create function pyjobq.job_list(
  p_job_type int default null,
  p_status int default null,
  p_dedupe_key text default null,
  p_created_after timestamptz default null,
  p_created_before timestamptz default null,
  p_oldest_first boolean default null,
  p_after uuid default null,
  p_limit int default null,
  p_error text default null,
  p_batch_id uuid default null
)
returns table (
  job_id uuid,
  job_type int,
  job_type_name text,
  status int,
  status_name text,
  priority int,
  attempts int,
  max_attempts int,
  dedupe_key text,
  run_after timestamptz,
  worker_id text,
  last_error text,
  created_at timestamptz,
  updated_at timestamptz,
  tries int,
  error_summary text
)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
-- Index scans only, whatever the statistics: a bitmap scan of job_pkey's
-- range would read every page of the history to sort it.
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
declare
  v_limit int := coalesce(p_limit, 100);
  v_oldest boolean := coalesce(p_oldest_first, false);
  v_from uuid;
  v_to uuid;
  v_denied smallint[] := pyjobq._denied_types('observe');
begin
  perform pyjobq._check_list_args(v_limit, p_status, p_job_type, p_dedupe_key, p_error);
  select r.from_id, r.to_id
    into v_from, v_to
    from pyjobq._list_range(p_created_after, p_created_before, v_oldest, p_after) r;

  -- One of three ways runs, chosen by the arguments (the others are cut off
  -- before they read a row): the statuses with few jobs (PENDING, RUNNING,
  -- WAITING, DEAD, CANCELLED: the queue's work, not its history) through their partial
  -- indexes, then sorted; DONE or any status along job_pkey in order, up to
  -- the limit. No way reads the whole history for one page.
  return query
  with matching as not materialized (
    select j.job_id, j.status, j.lease_until, j.batch_id
      from pyjobq.job_all j
     where (p_job_type is null or j.job_type = p_job_type)
       and (p_dedupe_key is null or j.dedupe_key = p_dedupe_key)
       and (p_error is null or strpos(lower(j.last_error), lower(p_error)) > 0)
       and (p_batch_id is null or j.batch_id = p_batch_id)
       and j.job_type <> all (v_denied)
  ), few as materialized (
    -- Every job of the status, through its partial index, before any limit or
    -- id range could tempt the planner into walking job_pkey instead (as it
    -- would on a table never analyzed, where rows look common); or every
    -- member of the batch, through job_batch_idx.
    select m.job_id from matching m where p_batch_id is null and p_status = 1 and m.status = 1
    union all
    select m.job_id from matching m
     where p_batch_id is null and p_status = 2 and m.status = 2 and m.lease_until is not null
    union all
    select m.job_id from matching m where p_batch_id is null and p_status = 6 and m.status = 6
    union all
    select m.job_id from matching m
     where p_batch_id is null and p_status in (4, 5) and m.status in (4, 5) and m.status = p_status
    union all
    select m.job_id from matching m
     where p_batch_id is not null and m.batch_id is not null and m.status = coalesce(p_status, m.status)
  ), ranged as not materialized (
    select m.job_id, m.status
      from matching m
     where p_batch_id is null
       and m.job_id >= v_from and m.job_id < v_to and m.job_id is distinct from p_after
  ), page as (
    (select f.job_id
       from few f
      where f.job_id >= v_from and f.job_id < v_to and f.job_id is distinct from p_after
      order by case when v_oldest then f.job_id end, case when not v_oldest then f.job_id end desc
      limit v_limit)
    union all
    (select r.job_id
       from ranged r
      where coalesce(p_status, 3) = 3 and v_oldest and r.status = coalesce(p_status, r.status)
      order by r.job_id
      limit v_limit)
    union all
    (select r.job_id
       from ranged r
      where coalesce(p_status, 3) = 3 and not v_oldest and r.status = coalesce(p_status, r.status)
      order by r.job_id desc
      limit v_limit)
  )
  select j.job_id, j.job_type::int, t.name::text, j.status::int,
         pyjobq._status_name(j.status),
         j.priority::int, j.attempts::int, j.max_attempts::int, j.dedupe_key::text, j.run_after,
         j.worker_id::text, j.last_error, j.created_at, j.updated_at,
         (j.attempts - j.attempts_refunded)::int, pyjobq._error_summary(j.last_error)
    from page p
    join pyjobq.job_all j on j.job_id = p.job_id
    join pyjobq.job_type t on t.job_type = j.job_type
   order by case when v_oldest then j.job_id end, case when not v_oldest then j.job_id end desc;
end;
$$;

comment on function pyjobq.job_list(int, int, text, timestamptz, timestamptz, boolean, uuid, int, text, uuid) is
  'Lists jobs newest first (or oldest, p_oldest_first), up to p_limit (1..1000, default 100), filtered by job '
  'type, status (1..6), dedupe key, creation time [p_created_after, p_created_before), batch (p_batch_id) and text in last_error '
  '(p_error, any case; read row by row, so give a status other than DONE or a creation range to keep it '
  'short on a long history). Keyset pages: pass the '
  'last job_id of a page as p_after for the next. Without payload and result (job_get has them), with the tries '
  'spent of max_attempts (as job_get) and the last line of last_error (error_summary); only the types the caller '
  'may observe.';

create function pyjobq.job_cancel(p_job_ids uuid[])
returns table (job_id uuid, outcome text)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
set enable_seqscan = off
set enable_bitmapscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_count int := coalesce(cardinality(p_job_ids), 0);
  v_locked uuid[];
  v_cancelled uuid[];
  v_running uuid[];
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  -- Cancelling is the producers' side of a type: its enqueue privilege.
  perform pyjobq._check_privilege('enqueue', array(select distinct j.job_type::int
                                                      from pyjobq.job_all j
                                                     where j.job_id = any (p_job_ids)));
  -- A RUNNING job is CANCELLED at once, like a PENDING one: its holder keeps
  -- its worker id on the row but holds nothing any more, so its every later
  -- call is refused (JQ005), and job_renew_lease_many tells it at the next
  -- heartbeat (cancelled = true) to stop the handler. Rows are locked in id
  -- order, so two cancels of overlapping sets cannot deadlock; WAITING jobs
  -- last, as a completion takes them (after the parents it ends), so that a
  -- cancel holding a child never waits for a parent whose completer waits
  -- for that child; and the WAITING ones together with every WAITING job
  -- the cancel reaches below them, in one statement (see _lock_reach).
  perform
    from pyjobq.job k
   where k.job_id = any (p_job_ids)
     and k.status <> 6
   order by k.job_id
     for no key update;
  perform pyjobq._lock_reach(p_job_ids, true);
  select array_agg(k.job_id order by k.status = 6, k.job_id),
         coalesce(array_agg(k.job_id) filter (where k.status = 2), '{}')
    into v_locked, v_running
    from (select k.job_id, k.status
            from pyjobq.job k
           where k.job_id = any (p_job_ids)
           order by k.status = 6, k.job_id
             for no key update) k;
  select coalesce(array_agg(f.job_id), '{}')
    into v_cancelled
    from pyjobq._finish(null,
                        array(select row(c.id, null, null, 'cancelled', null, null, null, null)::pyjobq.job_end
                                from unnest(v_locked) as c(id)),
                        v_now, '{}') f;
  -- One line in the audit log for the call.
  perform pyjobq._audit('cancel', cardinality(v_cancelled),
                        jsonb_build_object('job_ids', (array(select c from unnest(v_cancelled) c order by c))[1:100]));
  -- The others, as they are now (one that ended while this call waited for
  -- its row is in the history by now).
  return query
  select u.id,
         case when u.id = any (v_running) then 'cancelled_running'
              when u.id = any (v_cancelled) then 'cancelled'
              when exists (select from pyjobq.job_all j where j.job_id = u.id) then 'finished'
              else 'not_found'
         end
    from unnest(p_job_ids) with ordinality as u(id, ord)
   order by u.ord;
end;
$$;

comment on function pyjobq.job_cancel(uuid[]) is
  'Cancels up to 10000 jobs: PENDING, WAITING and RUNNING ones become CANCELLED (final, frees the dedupe key, '
  'redrivable, pruned like DONE); their dependants are resolved as at any end: CANCELLED in turn, unless they '
  'run on parent failure. A RUNNING job''s holder is fenced out at once (its calls get JQ005) and learns '
  'it at its next job_renew_lease_many. Returns every input id in input order with its outcome: cancelled, '
  'cancelled_running, finished (already DONE, DEAD or CANCELLED: unchanged) or not_found. A call that '
  'cancelled jobs writes a line to the audit log (job_audit) with the first 100 of their ids.';

-- Waiting for an outcome. A producer that wants to know when a job ends calls
-- job_watch, LISTENs on pyjobq_done, and reads the job again when its id
-- arrives. Only watched jobs are announced: the trigger's WHEN is checked as
-- the ended row enters the history, and for every other job it is all the
-- trigger costs.
create function pyjobq._notify_done()
returns trigger
language plpgsql
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  perform pg_notify('pyjobq_done', new.job_id::text);
  return null;
end;
$$;

comment on function pyjobq._notify_done() is
  'Trigger of job_done_notify: announces on pyjobq_done the id of a watched job that just ended.';

create trigger job_done_notify
  after insert on pyjobq.job_history
  for each row
  when (new.notify_done)
  execute function pyjobq._notify_done();

create function pyjobq.job_watch(p_job_ids uuid[])
returns table (job_id uuid, status int, status_name text)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
set enable_seqscan = off
set jit = off
as $$
declare
  v_count int := coalesce(cardinality(p_job_ids), 0);
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  perform pyjobq._check_privilege('observe', array(select distinct j.job_type::int
                                                      from pyjobq.job_all j
                                                     where j.job_id = any (p_job_ids)));
  update pyjobq.job j
     set notify_done = true
   where j.job_id = any (p_job_ids)
     and j.status in (1, 2, 6)
     and not j.notify_done;
  -- The status after the update: a job that already ended is not announced,
  -- so the caller reads it from here.
  return query
  select u.id, j.status::int,
         pyjobq._status_name(j.status)
    from unnest(p_job_ids) with ordinality as u(id, ord)
    left join pyjobq.job_all j on j.job_id = u.id
   order by u.ord;
end;
$$;

comment on function pyjobq.job_watch(uuid[]) is
  'Asks for the end (DONE, DEAD or CANCELLED) of up to 10000 jobs to be announced: NOTIFY pyjobq_done with the '
  'job id, on the commit that ends it. LISTEN pyjobq_done before calling it. Returns each input id in input order '
  'with its status now (null when there is no such job): a job that already ended is not announced.';
