-- depends: 0057_claim_priority_by_priority

-- Schema 58: the steps and the events of a job, for people watching
-- (job_step_list, job_event_list, granted as job_attempts is), and the check
-- that the reads of one job share (_check_observe).

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 58
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq._check_observe(p_job_id uuid)
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_job_id is null then
    raise exception 'p_job_id must not be null'
      using errcode = '22004',
            hint = 'Pass the job_id that job_enqueue returned.';
  end if;
  perform pyjobq._check_privilege('observe', array(select j.job_type::int from pyjobq.job_all j
                                                    where j.job_id = p_job_id));
end;
$$;

comment on function pyjobq._check_observe(uuid) is
  'Raises 22004 for a null p_job_id and 42501 when the session''s role may not observe the job''s type; a job '
  'that does not exist passes.';

create or replace function pyjobq.job_get(p_job_id uuid)
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
  progress jsonb
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
         j.waiting_on, j.batch_id, a.snoozes::int, a.progress
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
  'ended). No row when there is no such job (never enqueued, or pruned).';

create or replace function pyjobq.job_dependencies(p_job_id uuid)
returns table (relation text, job_id uuid, job_type int, status int, status_name text, resolved boolean)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  perform pyjobq._check_observe(p_job_id);
  return query
  select 'parent', e.parent_id, p.job_type::int, p.status::int, pyjobq._status_name(p.status), e.resolved
    from pyjobq.job_edge e
    left join pyjobq.job_all p on p.job_id = e.parent_id
   where e.child_id = p_job_id
   order by e.ord;
  return query
  select 'dependant', e.child_id, c.job_type::int, c.status::int, pyjobq._status_name(c.status), e.resolved
    from pyjobq.job_edge e
    left join pyjobq.job_all c on c.job_id = e.child_id
   where e.parent_id = p_job_id
   order by c.seq, e.child_id;
end;
$$;

comment on function pyjobq.job_dependencies(uuid) is
  'The graph around job p_job_id: its parents (relation parent, in the order its enqueue named them) and its '
  'dependants (relation dependant, in enqueue order), each with its type and status now (null once pruned) and whether '
  'the edge is resolved (the parent ended). No rows for a job without either.';

create or replace function pyjobq.job_attempts(p_job_id uuid)
returns table (
  attempt int,
  worker_id text,
  started_at timestamptz,
  ended_at timestamptz,
  outcome text,
  error_summary text,
  error text
)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  perform pyjobq._check_observe(p_job_id);
  return query
  select s.attempt, s.worker_id, s.started_at, s.ended_at, s.outcome, pyjobq._error_summary(s.error), s.error
    from (select a.attempt::int, a.worker_id::text, a.started_at, a.ended_at, a.outcome, a.error
            from pyjobq.job_attempt a
           where a.job_id = p_job_id
          union all
          -- The attempt running, or the one that made the job DONE, from its row.
          select j.attempts::int, j.worker_id::text, j.run_started_at,
                 case when j.status = 3 then j.updated_at end,
                 case when j.status = 2 then 'running' else 'done' end, null::text
            from pyjobq.job_all j
           where j.job_id = p_job_id
             and j.status in (2, 3)) s
   order by s.attempt;
end;
$$;

comment on function pyjobq.job_attempts(uuid) is
  'The attempts of job p_job_id, in order: each that ended otherwise than done (failed, dead, expired, '
  'cancelled, snoozed, waiting; its last 25) with its worker, start, end, outcome, error and the error''s last '
  'line (error_summary), then the one running or the one that made it DONE. No rows for a job that never ran or '
  'no longer exists.';

create or replace function pyjobq.job_step_list(p_job_id uuid)
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

create or replace function pyjobq.job_event_list(p_job_id uuid)
returns table (name text, state text, wait_until timestamptz, signalled_at timestamptz, payload jsonb)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
begin
  perform pyjobq._check_observe(p_job_id);
  return query
  select e.name::text,
         case when e.signalled_at is not null and e.wait_until is null then 'sent'
              when e.signalled_at is not null then 'signalled'
              when e.wait_until <= v_now then 'timed_out'
              else 'waiting' end,
         e.wait_until, e.signalled_at, e.payload
    from pyjobq.job_event e
   where e.job_id = p_job_id
   order by e.name;
end;
$$;

comment on function pyjobq.job_event_list(uuid) is
  'The events of job p_job_id by name, each waited for (job_event_wait) or sent (job_signal), with its state: '
  'waiting (neither its signal nor its timeout yet), signalled, timed_out, or sent (signalled, not waited for '
  'yet); when the first wait times out, when the signal came, and its payload. For callers that may observe '
  'the job''s type; no rows for a job without events or that does not exist.';


insert into pyjobq.api_grant (function, roles) values
  ('pyjobq.job_step_list(uuid)', '{pyjobq_producer,pyjobq_admin}'),
  ('pyjobq.job_event_list(uuid)', '{pyjobq_producer,pyjobq_admin}');

do $$ begin perform pyjobq.grant_roles(); end; $$;

revoke all on all functions in schema pyjobq from public;
