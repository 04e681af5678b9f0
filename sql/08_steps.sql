-- Steps and progress --------------------------------------------------------

-- The units of work a job's handler finished, by name, so that a later
-- attempt of the same job reads a step's result instead of doing the work
-- again (job_step_save, job_steps). Only the holder reads or writes them, as
-- it would finish the job. The primary key is the fence: two
-- attempts that both ran a step (the first one's lease lost meanwhile) race
-- for one row, and the second insert waits for the first one's transaction,
-- then stores nothing. Rows stay after the job ends (its story) and go with
-- it when job_prune deletes it.
create table pyjobq.job_step (
  job_id uuid not null,
  name varchar(200) not null,
  attempt smallint not null,
  worker_id varchar(80) not null,
  saved_at timestamptz not null,
  result jsonb,
  constraint job_step_pkey primary key (job_id, name)
);

comment on table pyjobq.job_step is
  'The steps of jobs that their handlers finished: the attempt and worker that recorded each, when, and its '
  'result. Written by job_step_save, deleted by job_prune with their jobs.';

-- Raises, as a holder's call on job p_job_id that could not act would, unless
-- p_worker_id holds attempt p_attempt of it with lease token p_lease_token.
create function pyjobq._check_holds(p_job_id uuid, p_worker_id text, p_attempt int, p_lease_token uuid)
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_denied smallint[] := pyjobq._denied_types('work');
begin
  perform pyjobq._check_holder(p_worker_id, p_attempt, p_lease_token);
  if not exists (select
                   from pyjobq.job j
                  where j.job_id = p_job_id
                    and pyjobq._holds(j, p_worker_id, p_attempt, p_lease_token, v_denied)) then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt, p_lease_token);
  end if;
end;
$$;

comment on function pyjobq._check_holds(uuid, text, int, uuid) is
  'Raises as _check_holder and _raise_not_held do unless p_worker_id holds attempt p_attempt of job p_job_id '
  'with lease token p_lease_token (any when null), of a type the caller may work.';

create function pyjobq.job_step_save(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_name text,
  p_result jsonb default null,
  p_lease_token uuid default null
)
returns table (saved boolean, result jsonb, attempt int, saved_at timestamptz)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
begin
  perform pyjobq._check_text('p_name', p_name, 200, false);
  perform pyjobq._check_size('p_result', p_result, 1048576,
                             'Store a large result elsewhere and keep its key in the step.');
  perform pyjobq._check_holds(p_job_id, p_worker_id, p_attempt, p_lease_token);
  -- The primary key is the fence between two attempts that both ran the step
  -- (the first one's lease was lost meanwhile): the second insert waits for
  -- the first one's transaction and, once it committed, stores nothing.
  return query
  insert into pyjobq.job_step as s (job_id, name, attempt, worker_id, saved_at, result)
  values (p_job_id, p_name, p_attempt, p_worker_id, v_now, p_result)
  on conflict on constraint job_step_pkey do nothing
  returning true, s.result, s.attempt::int, s.saved_at;
  if not found then
    return query
    select false, s.result, s.attempt::int, s.saved_at
      from pyjobq.job_step s
     where s.job_id = p_job_id
       and s.name = p_name;
  end if;
end;
$$;

comment on function pyjobq.job_step_save(uuid, text, int, text, jsonb, uuid) is
  'Records that step p_name (1 to 200 characters) of job p_job_id finished with p_result (any JSON up to '
  '1 MiB, or null), if p_worker_id holds attempt p_attempt of it with lease token p_lease_token; raises JQ001, '
  'JQ002, JQ003 or JQ005 as job_complete does when it does not. Returns saved = true and what it stored, or, '
  'when the step was recorded before (by this attempt or an earlier one), saved = false and the stored result, '
  'attempt and time, which stay. Called in the transaction that makes the step''s own writes, it makes them '
  'happen once: an attempt that gets saved = false must roll that transaction back and take the stored result.';

create function pyjobq.job_steps(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_lease_token uuid default null
)
returns table (name text, result jsonb, attempt int, saved_at timestamptz)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  perform pyjobq._check_holds(p_job_id, p_worker_id, p_attempt, p_lease_token);
  return query
  select s.name::text, s.result, s.attempt::int, s.saved_at
    from pyjobq.job_step s
   where s.job_id = p_job_id
   order by s.saved_at, s.name;
end;
$$;

comment on function pyjobq.job_steps(uuid, text, int, uuid) is
  'The steps recorded for job p_job_id (job_step_save), in the order they were saved, if p_worker_id holds '
  'attempt p_attempt of it with lease token p_lease_token; raises as job_step_save does when it does not.';

-- The steps for people watching (the dashboard, pyjobq show): who recorded
-- each and when, whatever the job's state.
create function pyjobq.job_step_list(p_job_id uuid)
returns table (name text, attempt int, worker_id text, saved_at timestamptz, result jsonb)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  perform pyjobq._check_observe(p_job_id);
  return query
  select s.name::text, s.attempt::int, s.worker_id::text, s.saved_at, s.result
    from pyjobq.job_step s
   where s.job_id = p_job_id
   order by s.saved_at, s.name;
end;
$$;

comment on function pyjobq.job_step_list(uuid) is
  'The steps recorded for job p_job_id (job_step_save), in the order they were saved: name, the attempt and '
  'worker that recorded each, when, and its result; for callers that may observe the job''s type (its holder '
  'reads them with job_steps). No rows for a job without steps or that does not exist.';

-- What a handler reports of its progress while it runs, for people watching
-- (job_get, the dashboard): its latest report only, in the job's row, whose
-- update stays within its page (no index covers the column).
create function pyjobq.job_progress(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_progress jsonb,
  p_lease_token uuid default null
)
returns void
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
begin
  perform pyjobq._check_holder(p_worker_id, p_attempt, p_lease_token);
  perform pyjobq._check_payload('p_progress', p_progress);
  perform pyjobq._check_size('p_progress', p_progress, 8192, 'Report a few figures, e.g. {"done": 40, "of": 100}.');
  update pyjobq.job j
     set progress = p_progress
   where j.job_id = p_job_id
     and pyjobq._holds(j, p_worker_id, p_attempt, p_lease_token, pyjobq._denied_types('work'));
  if not found then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt, p_lease_token);
  end if;
end;
$$;

comment on function pyjobq.job_progress(uuid, text, int, jsonb, uuid) is
  'Sets the progress of job p_job_id to p_progress (a JSON object of at most 8 KiB, or null to clear it), if '
  'p_worker_id holds attempt p_attempt of it with lease token p_lease_token; raises JQ001, JQ002, JQ003 or JQ005 '
  'as job_complete does when it does not. job_get shows the latest report while the job is yet to end.';
