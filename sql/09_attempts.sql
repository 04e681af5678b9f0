-- Attempts --------------------------------------------------------------------

-- The story of a job's attempts: each that ended otherwise than done (failed,
-- DEAD, expired, cancelled while it ran, snoozed, waiting) keeps a row, with
-- its worker, its times and its error, written by _finish in the statement
-- that ends it. A done attempt writes nothing here (a plain drain pays
-- nothing): the job's row tells of it, as it tells of the attempt running.
-- A job keeps its last 25 rows, so one that retries a thousand times keeps
-- 25 errors of at most 10,000 characters.
create table pyjobq.job_attempt (
  job_id uuid not null,
  attempt smallint not null,
  worker_id varchar(80),
  started_at timestamptz,
  ended_at timestamptz not null,
  outcome text not null,
  error text,
  constraint job_attempt_pkey primary key (job_id, attempt)
);

comment on table pyjobq.job_attempt is
  'The attempts of jobs that ended otherwise than done: worker, start, end, outcome and error; a job''s last '
  '25. Written by _finish, read by job_attempts, deleted by job_prune with their jobs.';

-- The attempts p_job_ids[i] (attempt p_attempts[i]) just ended as
-- p_outcomes[i]: recorded, and each job's older than its last 25 deleted.
create function pyjobq._to_story(p_job_ids uuid[], p_attempts int[], p_workers text[],
                                 p_started timestamptz[], p_outcomes text[], p_errors text[],
                                 p_now timestamptz)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  insert into pyjobq.job_attempt as a (job_id, attempt, worker_id, started_at, ended_at, outcome, error)
  select u.job_id, u.attempt, u.worker_id, u.started_at, p_now, u.outcome, u.error
    from unnest(p_job_ids, p_attempts, p_workers, p_started, p_outcomes, p_errors)
         as u(job_id, attempt, worker_id, started_at, outcome, error)
  on conflict on constraint job_attempt_pkey do nothing;
  delete from pyjobq.job_attempt a
   using unnest(p_job_ids, p_attempts) as u(job_id, attempt)
   where a.job_id = u.job_id
     and a.attempt <= u.attempt - 25;
end;
$$;

comment on function pyjobq._to_story(uuid[], int[], text[], timestamptz[], text[], text[], timestamptz) is
  'Records the attempts that just ended otherwise than done (job p_job_ids[i], attempt p_attempts[i], its '
  'worker, start, outcome and error), ended at p_now, and deletes each job''s attempts older than its last 25.';

-- The line an error is known by: its last one that is not blank (a Python
-- traceback ends with the exception), at most 200 characters.
create function pyjobq._error_summary(p_error text)
returns text
language sql
immutable
begin atomic
  select left(btrim((regexp_match(p_error, '([^\n]*\S)\s*$'))[1]), 200);
end;

comment on function pyjobq._error_summary(text) is
  'The last line of p_error that is not blank, trimmed, at most 200 characters; null for null.';

create function pyjobq.job_attempts(p_job_id uuid)
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
