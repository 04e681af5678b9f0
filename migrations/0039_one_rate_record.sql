-- depends: 0038_edges_from_one_read

-- Schema 39: the limited claim records what it took in the rate windows from
-- the ids it leased (_rate_record_claimed), and counts its type rooms down
-- from them (_room_left), on each of its paths alike; the commit's list of
-- parents to settle has one setting, named inside the two functions that use
-- it. What every call does is unchanged.

drop function pyjobq._rate_record_taken(jsonb, timestamptz);
drop function pyjobq._rate_taken(uuid[]);
drop function pyjobq._count_down(jsonb, text, text);
drop function pyjobq._settle_later(text, uuid[]);
drop function pyjobq._settle_list(text);

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

create function pyjobq._settle_later(p_ids uuid[])
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_list text := coalesce(current_setting('pyjobq.settle_parents', true), '');
  v_add text := array_to_string(p_ids, ',');
begin
  -- A loop of enqueues naming the same parents lists them once.
  if coalesce(v_add, '') <> '' and right(v_list, length(v_add)) is distinct from v_add then
    perform set_config('pyjobq.settle_parents', concat_ws(',', nullif(v_list, ''), v_add), true);
  end if;
end;
$$;

comment on function pyjobq._settle_later(uuid[]) is
  'Adds the parents p_ids to the list in setting pyjobq.settle_parents that this transaction''s commit settles '
  '(_settle).';

create function pyjobq._settle_list()
returns uuid[]
language sql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select coalesce(array_agg(distinct u.id::uuid order by u.id::uuid), '{}')
    from unnest(string_to_array(current_setting('pyjobq.settle_parents', true), ',')) u(id)
   where u.id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
$$;

comment on function pyjobq._settle_list() is
  'The ids listed in setting pyjobq.settle_parents (anything else there ignored), distinct, in order.';

create or replace function pyjobq._claim_limited(
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

create or replace function pyjobq._read_parents(
  p_parents uuid[],
  out waiting int,
  out failure text,
  out ids uuid[],
  out statuses smallint[]
)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_found int;
  v_wanted int := (select count(distinct u.id) from unnest(p_parents) u(id));
  v_live uuid[];
  v_missing uuid;
begin
  if cardinality(p_parents) > 100000 then
    raise exception 'p_depends_on must name at most 100000 parents'
      using errcode = '22023',
            detail = format('It named %s.', cardinality(p_parents));
  end if;
  if array_position(p_parents, null) is not null then
    raise exception 'p_depends_on must not contain null'
      using errcode = '22004',
            hint = 'Name each parent by the job_id its enqueue returned.';
  end if;
  -- Read again when one is missing: a job that ended into the history's
  -- default partition is in neither table for a read planned before
  -- job_history_maintain moved it to its day's partition and attached that.
  for v_try in 1 .. 3 loop
    select count(*), count(*) filter (where p.status in (1, 2, 6)),
           min(format('parent %s ended %s', p.job_id, pyjobq._status_name(p.status)))
             filter (where p.status in (4, 5)),
           array_agg(p.job_id) filter (where p.status in (1, 2, 6)),
           array_agg(p.job_id), array_agg(p.status)
      into v_found, waiting, failure, v_live, ids, statuses
      from pyjobq.job_all p
     where p.job_id = any (p_parents);
    exit when v_found >= v_wanted;
  end loop;
  if v_found < v_wanted then
    select u.id into v_missing
      from unnest(p_parents) u(id)
     where not exists (select from pyjobq.job_all p where p.job_id = u.id)
     limit 1;
    raise exception 'parent job % not found', v_missing
      using errcode = 'JQ002',
            hint = 'A job can depend only on jobs that exist: enqueue the parents first (pruned jobs are gone).';
  end if;
  -- The child will see its parents' results: the caller must be allowed to see them.
  perform pyjobq._check_privilege('observe', array(select distinct p.job_type::int
                                                      from pyjobq.job_all p
                                                     where p.job_id = any (p_parents)));
  perform pyjobq._settle_later(v_live);
end;
$$;

comment on function pyjobq._read_parents(uuid[]) is
  'Reads the jobs p_parents for the enqueue of their child, taking no lock: JQ002 when one does not exist, '
  '42501 when the caller may not observe one''s type. Returns how many have not ended, a text naming one '
  'that ended DEAD or CANCELLED (null when none did), and each parent''s id and status as read; lists those '
  'not ended for the commit (_settle).';

create or replace function pyjobq._settle()
returns trigger
language plpgsql
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_parents uuid[] := pyjobq._settle_list();
  v_ended uuid[];
begin
  if v_parents = '{}' then
    return null;
  end if;
  perform set_config('pyjobq.settle_parents', '', true);
  -- In id order, as every call takes job rows; this waits only for a call
  -- ending one of them, never for a producer.
  perform from pyjobq.job p where p.job_id = any (v_parents) order by p.job_id for no key update;
  update pyjobq.job p
     set has_dependants = true
   where p.job_id = any (v_parents)
     and not p.has_dependants;
  -- Those that ended since the enqueue read them: their edges from this
  -- transaction are unresolved (no other edge of an ended job is).
  v_ended := array(select h.job_id
                     from pyjobq.job_history h
                    where h.job_id = any (v_parents)
                      and exists (select from pyjobq.job_edge e where e.parent_id = h.job_id and not e.resolved));
  if v_ended <> '{}' then
    perform pyjobq._mark_parents(v_ended);
    perform pyjobq._ended(v_ended, pyjobq.clock_now(), false);
  end if;
  return null;
end;
$$;

comment on function pyjobq._settle() is
  'The commit of an enqueue with parents (a deferred trigger): locks and marks the parents it found live; of '
  'those that ended since, marks them too and resolves their edges.';

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 39
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';


revoke all on all functions in schema pyjobq from public;
