-- depends: 0015_concurrency_limits

-- Schema 16: rate limits.
--
-- job_type_set_limits takes a rate per job type (p_rate_limit claims in any
-- p_rate_period) and per concurrency key (p_key_rate_limit, p_key_rate_period)
-- as new trailing parameters that default to null; job_claim counts claims in
-- pyjobq.rate_window and keeps them; job_type_limits shows the rates and when
-- the type's next has room; job_next_due wakes an idle worker when a full
-- window opens.

alter table pyjobq.job_type
  add column rate_limit int,
  add column rate_period interval,
  add column key_rate_limit int,
  add column key_rate_period interval,
  add constraint job_type_rates_valid check (
    (rate_limit is null) = (rate_period is null) and (key_rate_limit is null) = (key_rate_period is null)
    and rate_limit between 1 and 10000 and key_rate_limit between 1 and 10000
    and rate_period between interval '1 millisecond' and interval '1 day'
    and key_rate_period between interval '1 millisecond' and interval '1 day');

create table pyjobq.rate_window (
  job_type smallint not null references pyjobq.job_type (job_type),
  concurrency_key varchar(200) not null,
  claimed_at timestamptz[] not null,
  claimed int[] not null,
  constraint rate_window_pkey primary key (job_type, concurrency_key),
  constraint rate_window_entries check (cardinality(claimed_at) = cardinality(claimed))
);

comment on table pyjobq.rate_window is
  'The claims each rate limit counts: per job type (concurrency_key '''') and per concurrency key, the times '
  'of the claims within the last period (ascending) and how many jobs each took. Written by job_claim only.';

drop function pyjobq.job_type_set_limits(int, int, int);
drop function pyjobq.job_type_limits();

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 16
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq._check_rate(p_limit_name text, p_limit int, p_period_name text, p_period interval)
returns interval
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_limit is null then
    if p_period is not null then
      raise exception '% needs %', p_period_name, p_limit_name
        using errcode = '22023',
              detail = format('%s was %s and %s null.', p_period_name, p_period, p_limit_name),
              hint = format('Pass %s, the claims allowed in each %s.', p_limit_name, p_period_name);
    end if;
    return null;
  end if;
  perform pyjobq._check_range(p_limit_name, p_limit, 1, 10000);
  if p_period is null then
    return interval '1 second';
  end if;
  if not isfinite(p_period) or p_period < interval '1 millisecond' or p_period > interval '1 day' then
    raise exception '% must be at least 1 millisecond and at most 1 day', p_period_name
      using errcode = '22023',
            detail = format('%s was %s.', p_period_name, p_period),
            hint = 'A rate is so many claims in any window of this length; leave it out for 1 second.';
  end if;
  return p_period;
end;
$$;

comment on function pyjobq._check_rate(text, int, text, interval) is
  'Raises 22023 naming the argument unless p_limit is null with no p_period, or 1..10000 with a p_period of '
  '1 millisecond..1 day; returns the period, 1 second when left out.';

create or replace function pyjobq._rate_used(p_claimed_at timestamptz[], p_claimed int[], p_since timestamptz)
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select coalesce(sum(u.n), 0)::int from unnest(p_claimed_at, p_claimed) u(at, n) where u.at > p_since
$$;

comment on function pyjobq._rate_used(timestamptz[], int[], timestamptz) is
  'The claims of a rate window made after p_since.';

create or replace function pyjobq._rate_opens(p_claimed_at timestamptz[], p_claimed int[], p_limit int, p_period interval,
                                   p_now timestamptz)
returns timestamptz
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select min(e.at) + p_period
    from (select u.at, sum(u.n) over (order by u.i) as gone, sum(u.n) over () as used
            from unnest(p_claimed_at, p_claimed) with ordinality u(at, n, i)
           where u.at > p_now - p_period) e
   where e.used >= p_limit
     and e.used - e.gone < p_limit
$$;

comment on function pyjobq._rate_opens(timestamptz[], int[], int, interval, timestamptz) is
  'When a rate window of p_limit claims per p_period, full at p_now, has room for one more claim; null when it '
  'has room at p_now.';

create or replace function pyjobq._rate_record(p_job_type smallint, p_key text, p_period interval, p_at timestamptz,
                                    p_count int)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  update pyjobq.rate_window w
     set (claimed_at, claimed) = (
           select coalesce(array_agg(u.at order by u.i), '{}') || p_at,
                  coalesce(array_agg(u.n order by u.i), '{}') || p_count
             from unnest(w.claimed_at, w.claimed) with ordinality u(at, n, i)
            where u.at > p_at - p_period)
   where w.job_type = p_job_type
     and w.concurrency_key = p_key;
  if not found then
    insert into pyjobq.rate_window (job_type, concurrency_key, claimed_at, claimed)
    values (p_job_type, p_key, array[p_at], array[p_count]);
  end if;
end;
$$;

comment on function pyjobq._rate_record(smallint, text, interval, timestamptz, int) is
  'Adds a claim of p_count jobs at p_at to the rate window of type p_job_type and key p_key ('''': the type''s '
  'own), dropping the entries older than p_period. The caller holds the window''s advisory lock.';

create function pyjobq.job_type_set_limits(
  p_job_type int,
  p_max_running int default null,
  p_key_max_running int default null,
  p_rate_limit int default null,
  p_rate_period interval default null,
  p_key_rate_limit int default null,
  p_key_rate_period interval default null
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
         key_rate_period = p_key_rate_period
   where t.job_type = p_job_type;
  -- The windows of a rate that is gone count nothing any more.
  delete from pyjobq.rate_window w
   where w.job_type = p_job_type
     and case when w.concurrency_key = '' then p_rate_limit else p_key_rate_limit end is null;
end;
$$;

comment on function pyjobq.job_type_set_limits(int, int, int, int, interval, int, interval) is
  'Sets job type p_job_type''s limits, all at once (null removes one): at most p_max_running (1..100000) of its '
  'jobs RUNNING at once and p_key_max_running (1..100000) per concurrency key; at most p_rate_limit '
  '(1..10000) claims of its jobs in any p_rate_period (1 millisecond..1 day, default 1 second), and '
  'p_key_rate_limit per concurrency key in any p_key_rate_period. job_claim keeps them exactly, across all '
  'workers; jobs already RUNNING beyond a lowered limit run on. Admins only.';

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
  next_claim_at timestamptz
)
language sql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select t.job_type::int, t.name::text, t.max_running, t.key_max_running, t.rate_limit, t.rate_period,
         t.key_rate_limit, t.key_rate_period,
         pyjobq._rate_opens(w.claimed_at, w.claimed, t.rate_limit, t.rate_period, pyjobq.clock_now())
    from pyjobq.job_type t
    left join pyjobq.rate_window w on w.job_type = t.job_type and w.concurrency_key = ''
   where t.max_running is not null or t.key_max_running is not null or t.rate_limit is not null
      or t.key_rate_limit is not null
   order by t.job_type
$$;

comment on function pyjobq.job_type_limits() is
  'The job types with a concurrency or rate limit, and their limits (null: none); next_claim_at is when the '
  'type''s rate limit next lets a claim take one of its jobs, null when it does now.';

create or replace function pyjobq._count_down(p_counts jsonb, p_type text, p_key text)
returns jsonb
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select p_counts || coalesce(jsonb_object_agg(k, (p_counts ->> k)::int - 1), '{}')
    from unnest(array[p_type, p_key]) k
   where p_counts ? k
$$;

comment on function pyjobq._count_down(jsonb, text, text) is
  'p_counts with one less in its entries p_type and p_key, where present.';

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

  for v_c in
    select c.job_id, c.job_type, c.concurrency_key
      from pyjobq.job c
     where c.status = 1
       and c.run_after <= p_now
       and c.job_type = any (p_types)
     order by c.priority, c.run_after, c.seq
     limit c_visits
  loop
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
  'job_claim for job types with concurrency or rate limits: takes up to p_limit due PENDING jobs in claim '
  'order while their type and concurrency key have room, counted under advisory locks; looks at 10000 due '
  'jobs at most.';

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
                     or t.key_rate_limit is not null)) then
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
  'claims in a period, than they allow, in all and per concurrency key. Returns the claimed jobs; attempt and lease_token (random, shown by '
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
  -- A rate window that is full holds due jobs back until it has room.
  return least(v_next, (
    select min(case when w.concurrency_key = ''
                    then pyjobq._rate_opens(w.claimed_at, w.claimed, t.rate_limit, t.rate_period, v_now)
                    else pyjobq._rate_opens(w.claimed_at, w.claimed, t.key_rate_limit, t.key_rate_period, v_now)
                    end)
      from pyjobq.job_type t
      join pyjobq.rate_window w on w.job_type = t.job_type
     where t.job_type = any (v_types)
       and (t.rate_limit is not null or t.key_rate_limit is not null)));
end;
$$;

comment on function pyjobq.job_next_due(int[]) is
  'The earliest run_after still to come of the PENDING jobs of the given job types (default: every type the '
  'caller may work), or null when none is scheduled, or when a full rate window (job_type_set_limits) next has room if '
  'sooner: when an idle worker should claim again. Jobs due now are not counted.';

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
  'windows with no claim in the last 25 hours, which count nothing.';

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
    pyjobq.job_type_set_limits(int, int, int, int, interval, int, interval),
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
