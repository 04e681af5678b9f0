-- depends: 0036_producers_hold_no_locks

-- Schema 37: job_counts, job_list and job_enqueue_many in smaller pieces,
-- each function under 120 lines. job_counts reads the ended jobs' counts and
-- estimates from _history_counts; job_list its range of ids from
-- _list_range; job_enqueue_many inserts rows without parents or a window
-- through _enqueue_rows. What they return is unchanged.

create or replace function pyjobq._history_counts()
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

create or replace function pyjobq.job_counts()
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

create or replace function pyjobq._list_range(
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

create or replace function pyjobq.job_list(
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
  updated_at timestamptz
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
  perform pyjobq._check_range('p_limit', v_limit, 1, 1000);
  perform pyjobq._check_range('p_status', coalesce(p_status, 1), 1, 6);  -- null: every status
  if p_job_type is not null then
    perform pyjobq._check_job_type(p_job_type);
  end if;
  perform pyjobq._check_text('p_dedupe_key', p_dedupe_key, 200, true);
  perform pyjobq._check_text('p_error', p_error, 200, true);
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
         j.worker_id::text, j.last_error, j.created_at, j.updated_at
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
  'last job_id of a page as p_after for the next. Without payload and result (job_get has them); only the types '
  'the caller may observe.';

create or replace function pyjobq._enqueue_rows(
  p_job_type int,
  p_payloads jsonb[],
  p_dedupe_keys text[],
  p_priority int,
  p_run_after timestamptz,
  p_max_attempts int,
  p_now timestamptz,
  p_concurrency_keys text[],
  p_metadata jsonb,
  p_batch_id uuid
)
returns table (ord int, job_id uuid, created boolean)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
set jit = off
as $$
declare
  v_count int := cardinality(p_payloads);
  v_ranks bigint[];
  v_row record;
  v_added int := 0;
begin
  perform pyjobq._pending_from(p_run_after, p_now, true);
  v_ranks := pyjobq._fair_ranks(p_job_type, p_priority, p_concurrency_keys, v_count, p_now);

  -- Without keys nothing can conflict: every row is inserted, and the ids
  -- drawn beforehand are the answer, in input order, without a row-by-row loop.
  if p_dedupe_keys is null then
    return query
    with input as materialized (
      select u.i::int as ord, u.payload, u.seq, u.new_id
        from rows from (unnest(p_payloads), pyjobq._new_job_ids(p_now, v_count))
             with ordinality as u(payload, seq, new_id, i)
    ),
    inserted as (
      insert into pyjobq.job as j
        (job_id, seq, job_type, payload, priority, run_after, max_attempts, created_at, updated_at, concurrency_key,
         fair_rank, metadata, batch_id)
      select i.new_id, i.seq, p_job_type, i.payload, p_priority, p_run_after, p_max_attempts, p_now, p_now,
             p_concurrency_keys[i.ord], v_ranks[i.ord], p_metadata, p_batch_id
        from input i
       order by i.ord
    )
    select i.ord, i.new_id, true
      from input i
     order by i.ord;
    perform pyjobq._batch_add(p_batch_id, v_count);
    perform pyjobq._announce(p_job_type, p_run_after, p_now);
    return;
  end if;

  -- Ids are drawn before the insert so that inserted rows can be matched back
  -- to their input position. A key repeated within the batch, or already held
  -- by an active job, yields that job with created = false.
  for v_row in
    with input as materialized (
      select u.i::int as ord, u.payload, p_dedupe_keys[u.i] as dedupe_key, u.seq, u.new_id
        from rows from (unnest(p_payloads), pyjobq._new_job_ids(p_now, v_count))
             with ordinality as u(payload, seq, new_id, i)
    ),
    inserted as (
      insert into pyjobq.job as j
        (job_id, seq, job_type, payload, priority, run_after, dedupe_key, max_attempts, created_at, updated_at,
         concurrency_key, fair_rank, metadata, batch_id)
      select i.new_id, i.seq, p_job_type, i.payload, p_priority, p_run_after, i.dedupe_key, p_max_attempts, p_now, p_now,
             p_concurrency_keys[i.ord], v_ranks[i.ord], p_metadata, p_batch_id
        from input i
       order by i.ord
      on conflict (job_type, dedupe_key) where status in (1, 2, 6) and dedupe_key is not null do nothing
      returning j.job_id, j.dedupe_key
    )
    select i.ord,
           i.dedupe_key,
           coalesce(mine.job_id, sibling.job_id, active.job_id) as job_id,
           mine.job_id is not null as created
      from input i
      left join inserted mine on mine.job_id = i.new_id
      left join inserted sibling on mine.job_id is null and sibling.dedupe_key = i.dedupe_key
      left join pyjobq.job active
             on mine.job_id is null and sibling.job_id is null
            and active.job_type = p_job_type and active.dedupe_key = i.dedupe_key
            and active.status in (1, 2, 6)
     order by i.ord
  loop
    ord := v_row.ord;
    job_id := v_row.job_id;
    created := v_row.created;
    if created then
      v_added := v_added + 1;
    end if;
    if job_id is null then
      -- The active job holding this key finished while we inserted.
      select e.job_id, e.created into job_id, created
        from pyjobq._enqueue_one(p_job_type, p_payloads[ord], p_priority, p_run_after,
                                 v_row.dedupe_key, p_max_attempts, p_now, null, p_concurrency_keys[ord],
                                 p_metadata, null, null, p_batch_id) e;
    end if;
    return next;
  end loop;
  perform pyjobq._batch_add(p_batch_id, v_added);
  perform pyjobq._announce(p_job_type, p_run_after, p_now);
end;
$$;

comment on function pyjobq._enqueue_rows(int, jsonb[], text[], int, timestamptz, int, timestamptz, text[], jsonb, uuid) is
  'job_enqueue_many''s rows without parents and without a window, checked by it: inserted in one statement, in '
  'input order; a duplicate key yields the active job holding it (created false). Returns every row.';

create or replace function pyjobq.job_enqueue_many(
  p_job_type int,
  p_payloads jsonb[],
  p_dedupe_keys text[] default null,
  p_priority int default null,
  p_run_after timestamptz default null,
  p_max_attempts int default null,
  p_unique_for interval default null,
  p_concurrency_keys text[] default null,
  p_metadata jsonb default null,
  p_depends_on jsonb[] default null,
  p_on_parent_failure text default null,
  p_batch_id uuid default null
)
returns table (ord int, job_id uuid, created boolean)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
-- A batch of thousands of rows costs enough to cross jit_above_cost, and
-- compiling the plan took longer than running it (270 of 450 ms for 20000).
set jit = off
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_priority int := coalesce(p_priority, 100);
  v_run_after timestamptz := coalesce(p_run_after, v_now);
  v_max_attempts int;
  v_count int := coalesce(cardinality(p_payloads), 0);
  v_bad int;
  v_row record;
  v_run_on_parent_failure boolean := pyjobq._check_on_parent_failure(p_on_parent_failure);
  v_ids uuid[] := '{}';
begin
  p_payloads := pyjobq._check_array('p_payloads', p_payloads);
  p_dedupe_keys := pyjobq._check_array('p_dedupe_keys', p_dedupe_keys);
  perform pyjobq._check_job_type(p_job_type);
  perform pyjobq._check_privilege('enqueue', array[p_job_type]);
  v_max_attempts := pyjobq._max_attempts(p_job_type, p_max_attempts);
  perform pyjobq._check_range('cardinality(p_payloads)', v_count, 1, 100000);
  perform pyjobq._check_range('p_priority', v_priority, 0, 32767);
  perform pyjobq._check_range('p_max_attempts', v_max_attempts, 1, 1000);
  perform pyjobq._check_time('p_run_after', v_run_after, v_now);
  select min(u.i) into v_bad
    from unnest(p_payloads) with ordinality as u(payload, i)
   where u.payload is null or jsonb_typeof(u.payload) <> 'object';
  if v_bad is not null then
    raise exception 'p_payloads[%] must be a JSON object', v_bad
      using errcode = '22023',
            hint = 'Every payload must be a JSON object, e.g. {"value": ...}.';
  end if;
  perform pyjobq._check_keys('p_dedupe_keys', p_dedupe_keys, v_count);

  perform pyjobq._check_unique_for(p_unique_for, p_dedupe_keys is not null);
  p_concurrency_keys := pyjobq._check_array('p_concurrency_keys', p_concurrency_keys);
  perform pyjobq._check_keys('p_concurrency_keys', p_concurrency_keys, v_count);
  perform pyjobq._check_payload('p_metadata', p_metadata);

  p_depends_on := pyjobq._check_array('p_depends_on', p_depends_on);
  if p_depends_on is not null then
    perform pyjobq._check_same_length('p_depends_on', cardinality(p_depends_on), v_count);
  end if;
  if p_batch_id is not null then
    perform pyjobq._batch_join(p_batch_id);
  end if;

  -- Parents without keys: set-based.
  if p_depends_on is not null and p_dedupe_keys is null then
    return query
      select g.ord, g.job_id, g.created
        from pyjobq._enqueue_graph(p_job_type, p_payloads, v_priority, v_run_after, v_max_attempts, v_now,
                                   p_concurrency_keys, p_metadata, p_depends_on, v_run_on_parent_failure,
                                   p_batch_id) g;
    return;
  end if;
  -- Parents with keys, which may be earlier rows of this call: one job at a
  -- time, in input order, each as job_enqueue takes it.
  if p_depends_on is not null then
    for v_row in
      select u.i::int as i, u.payload
        from unnest(p_payloads) with ordinality as u(payload, i)
       order by u.i
    loop
      select e.job_id, e.created into job_id, created
        from pyjobq._enqueue_one(p_job_type, v_row.payload, v_priority, v_run_after, p_dedupe_keys[v_row.i],
                                 v_max_attempts, v_now,
                                 case when p_dedupe_keys[v_row.i] is not null then p_unique_for end,
                                 p_concurrency_keys[v_row.i], p_metadata,
                                 array(select coalesce(v_ids[r.pos], r.id)
                                         from pyjobq._row_parents(p_depends_on[v_row.i], v_row.i) r
                                        order by r.k),
                                 v_run_on_parent_failure, p_batch_id) e;
      v_ids := v_ids || job_id;
      ord := v_row.i;
      return next;
    end loop;
    return;
  end if;

  -- A window over ended jobs: one job at a time, each as job_enqueue takes it.
  if p_unique_for is not null then
    return query
      select u.i::int, e.job_id, e.created
        from unnest(p_payloads, p_dedupe_keys) with ordinality as u(payload, dedupe_key, i)
       cross join lateral pyjobq._enqueue_one(p_job_type, u.payload, v_priority, v_run_after, u.dedupe_key,
                                              v_max_attempts, v_now,
                                              case when u.dedupe_key is not null then p_unique_for end,
                                              p_concurrency_keys[u.i], p_metadata, null, null, p_batch_id) e
       order by u.i;
    return;
  end if;

  -- Without parents and without a window: set-based.
  return query
    select r.ord, r.job_id, r.created
      from pyjobq._enqueue_rows(p_job_type, p_payloads, p_dedupe_keys, v_priority, v_run_after, v_max_attempts,
                                v_now, p_concurrency_keys, p_metadata, p_batch_id) r;
end;
$$;

comment on function pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int, interval, text[], jsonb, jsonb[], text, uuid) is
  'Adds up to 100000 jobs of one type in one call, with job_enqueue''s checks, defaults and dedupe; '
  'p_dedupe_keys, when given, pairs a key (or null) with each payload, and p_unique_for applies to the rows '
  'with a key as job_enqueue applies it; p_concurrency_keys likewise pairs a concurrency key (or null) with '
  'each payload; p_metadata is every job''s metadata, as job_enqueue keeps it. p_depends_on pairs with each '
  'payload null or a JSON array of its parents: job ids, or the 1-based positions of earlier payloads of the '
  'same call; p_on_parent_failure and p_batch_id apply to every job, as job_enqueue applies them. Returns one row per payload in input '
  'order: its 1-based position, the job id, and whether it was newly created. Notifies pyjobq_job as '
  'job_enqueue does.';

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 37
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';


revoke all on all functions in schema pyjobq from public;
