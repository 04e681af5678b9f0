-- depends: 0007_retry_policy_per_job_type

-- Schema 8: job_next_due, an idle worker's alarm.
--
-- A job that becomes due later (a run_after in the future, a retry's backoff)
-- is announced by nothing when that time comes, so an idle worker found it
-- only at its next poll, up to poll_interval late. job_next_due tells it when
-- the earliest such job becomes due. job_claim now resolves its job types
-- through _work_types, which job_next_due shares; what it accepts and refuses
-- is unchanged. Enqueues of jobs due later, and job_fail's retries, now notify
-- pyjobq_job too, with the time ("type@epoch"), so idle workers learn of them
-- as they are added. No table changes.

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 8
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';


create or replace function pyjobq._announce(p_job_type int, p_run_after timestamptz, p_now timestamptz)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  perform pg_notify('pyjobq_job',
                    case when p_run_after <= p_now then p_job_type::text
                         else format('%s@%s', p_job_type, extract(epoch from p_run_after)) end);
end;
$$;

comment on function pyjobq._announce(int, timestamptz, timestamptz) is
  'Notifies channel pyjobq_job on commit that a job of type p_job_type is PENDING: payload the type when '
  'p_run_after <= p_now, else type@run_after in seconds since 1970.';

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
      perform pyjobq._announce(p_job_type, v_run_after, v_now);
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
  'Notifies channel pyjobq_job on commit with the job type, and @run_after (seconds since 1970) when the job '
  'becomes due later.';

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
    perform pyjobq._announce(p_job_type, v_run_after, v_now);
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
  perform pyjobq._announce(p_job_type, v_run_after, v_now);
end;
$$;

comment on function pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int) is
  'Adds up to 100000 jobs of one type in one call, with job_enqueue''s checks, defaults and dedupe; '
  'p_dedupe_keys, when given, pairs a key (or null) with each payload. Returns one row per payload in input '
  'order: its 1-based position, the job id, and whether it was newly created. Notifies pyjobq_job as '
  'job_enqueue does.';

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
  v_job_type int;
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
  returning j.status::int, j.run_after, j.job_type into status, run_after, v_job_type;
  if not found then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt);
  end if;
  -- The retry is announced like a new job: idle workers learn when it is due.
  if status = 1 then
    perform pyjobq._announce(v_job_type, run_after, v_now);
  end if;
  return next;
end;
$$;

comment on function pyjobq.job_fail(uuid, text, int, text, double precision, boolean) is
  'Records a failed attempt p_attempt of job p_job_id held by p_worker_id, keeping p_error (truncated to 10000 '
  'characters) as last_error. With attempts left the job is PENDING again after p_retry_delay_seconds '
  '(0..31536000) or, by default, pyjobq.retry_backoff(attempt); with none left, or p_dead_letter, it is DEAD. '
  'Returns the new status and run_after; raises JQ001/JQ002/JQ003 like job_complete. A retry notifies '
  'pyjobq_job as job_enqueue does.';


create or replace function pyjobq._work_types(p_job_types int[])
returns smallint[]
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_types smallint[];
  v_denied smallint[] := pyjobq._denied_types('work');
begin
  p_job_types := pyjobq._check_array('p_job_types', p_job_types);
  if p_job_types is null then
    select array_agg(t.job_type order by t.job_type)
      into v_types
      from pyjobq.job_type t
     where t.job_type <> all (v_denied);
    return coalesce(v_types, '{}');
  end if;
  if exists (select 1
               from unnest(p_job_types) as u(code)
              where u.code is null or u.code not between 1 and 32767) then
    raise exception 'p_job_types elements must be job type codes between 1 and 32767'
      using errcode = '22023',
            hint = 'Pass null for every registered type.';
  end if;
  if cardinality(v_denied) > 0 then
    perform pyjobq._check_privilege('work', p_job_types);
  end if;
  return p_job_types::smallint[];
end;
$$;

comment on function pyjobq._work_types(int[]) is
  'The job types a worker''s call looks at: p_job_types checked (22023 for a code out of range, 42501 for a '
  'type the caller may not work), or every registered type the caller may work when null.';

create or replace function pyjobq.job_claim(
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
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_limit int := coalesce(p_limit, 1);
  v_lease int := coalesce(p_lease_seconds, 300);
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_limit', v_limit, 1, 1000);
  perform pyjobq._check_range('p_lease_seconds', v_lease, 1, 86400);
  return query
  select * from pyjobq._claim_pick(p_worker_id, pyjobq._work_types(p_job_types), v_limit, v_lease, v_now);
end;
$$;

comment on function pyjobq.job_claim(text, int, int, int[]) is
  'Atomically takes up to p_limit (1..1000, default 1) due PENDING jobs, lowest priority value then earliest '
  'run_after first, of the given job types (default all), and leases them to p_worker_id (1..80 chars) for '
  'p_lease_seconds (1..86400, default 300): RUNNING, attempts + 1. Rows locked by other claimers are skipped, '
  'never waited for. Returns the claimed jobs; attempt is the fencing token for complete/fail/renew/release. '
  'An empty result means nothing is due.';

create or replace function pyjobq.job_next_due(p_job_types int[] default null)
returns timestamptz
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set enable_sort = off
set jit = off
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
  return v_next;
end;
$$;

comment on function pyjobq.job_next_due(int[]) is
  'The earliest run_after still to come of the PENDING jobs of the given job types (default: every type the '
  'caller may work), or null when none is scheduled: when an idle worker should claim again. Jobs due now '
  'are not counted.';

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
    pyjobq.job_next_due(int[]),
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
  'next due, complete, fail, '
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
