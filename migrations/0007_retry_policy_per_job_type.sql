-- depends: 0006_redrive_one_job_per_key

-- Schema 7: a retry policy per job type.
--
-- job_type_set_policy lets an admin set, per type, the max_attempts of
-- enqueues that pass none, the backoff (base, cap, jitter) of its retries and
-- an execution timeout for workers; job_type_policies() shows them with the
-- defaults filled in, to every group role. The policy lives in new nullable
-- columns of job_type (null: the default), so no job and no type changes.

alter table pyjobq.job_type
  add column max_attempts smallint,
  add column backoff_base_seconds double precision,
  add column backoff_cap_seconds double precision,
  add column backoff_jitter double precision,
  add column timeout_seconds double precision,
  add constraint job_type_policy_valid check (
    max_attempts between 1 and 1000
    and backoff_base_seconds > 0 and backoff_base_seconds <= 86400
    and backoff_cap_seconds between coalesce(backoff_base_seconds, 2) and 31536000
    and backoff_jitter between 0 and 1
    and timeout_seconds > 0 and timeout_seconds <= 604800);

comment on table pyjobq.job_type is
  'Registered job type codes and their names, with each type''s retry policy; job_enqueue refuses codes '
  'that are not here.';

drop function pyjobq._retry_at(int, interval, timestamptz);

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 7
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq._check_seconds(p_name text, p_value double precision, p_above double precision,
                                      p_max double precision)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  -- Null is the default; NaN fails both comparisons' negation below.
  if p_value is not null and not (p_value > p_above and p_value <= p_max) then
    raise exception '% must be more than % and at most % seconds', p_name, p_above, p_max
      using errcode = '22023',
            detail = format('%s was %s.', p_name, p_value),
            hint = 'Leave it out for the default.';
  end if;
end;
$$;

comment on function pyjobq._check_seconds(text, double precision, double precision, double precision) is
  'Raises 22023 naming p_name unless p_value is null or a number of seconds in (p_above, p_max].';

create or replace function pyjobq._backoff(p_job_type int, p_tries int)
returns interval
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_base double precision;
  v_cap double precision;
  v_jitter double precision;
begin
  select coalesce(t.backoff_base_seconds, 2), coalesce(t.backoff_cap_seconds, 3600),
         coalesce(t.backoff_jitter, 0.25)
    into v_base, v_cap, v_jitter
    from pyjobq.job_type t
   where t.job_type = p_job_type;
  return make_interval(secs => least(v_cap, v_base * power(2.0, greatest(p_tries, 1) - 1))
                               * (1.0 - v_jitter * random()));
end;
$$;

comment on function pyjobq._backoff(int, int) is
  'Delay before the retry after p_tries tries of a job of type p_job_type, by the type''s policy.';

create or replace function pyjobq.job_type_set_policy(
  p_job_type int,
  p_max_attempts int default null,
  p_backoff_base_seconds double precision default null,
  p_backoff_cap_seconds double precision default null,
  p_backoff_jitter double precision default null,
  p_timeout_seconds double precision default null
)
returns void
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
begin
  perform pyjobq._check_job_type(p_job_type);
  if p_max_attempts is not null then
    perform pyjobq._check_range('p_max_attempts', p_max_attempts, 1, 1000);
  end if;
  perform pyjobq._check_seconds('p_backoff_base_seconds', p_backoff_base_seconds, 0, 86400);
  perform pyjobq._check_seconds('p_backoff_cap_seconds', p_backoff_cap_seconds,
                                coalesce(p_backoff_base_seconds, 2), 31536000);
  if p_backoff_jitter is not null and not (p_backoff_jitter between 0 and 1) then
    raise exception 'p_backoff_jitter must be between 0 and 1'
      using errcode = '22023',
            detail = format('p_backoff_jitter was %s.', p_backoff_jitter),
            hint = 'The share of the delay taken off at random; leave it out for 0.25.';
  end if;
  perform pyjobq._check_seconds('p_timeout_seconds', p_timeout_seconds, 0, 604800);
  update pyjobq.job_type t
     set max_attempts = p_max_attempts,
         backoff_base_seconds = p_backoff_base_seconds,
         backoff_cap_seconds = p_backoff_cap_seconds,
         backoff_jitter = p_backoff_jitter,
         timeout_seconds = p_timeout_seconds
   where t.job_type = p_job_type;
end;
$$;

comment on function pyjobq.job_type_set_policy(int, int, double precision, double precision, double precision, double precision) is
  'Sets job type p_job_type''s retry policy, each null meaning the default: max_attempts for enqueues that '
  'pass none (1..1000, default 3), backoff base (0..86400 s, default 2) doubling per try up to the cap '
  '(base..31536000 s, default 3600) minus up to p_backoff_jitter of it (0..1, default 0.25), and the '
  'execution timeout workers apply (0..604800 s, default none). Jobs already enqueued keep their max_attempts.';

create or replace function pyjobq.job_type_policies()
returns table (
  job_type int,
  name text,
  max_attempts int,
  backoff_base_seconds double precision,
  backoff_cap_seconds double precision,
  backoff_jitter double precision,
  timeout_seconds double precision
)
language sql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select t.job_type::int, t.name::text, coalesce(t.max_attempts, 3)::int,
         coalesce(t.backoff_base_seconds, 2), coalesce(t.backoff_cap_seconds, 3600),
         coalesce(t.backoff_jitter, 0.25), t.timeout_seconds
    from pyjobq.job_type t
   order by t.job_type
$$;

comment on function pyjobq.job_type_policies() is
  'Each registered job type''s retry policy as it applies, defaults filled in: max_attempts, backoff base, '
  'cap and jitter, and the execution timeout in seconds (null: none).';

create or replace function pyjobq._retry_at(p_job_type int, p_tries_used int, p_delay interval, p_now timestamptz)
returns timestamptz
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  return pyjobq._pending_from(p_now + coalesce(p_delay, pyjobq._backoff(p_job_type, p_tries_used)),
                              p_now, false);
end;
$$;

comment on function pyjobq._retry_at(int, int, interval, timestamptz) is
  'When a failed or reaped job of type p_job_type is due again: p_now plus p_delay or, when null, the '
  'type''s backoff after p_tries_used tries; through _pending_from.';

create or replace function pyjobq._max_attempts(p_job_type int, p_max_attempts int)
returns int
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_max_attempts is not null then
    return p_max_attempts;
  end if;
  return coalesce((select t.max_attempts from pyjobq.job_type t where t.job_type = p_job_type), 3);
end;
$$;

comment on function pyjobq._max_attempts(int, int) is
  'p_max_attempts, else the max_attempts of job type p_job_type''s policy, else 3.';

create or replace function pyjobq.job_enqueue(
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
  v_max_attempts int;
  v_seq bigint;
  v_new_id uuid;
  v_id uuid;
begin
  perform pyjobq._check_job_type(p_job_type);
  perform pyjobq._check_privilege('enqueue', array[p_job_type]);
  v_max_attempts := pyjobq._max_attempts(p_job_type, p_max_attempts);
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
    on conflict (job_type, dedupe_key) where status in (1, 2) and dedupe_key is not null do nothing
    returning j.job_id into v_id;
    if v_id is not null then
      perform pyjobq._pending_from(v_run_after, v_now, true);
      if v_run_after <= v_now then
        perform pg_notify('pyjobq_job', p_job_type::text);
      end if;
      return query select v_id, true;
      return;
    end if;
    select a.job_id into v_id
      from pyjobq.job a
     where a.job_type = p_job_type and a.dedupe_key = p_dedupe_key and a.status in (1, 2);
    if v_id is not null then
      return query select v_id, false;
      return;
    end if;
  end loop;
end;
$$;

comment on function pyjobq.job_enqueue(int, jsonb, int, timestamptz, text, int) is
  'Adds one PENDING job of registered type p_job_type (payload: a JSON object, default {}; priority 0..32767, '
  'default 100, lower runs first; run_after default now; max_attempts 1..1000, default the type''s policy or 3). With p_dedupe_key '
  '(1..200 chars) an active (PENDING or RUNNING) job of the same type with that key is returned with created = '
  'false instead. '
  'Notifies channel pyjobq_job with the job type on commit when the job is due now.';

create or replace function pyjobq.job_enqueue_many(
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
  v_max_attempts int;
  v_count int := coalesce(cardinality(p_payloads), 0);
  v_bad int;
  v_row record;
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

  perform pyjobq._pending_from(v_run_after, v_now, true);

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
      on conflict (job_type, dedupe_key) where status in (1, 2) and dedupe_key is not null do nothing
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
            and active.status in (1, 2)
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

create or replace function pyjobq.job_fail(
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
  returning j.status::int, j.run_after into status, run_after;
  if not found then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt);
  end if;
  return next;
end;
$$;

comment on function pyjobq.job_fail(uuid, text, int, text, double precision, boolean) is
  'Records a failed attempt p_attempt of job p_job_id held by p_worker_id, keeping p_error (truncated to 10000 '
  'characters) as last_error. With attempts left the job is PENDING again after p_retry_delay_seconds '
  '(0..31536000) or, by default, pyjobq.retry_backoff(attempt); with none left, or p_dead_letter, it is DEAD. '
  'Returns the new status and run_after; raises JQ001/JQ002/JQ003 like job_complete.';

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
    pyjobq.job_types(), pyjobq.job_type_code(text), pyjobq.job_type_policies(), pyjobq.schema_version(),
    pyjobq.clock_now()
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
    pyjobq.job_type_set_policy(int, int, double precision, double precision, double precision, double precision),
    pyjobq.job_reap(int)
    to pyjobq_admin;
end;
$$;

comment on function pyjobq.grant_roles() is
  'Creates the NOLOGIN group roles pyjobq_producer (enqueue, get, list, cancel, watch), pyjobq_worker (claim, '
  'complete, fail, '
  'renew, release, reap), pyjobq_observer (counts) and pyjobq_admin (counts, get, list, cancel, watch, reap, '
  'redrive, prune, '
  'register types, per-type grants) '
  'when missing and the caller may create roles, and grants each EXECUTE on its functions. Run by the '
  'installation; run it again as a role with CREATEROLE when the installing role could not create them.';


-- New functions, like every function of the schema, are not PUBLIC's; the
-- group roles get what grant_roles now grants.
revoke all on all functions in schema pyjobq from public;

do $$
begin
  perform pyjobq.grant_roles();
end;
$$;
