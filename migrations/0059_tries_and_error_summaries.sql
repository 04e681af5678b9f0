-- depends: 0058_steps_and_events_for_observers

-- Schema 59: job_list and job_get say the tries a job spent of max_attempts
-- (tries), which after a redrive differs from attempts, the claim counter;
-- job_list gives the last line of each job's last error (error_summary), the
-- exception of a traceback. Both gain columns at the end: dropped and created
-- again.

drop function pyjobq.job_get(uuid);
drop function pyjobq.job_list(int, int, text, timestamptz, timestamptz, boolean, uuid, int, text, uuid);

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 59
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq._check_list_args(p_limit int, p_status int, p_job_type int, p_dedupe_key text,
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


do $$ begin perform pyjobq.grant_roles(); end; $$;

revoke all on all functions in schema pyjobq from public;
