-- depends: 0040_claims_plan_once

-- Schema 41: the claim's pick and lease (_claim_pick, _lease), the one way out
-- of RUNNING (_finish), job_next_due and the new job ids (_new_job_ids) keep
-- one plan per session. Each was planned again at every call (PL/pgSQL's plan
-- cache judged the generic plan over array arguments costlier than the custom
-- ones), 0.42 ms of a one-job completion, 0.12 ms of a one-job claim and
-- 0.08 ms of an enqueue; their plans are pinned by the settings beside them,
-- so the generic plan is the plan they had.

create or replace function pyjobq._new_job_ids(p_now timestamptz, p_count int)
returns table (seq bigint, job_id uuid)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
set plan_cache_mode = force_generic_plan
as $$
begin
  -- Time-ordered ids in UUIDv7's layout (version 8 here): 48 bits of
  -- milliseconds, 12 random bits per call, then the job's (unique) seq under
  -- the variant bits: new keys land at the right edge of job_pkey. PL/pgSQL,
  -- its plan generic: kept for the session, where a SQL body, or custom
  -- plans for each p_count, are made at every call.
  return query
  select s.seq,
         (p.prefix || to_hex(s.seq | (-9223372036854775808)::bigint))::uuid
    from (select lpad(to_hex((extract(epoch from p_now) * 1000)::bigint & 281474976710655), 12, '0')
                 || '8' || lpad(to_hex(floor(random() * 4096)::int), 3, '0') as prefix) p,
         lateral (select nextval('pyjobq.job_seq') as seq from generate_series(1, p_count)) s;
end;
$$;

comment on function pyjobq._new_job_ids(timestamptz, int) is
  'p_count new (seq, job_id) pairs in increasing seq order: seq from pyjobq.job_seq, job_id time-ordered by p_now.';


create or replace function pyjobq._claim_pick(p_types smallint[], p_limit int, p_now timestamptz)
returns uuid[]
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
set plan_cache_mode = force_generic_plan
-- On a freshly bulk-loaded, never-analyzed table the planner guesses that few
-- rows are due and prefers a bitmap scan plus a sort of every due row. Taking
-- sorts off the table leaves the ordered scan of job_claim_idx, which stops
-- after p_limit rows, whatever the statistics say. The penalty that disabling
-- adds to a plan's cost would otherwise also trigger JIT compilation on
-- every call (hundreds of milliseconds), so JIT is off here too.
set enable_sort = off
set jit = off
as $$
declare
  v_now_us bigint := (extract(epoch from p_now) * 1000000)::bigint;
  v_front pyjobq.claim_front;
  v_bounded boolean;
  -- Without a front these match nothing yet keep every scan an index scan.
  v_priority smallint := -1;
  v_run_after timestamptz := '-infinity';
  v_seq bigint := 0;
  v_ids uuid[];
  v_from_head int;
begin
  -- Resume after this session's claim front, if it still holds (see "Claim
  -- fronts" above); the scan from the head comes after, and alone without one.
  v_front := pyjobq._claim_front_read(p_types::text, v_now_us);
  v_bounded := v_front.seq is not null;
  if v_bounded then
    v_priority := v_front.priority;
    v_run_after := v_front.run_after;
    v_seq := v_front.seq;
  end if;

  -- One statement picks: each MATERIALIZED CTE locks at most its limit
  -- exactly once (a plain subquery may be re-run by a nested loop and lock
  -- more), and SKIP LOCKED lets concurrent claimers take the next rows instead
  -- of waiting. The urgent jobs ahead of the front come first, then the jobs
  -- after it, then the scan from the head. Without a front, "ahead" and
  -- "after" have limit 0 and read nothing. It also finds the new front: the
  -- last job picked or, when the head scan picked any, the last of those (due
  -- jobs may remain between it and the old front).
  with ahead as materialized (
    select c.job_id, c.priority, c.run_after, c.seq, 1 as part
      from pyjobq.job c
     where c.status = 1
       and c.priority < v_priority
       and c.run_after <= p_now
       and c.job_type = any (p_types)
     order by c.priority, c.run_after, c.seq
     limit case when v_bounded then p_limit else 0 end
       for update skip locked
  ),
  after as materialized (
    select c.job_id, c.priority, c.run_after, c.seq, 2 as part
      from pyjobq.job c
     where c.status = 1
       and (c.priority, c.run_after, c.seq) > (v_priority, v_run_after, v_seq)
       and c.run_after <= p_now
       and c.job_type = any (p_types)
     order by c.priority, c.run_after, c.seq
     limit case when v_bounded then p_limit else 0 end
       for update skip locked
  ),
  head as materialized (
    select c.job_id, c.priority, c.run_after, c.seq, 3 as part
      from pyjobq.job c
     where c.status = 1
       and c.run_after <= p_now
       and c.job_type = any (p_types)
       and c.job_id not in (select a.job_id from ahead a union all select f.job_id from after f)
     order by c.priority, c.run_after, c.seq
     limit p_limit
       for update skip locked
  ),
  -- CTEs run as far as they are read: once p_limit jobs are picked, the
  -- scans not yet reached never start and lock nothing.
  picked as (
    (select * from ahead
     union all
     select * from after
     union all
     select * from head)
    limit p_limit
  )
  select array_agg(p.job_id order by p.priority, p.run_after, p.seq),
         count(*) filter (where p.part = 3),
         (array_agg(p.priority order by p.part = 3, p.priority, p.run_after, p.seq))[count(*)],
         (array_agg(p.run_after order by p.part = 3, p.priority, p.run_after, p.seq))[count(*)],
         (array_agg(p.seq order by p.part = 3, p.priority, p.run_after, p.seq))[count(*)]
    into v_ids, v_from_head, v_priority, v_run_after, v_seq
    from picked p;
  if v_ids is null then
    return '{}';
  end if;
  -- A head scan starts a new second of life; resuming keeps the old front's.
  perform pyjobq._claim_front_write(row(
    v_front.epoch, case when v_from_head > 0 then v_now_us else v_front.started_us end, p_types::text,
    v_now_us, v_priority, v_run_after, v_seq)::pyjobq.claim_front);
  return v_ids;
end;
$$;

comment on function pyjobq._claim_pick(smallint[], int, timestamptz) is
  'The plain claim''s choice: up to p_limit due PENDING jobs of p_types at p_now, in claim order, resuming from '
  'this session''s claim front, their rows locked for _lease; writes the new front.';

create or replace function pyjobq._lease(p_worker_id text, p_ids uuid[], p_lease int, p_at timestamptz)
returns setof pyjobq.claimed_job
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
set plan_cache_mode = force_generic_plan
as $$
begin
  return query
  with claimed as (
    update pyjobq.job j
       set status = 2,
           attempts = j.attempts + 1,
           worker_id = p_worker_id,
           lease_token = gen_random_uuid(),
           -- The lease, but never past the attempt's deadline.
           lease_until = p_at + make_interval(secs => least(p_lease, t.timeout_seconds)),
           run_started_at = p_at,
           updated_at = p_at
      from pyjobq.job_type t
     where j.job_id = any (p_ids)
       -- Not "status = 1", which job_claim_idx's predicate matches: on a table
       -- never analyzed, the planner would then read every PENDING job to
       -- find these few, where the primary key finds each.
       and j.status::int = 1
       and t.job_type = j.job_type
    returning j.job_id, j.job_type, j.priority, j.payload, j.attempts, j.max_attempts, j.dedupe_key,
              j.run_after, j.lease_until, j.created_at, j.lease_token, j.metadata, j.waiting_on
  )
  select c.job_id, c.job_type::int, c.priority::int, c.payload, c.attempts::int, c.max_attempts::int,
         c.dedupe_key::text, c.run_after, c.lease_until, c.created_at, c.lease_token, c.metadata,
         case when c.waiting_on is not null then pyjobq._parent_results(c.job_id) end
    from claimed c
    join unnest(p_ids) with ordinality u(job_id, ord) on u.job_id = c.job_id
   order by u.ord;
end;
$$;

comment on function pyjobq._lease(text, uuid[], int, timestamptz) is
  'Leases the PENDING jobs p_ids, whose row locks the caller holds, to p_worker_id from p_at for p_lease '
  'seconds (never past the type''s timeout): RUNNING, attempts + 1, a new lease token. Returns them in the '
  'order of p_ids. Every claim path ends here.';

create or replace function pyjobq._finish(p_worker_id text, p_ends pyjobq.job_end[], p_now timestamptz,
                               p_denied smallint[], p_follow boolean default true)
returns table (ord int, job_id uuid, attempt int, job_type smallint, status smallint, run_after timestamptz,
               followed boolean)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
-- One statement for the batch, its plan pinned: input rows on the outside, each
-- job found by its primary key (the only index the predicates allow),
-- whatever the statistics say. The penalties of the disabled methods would
-- otherwise tip the plan into JIT compilation.
set enable_seqscan = off
set enable_bitmapscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
set plan_cache_mode = force_generic_plan
as $$
begin
  return query
  with input as (
    -- An attempt named twice ends once, as its first mention says.
    select distinct on (e.job_id, e.attempt) e.*
      from unnest(p_ends) with ordinality
           as e(job_id, attempt, lease_token, outcome, result, error, delay, waiting, ord)
     order by e.job_id, e.attempt, e.ord
  ), ended as (
    delete from pyjobq.job j
     using input i
     where j.job_id = i.job_id
       and (i.outcome = 'cancelled' or pyjobq._holds(j, p_worker_id, i.attempt, i.lease_token, p_denied))
       and pyjobq._end_status(j, i.outcome) <> 1
    returning i.ord, j as row, pyjobq._end_status(j, i.outcome) as status, i.outcome,
              case when i.outcome = 'done' then i.result else j.result end as result,
              case i.outcome
                when 'done' then j.last_error
                when 'cancelled' then coalesce(i.error, j.last_error, 'cancelled')
                when 'released' then 'released with its claim counter spent (32767 claims)'
                else left(i.error, 10000)
              end as error,
              coalesce(i.waiting, j.waiting_on) as waiting
  ), retried as (
    update pyjobq.job j
       set status = 1,
           -- A release puts the job back at its old place in the queue, before
           -- claim fronts, and gives its try back; a failure waits its backoff.
           run_after = case when i.outcome = 'released' then pyjobq._pending_from(j.run_after, p_now, false)
                            else pyjobq._retry_at(j.job_type, j.attempts - j.attempts_refunded, i.delay, p_now)
                       end,
           attempts_refunded = j.attempts_refunded + (i.outcome = 'released')::int,
           last_error = case when i.outcome = 'released' then j.last_error else left(i.error, 10000) end,
           worker_id = null,
           lease_until = null,
           updated_at = p_now
      from input i
     where i.outcome in ('failed', 'expired', 'released')
       and j.job_id = i.job_id
       and pyjobq._holds(j, p_worker_id, i.attempt, i.lease_token, p_denied)
       and pyjobq._end_status(j, i.outcome) = 1
    returning i.ord, j.job_id, j.attempts, j.job_type, j.status, j.run_after, i.outcome
  ), moved as (
    select d.ord, (d.row).job_id, (d.row).attempts, (d.row).job_type, d.status, (d.row).run_after, d.outcome,
           true as ends, d.row, d.result, d.error, d.waiting,
           (d.row).has_dependants or (d.row).batch_id is not null as followed
      from ended d
    union all
    select r.ord, r.job_id, r.attempts, r.job_type, r.status, r.run_after, r.outcome,
           false, null, null, null, null, false
      from retried r
  ), followed as (
    -- One row (an aggregate), so that each follow-up runs once for the call,
    -- in this order: the ended rows into the history, the finish counts (what
    -- a holder or the reaper ended or failed, and a release only when it made
    -- the job DEAD), then what follows the ends of parents and batch members,
    -- which reads the history; and each type's retries announced once. The
    -- worker that lost its lease is not the one that ended the job: it gets
    -- JQ001 (lease_lost) later, never JQ003.
    select pyjobq._to_history(array_agg(m.row) filter (where m.ends),
                              array_agg(m.status) filter (where m.ends), p_now,
                              case when bool_or(m.outcome = 'done')
                                   then array_agg(m.result) filter (where m.ends) end,
                              case when bool_or(m.outcome <> 'done')
                                   then array_agg(m.error) filter (where m.ends) end,
                              case when bool_or(m.outcome = 'cancelled')
                                   then array_agg(m.waiting) filter (where m.ends) end,
                              case when bool_or(m.outcome = 'expired')
                                   then array_agg(m.outcome = 'expired') filter (where m.ends) end),
           pyjobq._stat_add(p_now, p_worker_id,
                            array_agg(m.job_type) filter (where m.outcome <> 'cancelled'
                                                            and (m.outcome <> 'released' or m.status = 4)),
                            array_agg(m.status) filter (where m.outcome <> 'cancelled'
                                                          and (m.outcome <> 'released' or m.status = 4))),
           case when p_follow and bool_or(m.followed)
                then pyjobq._ended(array_agg(m.job_id) filter (where m.followed), p_now) end,
           (select count(pyjobq._announce(r.job_type, r.due, p_now))
              from (select r.job_type, min(r.run_after) as due from retried r group by r.job_type) r)
      from moved m
  )
  select m.ord::int, m.job_id, m.attempts::int, m.job_type, m.status, m.run_after, m.followed
    from moved m
   cross join followed;
end;
$$;

comment on function pyjobq._finish(text, pyjobq.job_end[], timestamptz, smallint[], boolean) is
  'Ends the attempts p_ends that p_worker_id (any worker when null) holds, of types outside p_denied, as their '
  'outcomes say (a cancelled one whatever its status): DONE, DEAD or CANCELLED into the history, or PENDING '
  'again; counts them in job_stat, follows up dependants and batches (unless p_follow is false: the cascade '
  'follows up its own, a generation at a time), announces retries. Returns one row per attempt it moved, with '
  'its position in p_ends, its new status and whether its end is to be followed up.';

create or replace function pyjobq.job_next_due(p_job_types int[] default null)
returns timestamptz
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set enable_sort = off
set jit = off
set plan_cache_mode = force_generic_plan
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_types smallint[] := pyjobq._work_types(p_job_types);
  v_next timestamptz;
begin
  with recursive priorities as (
    (select c.priority
       from pyjobq.job c
      where c.status = 1
      order by c.priority
      limit 1)
    union all
    select (select c.priority
              from pyjobq.job c
             where c.status = 1
               and c.priority > p.priority
             order by c.priority
             limit 1)
      from priorities p
     where p.priority is not null
  )
  select min((select c.run_after
                from pyjobq.job c
               where c.status = 1
                 and c.priority = p.priority
                 and c.run_after > v_now
                 and c.job_type = any (v_types)
               order by c.run_after
               limit 1))
    into v_next
    from priorities p
   where p.priority is not null;
  -- A rate window may hold due jobs back: it has more room when its oldest
  -- claim leaves it. (Whether it is full is not enough: a claim that filled it
  -- may find it a claim short a moment later, jobs still due.) Windows empty
  -- out a period after the last claim, so an idle worker is not woken for long.
  return least(v_next, (
    select min(o.at + o.period)
      from pyjobq.job_type t
      join pyjobq.rate_window w on w.job_type = t.job_type
     cross join lateral (
       select case when w.concurrency_key = '' then t.rate_period else t.key_rate_period end as period) p
     cross join lateral (
       select min(e.at) as at, p.period from unnest(w.claimed_at) e(at) where e.at > v_now - p.period) o
     where t.job_type = any (v_types)
       and (t.rate_limit is not null or t.key_rate_limit is not null)));
end;
$$;

comment on function pyjobq.job_next_due(int[]) is
  'The earliest run_after still to come of the PENDING jobs of the given job types (default: every type the '
  'caller may work), or null when none is scheduled, or when a rate window (job_type_set_limits) next gains room if '
  'sooner: when an idle worker should claim again. Jobs due now are not counted.';

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 41
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

