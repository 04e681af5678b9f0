-- depends: 0021_keys_in_one_pass

-- Schema 22: what happened, for the people who operate the queue.
--
-- job_stat counts the jobs that leave RUNNING per minute, type and backend
-- (job_throughput, job_workers); audit_log keeps a line per cancel, redrive
-- and prune that changed jobs (job_audit); job_list filters by error text.

drop function pyjobq.job_list(int, int, text, timestamptz, timestamptz, boolean, uuid, int);

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

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 22
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

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

create function pyjobq._audit(p_action text, p_jobs bigint, p_detail jsonb)
returns void
language sql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  insert into pyjobq.audit_log (at, role, actor, action, jobs, detail)
  select pyjobq.clock_now(), session_user, left(nullif(current_setting('pyjobq.actor', true), ''), 200),
         p_action, p_jobs, p_detail
   where p_jobs > 0
$$;

comment on function pyjobq._audit(text, bigint, jsonb) is
  'Writes an audit_log line for action p_action on p_jobs jobs (none when p_jobs is 0).';

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

create or replace function pyjobq.job_complete(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_result jsonb default null,
  p_lease_token uuid default null
)
returns void
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_denied smallint[] := pyjobq._denied_types('work');
  v_job_type smallint;
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_attempt', p_attempt, 1, 32767);
  perform pyjobq._check_lease_token('p_lease_token', p_lease_token is null);
  update pyjobq.job j
     set status = 3,
         result = p_result,
         lease_until = null,
         updated_at = v_now
   where j.job_id = p_job_id
     and j.status = 2
     and j.worker_id = p_worker_id
     and j.job_type <> all (v_denied)
     and j.attempts = p_attempt
     and (j.lease_token = p_lease_token or p_lease_token is null)
  returning j.job_type into v_job_type;
  if not found then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt, p_lease_token);
  end if;
  perform pyjobq._stat_add(v_now, p_worker_id, array[v_job_type], array[3::smallint]);
end;
$$;

comment on function pyjobq.job_complete(uuid, text, int, jsonb, uuid) is
  'Marks job p_job_id DONE with p_result, if p_worker_id still holds attempt p_attempt of it (RUNNING) with '
  'lease token p_lease_token; otherwise raises JQ001 lease_lost, JQ002 job_not_found or JQ003 '
  'job_already_finished and changes nothing. Without p_lease_token: 22004, unless the caller owns the schema '
  'or job_settings accepts such calls.';

create or replace function pyjobq.job_complete_many(
  p_worker_id text,
  p_job_ids uuid[],
  p_attempts int[],
  p_results jsonb[] default null,
  p_lease_tokens uuid[] default null
)
returns table (job_id uuid, completed boolean)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
-- One statement for the batch, its plan pinned: input rows on the outside, each
-- job found by its primary key (the only index the update's predicate allows),
-- whatever the statistics say. The penalties of the disabled methods would
-- otherwise tip the plan into JIT compilation.
set enable_seqscan = off
set enable_bitmapscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_denied smallint[] := pyjobq._denied_types('work');
  v_count int := coalesce(cardinality(p_job_ids), 0);
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  p_attempts := pyjobq._check_array('p_attempts', p_attempts);
  p_results := pyjobq._check_array('p_results', p_results);
  p_lease_tokens := pyjobq._check_array('p_lease_tokens', p_lease_tokens);
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  perform pyjobq._check_same_length('p_attempts', coalesce(cardinality(p_attempts), 0), v_count);
  if p_results is not null then  -- null: no results; else one, possibly null, per job
    perform pyjobq._check_same_length('p_results', cardinality(p_results), v_count);
  end if;
  perform pyjobq._check_lease_tokens(p_lease_tokens, v_count);

  return query
  with input as (
    select u.id, u.attempt, u.result, u.token, u.ord
      from unnest(p_job_ids, p_attempts, p_results, p_lease_tokens)
           with ordinality as u(id, attempt, result, token, ord)
  ), first_mention as (
    -- A job listed twice is completed once, with the result of its first mention.
    select distinct on (i.id, i.attempt) i.id, i.attempt, i.result, i.token
      from input i
     order by i.id, i.attempt, i.ord
  ), done as (
    update pyjobq.job j
       set status = 3,
           result = f.result,
           lease_until = null,
           updated_at = v_now
      from first_mention f
     where j.job_id = f.id
       and j.status = 2
       and j.worker_id = p_worker_id
       and j.job_type <> all (v_denied)
       and j.attempts = f.attempt
       and (j.lease_token = f.token or f.token is null)
    returning j.job_id, j.attempts, j.job_type
  ), counted as (
    -- One row (an aggregate), so the cross join below records the batch once.
    select pyjobq._stat_add(v_now, p_worker_id, array_agg(d.job_type), array_agg(3::smallint))
      from done d
  )
  -- A job this very attempt completed before (a retried call whose first reply
  -- was lost) counts as completed: the result stored then stays.
  select i.id,
         case when (i.id, i.attempt) in (select d.job_id, d.attempts from done d) then true
              else exists (select from pyjobq.job k
                            where k.job_id = i.id
                              and k.job_type <> all (v_denied)
                              and k.status = 3
                              and k.worker_id = p_worker_id
                              and k.attempts = i.attempt
                              and (k.lease_token = i.token or i.token is null))
         end
    from input i
   cross join counted
   order by i.ord;
end;
$$;

comment on function pyjobq.job_complete_many(text, uuid[], int[], jsonb[], uuid[]) is
  'job_complete for up to 10000 jobs in one call: each job whose attempt p_worker_id still holds, with the lease '
  'token at its position in p_lease_tokens, becomes DONE. '
  'Returns every input job id with completed = true when that attempt is DONE (now, or by an earlier call of '
  'the same holder: retrying after a lost reply is safe) and false for those no longer held (left unchanged).';

create or replace function pyjobq.job_fail(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_error text default null,
  p_retry_delay_seconds double precision default null,
  p_dead_letter boolean default null,
  p_lease_token uuid default null
)
returns table (status int, run_after timestamptz)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_denied smallint[] := pyjobq._denied_types('work');
  v_dead_letter boolean := coalesce(p_dead_letter, false);
  v_delay interval;
  v_job_type int;
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_attempt', p_attempt, 1, 32767);
  perform pyjobq._check_lease_token('p_lease_token', p_lease_token is null);
  if p_retry_delay_seconds is not null then
    if not (p_retry_delay_seconds between 0 and 31536000) then
      raise exception 'p_retry_delay_seconds must be between 0 and 31536000'
        using errcode = '22023',
              detail = format('p_retry_delay_seconds was %s.', p_retry_delay_seconds),
              hint = 'Leave it out for the default exponential backoff.';
    end if;
    v_delay := make_interval(secs => p_retry_delay_seconds);
  end if;

  update pyjobq.job j
     set status = case when v_dead_letter or pyjobq._tries_left(j.attempts, j.attempts_refunded, j.max_attempts) <= 0 then 4 else 1 end,
         run_after = case when v_dead_letter or pyjobq._tries_left(j.attempts, j.attempts_refunded, j.max_attempts) <= 0 then j.run_after
                          else pyjobq._retry_at(j.job_type, j.attempts - j.attempts_refunded, v_delay, v_now) end,
         worker_id = case when v_dead_letter or pyjobq._tries_left(j.attempts, j.attempts_refunded, j.max_attempts) <= 0 then j.worker_id end,
         lease_until = null,
         last_error = left(p_error, 10000),
         updated_at = v_now
   where j.job_id = p_job_id
     and j.status = 2
     and j.worker_id = p_worker_id
     and j.job_type <> all (v_denied)
     and j.attempts = p_attempt
     and (j.lease_token = p_lease_token or p_lease_token is null)
  returning j.status::int, j.run_after, j.job_type into status, run_after, v_job_type;
  if not found then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt, p_lease_token);
  end if;
  perform pyjobq._stat_add(v_now, p_worker_id, array[v_job_type::smallint], array[status::smallint]);
  -- The retry is announced like a new job: idle workers learn when it is due.
  if status = 1 then
    perform pyjobq._announce(v_job_type, run_after, v_now);
  end if;
  return next;
end;
$$;

comment on function pyjobq.job_fail(uuid, text, int, text, double precision, boolean, uuid) is
  'Records a failed attempt p_attempt of job p_job_id held by p_worker_id with lease token p_lease_token, keeping p_error (truncated to 10000 '
  'characters) as last_error. With attempts left the job is PENDING again after p_retry_delay_seconds '
  '(0..31536000) or, by default, pyjobq.retry_backoff(attempt); with none left, or p_dead_letter, it is DEAD. '
  'Returns the new status and run_after; raises JQ001/JQ002/JQ003 like job_complete. A retry notifies '
  'pyjobq_job as job_enqueue does.';

create or replace function pyjobq.job_reap(p_limit int default null)
returns table (job_id uuid, job_type int, status int, worker_id text, attempt int, run_after timestamptz)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
-- As in job_claim: the ordered scan of job_lease_idx, never a sort of every lease.
set enable_sort = off
set jit = off
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_limit int := coalesce(p_limit, 1000);
begin
  perform pyjobq._check_range('p_limit', v_limit, 1, 100000);
  -- The expiry test is repeated in the UPDATE: a row that a completer or a
  -- renewer changed after this statement's snapshot is re-checked on its
  -- newest version, so a reaper never overwrites a finished or renewed job.
  return query
  with picked as materialized (
    select r.job_id, r.worker_id, r.attempts
      from pyjobq.job r
     where r.status = 2
       and r.lease_until < v_now
     order by r.lease_until
     limit v_limit
       for update skip locked
  ),
  reaped as (
    update pyjobq.job j
       set status = case when pyjobq._tries_left(j.attempts, j.attempts_refunded, j.max_attempts) <= 0
                         then 4 else 1 end,
           run_after = case when pyjobq._tries_left(j.attempts, j.attempts_refunded, j.max_attempts) <= 0
                            then j.run_after
                            else pyjobq._retry_at(j.job_type, j.attempts - j.attempts_refunded, null, v_now) end,
           -- Cleared even for DEAD: the worker that lost the lease gets JQ001
           -- (lease_lost), never JQ003, which means "your attempt finished it".
           worker_id = null,
           last_error = format('lease expired: worker %s did not finish attempt %s',
                               j.worker_id, j.attempts),
           lease_until = null,
           updated_at = v_now
      from picked p
     where j.job_id = p.job_id
       and j.status = 2
       and j.lease_until < v_now
    returning j.job_id, j.job_type, j.status, j.run_after
  ), counted as (
    select pyjobq._stat_add(v_now, null, array_agg(r.job_type), array_agg(r.status)) from reaped r
  )
  select r.job_id, r.job_type::int, r.status::int, p.worker_id::text, p.attempts::int, r.run_after
    from reaped r
    join picked p on p.job_id = r.job_id
   cross join counted;
  -- Finish counts older than job_throughput and job_workers look back.
  delete from pyjobq.job_stat s
   where s.minute < v_now - interval '25 hours';
end;
$$;

comment on function pyjobq.job_reap(int) is
  'Takes back up to p_limit (1..100000, default 1000) RUNNING jobs whose lease expired: PENDING after '
  'pyjobq.retry_backoff, or DEAD when their attempts are used up. Skips rows other sessions hold locked, so '
  'reapers never block claimers or each other; safe to run from every worker. Returns what it took back, '
  'with the worker and attempt that lost it. Also drops the finish counts (job_throughput) older than 25 '
  'hours.';

create or replace function pyjobq.job_cancel(p_job_ids uuid[])
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
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  -- Cancelling is the producers' side of a type: its enqueue privilege.
  perform pyjobq._check_privilege('enqueue', array(select distinct j.job_type::int
                                                      from pyjobq.job j
                                                     where j.job_id = any (p_job_ids)));
  -- A RUNNING job is CANCELLED at once, like a PENDING one: its holder keeps
  -- its worker id on the row but holds nothing any more, so its every later
  -- call is refused (JQ005), and job_renew_lease_many tells it at the next
  -- heartbeat (cancelled = true) to stop the handler. Rows are locked in id
  -- order, so two cancels of overlapping sets cannot deadlock.
  return query
  with input as (
    select u.id, u.ord
      from unnest(p_job_ids) with ordinality as u(id, ord)
  ), locked as materialized (
    select k.job_id, k.status
      from pyjobq.job k
     where k.job_id in (select i.id from input i)
     order by k.job_id
       for update
  ), cancelled as (
    update pyjobq.job j
       set status = 5,
           lease_until = null,
           last_error = coalesce(j.last_error, 'cancelled'),
           updated_at = v_now
      from locked l
     where j.job_id = l.job_id
       and l.status in (1, 2)
    returning j.job_id
  ), audited as (
    -- One row (an aggregate), so the cross join below writes one line.
    select pyjobq._audit('cancel', count(*),
                         jsonb_build_object('job_ids', (array_agg(c.job_id order by c.job_id))[1:100]))
      from cancelled c
  )
  select i.id,
         case when l.job_id is null then 'not_found'
              when l.status = 1 then 'cancelled'
              when l.status = 2 then 'cancelled_running'
              else 'finished'
         end
    from input i
    left join locked l on l.job_id = i.id
   cross join audited
   order by i.ord;
end;
$$;

comment on function pyjobq.job_cancel(uuid[]) is
  'Cancels up to 10000 jobs: PENDING and RUNNING ones become CANCELLED (final, frees the dedupe key, '
  'redrivable, pruned like DONE). A RUNNING job''s holder is fenced out at once (its calls get JQ005) and learns '
  'it at its next job_renew_lease_many. Returns every input id in input order with its outcome: cancelled, '
  'cancelled_running, finished (already DONE, DEAD or CANCELLED: unchanged) or not_found. A call that '
  'cancelled jobs writes a line to the audit log (job_audit) with the first 100 of their ids.';

create or replace function pyjobq.job_redrive(
  p_job_ids uuid[] default null,
  p_job_type int default null,
  p_limit int default null
)
returns table (job_id uuid)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_limit int := coalesce(p_limit, 1000);
  v_id uuid;
  v_picked uuid[];
  v_ids uuid[];
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  perform pyjobq._check_range('p_limit', v_limit, 1, 100000);
  if p_job_type is not null then
    perform pyjobq._check_job_type(p_job_type);
  end if;
  if p_job_ids is not null and cardinality(p_job_ids) > 100000 then
    raise exception 'cardinality(p_job_ids) must be between 0 and 100000'
      using errcode = '22023';
  end if;
  -- The batch is locked once, then moved in one statement. Only when a
  -- concurrent enqueue takes a key between this snapshot and the update (a
  -- unique violation) is it moved a row at a time, each row in a
  -- subtransaction of its own; a subtransaction per row on every call would
  -- overflow the subtransaction cache past 64 rows.
  -- Only jobs that can move count against the limit: a backlog of jobs whose
  -- key an active job holds must not stop every later call from reaching the
  -- rest, and of the jobs that share a key only the oldest can move (the next
  -- call may take the next), so only it is a candidate.
  select coalesce(array_agg(d.job_id order by d.updated_at, d.job_id), '{}')
    into v_picked
    from (select p.job_id, p.updated_at
            from pyjobq.job p
           where p.job_id in (select c.job_id
                                from (select e.job_id,
                                             row_number() over (
                                               partition by e.job_type, coalesce(e.dedupe_key, e.job_id::text)
                                               order by e.updated_at, e.job_id) as n
                                        from pyjobq.job e
                                       where e.status in (4, 5)
                                         and (p_job_ids is null or e.job_id = any (p_job_ids))
                                         and (p_job_type is null or e.job_type = p_job_type)
                                         and pyjobq._tries_left(e.attempts, e.attempts, e.max_attempts) > 0
                                         and (e.dedupe_key is null
                                              or not exists (select 1
                                                               from pyjobq.job a
                                                              where a.job_type = e.job_type
                                                                and a.dedupe_key = e.dedupe_key
                                                                and a.status in (1, 2)))) c
                               where c.n = 1)
             and p.status in (4, 5)  -- again, on the row as it is when locked
           order by p.updated_at, p.job_id
           limit v_limit
             for update skip locked) d;
  begin
    v_ids := pyjobq._redrive_rows(v_picked, v_now);
  exception when unique_violation then
    v_ids := '{}';
    foreach v_id in array v_picked loop
      begin
        v_ids := v_ids || pyjobq._redrive_rows(array[v_id], v_now);
      exception when unique_violation then
        null;
      end;
    end loop;
  end;
  perform pyjobq._audit('redrive', cardinality(v_ids),
                        jsonb_build_object('job_ids', v_ids[1:100], 'job_type', p_job_type, 'limit', v_limit,
                                           'given', cardinality(p_job_ids)));
  return query select u.id from unnest(v_ids) as u(id);
  if cardinality(v_ids) > 0 then
    perform pg_notify('pyjobq_job', '');
  end if;
end;
$$;

comment on function pyjobq.job_redrive(uuid[], int, int) is
  'Moves DEAD and CANCELLED jobs back to PENDING, due now, with a fresh budget of max_attempts tries '
  '(attempts, the fencing token, goes on from where it was): the ids in p_job_ids, or else every DEAD or '
  'CANCELLED job (of p_job_type when given), up to p_limit (1..100000, default 1000) oldest first. A job whose '
  'dedupe key an active job holds stays where it is. Returns the ids it moved; a call that moved jobs writes '
  'a line to the audit log (job_audit) with the first 100 of their ids.';

create or replace function pyjobq.job_prune(p_older_than interval, p_limit int default null)
returns bigint
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_limit int := coalesce(p_limit, 10000);
  v_deleted bigint;
begin
  perform pyjobq._check_range('p_limit', v_limit, 1, 100000);
  if p_older_than is null or p_older_than < interval '0' or p_older_than > interval '100 years' then
    raise exception 'p_older_than must be an interval between 0 and 100 years'
      using errcode = case when p_older_than is null then '22004' else '22023' end,
            detail = format('p_older_than was %s.', coalesce(p_older_than::text, 'null')),
            hint = 'e.g. ''7 days''.';
  end if;
  with doomed as (
    select d.job_id
      from pyjobq.job d
     where d.status in (3, 4, 5)
       and d.updated_at < v_now - p_older_than
     limit v_limit
       for update skip locked
  )
  delete from pyjobq.job j
   using doomed d
   where j.job_id = d.job_id;
  get diagnostics v_deleted = row_count;
  perform pyjobq._audit('prune', v_deleted, jsonb_build_object('older_than', p_older_than, 'limit', v_limit));
  -- A rate window with no claim for longer than any period (a day at most)
  -- counts nothing; an hour more leaves a claim that started before it alone.
  delete from pyjobq.rate_window w
   where w.claimed_at[cardinality(w.claimed_at)] < v_now - interval '25 hours';
  return v_deleted;
end;
$$;

comment on function pyjobq.job_prune(interval, int) is
  'Deletes up to p_limit (1..100000, default 10000) DONE, DEAD and CANCELLED jobs last changed more than '
  'p_older_than '
  '(0 to 100 years) ago, '
  'and returns how many it deleted; call it again until it returns less than p_limit. Also drops the rate '
  'windows with no claim in the last 25 hours, which count nothing. A call that deleted jobs writes a line to '
  'the audit log (job_audit).';

create function pyjobq.job_list(
  p_job_type int default null,
  p_status int default null,
  p_dedupe_key text default null,
  p_created_after timestamptz default null,
  p_created_before timestamptz default null,
  p_oldest_first boolean default null,
  p_after uuid default null,
  p_limit int default null,
  p_error text default null
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
  if p_status is not null then
    perform pyjobq._check_range('p_status', p_status, 1, 5);
  end if;
  if p_job_type is not null then
    perform pyjobq._check_job_type(p_job_type);
  end if;
  perform pyjobq._check_text('p_dedupe_key', p_dedupe_key, 200, true);
  perform pyjobq._check_text('p_error', p_error, 200, true);
  perform pyjobq._check_time('p_created_after', p_created_after, pyjobq.clock_now());
  perform pyjobq._check_time('p_created_before', p_created_before, pyjobq.clock_now());
  v_from := coalesce(pyjobq._job_id_floor(p_created_after), '00000000-0000-0000-0000-000000000000');
  v_to := coalesce(pyjobq._job_id_floor(p_created_before), 'ffffffff-ffff-ffff-ffff-ffffffffffff');
  -- Keyset pagination: the next page continues after the last id of this one.
  if p_after is not null and v_oldest then
    v_from := greatest(v_from, p_after);
  elsif p_after is not null then
    v_to := least(v_to, p_after);
  end if;

  -- One of three ways runs, chosen by the arguments (the others are cut off
  -- before they read a row): the statuses with few jobs (PENDING, RUNNING,
  -- DEAD, CANCELLED: the queue's work, not its history) through their partial
  -- indexes, then sorted; DONE or any status along job_pkey in order, up to
  -- the limit. No way reads the whole history for one page.
  return query
  with matching as not materialized (
    select j.job_id, j.status, j.lease_until
      from pyjobq.job j
     where (p_job_type is null or j.job_type = p_job_type)
       and (p_dedupe_key is null or j.dedupe_key = p_dedupe_key)
       and (p_error is null or strpos(lower(j.last_error), lower(p_error)) > 0)
       and j.job_type <> all (v_denied)
  ), few as materialized (
    -- Every job of the status, through its partial index, before any limit or
    -- id range could tempt the planner into walking job_pkey instead (as it
    -- would on a table never analyzed, where rows look common).
    select m.job_id from matching m where p_status = 1 and m.status = 1
    union all
    select m.job_id from matching m where p_status = 2 and m.lease_until is not null
    union all
    select m.job_id from matching m
     where p_status in (4, 5) and m.status in (4, 5) and m.status = p_status
  ), ranged as not materialized (
    select m.job_id, m.status
      from matching m
     where m.job_id >= v_from and m.job_id < v_to and m.job_id is distinct from p_after
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
    join pyjobq.job j on j.job_id = p.job_id
    join pyjobq.job_type t on t.job_type = j.job_type
   order by case when v_oldest then j.job_id end, case when not v_oldest then j.job_id end desc;
end;
$$;

comment on function pyjobq.job_list(int, int, text, timestamptz, timestamptz, boolean, uuid, int, text) is
  'Lists jobs newest first (or oldest, p_oldest_first), up to p_limit (1..1000, default 100), filtered by job '
  'type, status (1..5), dedupe key, creation time [p_created_after, p_created_before) and text in last_error '
  '(p_error, any case; read row by row, so give a status other than DONE or a creation range to keep it '
  'short on a long history). Keyset pages: pass the '
  'last job_id of a page as p_after for the next. Without payload and result (job_get has them); only the types '
  'the caller may observe.';

create or replace function pyjobq.grant_roles()
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_missing text[];
begin
  select array_agg(r.name order by r.name)
    into v_missing
    from unnest(array['pyjobq_producer', 'pyjobq_worker', 'pyjobq_observer', 'pyjobq_admin']) as r(name)
   where not exists (select 1 from pg_roles g where g.rolname = r.name);
  if v_missing is not null then
    if not exists (select 1 from pg_roles g
                    where g.rolname = current_user and (g.rolsuper or g.rolcreaterole)) then
      raise notice 'pyjobq: group roles % not created: role % may not create roles', v_missing, current_user
        using hint = 'Have a role with CREATEROLE run: select pyjobq.grant_roles();';
      return;
    end if;
    if 'pyjobq_producer' = any (v_missing) then create role pyjobq_producer nologin; end if;
    if 'pyjobq_worker' = any (v_missing) then create role pyjobq_worker nologin; end if;
    if 'pyjobq_observer' = any (v_missing) then create role pyjobq_observer nologin; end if;
    if 'pyjobq_admin' = any (v_missing) then create role pyjobq_admin nologin; end if;
  end if;

  grant usage on schema pyjobq to pyjobq_producer, pyjobq_worker, pyjobq_observer, pyjobq_admin;
  grant execute on function
    pyjobq.job_types(), pyjobq.job_type_code(text), pyjobq.job_type_policies(), pyjobq.job_type_limits(),
    pyjobq.schema_version(), pyjobq.clock_now()
    to pyjobq_producer, pyjobq_worker, pyjobq_observer, pyjobq_admin;
  grant execute on function
    pyjobq.job_enqueue(int, jsonb, int, timestamptz, text, int, interval, text),
    pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int, interval, text[])
    to pyjobq_producer;
  grant execute on function
    pyjobq.job_claim(text, int, int, int[]),
    pyjobq.job_next_due(int[]),
    pyjobq.job_complete(uuid, text, int, jsonb, uuid),
    pyjobq.job_complete_many(text, uuid[], int[], jsonb[], uuid[]),
    pyjobq.job_fail(uuid, text, int, text, double precision, boolean, uuid),
    pyjobq.job_renew_lease(uuid, text, int, int, uuid),
    pyjobq.job_renew_lease_many(text, uuid[], int[], int, uuid[]),
    pyjobq.job_release(uuid, text, int, uuid),
    pyjobq.job_release_many(text, uuid[], int[], uuid[]),
    pyjobq.job_reap(int),
    pyjobq.job_schedule_tick()
    to pyjobq_worker;
  grant execute on function
    pyjobq.job_counts(),
    pyjobq.job_throughput(int),
    pyjobq.job_workers(interval)
    to pyjobq_observer, pyjobq_admin;
  -- Payloads and results are the application's data: producers read back what they
  -- enqueued, admins what they operate on; observers see figures only.
  grant execute on function pyjobq.job_get(uuid) to pyjobq_producer, pyjobq_admin;
  -- Producers cancel what they enqueued; admins anything.
  grant execute on function pyjobq.job_cancel(uuid[]) to pyjobq_producer, pyjobq_admin;
  grant execute on function pyjobq.job_watch(uuid[]) to pyjobq_producer, pyjobq_admin;
  grant execute on function
    pyjobq.job_list(int, int, text, timestamptz, timestamptz, boolean, uuid, int, text)
    to pyjobq_producer, pyjobq_admin;
  grant execute on function
    pyjobq.job_redrive(uuid[], int, int),
    pyjobq.job_audit(bigint, int),
    pyjobq.job_prune(interval, int),
    pyjobq.job_type_register(int, text),
    pyjobq.job_type_grant(int, text, text),
    pyjobq.job_type_revoke(int, text, text),
    pyjobq.job_type_grants(),
    pyjobq.job_type_set_policy(int, int, double precision, double precision, double precision, double precision),
    pyjobq.job_settings(),
    pyjobq.job_settings_set(boolean),
    pyjobq.job_type_set_limits(int, int, int, int, interval, int, interval, boolean),
    pyjobq.job_reap(int),
    pyjobq.job_schedule_set(text, text, int, jsonb, text, int, int, text, text, int, timestamptz),
    pyjobq.job_schedule_delete(text),
    pyjobq.job_schedule_pause(text),
    pyjobq.job_schedule_resume(text),
    pyjobq.job_schedules(),
    pyjobq.job_schedule_tick()
    to pyjobq_admin;
end;
$$;

comment on function pyjobq.grant_roles() is
  'Creates the NOLOGIN group roles pyjobq_producer (enqueue, get, list, cancel, watch), pyjobq_worker (claim, '
  'next due, complete, fail, '
  'renew, release, reap, schedule tick), pyjobq_observer (counts, throughput, workers) and pyjobq_admin (counts, '
  'throughput, workers, get, list, cancel, watch, reap, redrive, prune, audit, '
  'register types, per-type grants, limits, settings, schedules) '
  'when missing and the caller may create roles, and grants each EXECUTE on its functions. Run by the '
  'installation; run it again as a role with CREATEROLE when the installing role could not create them.';


-- The new functions, like every function of the schema, are not PUBLIC's; the
-- group roles get what grant_roles grants.
revoke all on all functions in schema pyjobq from public;

do $$
begin
  perform pyjobq.grant_roles();
end;
$$;
