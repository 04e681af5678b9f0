-- Enqueue ---------------------------------------------------------------------

-- Job ids are time-ordered, in UUIDv7's layout (version 8 here): 48 bits of
-- milliseconds and 12 random bits, this prefix, then the job's (unique) seq
-- under the variant bits, so new keys land at the right edge of job_pkey.
create function pyjobq._job_id_prefix(p_now timestamptz)
returns text
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  return lpad(to_hex((extract(epoch from p_now) * 1000)::bigint & 281474976710655), 12, '0')
         || '8' || lpad(to_hex(floor(random() * 4096)::int), 3, '0');
end;
$$;

comment on function pyjobq._job_id_prefix(timestamptz) is
  'The first 16 hex digits of the ids of jobs created at p_now: its milliseconds, the version, 12 random bits. '
  'A job''s id is this prefix followed by to_hex(seq | (1 << 63)).';

create function pyjobq._new_job_ids(p_now timestamptz, p_count int)
returns table (seq bigint, job_id uuid)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
set plan_cache_mode = force_generic_plan
as $$
begin
  -- One prefix for the call. PL/pgSQL, its plan generic: kept for the
  -- session, where a SQL body, or custom plans for each p_count, are made at
  -- every call.
  return query
  select s.seq, (p.prefix || to_hex(s.seq | (-9223372036854775808)::bigint))::uuid
    from (select pyjobq._job_id_prefix(p_now) as prefix) p,
         lateral (select nextval('pyjobq.job_seq') as seq from generate_series(1, p_count)) s;
end;
$$;

comment on function pyjobq._new_job_ids(timestamptz, int) is
  'p_count new (seq, job_id) pairs in increasing seq order: seq from pyjobq.job_seq, job_id time-ordered by p_now.';

-- The max_attempts of a new job: the enqueue's own, else its type's policy,
-- else 3. With p_privilege, the caller's right to it first: one read of the
-- type serves both. The checks, which name what is wrong, run only when that
-- read cannot vouch for the caller: no such type, or a type that grants
-- p_privilege to named roles only.
create function pyjobq._max_attempts(p_job_type int, p_max_attempts int, p_privilege text default null)
returns int
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_max_attempts int;
  v_granted boolean;
begin
  select t.max_attempts,
         exists (select 1 from pyjobq.job_type_grant g where g.job_type = t.job_type and g.privilege = p_privilege)
    into v_max_attempts, v_granted
    from pyjobq.job_type t
   where t.job_type = p_job_type;
  if p_privilege is not null and (not found or v_granted) then
    perform pyjobq._check_job_type(p_job_type), pyjobq._check_privilege(p_privilege, array[p_job_type]);
  end if;
  return coalesce(p_max_attempts, v_max_attempts, 3);
end;
$$;

comment on function pyjobq._max_attempts(int, int, text) is
  'p_max_attempts, else the max_attempts of job type p_job_type''s policy, else 3. With p_privilege, first '
  'raises unless p_job_type is a registered type (22023) and the session holds p_privilege on it (42501).';

-- The job of type p_job_type with p_dedupe_key that ended most recently, if it
-- ended within p_window of p_now: what a p_unique_for enqueue returns.
create function pyjobq._ended_within(p_job_type int, p_dedupe_key text, p_window interval, p_now timestamptz)
returns uuid
language sql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select e.job_id
    from pyjobq.job_history e
   where e.job_type = p_job_type
     and e.dedupe_key = p_dedupe_key
     and e.updated_at >= p_now - p_window
   order by e.updated_at desc
   limit 1
$$;

comment on function pyjobq._ended_within(int, text, interval, timestamptz) is
  'The job of type p_job_type and key p_dedupe_key that ended last, if it ended within p_window before p_now.';

-- The active job (PENDING, RUNNING or WAITING) of a type that holds a dedupe
-- key: the one an enqueue with that key returns instead of a new job.
create function pyjobq._active_holder(p_job_type int, p_dedupe_key text)
returns uuid
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  return (select a.job_id
            from pyjobq.job a
           where a.job_type = p_job_type and a.dedupe_key = p_dedupe_key and a.status in (1, 2, 6));
end;
$$;

comment on function pyjobq._active_holder(int, text) is
  'The id of the PENDING, RUNNING or WAITING job of type p_job_type holding dedupe key p_dedupe_key; null: none.';

-- One job, its arguments checked: inserted PENDING, or, when an active job of
-- its type holds p_dedupe_key, that job (created false), changed first as
-- p_on_duplicate says (_take_duplicate). If the holder ends between the insert
-- and the lookup, try again. With p_unique_for, an active holder is the
-- duplicate first, then a job with the key that ended within that window:
-- looked for before the insert, and again after it, in a statement of its
-- own, because the active holder may end while the insert waits for it. Then
-- the insert is undone. job_enqueue and the ticks of schedules enqueue
-- through here.
create function pyjobq._enqueue_one(
  p_job_type int,
  p_payload jsonb,
  p_priority int,
  p_run_after timestamptz,
  p_dedupe_key text,
  p_max_attempts int,
  p_now timestamptz,
  p_unique_for interval default null,
  p_concurrency_key text default null,
  p_metadata jsonb default null,
  p_parents uuid[] default null,
  p_run_on_parent_failure boolean default null,
  p_batch_id uuid default null,
  p_on_duplicate text default null
)
returns table (job_id uuid, created boolean, replaced boolean)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_seq bigint;
  v_new_id uuid;
  v_row pyjobq.job;
  v_id uuid;
  v_ended uuid;
  v_status smallint := 1;
  v_waiting int;
  v_failure text;
  v_read_ids uuid[];
  v_read_statuses smallint[];
  v_replaced boolean;
begin
  if p_unique_for is not null then
    v_id := pyjobq._active_holder(p_job_type, p_dedupe_key);
    if v_id is null then
      v_id := pyjobq._ended_within(p_job_type, p_dedupe_key, p_unique_for, p_now);
    end if;
    if v_id is not null then
      return query select v_id, false, false;
      return;
    end if;
  end if;
  -- With parents: WAITING for those still to end, or CANCELLED at once by one
  -- that ended DEAD or CANCELLED (unless it runs on parent failure).
  if p_parents is not null then
    select l.waiting, l.failure, l.ids, l.statuses
      into v_waiting, v_failure, v_read_ids, v_read_statuses
      from pyjobq._read_parents(p_parents) l;
    v_status := case when v_failure is not null and not p_run_on_parent_failure then 5
                     when v_waiting > 0 then 6
                     else 1 end;
    -- Born CANCELLED it would take no key: an active holder is the answer.
    if v_status = 5 and p_dedupe_key is not null then
      v_id := pyjobq._active_holder(p_job_type, p_dedupe_key);
      if v_id is not null then
        return query select v_id, false, false;
        return;
      end if;
    end if;
  end if;
  loop
    v_seq := nextval('pyjobq.job_seq');
    v_new_id := (pyjobq._job_id_prefix(p_now) || to_hex(v_seq | (-9223372036854775808)::bigint))::uuid;
    -- The row, built once; born CANCELLED, it is history at once. A fair rank
    -- only for a type with fair share: asked in the row's own statement, it
    -- costs the others no call.
    v_row := row(v_new_id, p_job_type, p_priority, p_max_attempts, p_now, v_seq,
                 (select (pyjobq._fair_ranks(p_job_type, p_priority, array[p_concurrency_key], 1, p_now))[1]
                    from pyjobq.job_type t
                   where t.job_type = p_job_type and t.fair_share),
                 p_payload, p_dedupe_key, p_concurrency_key, p_metadata, p_batch_id,
                 case when p_parents is not null then p_run_on_parent_failure end, null, false, false, v_waiting,
                 0, p_run_after, case when v_status = 5 then v_failure end, v_status, 0, null, null, null, null,
                 p_now, 0, null);
    if v_status = 5 then
      perform pyjobq._to_history(array[v_row], array[5]::smallint[], p_now);
      v_id := v_new_id;
    elsif p_dedupe_key is null then
      -- Nothing can conflict: no speculative insert, whose confirmation is WAL too.
      insert into pyjobq.job select (v_row).*;
      v_id := v_new_id;
    else
      insert into pyjobq.job as j select (v_row).*
      on conflict (job_type, dedupe_key) where status in (1, 2, 6) and dedupe_key is not null do nothing
      returning j.job_id into v_id;
    end if;
    if v_id is not null and p_unique_for is not null and v_status <> 5 then
      v_ended := pyjobq._ended_within(p_job_type, p_dedupe_key, p_unique_for, p_now);
      if v_ended is not null then
        delete from pyjobq.job d where d.job_id = v_id;
        return query select v_ended, false, false;
        return;
      end if;
    end if;
    if v_id is not null then
      if p_parents is not null then
        perform pyjobq._link_parents(v_id, p_parents, v_read_ids, v_read_statuses);
      end if;
      if p_batch_id is not null then
        perform pyjobq._batch_add(p_batch_id, 1, case when v_status = 5 then 1 else 0 end);
      end if;
      if v_status = 1 then
        perform pyjobq._pending_from(p_run_after, p_now, true);
        perform pyjobq._announce(p_job_type, p_run_after, p_now);
      end if;
      return query select v_id, true, false;
      return;
    end if;
    select d.job_id, d.replaced into v_id, v_replaced
      from pyjobq._take_duplicate(p_job_type, p_dedupe_key, p_on_duplicate, p_payload, p_priority, p_run_after,
                                  p_max_attempts, p_concurrency_key, p_metadata, v_row.fair_rank, p_now) d;
    if v_id is not null then
      return query select v_id, false, v_replaced;
      return;
    end if;
  end loop;
end;
$$;

comment on function pyjobq._enqueue_one(int, jsonb, int, timestamptz, text, int, timestamptz, interval, text, jsonb, uuid[], boolean, uuid, text) is
  'Inserts one PENDING job from checked arguments (WAITING, or CANCELLED, with parents p_parents that have not '
  'all ended, or one ended DEAD or CANCELLED), or returns the active job of p_job_type holding '
  'p_dedupe_key (changed first as p_on_duplicate says, replaced true: see _take_duplicate), or else, with '
  'p_unique_for, the one that ended last within that window (created false); counts a new job in batch '
  'p_batch_id (locked by the caller); voids claim fronts and announces as every enqueue does.';

create function pyjobq.job_enqueue(
  p_job_type int,
  p_payload jsonb default null,
  p_priority int default null,
  p_run_after timestamptz default null,
  p_dedupe_key text default null,
  p_max_attempts int default null,
  p_unique_for interval default null,
  p_concurrency_key text default null,
  p_metadata jsonb default null,
  p_depends_on uuid[] default null,
  p_on_parent_failure text default null,
  p_batch_id uuid default null,
  p_on_duplicate text default null
)
returns table (job_id uuid, created boolean, replaced boolean)
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
  v_run_on_parent_failure boolean := case when p_on_parent_failure is not null
                                          then pyjobq._check_on_parent_failure(p_on_parent_failure) else false end;
  v_max_attempts int := pyjobq._max_attempts(p_job_type, p_max_attempts, 'enqueue');
  v_on_duplicate text := case when p_on_duplicate is not null
                              then pyjobq._check_on_duplicate(p_on_duplicate, p_dedupe_key is not null,
                                                              p_unique_for is not null) end;
begin
  -- The arguments given, checked in this order, in one statement (each
  -- statement is an executor run, each call a function's setup): one left out
  -- takes its default, which needs no check.
  perform case when p_payload is not null then pyjobq._check_payload('p_payload', p_payload) end,
          case when p_priority is not null then pyjobq._check_range('p_priority', p_priority, 0, 32767) end,
          case when p_max_attempts is not null then pyjobq._check_range('p_max_attempts', p_max_attempts, 1, 1000) end,
          case when p_dedupe_key is not null then pyjobq._check_text('p_dedupe_key', p_dedupe_key, 200, true) end,
          case when p_run_after is not null then pyjobq._check_time('p_run_after', p_run_after, v_now) end,
          case when p_unique_for is not null then pyjobq._check_unique_for(p_unique_for, p_dedupe_key is not null) end,
          case when p_concurrency_key is not null
               then pyjobq._check_text('p_concurrency_key', p_concurrency_key, 200, true) end,
          case when p_metadata is not null then pyjobq._check_payload('p_metadata', p_metadata) end;
  if p_batch_id is not null then
    perform pyjobq._batch_join(p_batch_id);
  end if;

  return query
    select e.job_id, e.created, e.replaced
      from pyjobq._enqueue_one(p_job_type, v_payload, v_priority, v_run_after, p_dedupe_key, v_max_attempts, v_now,
                               p_unique_for, p_concurrency_key, p_metadata,
                               case when p_depends_on is not null then pyjobq._check_array('p_depends_on', p_depends_on) end,
                               v_run_on_parent_failure, p_batch_id, v_on_duplicate) e;
end;
$$;

comment on function pyjobq.job_enqueue(int, jsonb, int, timestamptz, text, int, interval, text, jsonb, uuid[], text, uuid, text) is
  'Adds one PENDING job of registered type p_job_type (payload: a JSON object, default {}; priority 0..32767, '
  'default 100, lower runs first; run_after default now; max_attempts 1..1000, default the type''s policy or 3). With p_dedupe_key '
  '(1..200 chars) an active (PENDING or RUNNING) job of the same type with that key is returned with created = '
  'false instead, changed first when p_on_duplicate says so: ''replace'' gives it this call''s payload, priority, '
  'run_after, max_attempts, concurrency key and metadata, ''debounce'' moves its run_after out to this call''s, '
  'and either changes only a PENDING job never claimed (replaced true; a claimed one is returned unchanged); '
  'with p_unique_for (over 0, at most 365 days) also the job of the type with that key that '
  'ended (DONE, DEAD or CANCELLED) within that window. p_concurrency_key (1..200 chars) counts the job against '
  'its type''s per-key concurrency limit. p_metadata (a JSON object) is kept with the job and returned by '
  'job_claim and job_get: traceparent and tracestate carry the enqueue''s W3C trace context. '
  'With p_depends_on (existing jobs the caller may observe, at most 100000) the job is WAITING until they have all '
  'ended, then PENDING; a parent ending DEAD or CANCELLED cancels it, unless p_on_parent_failure is ''run'' '
  '(default ''cancel''); job_claim returns the parents'' results with it. A duplicate returned for its key keeps '
  'its own parents and batch. With p_batch_id the job joins that open batch (job_batch_open; JQ002 when there '
  'is none, JQ006 when it is closed). '
  'While a worker is asleep (job_worker_idle), notifies channel pyjobq_job on commit with the job type, and '
  '@run_after (seconds since 1970) when the job becomes due later.';

-- job_enqueue_many's rows without parents and without a window, checked by
-- it: inserted in one statement, the ids drawn beforehand so that inserted
-- rows match their input position. A key repeated within the call, or
-- already held by an active job, yields that job with created = false.
create function pyjobq._enqueue_rows(
  p_job_type int,
  p_payloads jsonb[],
  p_dedupe_keys text[],
  p_priority int,
  p_run_after timestamptz,
  p_max_attempts int,
  p_now timestamptz,
  p_concurrency_keys text[],
  p_metadata jsonb,
  p_batch_id uuid,
  p_on_duplicate text default null
)
returns table (ord int, job_id uuid, created boolean, replaced boolean)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
set jit = off
as $$
declare
  v_count int := cardinality(p_payloads);
  v_ranks bigint[];
  v_row record;
  v_added int := 0;
begin
  perform pyjobq._pending_from(p_run_after, p_now, true);
  v_ranks := pyjobq._fair_ranks(p_job_type, p_priority, p_concurrency_keys, v_count, p_now);

  -- Without keys nothing can conflict: every row is inserted, and the ids
  -- drawn beforehand are the answer, in input order, without a row-by-row loop.
  if p_dedupe_keys is null then
    return query
    with input as materialized (
      select u.i::int as ord, u.payload, u.seq, u.new_id
        from rows from (unnest(p_payloads), pyjobq._new_job_ids(p_now, v_count))
             with ordinality as u(payload, seq, new_id, i)
    ),
    inserted as (
      insert into pyjobq.job as j
        (job_id, seq, job_type, payload, priority, run_after, max_attempts, created_at, updated_at, concurrency_key,
         fair_rank, metadata, batch_id)
      select i.new_id, i.seq, p_job_type, i.payload, p_priority, p_run_after, p_max_attempts, p_now, p_now,
             p_concurrency_keys[i.ord], v_ranks[i.ord], p_metadata, p_batch_id
        from input i
       order by i.ord
    )
    select i.ord, i.new_id, true, false
      from input i
     order by i.ord;
    perform pyjobq._batch_add(p_batch_id, v_count);
    perform pyjobq._announce(p_job_type, p_run_after, p_now);
    return;
  end if;

  -- Ids are drawn before the insert so that inserted rows can be matched back
  -- to their input position. A key repeated within the batch, or already held
  -- by an active job, yields that job with created = false.
  for v_row in
    with input as materialized (
      select u.i::int as ord, u.payload, p_dedupe_keys[u.i] as dedupe_key, u.seq, u.new_id
        from rows from (unnest(p_payloads), pyjobq._new_job_ids(p_now, v_count))
             with ordinality as u(payload, seq, new_id, i)
    ),
    inserted as (
      insert into pyjobq.job as j
        (job_id, seq, job_type, payload, priority, run_after, dedupe_key, max_attempts, created_at, updated_at,
         concurrency_key, fair_rank, metadata, batch_id)
      select i.new_id, i.seq, p_job_type, i.payload, p_priority, p_run_after, i.dedupe_key, p_max_attempts, p_now, p_now,
             p_concurrency_keys[i.ord], v_ranks[i.ord], p_metadata, p_batch_id
        from input i
       order by i.ord
      on conflict (job_type, dedupe_key) where status in (1, 2, 6) and dedupe_key is not null do nothing
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
            and active.status in (1, 2, 6)
     order by i.ord
  loop
    ord := v_row.ord;
    job_id := v_row.job_id;
    created := v_row.created;
    replaced := false;
    if created then
      v_added := v_added + 1;
    end if;
    -- The active job holding this key finished while we inserted, or is to
    -- be changed (one of this call's own, which a later row replaces).
    if job_id is null or (not created and p_on_duplicate is not null) then
      select e.job_id, e.created, e.replaced into job_id, created, replaced
        from pyjobq._enqueue_one(p_job_type, p_payloads[ord], p_priority, p_run_after,
                                 v_row.dedupe_key, p_max_attempts, p_now, null, p_concurrency_keys[ord],
                                 p_metadata, null, null, p_batch_id, p_on_duplicate) e;
    end if;
    return next;
  end loop;
  perform pyjobq._batch_add(p_batch_id, v_added);
  perform pyjobq._announce(p_job_type, p_run_after, p_now);
end;
$$;

comment on function pyjobq._enqueue_rows(int, jsonb[], text[], int, timestamptz, int, timestamptz, text[], jsonb, uuid, text) is
  'job_enqueue_many''s rows without parents and without a window, checked by it: inserted in one statement, in '
  'input order; a duplicate key yields the active job holding it (created false), changed first as '
  'p_on_duplicate says (replaced true). Returns every row.';

create function pyjobq.job_enqueue_many(
  p_job_type int,
  p_payloads jsonb[],
  p_dedupe_keys text[] default null,
  p_priority int default null,
  p_run_after timestamptz default null,
  p_max_attempts int default null,
  p_unique_for interval default null,
  p_concurrency_keys text[] default null,
  p_metadata jsonb default null,
  p_depends_on jsonb[] default null,
  p_on_parent_failure text default null,
  p_batch_id uuid default null,
  p_on_duplicate text default null
)
returns table (ord int, job_id uuid, created boolean, replaced boolean)
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
  v_row record;
  v_run_on_parent_failure boolean := pyjobq._check_on_parent_failure(p_on_parent_failure);
  v_ids uuid[] := '{}';
begin
  p_payloads := pyjobq._check_array('p_payloads', p_payloads);
  p_dedupe_keys := pyjobq._check_array('p_dedupe_keys', p_dedupe_keys);
  v_max_attempts := pyjobq._max_attempts(p_job_type, p_max_attempts, 'enqueue');
  perform pyjobq._check_range('cardinality(p_payloads)', v_count, 1, 100000);
  perform pyjobq._check_range('p_priority', v_priority, 0, 32767);
  perform pyjobq._check_range('p_max_attempts', v_max_attempts, 1, 1000);
  perform pyjobq._check_time('p_run_after', v_run_after, v_now);
  perform pyjobq._check_payloads(p_payloads);
  perform pyjobq._check_keys('p_dedupe_keys', p_dedupe_keys, v_count);

  perform pyjobq._check_unique_for(p_unique_for, p_dedupe_keys is not null);
  p_on_duplicate := pyjobq._check_on_duplicate(p_on_duplicate, p_dedupe_keys is not null, p_unique_for is not null);
  p_concurrency_keys := pyjobq._check_array('p_concurrency_keys', p_concurrency_keys);
  perform pyjobq._check_keys('p_concurrency_keys', p_concurrency_keys, v_count);
  perform pyjobq._check_payload('p_metadata', p_metadata);

  p_depends_on := pyjobq._check_array('p_depends_on', p_depends_on);
  if p_depends_on is not null then
    perform pyjobq._check_same_length('p_depends_on', cardinality(p_depends_on), v_count);
  end if;
  if p_batch_id is not null then
    perform pyjobq._batch_join(p_batch_id);
  end if;

  -- Parents without keys: set-based.
  if p_depends_on is not null and p_dedupe_keys is null then
    return query
      select g.ord, g.job_id, g.created, false
        from pyjobq._enqueue_graph(p_job_type, p_payloads, v_priority, v_run_after, v_max_attempts, v_now,
                                   p_concurrency_keys, p_metadata, p_depends_on, v_run_on_parent_failure,
                                   p_batch_id) g;
    return;
  end if;
  -- Parents with keys, which may be earlier rows of this call: one job at a
  -- time, in input order, each as job_enqueue takes it.
  if p_depends_on is not null then
    for v_row in
      select u.i::int as i, u.payload
        from unnest(p_payloads) with ordinality as u(payload, i)
       order by u.i
    loop
      select e.job_id, e.created, e.replaced into job_id, created, replaced
        from pyjobq._enqueue_one(p_job_type, v_row.payload, v_priority, v_run_after, p_dedupe_keys[v_row.i],
                                 v_max_attempts, v_now,
                                 case when p_dedupe_keys[v_row.i] is not null then p_unique_for end,
                                 p_concurrency_keys[v_row.i], p_metadata,
                                 array(select coalesce(v_ids[r.pos], r.id)
                                         from pyjobq._row_parents(p_depends_on[v_row.i], v_row.i) r
                                        order by r.k),
                                 v_run_on_parent_failure, p_batch_id, p_on_duplicate) e;
      v_ids := v_ids || job_id;
      ord := v_row.i;
      return next;
    end loop;
    return;
  end if;

  -- A window over ended jobs: one job at a time, each as job_enqueue takes it.
  if p_unique_for is not null then
    return query
      select u.i::int, e.job_id, e.created, e.replaced
        from unnest(p_payloads, p_dedupe_keys) with ordinality as u(payload, dedupe_key, i)
       cross join lateral pyjobq._enqueue_one(p_job_type, u.payload, v_priority, v_run_after, u.dedupe_key,
                                              v_max_attempts, v_now,
                                              case when u.dedupe_key is not null then p_unique_for end,
                                              p_concurrency_keys[u.i], p_metadata, null, null, p_batch_id) e
       order by u.i;
    return;
  end if;

  -- Without parents and without a window: set-based.
  return query
    select r.ord, r.job_id, r.created, r.replaced
      from pyjobq._enqueue_rows(p_job_type, p_payloads, p_dedupe_keys, v_priority, v_run_after, v_max_attempts,
                                v_now, p_concurrency_keys, p_metadata, p_batch_id, p_on_duplicate) r;
end;
$$;

comment on function pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int, interval, text[], jsonb, jsonb[], text, uuid, text) is
  'Adds up to 100000 jobs of one type in one call, with job_enqueue''s checks, defaults and dedupe; '
  'p_dedupe_keys, when given, pairs a key (or null) with each payload, and p_unique_for applies to the rows '
  'with a key as job_enqueue applies it, as p_on_duplicate does (a later row replacing an earlier row''s job of '
  'the same key); p_concurrency_keys likewise pairs a concurrency key (or null) with '
  'each payload; p_metadata is every job''s metadata, as job_enqueue keeps it. p_depends_on pairs with each '
  'payload null or a JSON array of its parents: job ids, or the 1-based positions of earlier payloads of the '
  'same call; p_on_parent_failure and p_batch_id apply to every job, as job_enqueue applies them. Returns one row per payload in input '
  'order: its 1-based position, the job id, whether it was newly created, and whether it replaced the job '
  'holding its key. Notifies pyjobq_job as '
  'job_enqueue does.';
