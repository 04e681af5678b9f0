-- depends: 0002_claim_front_lifetime_and_input_checks

-- Schema 3: a dedupe key is a key of its job type.
--
-- The active-duplicate guard was one unique index on dedupe_key across every
-- job type, so a producer of one type that used another team's key got that
-- team's job id back (created = false), or took the key first and made the
-- other team's enqueue create nothing: per-type grants could be walked
-- around. The index is now on (job_type, dedupe_key), and job_enqueue,
-- job_enqueue_many and job_redrive look keys up within the job's type. No
-- job changes: the old index allowed one active job per key over all types,
-- so no key can be active on two types when this runs, and every key active
-- now stays active for its own type.
--
-- The JQ001 detail named the holder's worker id and attempt, its fencing
-- token, to any caller; it now names the job's status only. A worker is told
-- by job_renew_lease_many that a job was cancelled only for types it may work.
--
-- Only what changed is here; sql/ holds the whole schema, and the migration
-- test proves the two build the same catalog.

drop index pyjobq.job_dedupe_active_idx;

create unique index job_dedupe_active_idx on pyjobq.job (job_type, dedupe_key)
  where status in (1, 2) and dedupe_key is not null;

comment on column pyjobq.job.dedupe_key is
  'At most one PENDING or RUNNING job per job type and key; enqueueing an active key of the type returns '
  'the existing job.';

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 3
$$;

create or replace function pyjobq._raise_not_held(p_job_id uuid, p_worker_id text, p_attempt int)
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
    raise exception 'job % is already %', p_job_id, pyjobq._status_name(v_status)
      using errcode = 'JQ003',
            detail = format('Attempt %s of worker %s already finished it.', p_attempt, p_worker_id),
            hint = 'Finish each claimed attempt once.';
  end if;
  -- The detail names the status only: the holder's worker id and attempt are
  -- its fencing token, which no other caller may learn from an error.
  raise exception 'worker % no longer holds attempt % of job %', p_worker_id, p_attempt, p_job_id
    using errcode = 'JQ001',
          detail = format('The job is %s now.', pyjobq._status_name(v_status)),
          hint = 'The lease expired and the job was reaped or claimed again: drop this result, the job runs (or ran) elsewhere.';
end;
$$;

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
    on conflict (job_type, dedupe_key) where status in (1, 2) and dedupe_key is not null do nothing
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
  'default 100, lower runs first; run_after default now; max_attempts 1..1000, default 3). With p_dedupe_key '
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

create or replace function pyjobq.job_renew_lease_many(
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
                                         and k.job_type <> all (v_denied)
                                         and k.status = 5
                                         and k.worker_id = p_worker_id
                                         and k.attempts = i.attempt)
    from input i
    left join renewed r on r.job_id = i.id and r.attempts = i.attempt
   order by i.ord;
end;
$$;

create or replace function pyjobq._redrive_rows(p_ids uuid[], p_now timestamptz)
returns uuid[]
language sql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  with free as (
    select distinct on (d.job_type, coalesce(d.dedupe_key, d.job_id::text)) d.job_id
      from pyjobq.job d
     where d.job_id = any (p_ids)
       and d.status in (4, 5)
       and pyjobq._tries_left(d.attempts, d.attempts, d.max_attempts) > 0
       and (d.dedupe_key is null
            or not exists (select 1
                             from pyjobq.job a
                            where a.job_type = d.job_type
                              and a.dedupe_key = d.dedupe_key
                              and a.status in (1, 2)))
     order by d.job_type, coalesce(d.dedupe_key, d.job_id::text), d.updated_at
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
                                  where a.job_type = p.job_type
                                    and a.dedupe_key = p.dedupe_key
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

