-- depends: 0010_attempt_deadlines

-- Schema 11: job_counts reads a bounded part of the dead history.
--
-- DEAD and CANCELLED were counted exactly, each row through
-- job_dead_cancelled_idx at every call, so the call grew with the dead
-- history as DONE no longer does. Each type's DEAD and CANCELLED are now
-- counted up to 10001 index entries; beyond 10000 the figure is the estimate
-- from the statistics of the last ANALYZE, never below what was counted, and
-- exact is false. No table changes.

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 11
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq.job_counts()
returns table (
  job_type int,
  job_type_name text,
  status int,
  status_name text,
  jobs bigint,
  oldest_due_seconds double precision,
  expired_leases bigint,
  exact boolean
)
language sql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
-- PENDING, RUNNING, DEAD and CANCELLED through partial indexes whatever the
-- statistics say, so the cost follows the jobs in those states, never the
-- DONE history; plain index scans, which stop at a LIMIT (a bitmap scan reads
-- every matching entry first).
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
  -- (select pyjobq.clock_now()): read once, not once per row.
  with exact_counts as (
    select j.job_type, 1 as status, count(*) as jobs,
           min(j.run_after) filter (where j.run_after <= (select pyjobq.clock_now())) as oldest_due,
           null::bigint as expired_leases
      from pyjobq.job j
     where j.status = 1
     group by j.job_type
    union all
    select j.job_type, 2, count(*), null, count(*) filter (where j.lease_until < (select pyjobq.clock_now()))
      from pyjobq.job j
     where j.lease_until is not null  -- the RUNNING jobs exactly: job_running_has_lease
     group by j.job_type
  ), ended_counts as (
    -- DEAD and CANCELLED grow with history too: each type's counted through
    -- job_dead_cancelled_idx up to 10001 entries, no further.
    select t.job_type, e.status,
           (select count(*)
              from (select 1
                      from pyjobq.job j
                     where j.status in (4, 5)  -- the index's predicate, for the planner
                       and j.job_type = t.job_type
                       and j.status = e.status
                     limit 10001) as k) as jobs
      from pyjobq.job_type t
     cross join (values (4), (5)) as e(status)
  ), size as (
    -- The rows the planner would assume now: rows per page at the last
    -- ANALYZE times the pages now (null before the first ANALYZE).
    select pg_relation_size(c.oid) <= 1048576 as small,
           case when c.reltuples >= 0 and c.relpages > 0
                then c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::int)
           end as rows
      from pg_class c
     where c.oid = 'pyjobq.job'::regclass
  ), done_counted as (
    -- A table of at most 1 MiB (a few thousand jobs) is cheap to read: exact.
    select j.job_type, count(*) as jobs
      from pyjobq.job j
     where j.status = 3
       and (select z.small from size z)
     group by j.job_type
  ), stats as (
    select s.most_common_vals as vals, s.most_common_freqs as freqs
      from pg_stats_ext s
     where s.statistics_schemaname = 'pyjobq'
       and s.statistics_name = 'job_type_status_stats'
       and s.most_common_freqs is not null
  ), estimated as (
    -- Larger: each (type, status)'s share of the rows in the sample of the
    -- last ANALYZE, times the rows now. A pair missing from the sample has ~0.
    select s.vals[i][1]::int as job_type, s.vals[i][2]::int as status,
           round(s.freqs[i] * z.rows)::bigint as jobs
      from stats s
     cross join size z
     cross join lateral generate_subscripts(s.freqs, 1) as i
     where s.vals[i][2] in ('3', '4', '5')
  )
  select t.job_type::int,
         t.name::text,
         s.status,
         s.status_name,
         case when s.status in (1, 2) then coalesce(c.jobs, 0)
              when s.status in (4, 5) and e.jobs <= 10000 then e.jobs
              -- More than 10000 DEAD or CANCELLED: the estimate, but at least what was counted.
              when s.status in (4, 5) then greatest(coalesce(de.jobs, 0), e.jobs)
              when z.small then coalesce(dc.jobs, 0)
              when z.rows is not null and exists (select from stats) then coalesce(de.jobs, 0)
         end,
         case when s.status = 1 then
           coalesce(extract(epoch from pyjobq.clock_now() - c.oldest_due)::double precision, 0)
         end,
         case when s.status = 2 then coalesce(c.expired_leases, 0) end,
         s.status in (1, 2) or (s.status in (4, 5) and e.jobs <= 10000) or (s.status = 3 and z.small)
    from pyjobq.job_type t
   cross join (select g.status, pyjobq._status_name(g.status) as status_name
                 from generate_series(1, 5) as g(status)) as s
   cross join size z
    left join exact_counts c on c.job_type = t.job_type and c.status = s.status
    left join ended_counts e on e.job_type = t.job_type and e.status = s.status
    left join done_counted dc on dc.job_type = t.job_type and s.status = 3
    left join estimated de on de.job_type = t.job_type and de.status = s.status and not z.small
   where t.job_type <> all ((select pyjobq._denied_types('observe'))::smallint[])  -- evaluated once
   order by t.job_type, s.status
$$;

comment on function pyjobq.job_counts() is
  'Jobs per registered type and status (zero rows included), with health figures: for PENDING, the age in '
  'seconds of the oldest due job (0 when none is due); for RUNNING, how many leases expired without being reaped. '
  'PENDING and RUNNING are exact and read through indexes; so are DEAD and CANCELLED up to 10000 per type, '
  'beyond which they are at least 10001, from the statistics of the last ANALYZE (exact false). DONE is exact '
  'while the table is at most 1 MiB; beyond, it is an estimate from the statistics of the last ANALYZE (null '
  'before the first), and exact is false.';

