-- depends: 0016_rate_limits

-- Schema 17: fair share.
--
-- job_type_set_limits takes p_fair_share (a new trailing parameter, false by
-- default): the type's jobs enqueued from then on get a turn (job.fair_rank)
-- that takes them round robin across their concurrency keys, and job_claim
-- takes them in their turns; job_type_limits shows it. job_next_due wakes a
-- worker whenever a rate window gains room, full or not.

alter table pyjobq.job_type add column fair_share boolean not null default false;

alter table pyjobq.job add column fair_rank bigint;

comment on column pyjobq.job.fair_rank is
  'Set at enqueue for the jobs of a fair-share type: the job''s turn among its priority''s jobs, one more than '
  'its key''s last pending job, and never before the first due one; claims take them in this order. Null: '
  'claimed in due-time order.';

create index job_fair_idx on pyjobq.job (priority, fair_rank, seq)
  where status = 1 and fair_rank is not null;
create index job_fair_key_idx on pyjobq.job (job_type, priority, (coalesce(concurrency_key, '')), fair_rank)
  where status = 1 and fair_rank is not null;

drop function pyjobq.job_type_set_limits(int, int, int, int, interval, int, interval);
drop function pyjobq.job_type_limits();

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 17
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq._fair_ranks(p_job_type int, p_priority int, p_keys text[], p_count int, p_now timestamptz)
returns bigint[]
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
set enable_sort = off
as $$
declare
  v_head bigint;
begin
  if not (select t.fair_share from pyjobq.job_type t where t.job_type = p_job_type) then
    return null;
  end if;
  select h.fair_rank into v_head
    from pyjobq.job h
   where h.status = 1
     and h.fair_rank is not null
     and h.priority = p_priority
     and h.run_after <= p_now
   order by h.fair_rank
   limit 1;
  return (
    select array_agg(greatest(g.tail + 1, v_head, 1) + u.n - 1 order by u.i)
      from (select k.i, coalesce(k.key, '') as key,
                   row_number() over (partition by coalesce(k.key, '') order by k.i) as n
              from unnest(coalesce(p_keys, array_fill(null::text, array[p_count]))) with ordinality k(key, i)) u
      join (select d.key,
                   (select r.fair_rank
                      from pyjobq.job r
                     where r.status = 1
                       and r.fair_rank is not null
                       and r.job_type = p_job_type
                       and r.priority = p_priority
                       and coalesce(r.concurrency_key, '') = d.key
                     order by r.fair_rank desc
                     limit 1) as tail
              from (select distinct coalesce(k.key, '') as key from unnest(p_keys) k(key)
                    union
                    select '' where p_keys is null) d) g
        on g.key = u.key);
end;
$$;

comment on function pyjobq._fair_ranks(int, int, text[], int, timestamptz) is
  'The turns (job.fair_rank) of p_count new jobs of type p_job_type at priority p_priority with concurrency '
  'keys p_keys (null: none), in input order; null when the type has no fair share.';

create or replace function pyjobq._enqueue_one(
  p_job_type int,
  p_payload jsonb,
  p_priority int,
  p_run_after timestamptz,
  p_dedupe_key text,
  p_max_attempts int,
  p_now timestamptz,
  p_unique_for interval default null,
  p_concurrency_key text default null
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
    v_id := pyjobq._ended_within(p_job_type, p_dedupe_key, p_unique_for, p_now);
    if v_id is not null then
      return query select v_id, false;
      return;
    end if;
  end if;
  loop
    select n.seq, n.job_id into v_seq, v_new_id from pyjobq._new_job_ids(p_now, 1) n;
    insert into pyjobq.job as j
      (job_id, seq, job_type, payload, priority, run_after, dedupe_key, max_attempts, created_at, updated_at,
       concurrency_key, fair_rank)
    values
      (v_new_id, v_seq, p_job_type, p_payload, p_priority, p_run_after, p_dedupe_key, p_max_attempts, p_now, p_now,
       p_concurrency_key, (pyjobq._fair_ranks(p_job_type, p_priority, array[p_concurrency_key], 1, p_now))[1])
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

comment on function pyjobq._enqueue_one(int, jsonb, int, timestamptz, text, int, timestamptz, interval, text) is
  'Inserts one PENDING job from checked arguments, or returns the active job of p_job_type holding '
  'p_dedupe_key, or with p_unique_for one that ended within that window (created false); voids claim fronts '
  'and announces as every enqueue does.';

create or replace function pyjobq.job_enqueue_many(
  p_job_type int,
  p_payloads jsonb[],
  p_dedupe_keys text[] default null,
  p_priority int default null,
  p_run_after timestamptz default null,
  p_max_attempts int default null,
  p_unique_for interval default null,
  p_concurrency_keys text[] default null
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

  -- A window over ended jobs: one job at a time, each as job_enqueue takes it.
  if p_unique_for is not null then
    return query
      select u.i::int, e.job_id, e.created
        from unnest(p_payloads, p_dedupe_keys) with ordinality as u(payload, dedupe_key, i)
       cross join lateral pyjobq._enqueue_one(p_job_type, u.payload, v_priority, v_run_after, u.dedupe_key,
                                              v_max_attempts, v_now,
                                              case when u.dedupe_key is not null then p_unique_for end,
                                              p_concurrency_keys[u.i]) e
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
         fair_rank)
      select i.new_id, i.seq, p_job_type, i.payload, v_priority, v_run_after, v_max_attempts, v_now, v_now,
             p_concurrency_keys[i.ord], v_ranks[i.ord]
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
         concurrency_key, fair_rank)
      select i.new_id, i.seq, p_job_type, i.payload, v_priority, v_run_after, i.dedupe_key, v_max_attempts, v_now, v_now,
             p_concurrency_keys[i.ord], v_ranks[i.ord]
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
                                 v_row.dedupe_key, v_max_attempts, v_now, null, p_concurrency_keys[ord]) e;
    end if;
    return next;
  end loop;
  perform pyjobq._announce(p_job_type, v_run_after, v_now);
end;
$$;

comment on function pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int, interval, text[]) is
  'Adds up to 100000 jobs of one type in one call, with job_enqueue''s checks, defaults and dedupe; '
  'p_dedupe_keys, when given, pairs a key (or null) with each payload, and p_unique_for applies to the rows '
  'with a key as job_enqueue applies it; p_concurrency_keys likewise pairs a concurrency key (or null) with '
  'each payload. Returns one row per payload in input '
  'order: its 1-based position, the job id, and whether it was newly created. Notifies pyjobq_job as '
  'job_enqueue does.';

create function pyjobq.job_type_set_limits(
  p_job_type int,
  p_max_running int default null,
  p_key_max_running int default null,
  p_rate_limit int default null,
  p_rate_period interval default null,
  p_key_rate_limit int default null,
  p_key_rate_period interval default null,
  p_fair_share boolean default false
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
  if p_max_running is not null then
    perform pyjobq._check_range('p_max_running', p_max_running, 1, 100000);
  end if;
  if p_key_max_running is not null then
    perform pyjobq._check_range('p_key_max_running', p_key_max_running, 1, 100000);
  end if;
  p_rate_period := pyjobq._check_rate('p_rate_limit', p_rate_limit, 'p_rate_period', p_rate_period);
  p_key_rate_period := pyjobq._check_rate('p_key_rate_limit', p_key_rate_limit, 'p_key_rate_period',
                                          p_key_rate_period);
  update pyjobq.job_type t
     set max_running = p_max_running,
         key_max_running = p_key_max_running,
         rate_limit = p_rate_limit,
         rate_period = p_rate_period,
         key_rate_limit = p_key_rate_limit,
         key_rate_period = p_key_rate_period,
         fair_share = coalesce(p_fair_share, false)
   where t.job_type = p_job_type;
  -- The windows of a rate that is gone count nothing any more.
  delete from pyjobq.rate_window w
   where w.job_type = p_job_type
     and case when w.concurrency_key = '' then p_rate_limit else p_key_rate_limit end is null;
end;
$$;

comment on function pyjobq.job_type_set_limits(int, int, int, int, interval, int, interval, boolean) is
  'Sets job type p_job_type''s limits, all at once (null removes one): at most p_max_running (1..100000) of its '
  'jobs RUNNING at once and p_key_max_running (1..100000) per concurrency key; at most p_rate_limit '
  '(1..10000) claims of its jobs in any p_rate_period (1 millisecond..1 day, default 1 second), and '
  'p_key_rate_limit per concurrency key in any p_key_rate_period. job_claim keeps them exactly, across all '
  'workers; jobs already RUNNING beyond a lowered limit run on. With p_fair_share, jobs enqueued from now '
  'on are claimed round robin across their concurrency keys. Admins only.';

create function pyjobq.job_type_limits()
returns table (
  job_type int,
  name text,
  max_running int,
  key_max_running int,
  rate_limit int,
  rate_period interval,
  key_rate_limit int,
  key_rate_period interval,
  fair_share boolean,
  next_claim_at timestamptz
)
language sql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select t.job_type::int, t.name::text, t.max_running, t.key_max_running, t.rate_limit, t.rate_period,
         t.key_rate_limit, t.key_rate_period, t.fair_share,
         pyjobq._rate_opens(w.claimed_at, w.claimed, t.rate_limit, t.rate_period, pyjobq.clock_now())
    from pyjobq.job_type t
    left join pyjobq.rate_window w on w.job_type = t.job_type and w.concurrency_key = ''
   where t.max_running is not null or t.key_max_running is not null or t.rate_limit is not null
      or t.key_rate_limit is not null or t.fair_share
   order by t.job_type
$$;

comment on function pyjobq.job_type_limits() is
  'The job types with a concurrency or rate limit or fair share, and their limits (null: none); next_claim_at '
  'is when the type''s rate limit next lets a claim take one of its jobs, null when it does now.';

create or replace function pyjobq._claim_limited(
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
  lease_token uuid
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
              j.run_after, j.lease_until, j.created_at, j.lease_token
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
    return next;
    v_claimed := v_claimed + 1;
    exit when v_claimed >= p_limit;
  end loop;
  close v_plain;
  close v_fair;

  -- The claims the rates count (v_taken holds minus the jobs taken).
  for v_w in
    select e.key, -e.value::int as n, t.job_type, t.rate_period, t.key_rate_period
      from jsonb_each_text(v_taken) e
      join pyjobq.job_type t on t.job_type = split_part(e.key, '/', 1)::smallint
     where e.value::int < 0
  loop
    if position('/' in v_w.key) = 0 then
      perform pyjobq._rate_record(v_w.job_type, '', v_w.rate_period, v_at, v_w.n);
    else
      perform pyjobq._rate_record(v_w.job_type, substr(v_w.key, position('/' in v_w.key) + 1),
                                  v_w.key_rate_period, v_at, v_w.n);
    end if;
  end loop;
end;
$$;

comment on function pyjobq._claim_limited(text, smallint[], int, int, timestamptz) is
  'job_claim for job types with concurrency or rate limits or fair share: takes up to p_limit due PENDING jobs, '
  'in claim order and the fair-share ones in their turns, while their type and concurrency key have room, '
  'counted under advisory locks; looks at 10000 due jobs of each order at most.';

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
  created_at timestamptz,
  lease_token uuid
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
  'round robin across their concurrency keys. Returns the claimed jobs; attempt and lease_token (random, shown by '
  'nothing else) are the fencing token to pass to complete/fail/renew/release. An empty result means nothing '
  'is due.';

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
  -- A rate window may hold due jobs back: it has more room when its oldest
  -- claim leaves it. (Whether it is full is not enough: a claim that filled it
  -- may find it a claim short a moment later, jobs still due.) Windows empty
  -- out a period after the last claim, so an idle worker is not woken for long.
  return least(v_next, (
    select min(o.at + o.period)
      from pyjobq.job_type t
      join pyjobq.rate_window w on w.job_type = t.job_type
     cross join lateral (
       select case when w.concurrency_key = '' then t.rate_period else t.key_rate_period end as period) p
     cross join lateral (
       select min(e.at) as at, p.period from unnest(w.claimed_at) e(at) where e.at > v_now - p.period) o
     where t.job_type = any (v_types)
       and (t.rate_limit is not null or t.key_rate_limit is not null)));
end;
$$;

comment on function pyjobq.job_next_due(int[]) is
  'The earliest run_after still to come of the PENDING jobs of the given job types (default: every type the '
  'caller may work), or null when none is scheduled, or when a rate window (job_type_set_limits) next gains room if '
  'sooner: when an idle worker should claim again. Jobs due now are not counted.';

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
    pyjobq.job_settings(),
    pyjobq.job_settings_set(boolean),
    pyjobq.job_type_set_limits(int, int, int, int, interval, int, interval, boolean),
    pyjobq.job_reap(int),
    pyjobq.job_schedule_set(text, text, int, jsonb, text, int, int, text, text, int),
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
  'renew, release, reap, schedule tick), pyjobq_observer (counts) and pyjobq_admin (counts, get, list, cancel, '
  'watch, reap, redrive, prune, '
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
