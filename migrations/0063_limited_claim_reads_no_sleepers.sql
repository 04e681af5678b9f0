-- depends: 0062_allocate_type_codes

-- Schema 63: a limited claim (key limits, fair share, a type limit that binds
-- within the claim) reads no sleeping job. Its first due jobs in claim order
-- are read priority by priority, each only up to its first job not due, as
-- the plain claim reads them since schema 57; it walked every job not due
-- (snoozed, waiting, backing off, enqueued for later) of a priority before it
-- reached the next. One function, its signature unchanged, now planned once
-- per session. No table changes.

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 63
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq._claim_candidates(
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

