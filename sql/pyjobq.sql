-- pyjobq: a job queue that lives inside PostgreSQL.
--
-- The functions in this file are the whole API. Any client that can run
-- `select * from pyjobq.job_claim('w1', 10);` gets exactly the semantics the
-- Python package gets: every state transition, lease check, backoff and dedupe
-- decision is made here, in one statement per transition, so no client can
-- disagree with another.
--
-- A job's life, in the order the functions are defined below:
--
--   job_enqueue / job_enqueue_many   -> PENDING (1), due at run_after
--   job_claim                        -> RUNNING (2), attempts + 1 (never wound back), leased to a worker
--   job_renew_lease(_many)           -> RUNNING, lease pushed forward (heartbeat)
--   job_complete / job_complete_many -> DONE (3)
--   job_fail                         -> PENDING again after a backoff, or DEAD (4)
--   job_release(_many)               -> PENDING again, the try given back (shutdown)
--   job_reap                         -> expired leases: PENDING after a backoff, or DEAD
--   job_redrive                      -> DEAD back to PENDING with a fresh budget of attempts
--   job_prune                        -> DONE, DEAD and CANCELLED rows deleted after a while
--   job_counts                       -> jobs per type and status, with health figures
--   job_get                          -> one job, with its payload, result and last error
--   job_list                         -> pages of jobs by type, status, key and time, newest first
--   job_cancel                       -> PENDING or RUNNING to CANCELLED (5); its holder is fenced out
--   job_watch                        -> a job's end announced on pyjobq_done
--
-- Ownership: a claim hands out (job_id, worker_id, attempt). Every later
-- transition is a compare-and-set on all three plus status = RUNNING, so a
-- holder whose lease was reaped, and the job claimed again (even by a worker
-- with the same id), can never complete, fail or renew the newer attempt: it
-- gets SQLSTATE JQ001 instead. Recovery is by lease only: a job stays RUNNING
-- until its holder finishes it or job_reap finds its lease expired.
--
-- Time: every timestamp comes from pyjobq.clock_now(), the database clock,
-- which a session of the schema's owner can freeze with
-- `set pyjobq.fake_now = '...'` (tests); any other role that sets it gets 42501.
--
-- Waiting: claim, reap and prune skip rows other sessions hold locked. The
-- functions that must wait for a row (an uncommitted duplicate's dedupe key, a
-- job a reaper or another transaction is changing) give up after
-- lock_timeout = 5 s with SQLSTATE 55P03 instead of hanging behind a
-- transaction left open; retrying later is always safe.
--
-- Errors: arguments out of range raise 22023 (invalid_parameter_value) or
-- 22004 (null_value_not_allowed) naming the argument and its allowed range;
-- queue states raise the JQ class:
--   JQ001 lease_lost            the caller no longer holds this attempt of the job
--   JQ002 job_not_found         no job with that id
--   JQ003 job_already_finished  the caller's own attempt is already DONE or DEAD
--   JQ004 job_type_conflict     the job type code is registered under another name
-- Nothing is changed when an error is raised.

create schema pyjobq;

comment on schema pyjobq is 'pyjobq job queue: the tables are private, the functions are the API';

-- The clock ----------------------------------------------------------------

create function pyjobq.clock_now()
returns timestamptz
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_fake text := nullif(current_setting('pyjobq.fake_now', true), '');
  v_now timestamptz;
begin
  if v_fake is null then
    return statement_timestamp();
  end if;
  -- The clock belongs to the owner of the schema. Any other role that could move
  -- it would take live leases from their workers (reap in 2100), claim jobs due
  -- next week, or make a lease that never ends ('infinity').
  if not pg_has_role(session_user,
                     (select n.nspowner from pg_catalog.pg_namespace n where n.nspname = 'pyjobq'),
                     'USAGE') then
    raise exception 'only the owner of schema pyjobq may set pyjobq.fake_now'
      using errcode = '42501',
            detail = format('Role %s set pyjobq.fake_now to %s.', session_user, v_fake),
            hint = 'RESET pyjobq.fake_now: the test clock is for the schema owner''s test sessions.';
  end if;
  v_now := v_fake::timestamptz;
  if not isfinite(v_now) then
    raise exception 'pyjobq.fake_now must be a finite time'
      using errcode = '22023',
            detail = format('pyjobq.fake_now was %s.', v_fake),
            hint = 'Set a time such as ''2030-01-01 00:00:00+00'', or RESET pyjobq.fake_now.';
  end if;
  return v_now;
end;
$$;

comment on function pyjobq.clock_now() is
  'The one clock of pyjobq: statement_timestamp(), unless the session sets pyjobq.fake_now to freeze time '
  '(tests); only roles with the privileges of the pyjobq schema''s owner may, any other gets 42501, and a '
  'time that is not finite is 22023.';

create function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 2
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

-- Storage --------------------------------------------------------------------

create table pyjobq.job_type (
  job_type smallint primary key,
  name varchar(63) not null,
  created_at timestamptz not null default pyjobq.clock_now(),
  constraint job_type_name_key unique (name),
  constraint job_type_code_range check (job_type between 1 and 32767),
  constraint job_type_name_not_blank check (btrim(name, E' \t\n\r\f\v') <> '')
);

comment on table pyjobq.job_type is
  'Registered job type codes and their names; job_enqueue refuses codes that are not here.';

insert into pyjobq.job_type (job_type, name) values (1, 'SEARCH'), (2, 'OUTBOX');

-- Enqueue order: the claim's tiebreaker after priority and run_after, so
-- that every position in the claim order is unique and later jobs sort later.
create sequence pyjobq.job_seq;

-- Bumped (never rolled back, no row lock) by every change that can make a job
-- PENDING at a position before the claim order's current front; see job_claim.
create sequence pyjobq.job_claim_epoch;

create table pyjobq.job (
  job_id uuid not null default gen_random_uuid(),
  job_type smallint not null,
  status smallint not null default 1,
  priority smallint not null default 100,
  payload jsonb not null default '{}',
  result jsonb,
  dedupe_key varchar(200),
  attempts smallint not null default 0,
  max_attempts smallint not null default 3,
  run_after timestamptz not null,
  lease_until timestamptz,
  worker_id varchar(80),
  run_started_at timestamptz,
  last_error text,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  seq bigint not null default nextval('pyjobq.job_seq'),
  attempts_refunded smallint not null default 0,
  notify_done boolean not null default false,
  constraint job_pkey primary key (job_id),
  constraint job_status_valid check (status between 1 and 5),
  constraint job_payload_is_object check (jsonb_typeof(payload) = 'object'),
  constraint job_attempts_within_max
    check (attempts_refunded between 0 and attempts and attempts - attempts_refunded <= max_attempts),
  constraint job_running_has_lease check ((status = 2) = (lease_until is not null)),
  constraint job_running_has_worker check (status <> 2 or worker_id is not null)
);

comment on table pyjobq.job is
  'One row per job. Written only by the pyjobq functions; status 1 PENDING, 2 RUNNING, 3 DONE, 4 DEAD, '
  '5 CANCELLED.';
comment on column pyjobq.job.job_id is
  'Time-ordered for jobs added by job_enqueue and job_enqueue_many (pyjobq._new_job_ids); the default, '
  'gen_random_uuid(), only serves rows inserted directly.';
comment on column pyjobq.job.attempts is
  'Claims so far (+1 at each claim, never wound back): also the fencing token a holder passes back to complete, '
  'fail, renew or release, so a token is never valid twice for a job.';
comment on column pyjobq.job.notify_done is
  'Set by job_watch: the job''s end (DONE, DEAD or CANCELLED) is announced on channel pyjobq_done.';
comment on column pyjobq.job.attempts_refunded is
  'Claims that did not use up a try: given back by job_release, or forgiven by job_redrive. attempts - '
  'attempts_refunded is the tries used against max_attempts.';
comment on column pyjobq.job.seq is
  'Enqueue order, from sequence pyjobq.job_seq: breaks ties in the claim order (priority, run_after, seq).';
comment on column pyjobq.job.run_after is
  'The job is not claimed before this time (scheduling and retry backoff).';
comment on column pyjobq.job.lease_until is
  'Set only while RUNNING: after this time job_reap may take the job back from its worker.';
comment on column pyjobq.job.dedupe_key is
  'At most one PENDING or RUNNING job per key; enqueueing an active key returns the existing job.';

-- The claim: due PENDING jobs in priority then due-time order. The ORDER BY
-- matches this index exactly, so an ordered index scan that stops at LIMIT is
-- the only sensible plan whatever the statistics say (or do not yet say).
create index job_claim_idx on pyjobq.job (priority, run_after, seq) where status = 1;

-- The reaper: expired leases (only RUNNING jobs have one). The predicate is
-- on lease_until, not status: the compare-and-set transitions look a job up
-- by id with status = 2, and when statistics undercount RUNNING jobs the
-- planner would otherwise read this whole index for each of them.
create index job_lease_idx on pyjobq.job (lease_until) where lease_until is not null;

-- job_counts: the DEAD and CANCELLED jobs, exactly, without reading the
-- DONE history. Jobs end so rarely, so the index costs the drain nothing.
create index job_dead_cancelled_idx on pyjobq.job (job_type, status) where status in (4, 5);

-- job_counts: the share of each (job_type, status) pair in the sample of the
-- last ANALYZE, from which it estimates the DONE jobs without reading them.
create statistics pyjobq.job_type_status_stats (mcv) on job_type, status from pyjobq.job;

-- The active-duplicate guard; DONE, DEAD and CANCELLED jobs free their key.
create unique index job_dedupe_active_idx on pyjobq.job (dedupe_key)
  where status in (1, 2) and dedupe_key is not null;

-- Every transition rewrites the row (the partial indexes make it non-HOT), so
-- a queue churns through dead tuples at its own pace, not in proportion to
-- its size: vacuum and analyze on absolute thresholds.
alter table pyjobq.job set (
  autovacuum_vacuum_scale_factor = 0,
  autovacuum_vacuum_threshold = 5000,
  autovacuum_vacuum_insert_scale_factor = 0,
  autovacuum_vacuum_insert_threshold = 20000,
  autovacuum_analyze_scale_factor = 0,
  autovacuum_analyze_threshold = 20000,
  autovacuum_vacuum_cost_delay = 0
);

-- Argument checks -------------------------------------------------------------

create function pyjobq._check_range(p_name text, p_value bigint, p_min bigint, p_max bigint)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_value is null then
    raise exception '% must not be null', p_name
      using errcode = '22004',
            hint = format('Pass a value between %s and %s, or leave it out where it has a default.', p_min, p_max);
  end if;
  if p_value < p_min or p_value > p_max then
    raise exception '% must be between % and %', p_name, p_min, p_max
      using errcode = '22023',
            detail = format('%s was %s.', p_name, p_value);
  end if;
end;
$$;

comment on function pyjobq._check_range(text, bigint, bigint, bigint) is
  'Raises 22004 when p_value is null and 22023 when it is outside [p_min, p_max], naming the argument.';

create function pyjobq._check_text(p_name text, p_value text, p_max_length int, p_nullable boolean)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_value is null then
    if p_nullable then
      return;
    end if;
    raise exception '% must not be null', p_name
      using errcode = '22004',
            hint = format('Pass a non-blank text of at most %s characters.', p_max_length);
  end if;
  if btrim(p_value, E' \t\n\r\f\v') = '' or length(p_value) > p_max_length then
    raise exception '% must be a non-blank text of 1 to % characters', p_name, p_max_length
      using errcode = '22023',
            detail = format('%s had %s characters.', p_name, length(p_value));
  end if;
end;
$$;

comment on function pyjobq._check_text(text, text, int, boolean) is
  'Raises 22004 for a null text (unless p_nullable) and 22023 for a blank one (nothing but spaces, tabs or '
  'line breaks) or one longer than p_max_length.';

-- Arrays pair their elements by position (a payload with its dedupe key, a job
-- id with its attempt), so every array argument is one-dimensional and its
-- positions count from 1: an array written '[0:1]={a,b}' is renumbered (a
-- slice always starts at 1), a multi-dimensional one refused.
create function pyjobq._check_array(p_name text, p_value anyarray)
returns anyarray
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if array_ndims(p_value) > 1 then
    raise exception '% must be a one-dimensional array', p_name
      using errcode = '22023',
            detail = format('%s has %s dimensions.', p_name, array_ndims(p_value)),
            hint = 'Pass a plain list of values, e.g. ARRAY[...] or ''{...}''.';
  end if;
  if array_lower(p_value, 1) <> 1 then
    return p_value[array_lower(p_value, 1):array_upper(p_value, 1)];
  end if;
  return p_value;
end;
$$;

comment on function pyjobq._check_array(text, anyarray) is
  'Returns p_value renumbered from 1 when it starts elsewhere; raises 22023 when it has more than one dimension.';

create function pyjobq._check_same_length(p_name text, p_length int, p_expected int)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_length <> p_expected then
    raise exception '% must have as many elements as p_job_ids', p_name
      using errcode = '22023',
            detail = format('p_job_ids has %s, %s %s.', p_expected, p_name, p_length),
            hint = 'Pass one element per job, in the order of p_job_ids.';
  end if;
end;
$$;

comment on function pyjobq._check_same_length(text, int, int) is
  'Raises 22023 naming p_name when its array length p_length differs from p_job_ids'' p_expected.';

create function pyjobq._check_time(p_name text, p_value timestamptz, p_now timestamptz)
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  -- Finite and within a century of now: 'infinity' would make a job that is
  -- never due, or a bound that cannot be turned into a job id.
  if p_value is not null
     and not (isfinite(p_value) and p_value between p_now - interval '100 years' and p_now + interval '100 years') then
    raise exception '% must be a time within 100 years of now', p_name
      using errcode = '22023',
            detail = format('%s was %s.', p_name, p_value),
            hint = 'Leave it out for the default.';
  end if;
end;
$$;

comment on function pyjobq._check_time(text, timestamptz, timestamptz) is
  'Raises 22023 naming p_name unless p_value is null or a finite time within 100 years of p_now.';

-- The name of each status code, for the functions that show one.
create function pyjobq._status_name(p_status int)
returns text
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  return (array['PENDING', 'RUNNING', 'DONE', 'DEAD', 'CANCELLED'])[p_status];
end;
$$;

comment on function pyjobq._status_name(int) is
  'PENDING, RUNNING, DONE, DEAD or CANCELLED for status 1..5 (job_status_valid).';

create function pyjobq._check_job_type(p_job_type int)
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  perform pyjobq._check_range('p_job_type', p_job_type, 1, 32767);
  perform 1 from pyjobq.job_type t where t.job_type = p_job_type;
  if not found then
    raise exception 'p_job_type % is not a registered job type', p_job_type
      using errcode = '22023',
            hint = 'Register it first with pyjobq.job_type_register(code, name); pyjobq.job_types() lists the known ones.';
  end if;
end;
$$;

comment on function pyjobq._check_job_type(int) is
  'Raises 22023 unless p_job_type is a registered job type code.';

create function pyjobq._check_payload(p_name text, p_payload jsonb)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_payload is not null and jsonb_typeof(p_payload) <> 'object' then
    raise exception '% must be a JSON object', p_name
      using errcode = '22023',
            detail = format('%s was a JSON %s.', p_name, jsonb_typeof(p_payload)),
            hint = 'Wrap the value in an object, e.g. {"value": ...}.';
  end if;
end;
$$;

comment on function pyjobq._check_payload(text, jsonb) is
  'Raises 22023 unless p_payload is null or a JSON object.';

-- Why a transition on a job did not happen: raised after a guarded update
-- matched no row, so the caller learns whether the job is gone, already
-- finished by this very attempt, or no longer theirs.
create function pyjobq._raise_not_held(p_job_id uuid, p_worker_id text, p_attempt int)
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_status smallint;
  v_worker text;
  v_attempts smallint;
  v_job_type smallint;
begin
  if p_job_id is null then
    raise exception 'p_job_id must not be null'
      using errcode = '22004',
            hint = 'Pass the job_id that job_claim returned.';
  end if;
  select j.status, j.worker_id, j.attempts, j.job_type
    into v_status, v_worker, v_attempts, v_job_type
    from pyjobq.job j
   where j.job_id = p_job_id;
  if found then
    perform pyjobq._check_privilege('work', array[v_job_type]);
  else
    raise exception 'job % does not exist', p_job_id
      using errcode = 'JQ002',
            hint = 'It may have been pruned, or the id is wrong.';
  end if;
  if v_status = 5 then
    raise exception 'job % was cancelled', p_job_id
      using errcode = 'JQ005',
            hint = 'Stop working on it: nothing this attempt does is recorded.';
  end if;
  if v_status in (3, 4) and v_worker = p_worker_id and v_attempts = p_attempt then
    raise exception 'job % is already %', p_job_id, case v_status when 3 then 'DONE' else 'DEAD' end
      using errcode = 'JQ003',
            detail = format('Attempt %s of worker %s already finished it.', p_attempt, p_worker_id),
            hint = 'Finish each claimed attempt once.';
  end if;
  raise exception 'worker % no longer holds attempt % of job %', p_worker_id, p_attempt, p_job_id
    using errcode = 'JQ001',
          detail = format('The job is %s at attempt %s, worker %s.',
                          case v_status when 1 then 'PENDING' when 2 then 'RUNNING'
                                        when 3 then 'DONE' else 'DEAD' end,
                          v_attempts, coalesce(v_worker, 'none')),
          hint = 'The lease expired and the job was reaped or claimed again: drop this result, the job runs (or ran) elsewhere.';
end;
$$;

comment on function pyjobq._raise_not_held(uuid, text, int) is
  'Raises 22004 (null p_job_id), JQ002, JQ003 or JQ001 to explain why (p_worker_id, p_attempt) could not act '
  'on job p_job_id.';

-- Tries a job has left: its budget (max_attempts) minus the tries used, and
-- never more than the claims its smallint counter can still hand out.
create function pyjobq._tries_left(p_attempts int, p_attempts_refunded int, p_max_attempts int)
returns int
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  return least(p_max_attempts - (p_attempts - p_attempts_refunded), 32767 - p_attempts);
end;
$$;

comment on function pyjobq._tries_left(int, int, int) is
  'How many more times a job with these counters may be claimed: max_attempts minus the tries used '
  '(attempts - attempts_refunded), at most 32767 - attempts.';

-- Retry delay after attempt p_attempt: 2 s doubling per attempt, capped at one
-- hour, minus up to 25% random jitter so retries of a burst spread out.
create function pyjobq.retry_backoff(p_attempt int)
returns interval
language sql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select make_interval(secs => least(3600.0, 2.0 * power(2.0, greatest(p_attempt, 1) - 1))
                               * (1.0 - 0.25 * random()))
$$;

comment on function pyjobq.retry_backoff(int) is
  'Delay before the retry that follows attempt p_attempt: least(1 hour, 2 s * 2^(p_attempt - 1)) minus up to 25% jitter.';

-- Job types -------------------------------------------------------------------

create function pyjobq.job_type_register(p_job_type int, p_name text)
returns table (job_type int, name text, created boolean)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_name text;
begin
  perform pyjobq._check_range('p_job_type', p_job_type, 1, 32767);
  perform pyjobq._check_text('p_name', p_name, 63, false);
  insert into pyjobq.job_type as t (job_type, name)
  values (p_job_type, p_name)
  on conflict do nothing;
  if found then
    return query select p_job_type, p_name, true;
    return;
  end if;
  select t.name into v_name from pyjobq.job_type t where t.job_type = p_job_type;
  if v_name is distinct from p_name then
    raise exception 'job type % or name % is already registered', p_job_type, p_name
      using errcode = 'JQ004',
            detail = format('Code %s is named %s.', p_job_type, coalesce(v_name, '(unregistered)')),
            hint = 'Codes and names are registered once; pick another code or name.';
  end if;
  return query select p_job_type, p_name, false;
end;
$$;

comment on function pyjobq.job_type_register(int, text) is
  'Registers job type code p_job_type (1..32767) under p_name; idempotent for the same pair, JQ004 when either is taken by another.';

create function pyjobq.job_types()
returns table (job_type int, name text)
language sql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select t.job_type::int, t.name::text from pyjobq.job_type t order by t.job_type
$$;

comment on function pyjobq.job_types() is 'The registered job type codes and names.';

-- Enqueue ---------------------------------------------------------------------

-- Privileges per job type ------------------------------------------------------
--
-- The group roles decide which functions a role may call; these rows narrow,
-- per job type, who may use them on that type's jobs. A privilege of a type
-- with no row is open to every role that may call the function (the group
-- roles' meaning); once a type has a row for a privilege, only members of the
-- roles named for it (and the schema owner) hold it:
--
--   enqueue  job_enqueue, job_enqueue_many
--   work     job_claim, and each transition a holder makes: complete, fail,
--            renew, release
--   observe  job_get, and the type's rows of job_counts
--
-- Membership is that of the session's role (session_user): inside a SECURITY
-- DEFINER function the role that called it is not otherwise known. A worker
-- whose type it may not work is told 42501 before anything about the job, so
-- it learns neither the holder nor the attempt.

create table pyjobq.job_type_grant (
  job_type smallint not null,
  privilege text not null,
  role_oid oid not null,
  constraint job_type_grant_pkey primary key (job_type, privilege, role_oid),
  constraint job_type_grant_job_type_fkey foreign key (job_type) references pyjobq.job_type (job_type),
  constraint job_type_grant_privilege_valid check (privilege in ('enqueue', 'work', 'observe'))
);

comment on table pyjobq.job_type_grant is
  'Per-type privileges: a (job_type, privilege) with rows is held only by members of the roles named.';

create function pyjobq._denied_types(p_privilege text)
returns smallint[]
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  -- PL/pgSQL, not SQL: its plans are kept for the session, where a SQL
  -- function's body is planned again at every call (tens of microseconds on
  -- every claim and completion). No grant of the privilege: nothing denied.
  if not exists (select 1 from pyjobq.job_type_grant g where g.privilege = p_privilege)
     or pg_has_role(session_user,
                    (select n.nspowner from pg_catalog.pg_namespace n where n.nspname = 'pyjobq'),
                    'USAGE') then
    return '{}';
  end if;
  return (select coalesce(array_agg(distinct g.job_type order by g.job_type), '{}')
            from pyjobq.job_type_grant g
           where g.privilege = p_privilege
             and not exists (select 1
                               from pyjobq.job_type_grant m
                               join pg_catalog.pg_roles r on r.oid = m.role_oid
                              where m.job_type = g.job_type
                                and m.privilege = p_privilege
                                and pg_has_role(session_user, m.role_oid, 'MEMBER')));
end;
$$;

comment on function pyjobq._denied_types(text) is
  'The job types whose p_privilege is granted to named roles, none of which the session''s role is a member of.';

create function pyjobq._check_privilege(p_privilege text, p_job_types int[])
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_denied int;
begin
  -- The denied types are computed once for the whole set: a batch of jobs
  -- costs one check, not one per job.
  select min(u.code) into v_denied
    from unnest(p_job_types) as u(code)
   where u.code = any (pyjobq._denied_types(p_privilege));
  if v_denied is not null then
    raise exception 'permission denied to % jobs of type %', p_privilege, v_denied
      using errcode = '42501',
            detail = format('Job type %s grants %s to named roles only, and role %s is in none of them.',
                            v_denied, p_privilege, session_user),
            hint = 'An admin grants it with pyjobq.job_type_grant(job_type, role, privilege); '
                   'pyjobq.job_type_grants() lists the grants.';
  end if;
end;
$$;

comment on function pyjobq._check_privilege(text, int[]) is
  'Raises 42501 when the session''s role does not hold p_privilege (enqueue, work, observe) on one of the job '
  'types p_job_types.';

create function pyjobq.job_type_grant(p_job_type int, p_role text, p_privilege text)
returns boolean
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_role oid;
begin
  perform pyjobq._check_job_type(p_job_type);
  perform pyjobq._check_grant_privilege(p_privilege);
  v_role := pyjobq._check_role(p_role);
  insert into pyjobq.job_type_grant (job_type, privilege, role_oid)
  values (p_job_type, p_privilege, v_role)
  on conflict do nothing;
  return found;
end;
$$;

comment on function pyjobq.job_type_grant(int, text, text) is
  'Grants p_privilege (enqueue, work or observe) on the jobs of type p_job_type to the members of role p_role. '
  'From the first grant of a privilege on a type, only the roles granted it hold it. Returns true when newly '
  'granted, false when it was already.';

create function pyjobq.job_type_revoke(p_job_type int, p_role text, p_privilege text)
returns boolean
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_role oid;
begin
  perform pyjobq._check_job_type(p_job_type);
  perform pyjobq._check_grant_privilege(p_privilege);
  v_role := pyjobq._check_role(p_role);
  delete from pyjobq.job_type_grant g
   where g.job_type = p_job_type
     and g.privilege = p_privilege
     and g.role_oid = v_role;
  return found;
end;
$$;

comment on function pyjobq.job_type_revoke(int, text, text) is
  'Revokes p_privilege on the jobs of type p_job_type from role p_role; once no role holds a grant of it, the '
  'privilege is open to the group roles again. Returns true when a grant was removed.';

create function pyjobq.job_type_grants()
returns table (job_type int, job_type_name text, privilege text, role_name text)
language sql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select g.job_type::int, t.name::text, g.privilege, coalesce(r.rolname::text, g.role_oid::text)
    from pyjobq.job_type_grant g
    join pyjobq.job_type t on t.job_type = g.job_type
    left join pg_catalog.pg_roles r on r.oid = g.role_oid
   order by g.job_type, g.privilege, 4
$$;

comment on function pyjobq.job_type_grants() is
  'The per-type grants: job type, privilege and role (its oid when the role was dropped).';

create function pyjobq._check_grant_privilege(p_privilege text)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_privilege is null then
    raise exception 'p_privilege must not be null'
      using errcode = '22004',
            hint = 'Pass enqueue, work or observe.';
  end if;
  if p_privilege not in ('enqueue', 'work', 'observe') then
    raise exception 'p_privilege must be enqueue, work or observe'
      using errcode = '22023',
            detail = format('p_privilege was %s.', p_privilege),
            hint = 'enqueue: job_enqueue*; work: job_claim and what a holder does; observe: job_get, job_counts.';
  end if;
end;
$$;

comment on function pyjobq._check_grant_privilege(text) is
  'Raises 22004 or 22023 unless p_privilege is enqueue, work or observe.';

create function pyjobq._check_role(p_role text)
returns oid
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_role oid;
begin
  perform pyjobq._check_text('p_role', p_role, 63, false);
  select r.oid into v_role from pg_catalog.pg_roles r where r.rolname = p_role;
  if not found then
    raise exception 'p_role % is not a role', p_role
      using errcode = '22023',
            hint = 'Pass the exact name of an existing role: names are case-sensitive and never quoted here.';
  end if;
  return v_role;
end;
$$;

comment on function pyjobq._check_role(text) is
  'Returns the oid of the role named exactly p_role; raises 22004/22023 for no name or an unknown one.';

create function pyjobq._new_job_ids(p_now timestamptz, p_count int)
returns table (seq bigint, job_id uuid)
language sql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  -- Time-ordered ids in the layout of UUIDv7 (version 8 here): 48 bits of
  -- milliseconds since the epoch, 12 random bits per call, then the job's seq
  -- under the variant bits. seq is unique, so the id is; and new keys land at
  -- the right edge of job_pkey instead of on random pages of a large index.
  select s.seq,
         (p.prefix || to_hex(s.seq | (-9223372036854775808)::bigint))::uuid
    from (select lpad(to_hex((extract(epoch from p_now) * 1000)::bigint & 281474976710655), 12, '0')
                 || '8' || lpad(to_hex(floor(random() * 4096)::int), 3, '0') as prefix) p,
         lateral (select nextval('pyjobq.job_seq') as seq from generate_series(1, p_count)) s
$$;

comment on function pyjobq._new_job_ids(timestamptz, int) is
  'p_count new (seq, job_id) pairs in increasing seq order: seq from pyjobq.job_seq, job_id time-ordered by p_now.';

create function pyjobq.job_enqueue(
  p_job_type int,
  p_payload jsonb default null,
  p_priority int default null,
  p_run_after timestamptz default null,
  p_dedupe_key text default null,
  p_max_attempts int default null
)
returns table (job_id uuid, created boolean)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_payload jsonb := coalesce(p_payload, '{}');
  v_priority int := coalesce(p_priority, 100);
  v_run_after timestamptz := coalesce(p_run_after, v_now);
  v_max_attempts int := coalesce(p_max_attempts, 3);
  v_seq bigint;
  v_new_id uuid;
  v_id uuid;
begin
  perform pyjobq._check_job_type(p_job_type);
  perform pyjobq._check_privilege('enqueue', array[p_job_type]);
  perform pyjobq._check_payload('p_payload', v_payload);
  perform pyjobq._check_range('p_priority', v_priority, 0, 32767);
  perform pyjobq._check_range('p_max_attempts', v_max_attempts, 1, 1000);
  perform pyjobq._check_text('p_dedupe_key', p_dedupe_key, 200, true);
  perform pyjobq._check_time('p_run_after', v_run_after, v_now);

  -- An active job with the same key wins: insert or, on conflict, return that
  -- job. If it finishes between our insert and our lookup, try again.
  loop
    select n.seq, n.job_id into v_seq, v_new_id from pyjobq._new_job_ids(v_now, 1) n;
    insert into pyjobq.job as j
      (job_id, seq, job_type, payload, priority, run_after, dedupe_key, max_attempts, created_at, updated_at)
    values
      (v_new_id, v_seq, p_job_type, v_payload, v_priority, v_run_after, p_dedupe_key, v_max_attempts, v_now, v_now)
    on conflict (dedupe_key) where status in (1, 2) and dedupe_key is not null do nothing
    returning j.job_id into v_id;
    if v_id is not null then
      if v_run_after < v_now then
        perform pyjobq._claim_fronts_void();  -- may sort before a claim front
      end if;
      if v_run_after <= v_now then
        perform pg_notify('pyjobq_job', p_job_type::text);
      end if;
      return query select v_id, true;
      return;
    end if;
    select a.job_id into v_id
      from pyjobq.job a
     where a.dedupe_key = p_dedupe_key and a.status in (1, 2);
    if v_id is not null then
      return query select v_id, false;
      return;
    end if;
  end loop;
end;
$$;

comment on function pyjobq.job_enqueue(int, jsonb, int, timestamptz, text, int) is
  'Adds one PENDING job of registered type p_job_type (payload: a JSON object, default {}; priority 0..32767, '
  'default 100, lower runs first; run_after default now; max_attempts 1..1000, default 3). With p_dedupe_key '
  '(1..200 chars) an active (PENDING or RUNNING) job with that key is returned with created = false instead. '
  'Notifies channel pyjobq_job with the job type on commit when the job is due now.';

create function pyjobq.job_enqueue_many(
  p_job_type int,
  p_payloads jsonb[],
  p_dedupe_keys text[] default null,
  p_priority int default null,
  p_run_after timestamptz default null,
  p_max_attempts int default null
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
  v_max_attempts int := coalesce(p_max_attempts, 3);
  v_count int := coalesce(cardinality(p_payloads), 0);
  v_bad int;
  v_row record;
begin
  p_payloads := pyjobq._check_array('p_payloads', p_payloads);
  p_dedupe_keys := pyjobq._check_array('p_dedupe_keys', p_dedupe_keys);
  perform pyjobq._check_job_type(p_job_type);
  perform pyjobq._check_privilege('enqueue', array[p_job_type]);
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
  if p_dedupe_keys is not null then
    if cardinality(p_dedupe_keys) <> v_count then
      raise exception 'p_dedupe_keys must have as many elements as p_payloads'
        using errcode = '22023',
              detail = format('p_payloads has %s, p_dedupe_keys %s.', v_count, cardinality(p_dedupe_keys)),
              hint = 'Use null elements for jobs without a key.';
    end if;
    select min(u.i) into v_bad
      from unnest(p_dedupe_keys) with ordinality as u(dedupe_key, i)
     where btrim(u.dedupe_key, E' \t\n\r\f\v') = '' or length(u.dedupe_key) > 200;
    if v_bad is not null then
      raise exception 'p_dedupe_keys[%] must be null or a non-blank text of 1 to 200 characters', v_bad
        using errcode = '22023';
    end if;
  end if;

  if v_run_after < v_now then
    perform pyjobq._claim_fronts_void();  -- the jobs may sort before a claim front
  end if;

  -- Without keys nothing can conflict: every row is inserted, and the ids
  -- drawn beforehand are the answer, in input order, without a row-by-row loop.
  if p_dedupe_keys is null then
    return query
    with input as materialized (
      select u.i::int as ord, u.payload, u.seq, u.new_id
        from rows from (unnest(p_payloads), pyjobq._new_job_ids(v_now, v_count))
             with ordinality as u(payload, seq, new_id, i)
    ),
    inserted as (
      insert into pyjobq.job as j
        (job_id, seq, job_type, payload, priority, run_after, max_attempts, created_at, updated_at)
      select i.new_id, i.seq, p_job_type, i.payload, v_priority, v_run_after, v_max_attempts, v_now, v_now
        from input i
       order by i.ord
    )
    select i.ord, i.new_id, true
      from input i
     order by i.ord;
    if v_run_after <= v_now then
      perform pg_notify('pyjobq_job', p_job_type::text);
    end if;
    return;
  end if;

  -- Ids are drawn before the insert so that inserted rows can be matched back
  -- to their input position. A key repeated within the batch, or already held
  -- by an active job, yields that job with created = false.
  for v_row in
    with input as materialized (
      select u.i::int as ord, u.payload, p_dedupe_keys[u.i] as dedupe_key, u.seq, u.new_id
        from rows from (unnest(p_payloads), pyjobq._new_job_ids(v_now, v_count))
             with ordinality as u(payload, seq, new_id, i)
    ),
    inserted as (
      insert into pyjobq.job as j
        (job_id, seq, job_type, payload, priority, run_after, dedupe_key, max_attempts, created_at, updated_at)
      select i.new_id, i.seq, p_job_type, i.payload, v_priority, v_run_after, i.dedupe_key, v_max_attempts, v_now, v_now
        from input i
       order by i.ord
      on conflict (dedupe_key) where status in (1, 2) and dedupe_key is not null do nothing
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
            and active.dedupe_key = i.dedupe_key and active.status in (1, 2)
     order by i.ord
  loop
    ord := v_row.ord;
    job_id := v_row.job_id;
    created := v_row.created;
    if job_id is null then
      -- The active job holding this key finished while we inserted.
      select e.job_id, e.created into job_id, created
        from pyjobq.job_enqueue(p_job_type, p_payloads[ord], v_priority, v_run_after,
                                v_row.dedupe_key, v_max_attempts) e;
    end if;
    return next;
  end loop;
  if v_run_after <= v_now then
    perform pg_notify('pyjobq_job', p_job_type::text);
  end if;
end;
$$;

comment on function pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int) is
  'Adds up to 100000 jobs of one type in one call, with job_enqueue''s checks, defaults and dedupe; '
  'p_dedupe_keys, when given, pairs a key (or null) with each payload. Returns one row per payload in input '
  'order: its 1-based position, the job id, and whether it was newly created.';

-- Claim -----------------------------------------------------------------------
--
-- Claim fronts.
--
-- Each claimed job leaves an index entry behind that a snapshot older than the
-- claim can still see (an idle transaction, a long report), and while such a
-- snapshot lives, no scan and no vacuum may drop it: every claim from the head
-- of job_claim_idx would walk past all jobs claimed since, and a drain would
-- turn quadratic. So a session remembers where its last claim ended, its
-- front: (priority, run_after, seq) of the last job taken. Every due job
-- before that point was claimed, or locked by a claimer, when it was taken.
-- New jobs sort after it (seq grows, run_after >= now), except jobs of a more
-- urgent priority, which job_claim looks for separately, and jobs that a
-- change puts back before it (release, a past run_after, redrive, a retry due
-- at once): those call _claim_fronts_void(), which voids every front of every
-- session. When the part after the front cannot fill the batch, the scan from
-- the head fills it, so an emptying queue is answered exactly as without one.
--
-- Correctness rests on the head scan and the lifetime, not on the epoch, which
-- is only an optimisation: a job can still be left behind a front (an enqueue
-- that commits after claims passed its position, a claim that rolled back, a
-- release committing after a claimer read the epoch). So a front lives one
-- second from the head scan that started it; claims that resume from it do
-- not extend its life. The next claim after that second scans from the head,
-- so no due, unlocked job is passed over for much more than a second by any
-- session that keeps claiming, whatever the backlog.
--
-- The front is a session setting (pyjobq.claim_front), so a session may write
-- anything there: what cannot be read as a front is no front. Behind a
-- transaction-mode pooler a session serves many clients in turn, and a front
-- then belongs to whichever claimed last through it: it is still only a
-- starting point bounded to a second. pyjobq.claim_front_off = on turns fronts
-- off for the session; every claim is then the plain scan from the head.

create type pyjobq.claim_front as (
  epoch bigint,          -- pyjobq.job_claim_epoch when written: a later value voids it
  started_us bigint,     -- when the head scan that started it ran (microseconds since 1970)
  job_types text,        -- the set of job types claimed: a front serves that set only
  written_us bigint,     -- when the claim that wrote it ran: a clock read earlier voids it
  priority smallint,     -- the position of the last job taken
  run_after timestamptz,
  seq bigint
);

comment on type pyjobq.claim_front is
  'Where a session''s last claim ended, and whether that still holds; see the section "Claim fronts".';

create function pyjobq._claim_fronts_void()
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  perform nextval('pyjobq.job_claim_epoch');  -- never rolled back, no row lock
end;
$$;

comment on function pyjobq._claim_fronts_void() is
  'Voids the claim front of every session: called by each change that can make a job PENDING before one.';

create function pyjobq._claim_front_write(p_front pyjobq.claim_front)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  -- Numbers only (run_after as microseconds): the text reads back the same
  -- whatever DateStyle or TimeZone the session sets meanwhile.
  perform set_config('pyjobq.claim_front',
                     concat_ws('/', p_front.epoch, p_front.started_us, p_front.job_types, p_front.written_us,
                               p_front.priority, (extract(epoch from p_front.run_after) * 1000000)::bigint,
                               p_front.seq),
                     false);
end;
$$;

comment on function pyjobq._claim_front_write(pyjobq.claim_front) is
  'Keeps p_front as this session''s claim front.';

create function pyjobq._claim_front_read(p_job_types text, p_now_us bigint)
returns pyjobq.claim_front
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  c_lifetime_us constant bigint := 1000000;  -- one second from the head scan that started it
  v_text text := current_setting('pyjobq.claim_front', true);
  v_part text[] := string_to_array(v_text, '/');
  v_epoch bigint;
  v_run_after_us bigint;
begin
  select case when e.is_called then e.last_value else 0 end into v_epoch from pyjobq.job_claim_epoch e;
  if coalesce(v_text, '') = '' then
    return row(v_epoch, null, null, null, null, null, null)::pyjobq.claim_front;
  end if;
  if cardinality(v_part) = 7
     and v_part[1] = v_epoch::text
     and v_part[3] = p_job_types
     and v_part[2] ~ '^\d{1,18}$' and v_part[4] ~ '^\d{1,18}$' and v_part[7] ~ '^\d{1,18}$'
     and v_part[5] ~ '^\d{1,5}$' and v_part[6] ~ '^-?\d{1,18}$'
     and p_now_us < v_part[2]::bigint + c_lifetime_us
     and p_now_us >= v_part[2]::bigint
     -- a clock set back (a frozen test clock reset, an NTP step) would let new
     -- jobs sort before the front
     and p_now_us >= v_part[4]::bigint
     and v_part[5]::int <= 32767
     and current_setting('pyjobq.claim_front_off', true) is distinct from 'on' then
    v_run_after_us := v_part[6]::bigint;
    return row(v_epoch, v_part[2]::bigint, p_job_types, v_part[4]::bigint, v_part[5]::smallint,
               'epoch'::timestamptz + make_interval(secs => v_run_after_us / 1000000)
                 + (v_run_after_us % 1000000) * interval '1 microsecond',
               v_part[7]::bigint)::pyjobq.claim_front;
  end if;
  perform set_config('pyjobq.claim_front', '', false);  -- void for good, even if nothing is claimed
  return row(v_epoch, null, null, null, null, null, null)::pyjobq.claim_front;
end;
$$;

comment on function pyjobq._claim_front_read(text, bigint) is
  'This session''s claim front if it still holds for the current epoch, job types p_job_types and the time '
  'p_now_us. Otherwise, or when the setting is not a front at all, the setting is cleared and the result '
  'has only the current epoch (seq null). Either way its epoch is the one a new front is written with.';

create function pyjobq.job_claim(
  p_worker_id text,
  p_limit int default null,
  p_lease_seconds int default null,
  p_job_types int[] default null
)
returns table (
  job_id uuid,
  job_type int,
  priority int,
  payload jsonb,
  attempt int,
  max_attempts int,
  dedupe_key text,
  run_after timestamptz,
  lease_until timestamptz,
  created_at timestamptz
)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
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
  v_now timestamptz := pyjobq.clock_now();
  v_limit int := coalesce(p_limit, 1);
  v_lease int := coalesce(p_lease_seconds, 300);
  v_types smallint[];
  v_denied smallint[];
  v_now_us bigint := (extract(epoch from v_now) * 1000000)::bigint;
  v_front pyjobq.claim_front;
  v_bounded boolean;
  -- Without a front these match nothing yet keep every scan an index scan.
  v_priority smallint := -1;
  v_run_after timestamptz := '-infinity';
  v_seq bigint := 0;
  v_row record;
  v_head_last record;
  v_last record;
  v_claimed int := 0;
  v_from_head int := 0;
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_limit', v_limit, 1, 1000);
  perform pyjobq._check_range('p_lease_seconds', v_lease, 1, 86400);
  p_job_types := pyjobq._check_array('p_job_types', p_job_types);
  if p_job_types is null then
    select array_agg(t.job_type order by t.job_type) into v_types from pyjobq.job_type t;
  elsif exists (select 1
                  from unnest(p_job_types) as u(code)
                 where u.code is null or u.code not between 1 and 32767) then
    raise exception 'p_job_types elements must be job type codes between 1 and 32767'
      using errcode = '22023',
            hint = 'Pass null to claim every registered type.';
  else
    v_types := p_job_types::smallint[];
  end if;
  -- Types whose work privilege names roles the caller is not in: left out of
  -- "every type", refused when asked for by code.
  v_denied := pyjobq._denied_types('work');
  if cardinality(v_denied) > 0 then
    if p_job_types is null then
      v_types := array(select u.code from unnest(v_types) as u(code) where u.code <> all (v_denied) order by 1);
    else
      perform pyjobq._check_privilege('work', v_types::int[]);
    end if;
  end if;

  -- Resume after this session's claim front, if it still holds (see "Claim
  -- fronts" above); the scan from the head comes after, and alone without one.
  v_front := pyjobq._claim_front_read(v_types::text, v_now_us);
  v_bounded := v_front.seq is not null;
  if v_bounded then
    v_priority := v_front.priority;
    v_run_after := v_front.run_after;
    v_seq := v_front.seq;
  end if;

  -- One statement: each MATERIALIZED CTE locks at most its limit exactly once
  -- (a plain subquery may be re-run by a nested loop and lock more), and SKIP
  -- LOCKED lets concurrent claimers take the next rows instead of waiting.
  -- The urgent jobs ahead of the front come first, then the jobs after it,
  -- then the scan from the head. Without a front, "ahead" and "after" have
  -- limit 0 and read nothing.
  for v_row in
  with ahead as materialized (
    select c.job_id, 1 as part
      from pyjobq.job c
     where c.status = 1
       and c.priority < v_priority
       and c.run_after <= v_now
       and c.job_type = any (v_types)
     order by c.priority, c.run_after, c.seq
     limit case when v_bounded then v_limit else 0 end
       for update skip locked
  ),
  after as materialized (
    select c.job_id, 2 as part
      from pyjobq.job c
     where c.status = 1
       and (c.priority, c.run_after, c.seq) > (v_priority, v_run_after, v_seq)
       and c.run_after <= v_now
       and c.job_type = any (v_types)
     order by c.priority, c.run_after, c.seq
     limit case when v_bounded then v_limit else 0 end
       for update skip locked
  ),
  head as materialized (
    select c.job_id, 3 as part
      from pyjobq.job c
     where c.status = 1
       and c.run_after <= v_now
       and c.job_type = any (v_types)
       and c.job_id not in (select a.job_id from ahead a union all select f.job_id from after f)
     order by c.priority, c.run_after, c.seq
     limit v_limit
       for update skip locked
  ),
  -- CTEs run as far as they are read: once v_limit jobs are picked, the
  -- scans not yet reached never start and lock nothing.
  picked as (
    (select a.job_id, a.part from ahead a
     union all
     select f.job_id, f.part from after f
     union all
     select h.job_id, h.part from head h)
    limit v_limit
  ),
  claimed as (
    update pyjobq.job j
       set status = 2,
           attempts = j.attempts + 1,
           worker_id = p_worker_id,
           lease_until = v_now + make_interval(secs => v_lease),
           run_started_at = v_now,
           updated_at = v_now
      from picked p
     where j.job_id = p.job_id
    returning j.job_id, j.job_type, j.priority, j.payload, j.attempts, j.max_attempts,
              j.dedupe_key, j.run_after, j.lease_until, j.created_at, j.seq, p.part
  )
  select c.*
    from claimed c
   order by c.priority, c.run_after, c.seq
  loop
    job_id := v_row.job_id;
    job_type := v_row.job_type;
    priority := v_row.priority;
    payload := v_row.payload;
    attempt := v_row.attempts;
    max_attempts := v_row.max_attempts;
    dedupe_key := v_row.dedupe_key;
    run_after := v_row.run_after;
    lease_until := v_row.lease_until;
    created_at := v_row.created_at;
    return next;
    v_claimed := v_claimed + 1;
    v_last := v_row;
    if v_row.part = 3 then
      v_from_head := v_from_head + 1;
      v_head_last := v_row;
    end if;
  end loop;
  -- The new front: the last job taken, or, when the head scan took any, the
  -- last of those (due jobs may remain between it and the old front). A head
  -- scan starts a new second of life; resuming keeps the old front's.
  if v_from_head > 0 then
    v_last := v_head_last;
  end if;
  if v_claimed > 0 then
    perform pyjobq._claim_front_write(row(
      v_front.epoch, case when v_from_head > 0 then v_now_us else v_front.started_us end, v_types::text,
      v_now_us, v_last.priority, v_last.run_after, v_last.seq)::pyjobq.claim_front);
  end if;
end;
$$;

comment on function pyjobq.job_claim(text, int, int, int[]) is
  'Atomically takes up to p_limit (1..1000, default 1) due PENDING jobs, lowest priority value then earliest '
  'run_after first, of the given job types (default all), and leases them to p_worker_id (1..80 chars) for '
  'p_lease_seconds (1..86400, default 300): RUNNING, attempts + 1. Rows locked by other claimers are skipped, '
  'never waited for. Returns the claimed jobs; attempt is the fencing token for complete/fail/renew/release. '
  'An empty result means nothing is due.';

-- Finish ----------------------------------------------------------------------

create function pyjobq.job_complete(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_result jsonb default null
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
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_attempt', p_attempt, 1, 32767);
  update pyjobq.job j
     set status = 3,
         result = p_result,
         lease_until = null,
         updated_at = v_now
   where j.job_id = p_job_id
     and j.status = 2
     and j.worker_id = p_worker_id
     and j.job_type <> all (v_denied)
     and j.attempts = p_attempt;
  if not found then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt);
  end if;
end;
$$;

comment on function pyjobq.job_complete(uuid, text, int, jsonb) is
  'Marks job p_job_id DONE with p_result, if p_worker_id still holds attempt p_attempt of it (RUNNING); '
  'otherwise raises JQ001 lease_lost, JQ002 job_not_found or JQ003 job_already_finished and changes nothing.';

create function pyjobq.job_complete_many(
  p_worker_id text,
  p_job_ids uuid[],
  p_attempts int[],
  p_results jsonb[] default null
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
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  perform pyjobq._check_same_length('p_attempts', coalesce(cardinality(p_attempts), 0), v_count);
  if p_results is not null then  -- null: no results; else one, possibly null, per job
    perform pyjobq._check_same_length('p_results', cardinality(p_results), v_count);
  end if;

  return query
  with input as (
    select u.id, u.attempt, u.result, u.ord
      from unnest(p_job_ids, p_attempts, p_results) with ordinality as u(id, attempt, result, ord)
  ), first_mention as (
    -- A job listed twice is completed once, with the result of its first mention.
    select distinct on (i.id, i.attempt) i.id, i.attempt, i.result
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
    returning j.job_id, j.attempts
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
                              and k.attempts = i.attempt)
         end
    from input i
   order by i.ord;
end;
$$;

comment on function pyjobq.job_complete_many(text, uuid[], int[], jsonb[]) is
  'job_complete for up to 10000 jobs in one call: each job whose attempt p_worker_id still holds becomes DONE. '
  'Returns every input job id with completed = true when that attempt is DONE (now, or by an earlier call of '
  'the same holder: retrying after a lost reply is safe) and false for those no longer held (left unchanged).';

create function pyjobq.job_fail(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_error text default null,
  p_retry_delay_seconds double precision default null,
  p_dead_letter boolean default null
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
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_attempt', p_attempt, 1, 32767);
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
                          else v_now + coalesce(v_delay, pyjobq.retry_backoff(j.attempts - j.attempts_refunded)) end,
         worker_id = case when v_dead_letter or pyjobq._tries_left(j.attempts, j.attempts_refunded, j.max_attempts) <= 0 then j.worker_id end,
         lease_until = null,
         last_error = left(p_error, 10000),
         updated_at = v_now
   where j.job_id = p_job_id
     and j.status = 2
     and j.worker_id = p_worker_id
     and j.job_type <> all (v_denied)
     and j.attempts = p_attempt
  returning j.status::int, j.run_after into status, run_after;
  if not found then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt);
  end if;
  if p_retry_delay_seconds = 0 and status = 1 then
    perform pyjobq._claim_fronts_void();  -- due at once: may sort before a claim front
  end if;
  return next;
end;
$$;

comment on function pyjobq.job_fail(uuid, text, int, text, double precision, boolean) is
  'Records a failed attempt p_attempt of job p_job_id held by p_worker_id, keeping p_error (truncated to 10000 '
  'characters) as last_error. With attempts left the job is PENDING again after p_retry_delay_seconds '
  '(0..31536000) or, by default, pyjobq.retry_backoff(attempt); with none left, or p_dead_letter, it is DEAD. '
  'Returns the new status and run_after; raises JQ001/JQ002/JQ003 like job_complete.';

-- Leases ----------------------------------------------------------------------

create function pyjobq.job_renew_lease_many(
  p_worker_id text,
  p_job_ids uuid[],
  p_attempts int[],
  p_lease_seconds int default null
)
returns table (job_id uuid, renewed boolean, lease_until timestamptz, cancelled boolean)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
-- Each job found by its primary key whatever the statistics say, as in
-- job_complete_many.
set enable_seqscan = off
set enable_bitmapscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_denied smallint[] := pyjobq._denied_types('work');
  v_lease int := coalesce(p_lease_seconds, 300);
  v_count int := coalesce(cardinality(p_job_ids), 0);
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  p_attempts := pyjobq._check_array('p_attempts', p_attempts);
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  perform pyjobq._check_range('p_lease_seconds', v_lease, 1, 86400);
  perform pyjobq._check_same_length('p_attempts', coalesce(cardinality(p_attempts), 0), v_count);

  return query
  with input as (
    select u.id, u.attempt, u.ord
      from unnest(p_job_ids, p_attempts) with ordinality as u(id, attempt, ord)
  ), renewed as (
    update pyjobq.job j
       set lease_until = v_now + make_interval(secs => v_lease),
           updated_at = v_now
      from (select distinct i.id, i.attempt from input i) f
     where j.job_id = f.id
       and j.status = 2
       and j.worker_id = p_worker_id
       and j.job_type <> all (v_denied)
       and j.attempts = f.attempt
    returning j.job_id, j.attempts, j.lease_until
  )
  select i.id, r.job_id is not null, r.lease_until,
         -- cancelled while this holder had it: stop the handler
         r.job_id is null and exists (select from pyjobq.job k
                                       where k.job_id = i.id
                                         and k.status = 5
                                         and k.worker_id = p_worker_id
                                         and k.attempts = i.attempt)
    from input i
    left join renewed r on r.job_id = i.id and r.attempts = i.attempt
   order by i.ord;
end;
$$;

comment on function pyjobq.job_renew_lease_many(text, uuid[], int[], int) is
  'Heartbeat for up to 10000 jobs in one call: extends to now + p_lease_seconds (1..86400, default 300) the '
  'lease of each job whose attempt p_worker_id still holds. Returns every input job id, in input order, with '
  'renewed and the new lease_until, or renewed = false and a null lease_until for a job no longer held (left '
  'unchanged), with cancelled = true when job_cancel took it from this holder. A holder whose lease expired but '
  'was not yet reaped still holds the job.';

create function pyjobq.job_renew_lease(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_lease_seconds int default null
)
returns timestamptz
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_lease_until timestamptz;
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_attempt', p_attempt, 1, 32767);
  select r.lease_until
    into v_lease_until
    from pyjobq.job_renew_lease_many(p_worker_id, array[p_job_id], array[p_attempt], p_lease_seconds) r;
  -- Not renewed: why, including JQ005 when the job was cancelled.
  if v_lease_until is null then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt);
  end if;
  return v_lease_until;
end;
$$;

comment on function pyjobq.job_renew_lease(uuid, text, int, int) is
  'Heartbeat: extends the lease of attempt p_attempt of job p_job_id to now + p_lease_seconds (1..86400, '
  'default 300) if p_worker_id still holds it, and returns the new lease_until; raises JQ001/JQ002/JQ003 otherwise. '
  'A holder whose lease expired but was not yet reaped still holds the job.';

create function pyjobq.job_release_many(p_worker_id text, p_job_ids uuid[], p_attempts int[])
returns table (job_id uuid, released boolean)
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
  v_denied smallint[] := pyjobq._denied_types('work');
  v_count int := coalesce(cardinality(p_job_ids), 0);
  v_any boolean := false;
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  p_attempts := pyjobq._check_array('p_attempts', p_attempts);
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  perform pyjobq._check_same_length('p_attempts', coalesce(cardinality(p_attempts), 0), v_count);

  for job_id, released in
    with input as (
      select u.id, u.attempt, u.ord
        from unnest(p_job_ids, p_attempts) with ordinality as u(id, attempt, ord)
    ), given_back as (
      update pyjobq.job j
         -- The try is given back; the claim counter, the fencing token, is not.
         -- A job whose counter is spent can never be claimed again: DEAD.
         set status = case when pyjobq._tries_left(j.attempts, j.attempts_refunded + 1, j.max_attempts) <= 0
                           then 4 else 1 end,
             attempts_refunded = j.attempts_refunded + 1,
             worker_id = case when pyjobq._tries_left(j.attempts, j.attempts_refunded + 1, j.max_attempts) <= 0
                              then j.worker_id end,
             last_error = case when pyjobq._tries_left(j.attempts, j.attempts_refunded + 1, j.max_attempts) <= 0
                               then 'released with its claim counter spent (32767 claims)' else j.last_error end,
             lease_until = null,
             updated_at = v_now
        from (select distinct i.id, i.attempt from input i) f
       where j.job_id = f.id
         and j.status = 2
         and j.worker_id = p_worker_id
         and j.job_type <> all (v_denied)
         and j.attempts = f.attempt
      returning j.job_id, j.attempts as attempt
    )
    select i.id, (i.id, i.attempt) in (select g.job_id, g.attempt from given_back g)
      from input i
     order by i.ord
  loop
    v_any := v_any or released;
    return next;
  end loop;
  if v_any then
    perform pyjobq._claim_fronts_void();  -- back at their old places, before claim fronts
  end if;
end;
$$;

comment on function pyjobq.job_release_many(text, uuid[], int[]) is
  'job_release for up to 10000 jobs in one call: each job whose attempt p_worker_id still holds is PENDING '
  'again at its old place in the queue, the try given back (attempts_refunded + 1; attempts, the fencing token, '
  'stays). Returns every input job id, in input order, with released = false for a job no longer held (left '
  'unchanged).';

create function pyjobq.job_release(p_job_id uuid, p_worker_id text, p_attempt int)
returns void
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_attempt', p_attempt, 1, 32767);
  if not (select r.released
            from pyjobq.job_release_many(p_worker_id, array[p_job_id], array[p_attempt]) r) then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt);
  end if;
end;
$$;

comment on function pyjobq.job_release(uuid, text, int) is
  'Gives attempt p_attempt of job p_job_id back unused (e.g. a worker shutting down before starting it): '
  'PENDING again at its old place in the queue, the try given back (the next claim is attempt p_attempt + 1 '
  'and does not count against max_attempts). Raises JQ001/JQ002/JQ003 like job_complete.';

create function pyjobq.job_reap(p_limit int default null)
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
                            else v_now + pyjobq.retry_backoff(j.attempts - j.attempts_refunded) end,
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
  )
  select r.job_id, r.job_type::int, r.status::int, p.worker_id::text, p.attempts::int, r.run_after
    from reaped r
    join picked p on p.job_id = r.job_id;
end;
$$;

comment on function pyjobq.job_reap(int) is
  'Takes back up to p_limit (1..100000, default 1000) RUNNING jobs whose lease expired: PENDING after '
  'pyjobq.retry_backoff, or DEAD when their attempts are used up. Skips rows other sessions hold locked, so '
  'reapers never block claimers or each other; safe to run from every worker. Returns what it took back, '
  'with the worker and attempt that lost it.';

-- Operations ------------------------------------------------------------------

-- DEAD and CANCELLED jobs among p_ids back to PENDING, due at p_now, with a fresh budget
-- of max_attempts tries (attempts, the fencing token, goes on); returns the
-- ids moved. A job that has used up its claim counter stays DEAD. A job whose dedupe key an active job holds, or an older one of
-- p_ids takes, stays DEAD (keys are unique among active jobs only). A key an
-- uncommitted enqueue takes meanwhile still raises unique_violation.
create function pyjobq._redrive_rows(p_ids uuid[], p_now timestamptz)
returns uuid[]
language sql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  with free as (
    select distinct on (coalesce(d.dedupe_key, d.job_id::text)) d.job_id
      from pyjobq.job d
     where d.job_id = any (p_ids)
       and d.status in (4, 5)
       and pyjobq._tries_left(d.attempts, d.attempts, d.max_attempts) > 0
       and (d.dedupe_key is null
            or not exists (select 1
                             from pyjobq.job a
                            where a.dedupe_key = d.dedupe_key
                              and a.status in (1, 2)))
     order by coalesce(d.dedupe_key, d.job_id::text), d.updated_at
  ),
  moved as (
    update pyjobq.job j
       set status = 1,
           attempts_refunded = j.attempts,  -- a fresh budget; the fencing token goes on
           run_after = p_now,
           worker_id = null,
           result = null,
           updated_at = p_now
      from free f
     where j.job_id = f.job_id
       and j.status in (4, 5)
    returning j.job_id
  )
  select coalesce(array_agg(m.job_id), '{}') from moved m
$$;

comment on function pyjobq._redrive_rows(uuid[], timestamptz) is
  'job_redrive''s update: the DEAD and CANCELLED jobs of p_ids whose dedupe key is free back to PENDING; '
  'returns their ids.';

create function pyjobq.job_redrive(
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
  -- key an active job holds must not stop every later call from reaching the rest.
  select coalesce(array_agg(d.job_id order by d.updated_at), '{}')
    into v_picked
    from (select p.job_id, p.updated_at
            from pyjobq.job p
           where p.status in (4, 5)
             and (p_job_ids is null or p.job_id = any (p_job_ids))
             and (p_job_type is null or p.job_type = p_job_type)
             and pyjobq._tries_left(p.attempts, p.attempts, p.max_attempts) > 0
             and (p.dedupe_key is null
                  or not exists (select 1
                                   from pyjobq.job a
                                  where a.dedupe_key = p.dedupe_key
                                    and a.status in (1, 2)))
           order by p.updated_at
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
  return query select u.id from unnest(v_ids) as u(id);
  if cardinality(v_ids) > 0 then
    perform pyjobq._claim_fronts_void();  -- due now, with its old seq: may sort before a front
    perform pg_notify('pyjobq_job', '');
  end if;
end;
$$;

comment on function pyjobq.job_redrive(uuid[], int, int) is
  'Moves DEAD and CANCELLED jobs back to PENDING, due now, with a fresh budget of max_attempts tries '
  '(attempts, the fencing token, goes on from where it was): the ids in p_job_ids, or else every DEAD or '
  'CANCELLED job (of p_job_type when given), up to p_limit (1..100000, default 1000) oldest first. A job whose '
  'dedupe key an active job holds stays where it is. Returns the ids it moved.';

create function pyjobq.job_prune(p_older_than interval, p_limit int default null)
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
  return v_deleted;
end;
$$;

comment on function pyjobq.job_prune(interval, int) is
  'Deletes up to p_limit (1..100000, default 10000) DONE, DEAD and CANCELLED jobs last changed more than '
  'p_older_than '
  '(0 to 100 years) ago, '
  'and returns how many it deleted; call it again until it returns less than p_limit.';

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
-- DONE history.
set enable_seqscan = off
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
    select j.job_type, j.status, count(*), null, null
      from pyjobq.job j
     where j.status in (4, 5)
     group by j.job_type, j.status
  ), size as (
    -- The rows the planner would assume now: rows per page at the last
    -- ANALYZE times the pages now (null before the first ANALYZE).
    select pg_relation_size(c.oid) <= 1048576 as small,
           case when c.reltuples >= 0 and c.relpages > 0
                then c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::int)
           end as rows
      from pg_class c
     where c.oid = 'pyjobq.job'::regclass
  ), done_counted as (
    -- A table of at most 1 MiB (a few thousand jobs) is cheap to read: exact.
    select j.job_type, count(*) as jobs
      from pyjobq.job j
     where j.status = 3
       and (select z.small from size z)
     group by j.job_type
  ), stats as (
    select s.most_common_vals as vals, s.most_common_freqs as freqs
      from pg_stats_ext s
     where s.statistics_schemaname = 'pyjobq'
       and s.statistics_name = 'job_type_status_stats'
       and s.most_common_freqs is not null
  ), done_estimated as (
    -- Larger: each type's share of DONE rows in the sample of the last
    -- ANALYZE, times the rows now. A type missing from the sample has ~0.
    select s.vals[i][1]::int as job_type, round(s.freqs[i] * z.rows)::bigint as jobs
      from stats s
     cross join size z
     cross join lateral generate_subscripts(s.freqs, 1) as i
     where not z.small
       and s.vals[i][2] = '3'
  )
  select t.job_type::int,
         t.name::text,
         s.status,
         s.status_name,
         case when s.status <> 3 then coalesce(c.jobs, 0)
              when z.small then coalesce(dc.jobs, 0)
              when z.rows is not null and exists (select from stats) then coalesce(de.jobs, 0)
         end,
         case when s.status = 1 then
           coalesce(extract(epoch from pyjobq.clock_now() - c.oldest_due)::double precision, 0)
         end,
         case when s.status = 2 then coalesce(c.expired_leases, 0) end,
         s.status <> 3 or z.small
    from pyjobq.job_type t
   cross join (select g.status, pyjobq._status_name(g.status) as status_name
                 from generate_series(1, 5) as g(status)) as s
   cross join size z
    left join exact_counts c on c.job_type = t.job_type and c.status = s.status
    left join done_counted dc on dc.job_type = t.job_type and s.status = 3
    left join done_estimated de on de.job_type = t.job_type and s.status = 3
   where t.job_type <> all ((select pyjobq._denied_types('observe'))::smallint[])  -- evaluated once
   order by t.job_type, s.status
$$;

comment on function pyjobq.job_counts() is
  'Jobs per registered type and status (zero rows included), with health figures: for PENDING, the age in '
  'seconds of the oldest due job (0 when none is due); for RUNNING, how many leases expired without being reaped. '
  'PENDING, RUNNING, DEAD and CANCELLED are exact and read through indexes. DONE is exact while the table is at '
  'most 1 MiB; '
  'beyond, it is an estimate from the statistics of the last ANALYZE (null before the first), and exact is false.';

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
  updated_at timestamptz
)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_job_id is null then
    raise exception 'p_job_id must not be null'
      using errcode = '22004',
            hint = 'Pass the job_id that job_enqueue returned.';
  end if;
  perform pyjobq._check_privilege('observe', array(select j.job_type::int from pyjobq.job j where j.job_id = p_job_id));
  -- No job is an empty result, not an error: a pruned job is simply gone.
  return query
  select j.job_id, j.job_type::int, t.name::text, j.status::int,
         pyjobq._status_name(j.status),
         j.priority::int, j.attempts::int, j.max_attempts::int, j.payload, j.result, j.last_error,
         j.dedupe_key::text, j.run_after, j.lease_until, j.worker_id::text, j.run_started_at,
         case when j.status in (3, 4, 5) then j.updated_at end, j.created_at, j.updated_at
    from pyjobq.job j
    join pyjobq.job_type t on t.job_type = j.job_type
   where j.job_id = p_job_id;
end;
$$;

comment on function pyjobq.job_get(uuid) is
  'One job as a person needs it to see what happened: type, status, priority, attempts, payload, result, '
  'last_error, dedupe key, run_after, its lease and worker while RUNNING, when its last attempt started '
  '(run_started_at) and when it ended (DONE, DEAD or CANCELLED). No row when there is no such job (never enqueued, '
  'or pruned).';

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

create function pyjobq.job_list(
  p_job_type int default null,
  p_status int default null,
  p_dedupe_key text default null,
  p_created_after timestamptz default null,
  p_created_before timestamptz default null,
  p_oldest_first boolean default null,
  p_after uuid default null,
  p_limit int default null
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

comment on function pyjobq.job_list(int, int, text, timestamptz, timestamptz, boolean, uuid, int) is
  'Lists jobs newest first (or oldest, p_oldest_first), up to p_limit (1..1000, default 100), filtered by job '
  'type, status (1..5), dedupe key and creation time [p_created_after, p_created_before). Keyset pages: pass the '
  'last job_id of a page as p_after for the next. Without payload and result (job_get has them); only the types '
  'the caller may observe.';

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
  )
  select i.id,
         case when l.job_id is null then 'not_found'
              when l.status = 1 then 'cancelled'
              when l.status = 2 then 'cancelled_running'
              else 'finished'
         end
    from input i
    left join locked l on l.job_id = i.id
   order by i.ord;
end;
$$;

comment on function pyjobq.job_cancel(uuid[]) is
  'Cancels up to 10000 jobs: PENDING and RUNNING ones become CANCELLED (final, frees the dedupe key, '
  'redrivable, pruned like DONE). A RUNNING job''s holder is fenced out at once (its calls get JQ005) and learns '
  'it at its next job_renew_lease_many. Returns every input id in input order with its outcome: cancelled, '
  'cancelled_running, finished (already DONE, DEAD or CANCELLED: unchanged) or not_found.';

-- Waiting for an outcome. A producer that wants to know when a job ends calls
-- job_watch, LISTENs on pyjobq_done, and reads the job again when its id
-- arrives. Only watched jobs are announced: the trigger's WHEN is checked as
-- the row is updated, and for every other job it is all the trigger costs.
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
  after update of status on pyjobq.job
  for each row
  when (new.notify_done and new.status in (3, 4, 5) and old.status in (1, 2))
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
                                                      from pyjobq.job j
                                                     where j.job_id = any (p_job_ids)));
  update pyjobq.job j
     set notify_done = true
   where j.job_id = any (p_job_ids)
     and j.status in (1, 2)
     and not j.notify_done;
  -- The status after the update: a job that already ended is not announced,
  -- so the caller reads it from here.
  return query
  select u.id, j.status::int,
         pyjobq._status_name(j.status)
    from unnest(p_job_ids) with ordinality as u(id, ord)
    left join pyjobq.job j on j.job_id = u.id
   order by u.ord;
end;
$$;

comment on function pyjobq.job_watch(uuid[]) is
  'Asks for the end (DONE, DEAD or CANCELLED) of up to 10000 jobs to be announced: NOTIFY pyjobq_done with the '
  'job id, on the commit that ends it. LISTEN pyjobq_done before calling it. Returns each input id in input order '
  'with its status now (null when there is no such job): a job that already ended is not announced.';

-- Privileges ------------------------------------------------------------------

-- The tables are private: roles other than the owner reach the queue only
-- through the job_* functions, which run with the owner's rights (security
-- definer) and pin their search_path, so a caller can neither touch rows
-- directly nor redirect a name to an object of its own. Nothing is executable
-- by PUBLIC; the group roles below get exactly what their job needs.
revoke all on all functions in schema pyjobq from public;

create function pyjobq.grant_roles()
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
    pyjobq.job_types(), pyjobq.schema_version(), pyjobq.clock_now()
    to pyjobq_producer, pyjobq_worker, pyjobq_observer, pyjobq_admin;
  grant execute on function
    pyjobq.job_enqueue(int, jsonb, int, timestamptz, text, int),
    pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int)
    to pyjobq_producer;
  grant execute on function
    pyjobq.job_claim(text, int, int, int[]),
    pyjobq.job_complete(uuid, text, int, jsonb),
    pyjobq.job_complete_many(text, uuid[], int[], jsonb[]),
    pyjobq.job_fail(uuid, text, int, text, double precision, boolean),
    pyjobq.job_renew_lease(uuid, text, int, int),
    pyjobq.job_renew_lease_many(text, uuid[], int[], int),
    pyjobq.job_release(uuid, text, int),
    pyjobq.job_release_many(text, uuid[], int[]),
    pyjobq.job_reap(int)
    to pyjobq_worker;
  grant execute on function pyjobq.job_counts() to pyjobq_observer, pyjobq_admin;
  -- Payloads and results are the application's data: producers read back what they
  -- enqueued, admins what they operate on; observers see figures only.
  grant execute on function pyjobq.job_get(uuid) to pyjobq_producer, pyjobq_admin;
  -- Producers cancel what they enqueued; admins anything.
  grant execute on function pyjobq.job_cancel(uuid[]) to pyjobq_producer, pyjobq_admin;
  grant execute on function pyjobq.job_watch(uuid[]) to pyjobq_producer, pyjobq_admin;
  grant execute on function
    pyjobq.job_list(int, int, text, timestamptz, timestamptz, boolean, uuid, int)
    to pyjobq_producer, pyjobq_admin;
  grant execute on function
    pyjobq.job_redrive(uuid[], int, int),
    pyjobq.job_prune(interval, int),
    pyjobq.job_type_register(int, text),
    pyjobq.job_type_grant(int, text, text),
    pyjobq.job_type_revoke(int, text, text),
    pyjobq.job_type_grants(),
    pyjobq.job_reap(int)
    to pyjobq_admin;
end;
$$;

revoke all on function pyjobq.grant_roles() from public;

comment on function pyjobq.grant_roles() is
  'Creates the NOLOGIN group roles pyjobq_producer (enqueue, get, list, cancel, watch), pyjobq_worker (claim, '
  'complete, fail, '
  'renew, release, reap), pyjobq_observer (counts) and pyjobq_admin (counts, get, list, cancel, watch, reap, '
  'redrive, prune, '
  'register types, per-type grants) '
  'when missing and the caller may create roles, and grants each EXECUTE on its functions. Run by the '
  'installation; run it again as a role with CREATEROLE when the installing role could not create them.';

do $$
begin
  perform pyjobq.grant_roles();
end;
$$;
