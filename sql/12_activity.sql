-- Activity --------------------------------------------------------------------
--
-- What happened, for the people who operate the queue: jobs finished per
-- minute and type, the workers seen finishing them, and the operators'
-- actions (cancel, redrive, prune) with who took them. The dashboard reads
-- these like any other client.

-- Jobs that left RUNNING, per minute, job type, server backend and worker. The
-- backend is in the key so that a session only ever updates rows no other
-- session writes: recording never waits for another transaction's lock, however
-- long a caller keeps its own transaction open; the worker, so that workers
-- sharing a pooled connection stay apart. A call records its whole batch in one
-- row per type, so a job costs a fraction of one small update. Unlogged: the
-- counts cost no WAL (a logged row would add about 140 bytes to a job
-- completed on its own), and what they lose is what any process's counters
-- lose: a crash empties the table (a clean restart does not), and a streaming
-- replica has none of it, so job_throughput and job_workers read the primary.
create unlogged table pyjobq.job_stat (
  minute timestamptz not null,
  job_type smallint not null,
  backend int not null,
  worker_id varchar(80) not null,
  seen_at timestamptz not null,
  completed bigint not null default 0,
  retried bigint not null default 0,
  dead bigint not null default 0,
  constraint job_stat_pkey primary key (minute, job_type, backend, worker_id)
) with (fillfactor = 70);

comment on table pyjobq.job_stat is
  'Jobs that left RUNNING per minute, job type, server backend and worker (worker_id '''' for the reaper): '
  'completed (DONE), retried (PENDING again after a failure or an expired lease) and dead; seen_at is the '
  'last time it was added to. Written by job_complete, job_complete_many, job_fail and job_reap; rows older '
  'than 25 hours are dropped by job_reap. Read through job_throughput and job_workers. Unlogged: emptied by '
  'a crash, absent on streaming replicas.';

-- One line per operator action that changed jobs. role is the session's login
-- role, which the database vouches for; actor is what the client says it acts
-- for (the setting pyjobq.actor, e.g. a dashboard's user), which it does not.
create table pyjobq.audit_log (
  audit_id bigint generated always as identity,
  at timestamptz not null,
  role text not null,
  actor text,
  action text not null,
  jobs bigint not null,
  detail jsonb not null,
  constraint audit_log_pkey primary key (audit_id)
);

comment on table pyjobq.audit_log is
  'One line per job_cancel, job_redrive and job_prune call that changed at least one job: when, the login '
  'role (session_user), the actor the client named in the setting pyjobq.actor, the action, how many jobs '
  'and its arguments. Read through job_audit.';

create function pyjobq._stat_add(p_now timestamptz, p_worker_id text, p_job_types smallint[], p_statuses smallint[])
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  -- PL/pgSQL, not SQL: its plan is kept for the session, where a SQL
  -- function's is made again at every call (about 150 microseconds here).
  insert into pyjobq.job_stat as s (minute, job_type, backend, worker_id, seen_at, completed, retried, dead)
  select to_timestamp(floor(extract(epoch from p_now) / 60) * 60),  -- whatever the session's TimeZone
         t.job_type, pg_backend_pid(), coalesce(p_worker_id, ''), p_now,
         count(*) filter (where t.status = 3),
         count(*) filter (where t.status = 1),
         count(*) filter (where t.status = 4)
    from unnest(p_job_types, p_statuses) as t(job_type, status)
   group by t.job_type
  on conflict (minute, job_type, backend, worker_id) do update
     set completed = s.completed + excluded.completed,
         retried = s.retried + excluded.retried,
         dead = s.dead + excluded.dead,
         seen_at = excluded.seen_at;
end;
$$;

comment on function pyjobq._stat_add(timestamptz, text, smallint[], smallint[]) is
  'Records in job_stat the jobs that just left RUNNING: their types and new statuses (3 completed, 1 '
  'retried, 4 dead), by p_worker_id (null: the reaper) at p_now.';

create function pyjobq._audit(p_action text, p_jobs bigint, p_detail jsonb, p_changed boolean default null)
returns void
language sql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  insert into pyjobq.audit_log (at, role, actor, action, jobs, detail)
  select pyjobq.clock_now(), session_user, left(nullif(current_setting('pyjobq.actor', true), ''), 200),
         p_action, p_jobs, p_detail
   where coalesce(p_changed, p_jobs > 0)
$$;

comment on function pyjobq._audit(text, bigint, jsonb, boolean) is
  'Writes an audit_log line for action p_action on p_jobs jobs when the call changed something: p_changed, '
  'or when it is null, p_jobs above 0.';

create function pyjobq.job_throughput(p_minutes int default null)
returns table (
  minute timestamptz,
  job_type int,
  job_type_name text,
  completed bigint,
  retried bigint,
  dead bigint
)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_minutes int := coalesce(p_minutes, 60);
  v_now timestamptz := pyjobq.clock_now();
begin
  perform pyjobq._check_range('p_minutes', v_minutes, 1, 1440);
  return query
  select s.minute, s.job_type::int, t.name::text,
         sum(s.completed)::bigint, sum(s.retried)::bigint, sum(s.dead)::bigint
    from pyjobq.job_stat s
    join pyjobq.job_type t on t.job_type = s.job_type
   where s.minute > v_now - make_interval(mins => v_minutes)
     and s.job_type <> all (pyjobq._denied_types('observe'))
   group by s.minute, s.job_type, t.name
   order by s.minute, s.job_type;
end;
$$;

comment on function pyjobq.job_throughput(int) is
  'Jobs that left RUNNING in each of the last p_minutes minutes (1..1440, default 60; the current minute '
  'included), per job type: completed (DONE), retried (PENDING again after a failure or an expired lease) '
  'and dead. Minutes and types with none are left out. Only the types the caller may observe.';

create function pyjobq.job_workers(p_within interval default null)
returns table (
  worker_id text,
  seen_at timestamptz,
  running bigint,
  completed bigint,
  retried bigint,
  dead bigint
)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set enable_seqscan = off
set jit = off
as $$
declare
  v_within interval := coalesce(p_within, interval '5 minutes');
  v_now timestamptz := pyjobq.clock_now();
  v_denied smallint[] := pyjobq._denied_types('observe');
begin
  if v_within < interval '1 second' or v_within > interval '1 day' then
    raise exception 'p_within must be an interval between 1 second and 1 day'
      using errcode = '22023',
            detail = format('p_within was %s.', v_within),
            hint = 'e.g. ''5 minutes''.';
  end if;
  return query
  with finished as (
    select s.worker_id, max(s.seen_at) as seen_at,
           sum(s.completed) as completed, sum(s.retried) as retried, sum(s.dead) as dead
      from pyjobq.job_stat s
     where s.minute > v_now - v_within - interval '1 minute'
       and s.seen_at > v_now - v_within
       and s.worker_id <> ''  -- not the reaper
       and s.job_type <> all (v_denied)
     group by s.worker_id
  ), holding as (
    select j.worker_id, max(j.run_started_at) as seen_at, count(*) as running
      from pyjobq.job j
     where j.lease_until is not null  -- RUNNING, through job_lease_idx
       and j.job_type <> all (v_denied)
     group by j.worker_id
  )
  select coalesce(f.worker_id, h.worker_id)::text,
         greatest(f.seen_at, h.seen_at),
         coalesce(h.running, 0)::bigint,
         coalesce(f.completed, 0)::bigint,
         coalesce(f.retried, 0)::bigint,
         coalesce(f.dead, 0)::bigint
    from finished f
    full join holding h on h.worker_id = f.worker_id
   order by 1;
end;
$$;

comment on function pyjobq.job_workers(interval) is
  'The workers seen within p_within (1 second to 1 day, default 5 minutes): those that finished a job then '
  '(completed, retried after a failure, or dead, counted over p_within to the minute) and those holding '
  'RUNNING jobs now (running). seen_at is the last finish or claim. An idle worker that finished nothing is '
  'not seen. Only the types the caller may observe.';

create function pyjobq.job_audit(p_before bigint default null, p_limit int default null)
returns table (
  audit_id bigint,
  at timestamptz,
  role text,
  actor text,
  action text,
  jobs bigint,
  detail jsonb
)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_limit int := coalesce(p_limit, 100);
begin
  perform pyjobq._check_range('p_limit', v_limit, 1, 1000);
  return query
  select a.audit_id, a.at, a.role, a.actor, a.action, a.jobs, a.detail
    from pyjobq.audit_log a
   where a.audit_id < coalesce(p_before, 9223372036854775807)
   order by a.audit_id desc
   limit v_limit;
end;
$$;

comment on function pyjobq.job_audit(bigint, int) is
  'The audit log newest first, up to p_limit lines (1..1000, default 100); pass the last audit_id of a page '
  'as p_before for the next. A line per job_cancel, job_redrive and job_prune call that changed jobs: when, '
  'the login role, the actor the client named (setting pyjobq.actor), the action, how many jobs and its '
  'arguments.';
