-- depends:

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
--   job_claim                        -> RUNNING (2), attempts + 1, leased to a worker
--   job_renew_lease                  -> RUNNING, lease pushed forward (heartbeat)
--   job_complete / job_complete_many -> DONE (3)
--   job_fail                         -> PENDING again after a backoff, or DEAD (4)
--   job_release                      -> PENDING again, the attempt given back (shutdown)
--   job_reap                         -> expired leases: PENDING after a backoff, or DEAD
--   job_redrive                      -> DEAD back to PENDING with fresh attempts
--   job_prune                        -> DONE and DEAD rows deleted after a while
--   job_counts                       -> jobs per type and status, with health figures
--
-- Ownership: a claim hands out (job_id, worker_id, attempt). Every later
-- transition is a compare-and-set on all three plus status = RUNNING, so a
-- holder whose lease was reaped, and the job claimed again (even by a worker
-- with the same id), can never complete, fail or renew the newer attempt: it
-- gets SQLSTATE JQ001 instead. Recovery is by lease only: a job stays RUNNING
-- until its holder finishes it or job_reap finds its lease expired.
--
-- Time: every timestamp comes from pyjobq.clock_now(), the database clock,
-- which a session can freeze with `set pyjobq.fake_now = '...'` (tests).
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

-- "if not exists": `pyjobq migrate` creates the schema first, to keep yoyo's bookkeeping in it.
create schema if not exists pyjobq;

comment on schema pyjobq is 'pyjobq job queue: the tables are private, the functions are the API';

-- The clock ----------------------------------------------------------------

create function pyjobq.clock_now()
returns timestamptz
language sql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select coalesce(
    nullif(current_setting('pyjobq.fake_now', true), '')::timestamptz,
    statement_timestamp()
  )
$$;

comment on function pyjobq.clock_now() is
  'The one clock of pyjobq: statement_timestamp(), unless the session sets pyjobq.fake_now to freeze time (tests).';

create function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 1
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
  constraint job_type_name_not_blank check (btrim(name) <> '')
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
  constraint job_pkey primary key (job_id),
  constraint job_status_valid check (status between 1 and 4),
  constraint job_payload_is_object check (jsonb_typeof(payload) = 'object'),
  constraint job_attempts_within_max check (attempts between 0 and max_attempts),
  constraint job_running_has_lease check ((status = 2) = (lease_until is not null)),
  constraint job_running_has_worker check (status <> 2 or worker_id is not null)
);

comment on table pyjobq.job is
  'One row per job. Written only by the pyjobq functions; status 1 PENDING, 2 RUNNING, 3 DONE, 4 DEAD.';
comment on column pyjobq.job.job_id is
  'Time-ordered for jobs added by job_enqueue and job_enqueue_many (pyjobq._new_job_ids); the default, '
  'gen_random_uuid(), only serves rows inserted directly.';
comment on column pyjobq.job.attempts is
  'Claims so far (+1 at each claim); also the fencing token a holder passes back to complete, fail, renew or release.';
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

-- The active-duplicate guard; DONE and DEAD jobs free their key.
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
  if btrim(p_value) = '' or length(p_value) > p_max_length then
    raise exception '% must be a non-blank text of 1 to % characters', p_name, p_max_length
      using errcode = '22023',
            detail = format('%s had %s characters.', p_name, length(p_value));
  end if;
end;
$$;

comment on function pyjobq._check_text(text, text, int, boolean) is
  'Raises 22004 for a null text (unless p_nullable) and 22023 for a blank one or one longer than p_max_length.';

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
begin
  select j.status, j.worker_id, j.attempts
    into v_status, v_worker, v_attempts
    from pyjobq.job j
   where j.job_id = p_job_id;
  if not found then
    raise exception 'job % does not exist', p_job_id
      using errcode = 'JQ002',
            hint = 'It may have been pruned, or the id is wrong.';
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
  'Raises JQ002, JQ003 or JQ001 to explain why (p_worker_id, p_attempt) could not act on job p_job_id.';

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
  perform pyjobq._check_payload('p_payload', v_payload);
  perform pyjobq._check_range('p_priority', v_priority, 0, 32767);
  perform pyjobq._check_range('p_max_attempts', v_max_attempts, 1, 1000);
  perform pyjobq._check_text('p_dedupe_key', p_dedupe_key, 200, true);
  if not isfinite(v_run_after) then
    raise exception 'p_run_after must be a finite time'
      using errcode = '22023', hint = 'Leave it out to run the job now.';
  end if;

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
        perform nextval('pyjobq.job_claim_epoch');  -- may sort before a claim front
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
  perform pyjobq._check_job_type(p_job_type);
  perform pyjobq._check_range('cardinality(p_payloads)', v_count, 1, 100000);
  perform pyjobq._check_range('p_priority', v_priority, 0, 32767);
  perform pyjobq._check_range('p_max_attempts', v_max_attempts, 1, 1000);
  if not isfinite(v_run_after) then
    raise exception 'p_run_after must be a finite time'
      using errcode = '22023', hint = 'Leave it out to run the jobs now.';
  end if;
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
     where btrim(u.dedupe_key) = '' or length(u.dedupe_key) > 200;
    if v_bad is not null then
      raise exception 'p_dedupe_keys[%] must be null or a non-blank text of 1 to 200 characters', v_bad
        using errcode = '22023';
    end if;
  end if;

  if v_run_after < v_now then
    perform nextval('pyjobq.job_claim_epoch');  -- the jobs may sort before a claim front
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
  v_front text[] := string_to_array(current_setting('pyjobq.claim_front', true), '/');
  v_epoch bigint;
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

  -- The front. Each claimed job leaves an index entry behind that a snapshot
  -- older than the claim can still see (an idle transaction, a long report),
  -- and while such a snapshot lives, no scan and no vacuum may drop it: every
  -- claim from the head of job_claim_idx would walk past all jobs claimed
  -- since, and a drain would turn quadratic. So the session remembers where
  -- its last claim ended, (priority, run_after, seq): every due job before
  -- that point was claimed, or locked by a claimer, when it was taken. New
  -- jobs sort after it (seq grows, run_after >= now), except jobs of a more
  -- urgent priority, looked for separately ("ahead"), and jobs that a change
  -- puts back before it (release, a past run_after, redrive, a retry due at
  -- once), which bump pyjobq.job_claim_epoch and so void every front. A front
  -- also expires after a second, is void once the clock reads earlier than
  -- when it was taken, and is kept per set of job types; the expiry bounds the
  -- wait of a job left behind by a claim that rolled back. When
  -- the part after the front cannot fill the batch, the scan from the head
  -- fills it, so an emptying queue is answered exactly as without a front.
  select case when e.is_called then e.last_value else 0 end into v_epoch from pyjobq.job_claim_epoch e;
  v_bounded := coalesce(cardinality(v_front) = 7
                        and v_front[1] = v_epoch::text
                        and v_front[3] = v_types::text
                        and extract(epoch from clock_timestamp()) * 1000000 < v_front[2]::numeric + 1000000
                        -- a clock set back (a frozen test clock reset, an NTP
                        -- step) would let new jobs sort before the front
                        and extract(epoch from v_now) * 1000000 >= v_front[4]::numeric,
                        false);
  if not v_bounded and cardinality(v_front) > 0 then
    perform set_config('pyjobq.claim_front', '', false);  -- void for good, even if nothing is claimed
  end if;
  if v_bounded then
    v_priority := v_front[5]::smallint;
    v_run_after := 'epoch'::timestamptz + make_interval(secs => v_front[6]::bigint / 1000000)
                   + (v_front[6]::bigint % 1000000) * interval '1 microsecond';
    v_seq := v_front[7]::bigint;
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
  -- last of those (due jobs may remain between it and the old front).
  if v_from_head > 0 then
    v_last := v_head_last;
  end if;
  if v_claimed > 0 then
    perform set_config(
      'pyjobq.claim_front',
      concat_ws('/', v_epoch, (extract(epoch from clock_timestamp()) * 1000000)::bigint, v_types::text,
                (extract(epoch from v_now) * 1000000)::bigint,
                v_last.priority, (extract(epoch from v_last.run_after) * 1000000)::bigint, v_last.seq),
      false);
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
  v_count int := coalesce(cardinality(p_job_ids), 0);
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  if coalesce(cardinality(p_attempts), 0) <> v_count
     or (p_results is not null and cardinality(p_results) <> v_count) then
    raise exception 'p_attempts and p_results must have as many elements as p_job_ids'
      using errcode = '22023',
            detail = format('p_job_ids has %s, p_attempts %s, p_results %s.',
                            v_count, cardinality(p_attempts), coalesce(cardinality(p_results)::text, 'null')),
            hint = 'Pass p_results as null, or with a (possibly null) result for every job.';
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
       and j.attempts = f.attempt
    returning j.job_id, j.attempts
  )
  select i.id, coalesce((i.id, i.attempt) in (select d.job_id, d.attempts from done d), false)
    from input i
   order by i.ord;
end;
$$;

comment on function pyjobq.job_complete_many(text, uuid[], int[], jsonb[]) is
  'job_complete for up to 10000 jobs in one call: each job whose attempt p_worker_id still holds becomes DONE. '
  'Returns every input job id with completed = false for those no longer held (they are left unchanged).';

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

  return query
  update pyjobq.job j
     set status = case when v_dead_letter or j.attempts >= j.max_attempts then 4 else 1 end,
         run_after = case when v_dead_letter or j.attempts >= j.max_attempts then j.run_after
                          else v_now + coalesce(v_delay, pyjobq.retry_backoff(j.attempts)) end,
         worker_id = case when v_dead_letter or j.attempts >= j.max_attempts then j.worker_id end,
         lease_until = null,
         last_error = left(p_error, 10000),
         updated_at = v_now
   where j.job_id = p_job_id
     and j.status = 2
     and j.worker_id = p_worker_id
     and j.attempts = p_attempt
  returning j.status::int, j.run_after;
  if not found then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt);
  end if;
  if p_retry_delay_seconds = 0 then
    perform nextval('pyjobq.job_claim_epoch');  -- due at once: may sort before a claim front
  end if;
end;
$$;

comment on function pyjobq.job_fail(uuid, text, int, text, double precision, boolean) is
  'Records a failed attempt p_attempt of job p_job_id held by p_worker_id, keeping p_error (truncated to 10000 '
  'characters) as last_error. With attempts left the job is PENDING again after p_retry_delay_seconds '
  '(0..31536000) or, by default, pyjobq.retry_backoff(attempt); with none left, or p_dead_letter, it is DEAD. '
  'Returns the new status and run_after; raises JQ001/JQ002/JQ003 like job_complete.';

-- Leases ----------------------------------------------------------------------

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
  v_now timestamptz := pyjobq.clock_now();
  v_lease int := coalesce(p_lease_seconds, 300);
  v_lease_until timestamptz;
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_attempt', p_attempt, 1, 32767);
  perform pyjobq._check_range('p_lease_seconds', v_lease, 1, 86400);
  update pyjobq.job j
     set lease_until = v_now + make_interval(secs => v_lease),
         updated_at = v_now
   where j.job_id = p_job_id
     and j.status = 2
     and j.worker_id = p_worker_id
     and j.attempts = p_attempt
  returning j.lease_until into v_lease_until;
  if not found then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt);
  end if;
  return v_lease_until;
end;
$$;

comment on function pyjobq.job_renew_lease(uuid, text, int, int) is
  'Heartbeat: extends the lease of attempt p_attempt of job p_job_id to now + p_lease_seconds (1..86400, '
  'default 300) if p_worker_id still holds it, and returns the new lease_until; raises JQ001/JQ002/JQ003 otherwise. '
  'A holder whose lease expired but was not yet reaped still holds the job.';

create function pyjobq.job_release(p_job_id uuid, p_worker_id text, p_attempt int)
returns void
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_attempt', p_attempt, 1, 32767);
  update pyjobq.job j
     set status = 1,
         attempts = j.attempts - 1,
         worker_id = null,
         lease_until = null,
         updated_at = v_now
   where j.job_id = p_job_id
     and j.status = 2
     and j.worker_id = p_worker_id
     and j.attempts = p_attempt;
  if not found then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt);
  end if;
  perform nextval('pyjobq.job_claim_epoch');  -- back at its old place, before claim fronts
end;
$$;

comment on function pyjobq.job_release(uuid, text, int) is
  'Gives attempt p_attempt of job p_job_id back unused (e.g. a worker shutting down before starting it): '
  'PENDING again at its old place in the queue, attempts - 1. Raises JQ001/JQ002/JQ003 like job_complete.';

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
       set status = case when j.attempts >= j.max_attempts then 4 else 1 end,
           run_after = case when j.attempts >= j.max_attempts then j.run_after
                            else v_now + pyjobq.retry_backoff(j.attempts) end,
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
  v_moved int := 0;
begin
  perform pyjobq._check_range('p_limit', v_limit, 1, 100000);
  if p_job_type is not null then
    perform pyjobq._check_job_type(p_job_type);
  end if;
  if p_job_ids is not null and cardinality(p_job_ids) > 100000 then
    raise exception 'cardinality(p_job_ids) must be between 0 and 100000'
      using errcode = '22023';
  end if;
  -- One row at a time: a DEAD job whose dedupe key an active job holds now
  -- (or another redriven job took first) stays DEAD instead of failing all.
  for v_id in
    select d.job_id
      from pyjobq.job d
     where d.status = 4
       and (p_job_ids is null or d.job_id = any (p_job_ids))
       and (p_job_type is null or d.job_type = p_job_type)
     order by d.updated_at
     limit v_limit
       for update skip locked
  loop
    begin
      update pyjobq.job j
         set status = 1,
             attempts = 0,
             run_after = v_now,
             worker_id = null,
             result = null,
             updated_at = v_now
       where j.job_id = v_id
         and j.status = 4;
      job_id := v_id;
      v_moved := v_moved + 1;
      return next;
    exception when unique_violation then
      null;
    end;
  end loop;
  if v_moved > 0 then
    perform nextval('pyjobq.job_claim_epoch');  -- due now, with its old seq: may sort before a front
    perform pg_notify('pyjobq_job', '');
  end if;
end;
$$;

comment on function pyjobq.job_redrive(uuid[], int, int) is
  'Moves DEAD jobs back to PENDING, due now, with attempts reset to 0: the ids in p_job_ids, or else every '
  'DEAD job (of p_job_type when given), up to p_limit (1..100000, default 1000) oldest first. A job whose '
  'dedupe key an active job holds stays DEAD. Returns the ids it moved.';

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
  if p_older_than is null or p_older_than < interval '0' then
    raise exception 'p_older_than must be an interval of zero or more'
      using errcode = case when p_older_than is null then '22004' else '22023' end,
            hint = 'e.g. ''7 days''.';
  end if;
  with doomed as (
    select d.job_id
      from pyjobq.job d
     where d.status in (3, 4)
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
  'Deletes up to p_limit (1..100000, default 10000) DONE and DEAD jobs last changed more than p_older_than ago, '
  'and returns how many it deleted; call it again until it returns less than p_limit.';

create function pyjobq.job_counts()
returns table (
  job_type int,
  job_type_name text,
  status int,
  status_name text,
  jobs bigint,
  oldest_due_seconds double precision,
  expired_leases bigint
)
language sql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  with tally as (
    select j.job_type,
           j.status,
           count(*) as jobs,
           min(j.run_after) filter (where j.status = 1 and j.run_after <= pyjobq.clock_now()) as oldest_due,
           count(*) filter (where j.status = 2 and j.lease_until < pyjobq.clock_now()) as expired_leases
      from pyjobq.job j
     group by j.job_type, j.status
  )
  select t.job_type::int,
         t.name::text,
         s.status,
         s.status_name,
         coalesce(c.jobs, 0),
         case when s.status = 1 then
           coalesce(extract(epoch from pyjobq.clock_now() - c.oldest_due)::double precision, 0)
         end,
         case when s.status = 2 then coalesce(c.expired_leases, 0) end
    from pyjobq.job_type t
   cross join (values (1, 'PENDING'), (2, 'RUNNING'), (3, 'DONE'), (4, 'DEAD')) as s(status, status_name)
    left join tally c on c.job_type = t.job_type and c.status = s.status
   order by t.job_type, s.status
$$;

comment on function pyjobq.job_counts() is
  'Jobs per registered type and status (zero rows included), with health figures: for PENDING, the age in '
  'seconds of the oldest due job (0 when none is due); for RUNNING, how many leases expired without being reaped.';

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
    pyjobq.job_release(uuid, text, int),
    pyjobq.job_reap(int)
    to pyjobq_worker;
  grant execute on function pyjobq.job_counts() to pyjobq_observer, pyjobq_admin;
  grant execute on function
    pyjobq.job_redrive(uuid[], int, int),
    pyjobq.job_prune(interval, int),
    pyjobq.job_type_register(int, text),
    pyjobq.job_reap(int)
    to pyjobq_admin;
end;
$$;

revoke all on function pyjobq.grant_roles() from public;

comment on function pyjobq.grant_roles() is
  'Creates the NOLOGIN group roles pyjobq_producer (enqueue), pyjobq_worker (claim, complete, fail, renew, '
  'release, reap), pyjobq_observer (counts) and pyjobq_admin (counts, reap, redrive, prune, register types) '
  'when missing and the caller may create roles, and grants each EXECUTE on its functions. Run by the '
  'installation; run it again as a role with CREATEROLE when the installing role could not create them.';

do $$
begin
  perform pyjobq.grant_roles();
end;
$$;
