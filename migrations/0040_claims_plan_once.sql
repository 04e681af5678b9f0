-- depends: 0039_one_rate_record

-- Schema 40: the limited claim's key visit (_claim_key_heads) and its choice
-- under the keys' locks (_claim_choose) keep one plan per session. The choice
-- was planned again at every call (PL/pgSQL's plan cache judged the generic
-- plan costlier than the custom ones, which cost 0.5 ms each to make), and the
-- key visit, an SQL function with settings, is never cached: together they
-- were half the time of an empty claim behind a full key's backlog.

create or replace function pyjobq._claim_key_heads(p_job_type smallint, p_room int, p_rule jsonb, p_now timestamptz)
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

create or replace function pyjobq._claim_choose(p_pool uuid[], p_limit int, p_room jsonb, p_keyed jsonb, p_at timestamptz)
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

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 40
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

