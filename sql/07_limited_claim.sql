-- The limited claim -----------------------------------------------------------
--
-- Concurrency and rate limits. A claim that may take jobs of a type with a
-- limit (job_type_set_limits) takes due jobs in claim order (fair-share jobs
-- in their turns) only while their type, and their concurrency key, have
-- room. Room is counted under a transaction-level advisory lock, so that no
-- two claims count the same room: for the type, taken for every type with a
-- limit on its whole up front in type order (never in a cycle); for a key,
-- tried as the claim's candidates come, and a key another claim holds has no
-- room for this one, which takes the next keys' jobs. A type lock another
-- claim holds is waited for, but 50 ms at most in all, whatever the number
-- of types: a claim committed in the usual few milliseconds lets the next one
-- through, and one left open (a client claiming inside a long transaction, a
-- paused debugger) costs the others 50 ms and that type's jobs until it ends;
-- their claims take every other type's. Locks are in the two-integer space:
-- (1887005297, type) for a type, (-type, hashtext(key)) for a key.
--
-- The candidates are the first due jobs, a few times what the claim wants.
-- When full keys' jobs fill them (one customer's million jobs ahead of
-- everyone else's), the claim visits the keys with jobs due instead, one
-- index probe a key: its work is bounded by the keys, not by the backlog.
--
-- The RUNNING jobs are counted with the statement's snapshot, taken after the
-- lock: only READ COMMITTED gives each statement its own. Under REPEATABLE
-- READ or SERIALIZABLE the count would be the transaction's first snapshot's,
-- which may predate claims committed since, so such a claim of a type with a
-- concurrency limit is refused (JQ007) rather than let past its limit.
--
-- RUNNING jobs are counted: every way out of RUNNING only frees room, so a
-- count read under the lock can only be high. Claims are counted in a sliding
-- window (pyjobq.rate_window): at most N claims in any period T, an exact
-- bound where a fixed window lets 2N through across its edge and a token
-- bucket lets a full bucket and its refill through within one period. The
-- claim's time is its clock, or the latest time its type windows hold if
-- later (a claim that waited for the lock can start before the one it waited
-- for), so times only grow along each window and entries older than T can
-- go; a key window holding a later time than that has no room for this claim.
-- Its jobs start at that time (run_started_at), the time the windows count.
-- Claims of types without limits never come here.

-- The types' locks of a limited claim, taken in type order (never in a
-- cycle); a lock another claim holds is waited for 50 ms at most in all,
-- and its type left out of this claim. Returns the types claimed and the
-- claim's time: p_at, or the latest time their type rate windows hold, if
-- later. Refuses (JQ007) a claim of a type with a concurrency limit outside
-- READ COMMITTED.
create function pyjobq._claim_lock_types(inout p_types smallint[], inout p_at timestamptz)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '100ms'
as $$
declare
  c_lock_wait constant interval := '50 milliseconds';  -- for type locks, in all
  v_waited_until timestamptz := clock_timestamp() + c_lock_wait;
  v_busy smallint[] := '{}';       -- types another claim holds: not claimed this time
  v_type record;
begin
  if current_setting('transaction_isolation') <> 'read committed'
     and exists (select from pyjobq.job_type t
                  where t.job_type = any (p_types)
                    and (t.max_running is not null or t.key_max_running is not null)) then
    raise exception 'job_claim of a type with a concurrency limit needs READ COMMITTED, not %',
                    upper(current_setting('transaction_isolation'))
      using errcode = 'JQ007',
            detail = 'Under it the RUNNING jobs would be counted with the transaction''s first snapshot, '
                     'which misses claims committed since.',
            hint = 'Claim in a transaction of its own, or at READ COMMITTED.';
  end if;
  for v_type in
    select t.job_type, t.max_running, t.rate_limit
      from pyjobq.job_type t
     where t.job_type = any (p_types)
       and (t.max_running is not null or t.rate_limit is not null)
     order by t.job_type
  loop
    if not pg_try_advisory_xact_lock(1887005297, v_type.job_type) then
      begin
        perform set_config('lock_timeout',
                           greatest(1, ceil(extract(epoch from v_waited_until - clock_timestamp()) * 1000))::text
                             || 'ms', true);
        perform pg_advisory_xact_lock(1887005297, v_type.job_type);
        perform set_config('lock_timeout', '100ms', true);
      exception when lock_not_available then
        v_busy := v_busy || v_type.job_type;
        continue;
      end;
    end if;
    if v_type.rate_limit is not null then
      -- A statement of its own: its snapshot follows the lock.
      p_at := greatest(p_at, (select w.claimed_at[cardinality(w.claimed_at)]
                                from pyjobq.rate_window w
                               where w.job_type = v_type.job_type and w.concurrency_key = ''));
    end if;
  end loop;
  p_types := array(select t from unnest(p_types) t where t <> all (v_busy));
end;
$$;

comment on function pyjobq._claim_lock_types(smallint[], timestamptz) is
  'Takes the advisory locks of the types p_types that have a type limit, in type order, waiting 50 ms at most in '
  'all; returns the types whose lock it holds or that need none, and the claim''s time (p_at, or later where a '
  'type''s rate window already holds a later one). Raises JQ007 for a type with a concurrency limit outside '
  'READ COMMITTED.';

create function pyjobq._claim_limited(
  p_worker_id text,
  p_types smallint[],
  p_limit int,
  p_lease int,
  p_now timestamptz
)
returns setof pyjobq.claimed_job
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
set enable_sort = off
set jit = off
-- Nothing but a type lock is waited for (_claim_lock_types), and that 50 ms at most.
set lock_timeout = '100ms'
as $$
declare
  v_at timestamptz;                -- the claim's time
  v_type record;
  v_room jsonb := '{}';            -- room left, by "type", once counted
  v_keyed jsonb := '{}';           -- key limits, by "type": {max, rate, period}
  v_fair boolean;
  v_pool uuid[];
  v_ids uuid[];
begin
  select l.p_types, l.p_at into p_types, v_at from pyjobq._claim_lock_types(p_types, p_now) l;

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
    end if;
    if v_type.key_max_running is not null or v_type.key_rate_limit is not null then
      v_keyed := v_keyed || jsonb_build_object(v_type.job_type::text, jsonb_build_object(
        'max', v_type.key_max_running, 'rate', v_type.key_rate_limit, 'period', v_type.key_rate_period));
    end if;
  end loop;
  v_fair := exists (select from pyjobq.job_type t where t.job_type = any (p_types) and t.fair_share);

  if v_keyed = '{}' and not v_fair
     and not exists (select from jsonb_each_text(v_room) r where r.value::int < p_limit) then
    -- No limit can bind within this claim: no key has one, no type is fair,
    -- and every limited type has room for all p_limit jobs. Then the claim is
    -- the plain one, resuming from the session's claim front, at the claim's
    -- time. (A type limit that never binds costs its lock and its count.)
    v_ids := pyjobq._claim_pick(p_types, p_limit, v_at);
    return query select * from pyjobq._lease(p_worker_id, v_ids, p_lease, v_at);
    perform pyjobq._rate_record_claimed(v_ids, v_at);
  else
    -- The first due jobs: where no key is full, they are the claim.
    v_pool := pyjobq._claim_candidates(p_types, p_limit, v_room, v_keyed, p_now, false);
    v_ids := pyjobq._claim_choose(v_pool, p_limit, v_room, v_keyed, v_at);
    if v_ids <> '{}' then
      return query select * from pyjobq._lease(p_worker_id, v_ids, p_lease, v_at);
      -- Counted now: the keys' rooms below are read from their windows.
      perform pyjobq._rate_record_claimed(v_ids, v_at);
      v_room := pyjobq._room_left(v_room, v_ids);
    end if;
    -- Full keys or full types ahead: the claim visits keys, and looks further.
    if cardinality(v_ids) < p_limit and cardinality(v_pool) >= p_limit then
      v_pool := pyjobq._claim_candidates(p_types, p_limit - cardinality(v_ids), v_room, v_keyed, p_now, true);
      v_ids := pyjobq._claim_choose(v_pool, p_limit - cardinality(v_ids), v_room, v_keyed, v_at);
      if v_ids <> '{}' then
        return query select * from pyjobq._lease(p_worker_id, v_ids, p_lease, v_at);
        perform pyjobq._rate_record_claimed(v_ids, v_at);
      end if;
    end if;
  end if;
end;
$$;

comment on function pyjobq._claim_limited(text, smallint[], int, int, timestamptz) is
  'job_claim for job types with concurrency or rate limits or fair share: takes up to p_limit due PENDING jobs, '
  'in claim order and the fair-share ones in their turns, while their type and concurrency key have room, '
  'counted under advisory locks. Its work is bounded by the keys with jobs due, not by the jobs of full keys. '
  'A type whose lock another claim holds for more than 50 ms is left out of this claim. Raises JQ007 for a '
  'type with a concurrency limit outside READ COMMITTED.';

-- The key visit of a limited claim, for one type with key limits (p_rule,
-- as _claim_limited keeps it) and room for p_room jobs: a skip scan of
-- job_key_claim_idx finds the keys with jobs due, one index probe a key
-- however many jobs it holds, and each key with room gives its first due
-- jobs, as many as its room. The room read here, without the keys' locks,
-- only narrows the visit: _claim_choose counts it again under them.
create function pyjobq._claim_key_heads(p_job_type smallint, p_room int, p_rule jsonb, p_now timestamptz)
returns setof uuid
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
set enable_sort = off
set jit = off
set plan_cache_mode = force_generic_plan
as $$
begin
  return query
  with recursive keys as (
    (select c.concurrency_key as key
       from pyjobq.job c
      where c.status = 1
        and c.concurrency_key is not null
        and c.job_type = p_job_type
      order by c.concurrency_key
      limit 1)
    union all
    select (select c.concurrency_key
              from pyjobq.job c
             where c.status = 1
               and c.concurrency_key is not null
               and c.job_type = p_job_type
               and c.concurrency_key > k.key
             order by c.concurrency_key
             limit 1)
      from keys k
     where k.key is not null
  )
  select h.job_id
    from (select k.key from keys k where k.key is not null limit 10000) k
   cross join lateral (
     select least(p_room,
                  coalesce((p_rule ->> 'max')::int - (
                    select count(*)
                      from (select 1
                              from pyjobq.job r
                             where r.status = 2
                               and r.concurrency_key is not null
                               and r.job_type = p_job_type
                               and r.concurrency_key = k.key
                             limit (p_rule ->> 'max')::int) r), p_room),
                  coalesce((p_rule ->> 'rate')::int - coalesce((
                    select pyjobq._rate_used(w.claimed_at, w.claimed, p_now - (p_rule ->> 'period')::interval)
                      from pyjobq.rate_window w
                     where w.job_type = p_job_type
                       and w.concurrency_key = k.key), 0), p_room)) as room) r
   cross join lateral (
     select c.job_id
       from pyjobq.job c
      where c.status = 1
        and c.concurrency_key is not null
        and c.job_type = p_job_type
        and c.concurrency_key = k.key
        and c.run_after <= p_now
      order by c.priority, c.run_after, c.seq
      limit greatest(r.room, 0)) h;
end;
$$;

comment on function pyjobq._claim_key_heads(smallint, int, jsonb, timestamptz) is
  'For a limited claim behind full keys: the first due PENDING jobs of each concurrency key of type p_job_type '
  'with room, as many as its room under the key limits p_rule and at most p_room, keys visited one index probe '
  'each (10000 at most).';

-- The jobs a limited claim of p_limit may take, in the claim's order. First
-- (p_by_key false) the first due jobs in claim order of the types with room
-- (p_room), four times what the claim wants, and each fair-share type's
-- first jobs in their turns: where no key or type is full, they are the
-- claim. Then, when full keys' or types' jobs filled those (one customer's
-- million jobs ahead of everyone else's; p_by_key true), the keys of each
-- type with key limits are visited instead (_claim_key_heads), and the other
-- jobs are taken up to their type's room. Jobs without a key, and types
-- without key limits, are not in the index the key visit reads: both passes
-- look for them among the first c_visits due jobs in claim order, so a full
-- key's or type's backlog longer than that holds them back in a claim that
-- includes its type (claim them apart, p_job_types, where that matters).
--
-- The order: priority first; within one, jobs in claim order and fair-share
-- jobs in their turns take turns, fair share first, the turn carried over
-- from one priority to the next.
--
-- The jobs the candidates start from ("visits"): the first due ones in claim
-- order, priority by priority, each priority read only up to its first job not
-- due, as _claim_pick reads them, so no sleeping job (snoozed, waiting, backing
-- off, enqueued for later) is walked; inlined where it is read, so that each
-- reader reads only as far as it takes. Planned once per session: a plan for
-- each call's values cost more than the claim gained.
create function pyjobq._claim_candidates(
  p_types smallint[],
  p_limit int,
  p_room jsonb,
  p_keyed jsonb,
  p_now timestamptz,
  p_by_key boolean
)
returns uuid[]
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
set plan_cache_mode = force_generic_plan
set enable_sort = off
set jit = off
as $$
declare
  c_visits constant int := 1000;    -- due jobs looked at for those the key visit cannot see
  v_ids uuid[];
  v_priority int[];
  v_fair boolean[];
  v_nth bigint[];
  v_level record;
  v_fair_turn boolean := true;
  v_fair_first int[] := '{}';
begin
  with recursive present(priority) as (
    (select c.priority from pyjobq.job c where c.status = 1 order by c.priority limit 1)
    union all
    select (select c.priority from pyjobq.job c where c.status = 1 and c.priority > q.priority
             order by c.priority limit 1)
      from present q where q.priority is not null
  ),
  visits as not materialized (  -- see above
    select v.*
      from present q
     cross join lateral (
       select c.job_id, c.job_type, c.concurrency_key, c.priority, c.run_after, c.seq
         from pyjobq.job c
        where c.status = 1 and c.priority = q.priority and c.run_after <= p_now
          and c.job_type = any (p_types) and c.fair_rank is null
        order by c.priority, c.run_after, c.seq
        limit c_visits) v
     limit c_visits
  ),
  types as (
    select t.job_type, least(p_limit, coalesce((p_room ->> t.job_type::text)::int, p_limit)) as room,
           p_keyed -> t.job_type::text as rule, t.fair_share
      from pyjobq.job_type t
     where t.job_type = any (p_types)
       and coalesce((p_room ->> t.job_type::text)::int, p_limit) > 0
  ),
  cand as (
    (select v.job_id
       from visits v
      where not p_by_key
        -- A type without room takes nothing: its jobs are passed over.
        and coalesce((p_room ->> v.job_type::text)::int, p_limit) > 0
      limit 4 * p_limit)
    union all
    select h.job_id
      from types t
     cross join lateral (
       select c.job_id
         from pyjobq.job c
        where c.status = 1
          and c.fair_rank is not null
          and c.run_after <= p_now
          and c.job_type = t.job_type
        order by c.priority, c.fair_rank, c.seq
        limit 4 * p_limit) h
     where not p_by_key
       and t.fair_share
    union all
    (select n.job_id
       from (select v.job_id, v.job_type,
                    row_number() over (partition by v.job_type order by v.priority, v.run_after, v.seq) as nth
               from visits v
              where p_by_key
                and (v.concurrency_key is null or not p_keyed ? v.job_type::text)) n
      -- Each type's first jobs, as many as its room.
      where n.nth <= coalesce((p_room ->> n.job_type::text)::int, p_limit)
      limit 4 * p_limit)
    union all
    select h.job_id
      from types t
     cross join lateral pyjobq._claim_key_heads(t.job_type, t.room, t.rule, p_now) h(job_id)
     where p_by_key
       and t.rule is not null
  )
  select array_agg(n.job_id), array_agg(n.priority), array_agg(n.fair), array_agg(n.nth)
    into v_ids, v_priority, v_fair, v_nth
    from (select j.job_id, j.priority, j.fair_rank is not null as fair,
                 row_number() over (partition by j.priority, j.fair_rank is not null
                                    order by j.fair_rank, j.run_after, j.seq) as nth
            from (select distinct c.job_id from cand c) c
           -- By id, one probe each, whatever the statistics say (see _lease).
           cross join lateral (select j.* from pyjobq.job j where j.job_id = c.job_id limit 1) j) n;
  -- Taking turns: the first turn is fair share's; the turn after a priority
  -- is fair share's if it took its last job from claim order, and the other
  -- way round.
  for v_level in
    select u.priority, count(*) filter (where u.fair) as fair, count(*) filter (where not u.fair) as plain
      from unnest(v_priority, v_fair) u(priority, fair)
     group by u.priority
     order by u.priority
  loop
    if v_fair_turn then
      v_fair_first := v_fair_first || v_level.priority;
    end if;
    v_fair_turn := case when v_level.fair > v_level.plain then false
                        when v_level.fair < v_level.plain then true
                        else v_fair_turn end;
  end loop;
  return array(select u.job_id
                 from unnest(v_ids, v_priority, v_fair, v_nth) u(job_id, priority, fair, nth)
                order by u.priority, u.nth, u.fair = (u.priority = any (v_fair_first)) desc);
end;
$$;

comment on function pyjobq._claim_candidates(smallint[], int, jsonb, jsonb, timestamptz, boolean) is
  'The due PENDING jobs of p_types a limited claim of p_limit jobs may take, in the claim''s order (fair-share '
  'turns taken in turn with claim order): the first due jobs and each fair-share type''s first turns; or, with '
  'p_by_key, for each type with key limits (p_keyed) and room (p_room), the first jobs of each of its keys with '
  'room, visited key by key (10000 keys at most), and the jobs without a key limit among the first 1000 due.';

-- A limited claim's choice among candidates (p_pool, in the claim's order).
-- (Each candidate is looked up by id, one probe of the primary key, whatever
-- the statistics say: see _lease.)
-- First the locks of their keys are tried, in that order, until enough jobs
-- have one: a key another claim holds has no room for this one, which takes
-- the next keys instead. Then, in a statement whose snapshot follows the
-- locks, each locked key's room is counted (its RUNNING jobs, its rate
-- window), and the candidates are taken in order while their key and type
-- have room, their rows locked with SKIP LOCKED for _lease.
create function pyjobq._claim_choose(p_pool uuid[], p_limit int, p_room jsonb, p_keyed jsonb, p_at timestamptz)
returns uuid[]
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
set enable_sort = off
set jit = off
set plan_cache_mode = force_generic_plan
as $$
declare
  v_mine text[];
  v_pool uuid[];
begin
  select array_agg(o.job_id order by o.ord),
         array_agg(distinct o.job_type || '/' || o.concurrency_key) filter (where o.keyed)
    into v_pool, v_mine
    from (select c.*
            from (select c.*
                    from (select u.ord, j.job_id, j.job_type, j.concurrency_key,
                                 j.concurrency_key is not null and p_keyed ? j.job_type::text as keyed,
                                 row_number() over (partition by j.job_type order by u.ord) as nth_of_type
                            from unnest(p_pool) with ordinality u(job_id, ord)
                           cross join lateral (select j.* from pyjobq.job j
                                                where j.job_id = u.job_id and j.status::int = 1 limit 1) j) c
                   -- Beyond its type's room a candidate cannot be taken: it counts for nothing.
                   where c.nth_of_type <= coalesce((p_room ->> c.job_type::text)::int, p_limit)
                   order by c.ord
                  offset 0) c
           -- Tried as the candidates come, in order, until enough have passed.
           where not c.keyed or pg_try_advisory_xact_lock(-c.job_type, hashtext(c.concurrency_key))
           limit 2 * p_limit) o;
  return array(
    with cand as (
      select u.ord, j.job_id, j.job_type, j.concurrency_key,
             case when j.concurrency_key is not null and p_keyed ? j.job_type::text
                  then j.job_type || '/' || j.concurrency_key end as key
        from unnest(v_pool) with ordinality u(job_id, ord)
       cross join lateral (select j.* from pyjobq.job j
                            where j.job_id = u.job_id and j.status::int = 1 limit 1) j
    ),
    room as (
      select m.key, least(
               coalesce((m.rule ->> 'max')::int - (
                 select count(*)
                   from (select 1
                           from pyjobq.job r
                          where r.status = 2
                            and r.concurrency_key is not null
                            and r.job_type = m.job_type
                            and r.concurrency_key = m.concurrency_key
                          limit (m.rule ->> 'max')::int) r), p_limit),
               coalesce((m.rule ->> 'rate')::int - coalesce((
                 select case when w.claimed_at[cardinality(w.claimed_at)] > p_at then (m.rule ->> 'rate')::int
                             else pyjobq._rate_used(w.claimed_at, w.claimed, p_at - (m.rule ->> 'period')::interval)
                        end
                   from pyjobq.rate_window w
                  where w.job_type = m.job_type
                    and w.concurrency_key = m.concurrency_key), 0), p_limit)) as left_
        from (select k.key, split_part(k.key, '/', 1)::smallint as job_type,
                     substr(k.key, position('/' in k.key) + 1) as concurrency_key,
                     p_keyed -> split_part(k.key, '/', 1) as rule
                from unnest(v_mine) k(key)) m
    ),
    keyed as (
      select c.*
        from (select c.*, row_number() over (partition by c.key order by c.ord) as nth
                from cand c) c
        left join room r on r.key = c.key
       where c.key is null or c.nth <= r.left_
    ),
    typed as (
      select k.*, row_number() over (partition by k.job_type order by k.ord) as nth_of_type
        from keyed k
    ),
    picked as (
      select t.job_id, t.ord
        from typed t
       where t.nth_of_type <= coalesce((p_room ->> t.job_type::text)::int, p_limit)
       order by t.ord
       limit p_limit
    ),
    locked as (
      select l.job_id
        from pyjobq.job l
       where l.job_id in (select p.job_id from picked p)
         and l.status::int = 1
         for update skip locked
    )
    select p.job_id
      from picked p
      join locked l on l.job_id = p.job_id
     order by p.ord);
end;
$$;

comment on function pyjobq._claim_choose(uuid[], int, jsonb, jsonb, timestamptz) is
  'Of the candidates p_pool, in order, the up to p_limit a limited claim at p_at takes: their concurrency key''s '
  'lock tried, its room counted under it, the type rooms p_room kept; their rows locked for _lease.';

-- The rooms p_room left by "type" once the jobs p_ids are taken.
create function pyjobq._room_left(p_room jsonb, p_ids uuid[])
returns jsonb
language sql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select p_room || coalesce(jsonb_object_agg(t.key, (p_room ->> t.key)::int - t.n), '{}')
    from (select j.job_type::text as key, count(*) as n
            from pyjobq.job j
           where j.job_id = any (p_ids)
           group by j.job_type) t
   where p_room ? t.key
$$;

comment on function pyjobq._room_left(jsonb, uuid[]) is
  'p_room (room left by "type") with the jobs p_ids taken from the entries of their types, where present.';
