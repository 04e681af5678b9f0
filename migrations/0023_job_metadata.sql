-- depends: 0022_activity

-- Schema 23: metadata with each job.
--
-- job_enqueue and job_enqueue_many take p_metadata, a JSON object kept with
-- the job (the W3C trace context of the enqueue, among what a producer may
-- say besides the payload); job_claim and job_get return it. The functions
-- whose arguments or results change are dropped and created again; the claim's
-- internals return the new column too.

drop function pyjobq.job_enqueue(int, jsonb, int, timestamptz, text, int, interval, text);
drop function pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int, interval, text[]);
drop function pyjobq._enqueue_one(int, jsonb, int, timestamptz, text, int, timestamptz, interval, text);
drop function pyjobq.job_claim(text, int, int, int[]);
drop function pyjobq._claim_pick(text, smallint[], int, int, timestamptz);
drop function pyjobq._claim_limited(text, smallint[], int, int, timestamptz);
drop function pyjobq.job_get(uuid);

-- A new column with no default: no rewrite. The check is added unvalidated and
-- validated after, so that the table is read under a lock that lets
-- claims and completions go on.
alter table pyjobq.job add column metadata jsonb;
alter table pyjobq.job add constraint job_metadata_is_object check (jsonb_typeof(metadata) = 'object') not valid;
alter table pyjobq.job validate constraint job_metadata_is_object;

comment on column pyjobq.job.metadata is
  'What the producer said about the job besides its payload, given at enqueue and returned by job_claim and '
  'job_get: a JSON object or null. traceparent and tracestate carry the W3C trace context of the enqueue, '
  'which the Python worker continues in the handler''s span.';

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 23
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

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
  p_metadata jsonb default null
)
returns table (job_id uuid, created boolean)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_seq bigint;
  v_new_id uuid;
  v_id uuid;
  v_ended uuid;
begin
  if p_unique_for is not null then
    -- An active job with the key is the duplicate first: the one a window-less
    -- enqueue returns, and the one whose outcome is still to come.
    select a.job_id into v_id
      from pyjobq.job a
     where a.job_type = p_job_type and a.dedupe_key = p_dedupe_key and a.status in (1, 2);
    if v_id is null then
      v_id := pyjobq._ended_within(p_job_type, p_dedupe_key, p_unique_for, p_now);
    end if;
    if v_id is not null then
      return query select v_id, false;
      return;
    end if;
  end if;
  loop
    select n.seq, n.job_id into v_seq, v_new_id from pyjobq._new_job_ids(p_now, 1) n;
    insert into pyjobq.job as j
      (job_id, seq, job_type, payload, priority, run_after, dedupe_key, max_attempts, created_at, updated_at,
       concurrency_key, fair_rank, metadata)
    values
      (v_new_id, v_seq, p_job_type, p_payload, p_priority, p_run_after, p_dedupe_key, p_max_attempts, p_now, p_now,
       p_concurrency_key, (pyjobq._fair_ranks(p_job_type, p_priority, array[p_concurrency_key], 1, p_now))[1],
       p_metadata)
    on conflict (job_type, dedupe_key) where status in (1, 2) and dedupe_key is not null do nothing
    returning j.job_id into v_id;
    if v_id is not null and p_unique_for is not null then
      v_ended := pyjobq._ended_within(p_job_type, p_dedupe_key, p_unique_for, p_now);
      if v_ended is not null then
        delete from pyjobq.job d where d.job_id = v_id;
        return query select v_ended, false;
        return;
      end if;
    end if;
    if v_id is not null then
      perform pyjobq._pending_from(p_run_after, p_now, true);
      perform pyjobq._announce(p_job_type, p_run_after, p_now);
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

comment on function pyjobq._enqueue_one(int, jsonb, int, timestamptz, text, int, timestamptz, interval, text, jsonb) is
  'Inserts one PENDING job from checked arguments, or returns the active job of p_job_type holding '
  'p_dedupe_key, or else, with p_unique_for, the one that ended last within that window (created false); '
  'voids claim fronts and announces as every enqueue does.';

create function pyjobq.job_enqueue(
  p_job_type int,
  p_payload jsonb default null,
  p_priority int default null,
  p_run_after timestamptz default null,
  p_dedupe_key text default null,
  p_max_attempts int default null,
  p_unique_for interval default null,
  p_concurrency_key text default null,
  p_metadata jsonb default null
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
begin
  perform pyjobq._check_job_type(p_job_type);
  perform pyjobq._check_privilege('enqueue', array[p_job_type]);
  v_max_attempts := pyjobq._max_attempts(p_job_type, p_max_attempts);
  perform pyjobq._check_payload('p_payload', v_payload);
  perform pyjobq._check_range('p_priority', v_priority, 0, 32767);
  perform pyjobq._check_range('p_max_attempts', v_max_attempts, 1, 1000);
  perform pyjobq._check_text('p_dedupe_key', p_dedupe_key, 200, true);
  perform pyjobq._check_time('p_run_after', v_run_after, v_now);
  perform pyjobq._check_unique_for(p_unique_for, p_dedupe_key is not null);
  perform pyjobq._check_text('p_concurrency_key', p_concurrency_key, 200, true);
  perform pyjobq._check_payload('p_metadata', p_metadata);

  return query
    select e.job_id, e.created
      from pyjobq._enqueue_one(p_job_type, v_payload, v_priority, v_run_after, p_dedupe_key, v_max_attempts, v_now,
                               p_unique_for, p_concurrency_key, p_metadata) e;
end;
$$;

comment on function pyjobq.job_enqueue(int, jsonb, int, timestamptz, text, int, interval, text, jsonb) is
  'Adds one PENDING job of registered type p_job_type (payload: a JSON object, default {}; priority 0..32767, '
  'default 100, lower runs first; run_after default now; max_attempts 1..1000, default the type''s policy or 3). With p_dedupe_key '
  '(1..200 chars) an active (PENDING or RUNNING) job of the same type with that key is returned with created = '
  'false instead; with p_unique_for (over 0, at most 365 days) also the job of the type with that key that '
  'ended (DONE, DEAD or CANCELLED) within that window. p_concurrency_key (1..200 chars) counts the job against '
  'its type''s per-key concurrency limit. p_metadata (a JSON object) is kept with the job and returned by '
  'job_claim and job_get: traceparent and tracestate carry the enqueue''s W3C trace context. '
  'Notifies channel pyjobq_job on commit with the job type, and @run_after (seconds since 1970) when the job '
  'becomes due later.';

create function pyjobq.job_enqueue_many(
  p_job_type int,
  p_payloads jsonb[],
  p_dedupe_keys text[] default null,
  p_priority int default null,
  p_run_after timestamptz default null,
  p_max_attempts int default null,
  p_unique_for interval default null,
  p_concurrency_keys text[] default null,
  p_metadata jsonb default null
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
  v_ranks bigint[];
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
  perform pyjobq._check_keys('p_dedupe_keys', p_dedupe_keys, v_count);

  perform pyjobq._check_unique_for(p_unique_for, p_dedupe_keys is not null);
  p_concurrency_keys := pyjobq._check_array('p_concurrency_keys', p_concurrency_keys);
  perform pyjobq._check_keys('p_concurrency_keys', p_concurrency_keys, v_count);
  perform pyjobq._check_payload('p_metadata', p_metadata);

  -- A window over ended jobs: one job at a time, each as job_enqueue takes it.
  if p_unique_for is not null then
    return query
      select u.i::int, e.job_id, e.created
        from unnest(p_payloads, p_dedupe_keys) with ordinality as u(payload, dedupe_key, i)
       cross join lateral pyjobq._enqueue_one(p_job_type, u.payload, v_priority, v_run_after, u.dedupe_key,
                                              v_max_attempts, v_now,
                                              case when u.dedupe_key is not null then p_unique_for end,
                                              p_concurrency_keys[u.i], p_metadata) e
       order by u.i;
    return;
  end if;

  perform pyjobq._pending_from(v_run_after, v_now, true);
  v_ranks := pyjobq._fair_ranks(p_job_type, v_priority, p_concurrency_keys, v_count, v_now);

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
        (job_id, seq, job_type, payload, priority, run_after, max_attempts, created_at, updated_at, concurrency_key,
         fair_rank, metadata)
      select i.new_id, i.seq, p_job_type, i.payload, v_priority, v_run_after, v_max_attempts, v_now, v_now,
             p_concurrency_keys[i.ord], v_ranks[i.ord], p_metadata
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
        (job_id, seq, job_type, payload, priority, run_after, dedupe_key, max_attempts, created_at, updated_at,
         concurrency_key, fair_rank, metadata)
      select i.new_id, i.seq, p_job_type, i.payload, v_priority, v_run_after, i.dedupe_key, v_max_attempts, v_now, v_now,
             p_concurrency_keys[i.ord], v_ranks[i.ord], p_metadata
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
        from pyjobq._enqueue_one(p_job_type, p_payloads[ord], v_priority, v_run_after,
                                 v_row.dedupe_key, v_max_attempts, v_now, null, p_concurrency_keys[ord],
                                 p_metadata) e;
    end if;
    return next;
  end loop;
  perform pyjobq._announce(p_job_type, v_run_after, v_now);
end;
$$;

comment on function pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int, interval, text[], jsonb) is
  'Adds up to 100000 jobs of one type in one call, with job_enqueue''s checks, defaults and dedupe; '
  'p_dedupe_keys, when given, pairs a key (or null) with each payload, and p_unique_for applies to the rows '
  'with a key as job_enqueue applies it; p_concurrency_keys likewise pairs a concurrency key (or null) with '
  'each payload; p_metadata is every job''s metadata, as job_enqueue keeps it. Returns one row per payload in input '
  'order: its 1-based position, the job id, and whether it was newly created. Notifies pyjobq_job as '
  'job_enqueue does.';

create function pyjobq._claim_pick(
  p_worker_id text,
  p_types smallint[],
  p_limit int,
  p_lease int,
  p_now timestamptz
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
  created_at timestamptz,
  lease_token uuid,
  metadata jsonb
)
language plpgsql
volatile
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
  v_now_us bigint := (extract(epoch from p_now) * 1000000)::bigint;
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
  -- Resume after this session's claim front, if it still holds (see "Claim
  -- fronts" above); the scan from the head comes after, and alone without one.
  v_front := pyjobq._claim_front_read(p_types::text, v_now_us);
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
       and c.run_after <= p_now
       and c.job_type = any (p_types)
     order by c.priority, c.run_after, c.seq
     limit case when v_bounded then p_limit else 0 end
       for update skip locked
  ),
  after as materialized (
    select c.job_id, 2 as part
      from pyjobq.job c
     where c.status = 1
       and (c.priority, c.run_after, c.seq) > (v_priority, v_run_after, v_seq)
       and c.run_after <= p_now
       and c.job_type = any (p_types)
     order by c.priority, c.run_after, c.seq
     limit case when v_bounded then p_limit else 0 end
       for update skip locked
  ),
  head as materialized (
    select c.job_id, 3 as part
      from pyjobq.job c
     where c.status = 1
       and c.run_after <= p_now
       and c.job_type = any (p_types)
       and c.job_id not in (select a.job_id from ahead a union all select f.job_id from after f)
     order by c.priority, c.run_after, c.seq
     limit p_limit
       for update skip locked
  ),
  -- CTEs run as far as they are read: once p_limit jobs are picked, the
  -- scans not yet reached never start and lock nothing.
  picked as (
    (select a.job_id, a.part from ahead a
     union all
     select f.job_id, f.part from after f
     union all
     select h.job_id, h.part from head h)
    limit p_limit
  ),
  claimed as (
    update pyjobq.job j
       set status = 2,
           attempts = j.attempts + 1,
           worker_id = p_worker_id,
           lease_token = gen_random_uuid(),
           -- The lease, but never past the attempt's deadline.
           lease_until = p_now + make_interval(secs => least(p_lease, t.timeout_seconds)),
           run_started_at = p_now,
           updated_at = p_now
      from picked p, pyjobq.job_type t
     where j.job_id = p.job_id
       and t.job_type = j.job_type
    returning j.job_id, j.job_type, j.priority, j.payload, j.attempts, j.max_attempts,
              j.dedupe_key, j.run_after, j.lease_until, j.created_at, j.lease_token, j.metadata, j.seq, p.part
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
    lease_token := v_row.lease_token;
    metadata := v_row.metadata;
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
      v_front.epoch, case when v_from_head > 0 then v_now_us else v_front.started_us end, p_types::text,
      v_now_us, v_last.priority, v_last.run_after, v_last.seq)::pyjobq.claim_front);
  end if;
end;
$$;

comment on function pyjobq._claim_pick(text, smallint[], int, int, timestamptz) is
  'job_claim once its arguments are checked: takes up to p_limit due PENDING jobs of p_types for p_worker_id, '
  'resuming from this session''s claim front, and writes the new front.';

create function pyjobq._claim_limited(
  p_worker_id text,
  p_types smallint[],
  p_limit int,
  p_lease int,
  p_now timestamptz
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
  created_at timestamptz,
  lease_token uuid,
  metadata jsonb
)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
set enable_sort = off
set jit = off
as $$
declare
  c_visits constant int := 10000;  -- due jobs a claim looks at, at most
  v_at timestamptz := p_now;       -- the claim's time
  v_type record;
  v_room jsonb := '{}';            -- room left, by "type" and "type/key", once counted
  v_keyed jsonb := '{}';           -- key limits, by "type": {max, rate, period}
  v_taken jsonb := '{}';           -- jobs taken, by "type" and "type/key", where a rate counts them
  v_rule jsonb;
  v_w record;
  v_plain refcursor;
  v_fair refcursor;
  v_p record;
  v_f record;
  v_p_found boolean;
  v_f_found boolean;
  v_fair_turn boolean := true;
  v_c record;
  v_key text;
  v_row record;
  v_claimed int := 0;
  v_ids uuid[];
  v_mine text[];
begin
  for v_type in
    select t.job_type, t.max_running, t.rate_limit
      from pyjobq.job_type t
     where t.job_type = any (p_types)
       and (t.max_running is not null or t.rate_limit is not null)
     order by t.job_type
  loop
    perform pg_advisory_xact_lock(1887005297, v_type.job_type);
    if v_type.rate_limit is not null then
      -- A statement of its own: its snapshot follows the lock.
      v_at := greatest(v_at, (select w.claimed_at[cardinality(w.claimed_at)]
                                from pyjobq.rate_window w
                               where w.job_type = v_type.job_type and w.concurrency_key = ''));
    end if;
  end loop;

  for v_type in
    select t.job_type, t.max_running, t.key_max_running, t.rate_limit, t.rate_period, t.key_rate_limit,
           t.key_rate_period, w.claimed_at, w.claimed
      from pyjobq.job_type t
      left join pyjobq.rate_window w on w.job_type = t.job_type and w.concurrency_key = ''
     where t.job_type = any (p_types)
  loop
    if v_type.max_running is not null then
      v_room := v_room || jsonb_build_object(v_type.job_type::text, v_type.max_running - (
        select count(*)
          from (select 1
                  from pyjobq.job r
                 where r.lease_until is not null  -- RUNNING: job_running_has_lease
                   and r.job_type = v_type.job_type
                 limit v_type.max_running) as r));
    end if;
    if v_type.rate_limit is not null then
      v_room := v_room || jsonb_build_object(v_type.job_type::text, least(
        (v_room ->> v_type.job_type::text)::int,
        v_type.rate_limit - pyjobq._rate_used(v_type.claimed_at, v_type.claimed, v_at - v_type.rate_period)));
      v_taken := v_taken || jsonb_build_object(v_type.job_type::text, 0);
    end if;
    if v_type.key_max_running is not null or v_type.key_rate_limit is not null then
      v_keyed := v_keyed || jsonb_build_object(v_type.job_type::text, jsonb_build_object(
        'max', v_type.key_max_running, 'rate', v_type.key_rate_limit, 'period', v_type.key_rate_period));
    end if;
  end loop;

  -- No limit can bind within this claim: no key has one, no type is fair, and
  -- every limited type has room for all p_limit jobs. Then the claim is the
  -- plain one, set-based and resuming from the session's claim front, at the
  -- claim's time; the rates count what it took. (A type limit that never binds
  -- costs its lock and its count, not the walk below.)
  if v_keyed = '{}'
     and not exists (select from jsonb_each_text(v_room) r where r.value::int < p_limit)
     and not exists (select from pyjobq.job_type t where t.job_type = any (p_types) and t.fair_share) then
    for v_row in select * from pyjobq._claim_pick(p_worker_id, p_types, p_limit, p_lease, v_at) loop
      v_taken := pyjobq._count_down(v_taken, v_row.job_type::text, null);
      job_id := v_row.job_id;
      job_type := v_row.job_type;
      priority := v_row.priority;
      payload := v_row.payload;
      attempt := v_row.attempt;
      max_attempts := v_row.max_attempts;
      dedupe_key := v_row.dedupe_key;
      run_after := v_row.run_after;
      lease_until := v_row.lease_until;
      created_at := v_row.created_at;
      lease_token := v_row.lease_token;
      metadata := v_row.metadata;
      return next;
    end loop;
    perform pyjobq._rate_record_taken(v_taken, v_at);
    return;
  end if;

  -- Keys with a limit on their RUNNING jobs and nothing else in the way (no key
  -- rate, no fair share): the first due jobs, a few times what the claim wants,
  -- are taken in one pass. One statement tries their keys' locks; the next,
  -- whose snapshot follows the locks, counts the keys' RUNNING jobs, picks the
  -- jobs their key and type have room for, in claim order, and leases them.
  -- What the pass could not fill, the walk below takes on from the head (its
  -- counts see what the pass took).
  if v_keyed <> '{}'
     and not exists (select from jsonb_each(v_keyed) k where k.value ->> 'rate' is not null)
     and not exists (select from pyjobq.job_type t where t.job_type = any (p_types) and t.fair_share) then
    select array_agg(c.job_id order by c.ord),
           array_agg(distinct c.job_type || '/' || c.concurrency_key)
             filter (where case when c.concurrency_key is not null and v_keyed ? c.job_type::text
                                then pg_try_advisory_xact_lock(-c.job_type, hashtext(c.concurrency_key))
                                else false end)
      into v_ids, v_mine
      from (select d.job_id, d.job_type, d.concurrency_key, row_number() over () as ord
              from (select d.job_id, d.job_type, d.concurrency_key
                      from pyjobq.job d
                     where d.status = 1
                       and d.run_after <= p_now
                       and d.job_type = any (p_types)
                       and d.fair_rank is null
                     order by d.priority, d.run_after, d.seq
                     limit 4 * p_limit) d) c;
    for v_row in
      with cand as (
        select u.ord, j.job_id, j.job_type, j.concurrency_key,
               j.job_type || '/' || j.concurrency_key as key
          from unnest(v_ids) with ordinality u(job_id, ord)
          join pyjobq.job j on j.job_id = u.job_id and j.status = 1
      ),
      room as (
        select k.key, (v_keyed -> split_part(k.key, '/', 1) ->> 'max')::int - (
                 select count(*)
                   from pyjobq.job r
                  where r.status = 2
                    and r.concurrency_key is not null
                    and r.job_type = split_part(k.key, '/', 1)::smallint
                    and r.concurrency_key = substr(k.key, position('/' in k.key) + 1)) as left_
          from unnest(v_mine) k(key)
      ),
      by_key as (
        select c.*, row_number() over (partition by c.key order by c.ord) as nth
          from cand c
      ),
      keyed as (
        select b.*
          from by_key b
          left join room r on r.key = b.key
         where b.concurrency_key is null
            or not v_keyed ? b.job_type::text
            or b.nth <= r.left_
      ),
      typed as (
        select k.*, row_number() over (partition by k.job_type order by k.ord) as nth_of_type
          from keyed k
      ),
      picked as (
        select t.job_id
          from typed t
         where t.nth_of_type <= coalesce((v_room ->> t.job_type::text)::int, p_limit)
         order by t.ord
         limit p_limit
      ),
      locked as (
        select l.job_id from pyjobq.job l
         where l.job_id in (select p.job_id from picked p) and l.status = 1
           for update skip locked
      ),
      claimed as (
        update pyjobq.job j
           set status = 2,
               attempts = j.attempts + 1,
               worker_id = p_worker_id,
               lease_token = gen_random_uuid(),
               lease_until = v_at + make_interval(secs => least(p_lease, t.timeout_seconds)),
               run_started_at = v_at,
               updated_at = v_at
          from locked l, pyjobq.job_type t
         where j.job_id = l.job_id
           and t.job_type = j.job_type
        returning j.job_id, j.job_type, j.priority, j.payload, j.attempts, j.max_attempts, j.dedupe_key,
                  j.run_after, j.lease_until, j.created_at, j.lease_token, j.metadata, j.seq
      )
      select c.* from claimed c order by c.priority, c.run_after, c.seq
    loop
      v_room := pyjobq._count_down(v_room, v_row.job_type::text, null);
      v_taken := pyjobq._count_down(v_taken, v_row.job_type::text, null);
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
      lease_token := v_row.lease_token;
      metadata := v_row.metadata;
      return next;
      v_claimed := v_claimed + 1;
    end loop;
    if v_claimed >= p_limit or coalesce(cardinality(v_ids), 0) < 4 * p_limit then
      perform pyjobq._rate_record_taken(v_taken, v_at);
      return;
    end if;
  end if;

  -- Two streams of due jobs: in claim order, and the fair-share jobs in their
  -- turns (job.fair_rank); the more urgent priority first, and taking turns
  -- within one.
  open v_plain for
    select c.job_id, c.job_type, c.concurrency_key, c.priority
      from pyjobq.job c
     where c.status = 1
       and c.run_after <= p_now
       and c.job_type = any (p_types)
       and c.fair_rank is null
     order by c.priority, c.run_after, c.seq
     limit c_visits;
  open v_fair for
    select c.job_id, c.job_type, c.concurrency_key, c.priority
      from pyjobq.job c
     where c.status = 1
       and c.fair_rank is not null
       and c.run_after <= p_now
       and c.job_type = any (p_types)
     order by c.priority, c.fair_rank, c.seq
     limit c_visits;
  fetch v_plain into v_p;
  v_p_found := found;
  fetch v_fair into v_f;
  v_f_found := found;
  loop
    if v_f_found and (not v_p_found or v_f.priority < v_p.priority
                      or (v_f.priority = v_p.priority and v_fair_turn)) then
      v_c := v_f;
      fetch v_fair into v_f;
      v_f_found := found;
      v_fair_turn := false;
    elsif v_p_found then
      v_c := v_p;
      fetch v_plain into v_p;
      v_p_found := found;
      v_fair_turn := true;
    else
      exit;
    end if;
    continue when (v_room ->> v_c.job_type::text)::int <= 0;
    v_key := null;
    v_rule := v_keyed -> v_c.job_type::text;
    if v_c.concurrency_key is not null and v_rule is not null then
      v_key := v_c.job_type || '/' || v_c.concurrency_key;
      if not v_room ? v_key then
        v_room := v_room || jsonb_build_object(v_key, 0);
        if pg_try_advisory_xact_lock(-v_c.job_type, hashtext(v_c.concurrency_key)) then
          v_room := v_room || jsonb_build_object(v_key, 100000);
          if v_rule ->> 'max' is not null then
            v_room := v_room || jsonb_build_object(v_key, (v_rule ->> 'max')::int - (
              select count(*)
                from (select 1
                        from pyjobq.job r
                       where r.status = 2
                         and r.concurrency_key is not null
                         and r.job_type = v_c.job_type
                         and r.concurrency_key = v_c.concurrency_key
                       limit (v_rule ->> 'max')::int) as r));
          end if;
          if v_rule ->> 'rate' is not null then
            select w.claimed_at, w.claimed into v_w
              from pyjobq.rate_window w
             where w.job_type = v_c.job_type and w.concurrency_key = v_c.concurrency_key;
            v_room := v_room || jsonb_build_object(v_key, case
              when v_w.claimed_at[cardinality(v_w.claimed_at)] > v_at then 0
              else least((v_room ->> v_key)::int, (v_rule ->> 'rate')::int
                         - pyjobq._rate_used(v_w.claimed_at, v_w.claimed, v_at - (v_rule ->> 'period')::interval))
              end);
            v_taken := v_taken || jsonb_build_object(v_key, 0);
          end if;
        end if;
      end if;
      continue when (v_room ->> v_key)::int <= 0;
    end if;
    update pyjobq.job j
       set status = 2,
           attempts = j.attempts + 1,
           worker_id = p_worker_id,
           lease_token = gen_random_uuid(),
           lease_until = v_at + make_interval(secs => least(p_lease, t.timeout_seconds)),
           run_started_at = v_at,
           updated_at = v_at
      from pyjobq.job_type t
     where j.job_id = (select l.job_id from pyjobq.job l where l.job_id = v_c.job_id and l.status = 1
                          for update skip locked)
       and t.job_type = j.job_type
    returning j.job_id, j.job_type, j.priority, j.payload, j.attempts, j.max_attempts, j.dedupe_key,
              j.run_after, j.lease_until, j.created_at, j.lease_token, j.metadata
      into v_row;
    continue when not found;  -- another claimer has it
    v_room := pyjobq._count_down(v_room, v_c.job_type::text, v_key);
    v_taken := pyjobq._count_down(v_taken, v_c.job_type::text, v_key);
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
    lease_token := v_row.lease_token;
    metadata := v_row.metadata;
    return next;
    v_claimed := v_claimed + 1;
    exit when v_claimed >= p_limit;
  end loop;
  close v_plain;
  close v_fair;

  perform pyjobq._rate_record_taken(v_taken, v_at);
end;
$$;

comment on function pyjobq._claim_limited(text, smallint[], int, int, timestamptz) is
  'job_claim for job types with concurrency or rate limits or fair share: takes up to p_limit due PENDING jobs, '
  'in claim order and the fair-share ones in their turns, while their type and concurrency key have room, '
  'counted under advisory locks; looks at 10000 due jobs of each order at most.';

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
  created_at timestamptz,
  lease_token uuid,
  metadata jsonb
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
  v_types smallint[];
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_limit', v_limit, 1, 1000);
  perform pyjobq._check_range('p_lease_seconds', v_lease, 1, 86400);
  v_types := pyjobq._work_types(p_job_types);
  if exists (select 1 from pyjobq.job_type t
              where t.job_type = any (v_types)
                and (t.max_running is not null or t.key_max_running is not null or t.rate_limit is not null
                     or t.key_rate_limit is not null or t.fair_share)) then
    return query select * from pyjobq._claim_limited(p_worker_id, v_types, v_limit, v_lease, v_now);
  else
    return query select * from pyjobq._claim_pick(p_worker_id, v_types, v_limit, v_lease, v_now);
  end if;
end;
$$;

comment on function pyjobq.job_claim(text, int, int, int[]) is
  'Atomically takes up to p_limit (1..1000, default 1) due PENDING jobs, lowest priority value then earliest '
  'run_after first, of the given job types (default all), and leases them to p_worker_id (1..80 chars) for '
  'p_lease_seconds (1..86400, default 300): RUNNING, attempts + 1. Rows locked by other claimers are skipped, '
  'never waited for. A type with concurrency limits (job_type_set_limits) never has more RUNNING, or more '
  'claims in a period, than they allow, in all and per concurrency key; a fair-share type''s jobs are taken '
  'round robin across their concurrency keys. Returns the claimed jobs with their metadata; attempt and lease_token '
  '(random, shown by nothing else) are the fencing token to pass to complete/fail/renew/release. An empty result means nothing '
  'is due.';

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
  updated_at timestamptz,
  metadata jsonb
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
         case when j.status in (3, 4, 5) then j.updated_at end, j.created_at, j.updated_at, j.metadata
    from pyjobq.job j
    join pyjobq.job_type t on t.job_type = j.job_type
   where j.job_id = p_job_id;
end;
$$;

comment on function pyjobq.job_get(uuid) is
  'One job as a person needs it to see what happened: type, status, priority, attempts, payload, result, '
  'last_error, dedupe key, run_after, its lease and worker while RUNNING, when its last attempt started '
  '(run_started_at) and when it ended (DONE, DEAD or CANCELLED), and the metadata of its enqueue. No row when there is no such job (never enqueued, '
  'or pruned).';

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
    pyjobq.job_enqueue(int, jsonb, int, timestamptz, text, int, interval, text, jsonb),
    pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int, interval, text[], jsonb)
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


-- The functions created again, like every function of the schema, are not
-- PUBLIC's; the group roles get what grant_roles grants.
revoke all on all functions in schema pyjobq from public;

do $$
begin
  perform pyjobq.grant_roles();
end;
$$;
