-- Limits ----------------------------------------------------------------------
--
-- An admin gives a job type limits on its RUNNING jobs and on its claims per
-- period, in all and per concurrency key (a customer, a tenant, an account:
-- job_enqueue's p_concurrency_key), or fair share across its keys;
-- job_claim keeps them through _claim_limited (07_limited_claim.sql), with the
-- rate windows' helpers here; the enqueue gives fair-share jobs their turns
-- (_fair_ranks, at the end).

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

create function pyjobq._check_rate(p_limit_name text, p_limit int, p_period_name text, p_period interval)
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

create function pyjobq._rate_used(p_claimed_at timestamptz[], p_claimed int[], p_since timestamptz)
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select coalesce(sum(u.n), 0)::int from unnest(p_claimed_at, p_claimed) u(at, n) where u.at > p_since
$$;

comment on function pyjobq._rate_used(timestamptz[], int[], timestamptz) is
  'The claims of a rate window made after p_since.';

-- When a full window next has room: once enough of its oldest claims, counted
-- from the oldest, have left it that fewer than p_limit remain.
create function pyjobq._rate_opens(p_claimed_at timestamptz[], p_claimed int[], p_limit int, p_period interval,
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

create function pyjobq._rate_record(p_job_type smallint, p_key text, p_period interval, p_at timestamptz,
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

-- The rate windows a claim's jobs count in: the type's own ('') where the
-- type has a rate limit, and the key's where it has a key rate limit.
create function pyjobq._rate_record_claimed(p_ids uuid[], p_at timestamptz)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_w record;
begin
  for v_w in
    select t.job_type, w.key, w.period, count(*)::int as n
      from pyjobq.job j
      join pyjobq.job_type t on t.job_type = j.job_type
     cross join lateral (values ('', t.rate_period, t.rate_limit is not null),
                                (j.concurrency_key, t.key_rate_period, t.key_rate_limit is not null)) w(key, period, counts)
     where j.job_id = any (p_ids)
       and w.counts
       and w.key is not null
     group by t.job_type, w.key, w.period
  loop
    perform pyjobq._rate_record(v_w.job_type, v_w.key, v_w.period, p_at, v_w.n);
  end loop;
end;
$$;

comment on function pyjobq._rate_record_claimed(uuid[], timestamptz) is
  'Adds the claim at p_at of the jobs p_ids to the rate windows they count in: their type''s, where it has a '
  'rate limit, and their concurrency key''s, where the type has a key rate limit. The caller holds the types'' '
  'advisory locks.';

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

-- Fair share. A fair-share type's jobs are claimed in turns (job.fair_rank),
-- the turn of a key's job one after its key's last pending job, so a key's
-- jobs take every turn from there on, one each, and a key with 100,000 jobs
-- waiting holds one turn in each, not the next 100,000. A key with none
-- waiting starts at the first due turn of the priority (never behind the
-- queue's head, nor before it), so a key's past does not count for or against
-- it. Turns are shared by all fair-share types, so the turns of two such types
-- interleave as their keys' do. Two enqueues of a key at once may take the
-- same turn: seq orders them, and nothing but the order depends on it.
create function pyjobq._fair_ranks(p_job_type int, p_priority int, p_keys text[], p_count int, p_now timestamptz)
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
