-- depends: 0060_pause_and_resume

-- Schema 61: replacing and debouncing. job_enqueue and job_enqueue_many take
-- p_on_duplicate: 'keep' (the default) returns the active job holding the
-- key, 'replace' gives it the enqueue's arguments, 'debounce' moves its
-- run_after out; either changes only a PENDING job never claimed, and both
-- return replaced. job_update changes a PENDING job by id (producers and
-- admins, audited). No table changes.

drop function pyjobq.job_enqueue(int, jsonb, int, timestamptz, text, int, interval, text, jsonb, uuid[], text, uuid);
drop function pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int, interval, text[], jsonb, jsonb[], text, uuid);
drop function pyjobq._enqueue_rows(int, jsonb[], text[], int, timestamptz, int, timestamptz, text[], jsonb, uuid);
drop function pyjobq._enqueue_one(int, jsonb, int, timestamptz, text, int, timestamptz, interval, text, jsonb, uuid[], boolean, uuid);

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 61
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq._check_payloads(p_payloads jsonb[])
returns void
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_bad int;
begin
  select min(u.i) into v_bad
    from unnest(p_payloads) with ordinality as u(payload, i)
   where u.payload is null or jsonb_typeof(u.payload) <> 'object';
  if v_bad is not null then
    raise exception 'p_payloads[%] must be a JSON object', v_bad
      using errcode = '22023',
            hint = 'Every payload must be a JSON object, e.g. {"value": ...}.';
  end if;
end;
$$;

comment on function pyjobq._check_payloads(jsonb[]) is
  'Raises 22023 naming the first element of p_payloads that is null or not a JSON object.';

create or replace function pyjobq._check_on_duplicate(p_on_duplicate text, p_has_key boolean, p_has_window boolean)
returns text
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_on_duplicate is null or p_on_duplicate = 'keep' then
    return null;
  elsif p_on_duplicate not in ('replace', 'debounce') then
    raise exception 'p_on_duplicate must be ''keep'', ''replace'' or ''debounce'''
      using errcode = '22023',
            detail = format('p_on_duplicate was %s.', p_on_duplicate),
            hint = '''keep'' (the default) returns the job holding the key; ''replace'' gives it this enqueue''s '
                   'arguments; ''debounce'' moves its run_after out.';
  elsif not p_has_key then
    raise exception 'p_on_duplicate ''%'' needs a dedupe key', p_on_duplicate
      using errcode = '22023',
            hint = 'Pass p_dedupe_key: the job it changes is the one holding that key.';
  elsif p_has_window then
    raise exception 'p_on_duplicate ''%'' cannot be combined with p_unique_for', p_on_duplicate
      using errcode = '22023',
            hint = 'A job that ended cannot be changed: leave p_unique_for out.';
  end if;
  return p_on_duplicate;
end;
$$;

comment on function pyjobq._check_on_duplicate(text, boolean, boolean) is
  'The duplicate policy of an enqueue: null for p_on_duplicate ''keep'' or null, else ''replace'' or '
  '''debounce'', which need a dedupe key (p_has_key) and no p_unique_for window (p_has_window); 22023 otherwise.';

create or replace function pyjobq._take_duplicate(
  p_job_type int,
  p_dedupe_key text,
  p_on_duplicate text,
  p_payload jsonb,
  p_priority int,
  p_run_after timestamptz,
  p_max_attempts int,
  p_concurrency_key text,
  p_metadata jsonb,
  p_fair_rank bigint,
  p_now timestamptz
)
returns table (job_id uuid, replaced boolean)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_id uuid;
  v_run_after timestamptz;
begin
  if p_on_duplicate = 'replace' then
    update pyjobq.job a
       set payload = p_payload, priority = p_priority, run_after = p_run_after, max_attempts = p_max_attempts,
           concurrency_key = p_concurrency_key, metadata = p_metadata, fair_rank = p_fair_rank, updated_at = p_now
     where a.job_type = p_job_type and a.dedupe_key = p_dedupe_key and a.status = 1 and a.attempts = 0
    returning a.job_id, a.run_after into v_id, v_run_after;
  elsif p_on_duplicate = 'debounce' then
    update pyjobq.job a
       set run_after = greatest(a.run_after, p_run_after), updated_at = p_now
     where a.job_type = p_job_type and a.dedupe_key = p_dedupe_key and a.status = 1 and a.attempts = 0
    returning a.job_id, a.run_after into v_id, v_run_after;
  end if;
  if v_id is not null then
    -- Due sooner than it was, it may sort before a claim front, and wake a worker.
    perform pyjobq._pending_from(v_run_after, p_now, false), pyjobq._announce(p_job_type, v_run_after, p_now);
    return query select v_id, true;
    return;
  end if;
  return query select pyjobq._active_holder(p_job_type, p_dedupe_key), false;
end;
$$;

comment on function pyjobq._take_duplicate(int, text, text, jsonb, int, timestamptz, int, text, jsonb, bigint, timestamptz) is
  'The active job of type p_job_type holding p_dedupe_key (null: none, the caller inserts its job), with '
  'replaced true when p_on_duplicate ''replace'' gave it the other arguments (payload, priority, run_after, '
  'max_attempts, concurrency key, metadata, fair rank), or ''debounce'' moved its run_after out to '
  'p_run_after; only a PENDING job never claimed is changed.';

create or replace function pyjobq._enqueue_one(
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
  v_row pyjobq.job_history;
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
    -- The row in the history's column order; born CANCELLED, it is history at
    -- once. A fair rank only for a type with fair share: asked in the row's
    -- own statement, it costs the others no call.
    v_row := row(v_new_id, p_job_type, v_status, p_priority, p_payload, null, p_dedupe_key, 0, p_max_attempts,
                 p_run_after, null, null, null, case when v_status = 5 then v_failure end, p_now, p_now, v_seq, 0,
                 false, null, p_concurrency_key,
                 (select (pyjobq._fair_ranks(p_job_type, p_priority, array[p_concurrency_key], 1, p_now))[1]
                    from pyjobq.job_type t
                   where t.job_type = p_job_type and t.fair_share),
                 p_metadata, v_waiting, case when p_parents is not null then p_run_on_parent_failure end, false,
                 p_batch_id);
    if v_status = 5 then
      insert into pyjobq.job_history select (v_row).*;
      v_id := v_new_id;
    else
      insert into pyjobq.job as j
        (job_id, job_type, status, priority, payload, result, dedupe_key, attempts, max_attempts, run_after,
         lease_until, worker_id, run_started_at, last_error, created_at, updated_at, seq, attempts_refunded,
         notify_done, lease_token, concurrency_key, fair_rank, metadata, waiting_on, run_on_parent_failure,
         has_dependants, batch_id) select (v_row).*
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

create or replace function pyjobq._enqueue_rows(
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

create or replace function pyjobq.job_enqueue(
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


create or replace function pyjobq.job_enqueue_many(
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

create or replace function pyjobq.job_update(
  p_job_id uuid,
  p_payload jsonb default null,
  p_priority int default null,
  p_run_after timestamptz default null
)
returns text
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_type int;
  v_status smallint;
  v_run_after timestamptz;
begin
  if p_job_id is null then
    raise exception 'p_job_id must not be null' using errcode = '22004';
  end if;
  if p_payload is null and p_priority is null and p_run_after is null then
    raise exception 'job_update needs p_payload, p_priority or p_run_after'
      using errcode = '22023',
            hint = 'Pass what should change; the others stay as they are.';
  end if;
  perform case when p_payload is not null then pyjobq._check_payload('p_payload', p_payload) end,
          case when p_priority is not null then pyjobq._check_range('p_priority', p_priority, 0, 32767) end,
          pyjobq._check_time('p_run_after', p_run_after, v_now);
  select j.job_type into v_type from pyjobq.job_all j where j.job_id = p_job_id;
  if not found then
    return 'not_found';
  end if;
  -- Changing a job is the producers' side of its type, as cancelling it is.
  perform pyjobq._check_privilege('enqueue', array[v_type]);
  update pyjobq.job a
     set payload = coalesce(p_payload, a.payload),
         priority = coalesce(p_priority, a.priority),
         run_after = coalesce(p_run_after, a.run_after),
         fair_rank = case when p_priority is distinct from a.priority and p_priority is not null
                          then (pyjobq._fair_ranks(a.job_type, p_priority, array[a.concurrency_key], 1, v_now))[1]
                          else a.fair_rank end,
         updated_at = v_now
   where a.job_id = p_job_id and a.status = 1 and (p_payload is null or a.attempts = 0)
  returning a.run_after into v_run_after;
  if found then
    perform pyjobq._pending_from(v_run_after, v_now, false), pyjobq._announce(v_type, v_run_after, v_now),
            pyjobq._audit('update', 1, jsonb_strip_nulls(jsonb_build_object(
              'job_ids', array[p_job_id], 'payload', p_payload is not null, 'priority', p_priority,
              'run_after', p_run_after)));
    return 'updated';
  end if;
  select j.status into v_status from pyjobq.job_all j where j.job_id = p_job_id;
  return case when v_status in (3, 4, 5) then 'finished'
              when v_status = 6 then 'waiting'
              when v_status is null then 'not_found'
              else 'claimed' end;
end;
$$;

comment on function pyjobq.job_update(uuid, jsonb, int, timestamptz) is
  'Changes a PENDING job: its payload (a JSON object; only while the job was never claimed), priority '
  '(0..32767) and run_after (within 100 years of now); what is null stays. Returns updated, claimed (RUNNING, or '
  'a payload asked of a job claimed before: a handler has seen it), waiting (WAITING for its parents), finished '
  'or not_found; only updated changed anything. Needs the enqueue privilege on the job''s type; an update '
  'writes a line to the audit log (job_audit).';


update pyjobq.api_grant
   set function = 'pyjobq.job_enqueue(int, jsonb, int, timestamptz, text, int, interval, text, jsonb, uuid[], text, uuid, text)'
 where function = 'pyjobq.job_enqueue(int, jsonb, int, timestamptz, text, int, interval, text, jsonb, uuid[], text, uuid)';
update pyjobq.api_grant
   set function = 'pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int, interval, text[], jsonb, jsonb[], text, uuid, text)'
 where function = 'pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int, interval, text[], jsonb, jsonb[], text, uuid)';
insert into pyjobq.api_grant (function, roles) values
  ('pyjobq.job_update(uuid, jsonb, int, timestamptz)', '{pyjobq_producer,pyjobq_admin}');

do $$ begin perform pyjobq.grant_roles(); end; $$;

revoke all on all functions in schema pyjobq from public;
