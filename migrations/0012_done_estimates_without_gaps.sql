-- depends: 0011_bounded_dead_counts

-- Schema 12: job_counts estimates DONE where it read 0 or nothing.
--
-- A type whose DONE jobs were too few to be in the sample of the last ANALYZE
-- read about 0, and every DONE figure was null before the first ANALYZE. A
-- type without a share in the statistics now gets the rows that no share and
-- no exact count accounts for (split with the other such types), and before
-- the first ANALYZE the shares come from about 32 pages of the table and the
-- rows from the server's count of live rows. No table changes.

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 12
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
    -- The rows now: rows per page at the last ANALYZE times the pages now, or,
    -- before the first ANALYZE, the server's count of live rows.
    select pg_relation_size(c.oid) <= 1048576 as small,
           pg_relation_size(c.oid) / current_setting('block_size')::int as pages,
           case when c.reltuples >= 0 and c.relpages > 0
                then c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::int)
                else pg_stat_get_live_tuples(c.oid)
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
  ), listed as (
    -- Each (type, status)'s share of the rows in the sample of the last ANALYZE.
    select s.vals[i][1]::int as job_type, s.vals[i][2]::int as status, s.freqs[i] as freq
      from stats s
     cross join lateral generate_subscripts(s.freqs, 1) as i
  ), sample as materialized (
    -- Larger and never analyzed: about 32 of its pages, the same ones at every
    -- call while it does not grow. The condition is checked before the scan.
    select j.job_type, j.status
      from pyjobq.job j
           tablesample system ((select least(100, 100.0 * 32 / greatest(z.pages, 1)) from size z)) repeatable (0)
     where not (select z.small from size z)
       and not exists (select from stats)
  ), shares as (
    select l.job_type, l.status, l.freq from listed l
    union all
    select m.job_type, 3, count(*)::double precision / (select count(*) from sample)
      from sample m
     where m.status = 3
     group by m.job_type
  ), known as (
    -- Rows counted exactly now whose (type, status) has no share.
    select coalesce(sum(k.jobs), 0) as jobs
      from (select c.job_type, c.status, c.jobs from exact_counts c
            union all
            select e.job_type, e.status, e.jobs from ended_counts e where e.jobs <= 10000) as k
     where not exists (select from shares h where (h.job_type, h.status) = (k.job_type, k.status))
  ), estimated as (
    -- Not small: a share times the rows now. A type whose DONE jobs have no
    -- share (too few to be in the sample) gets, split with the others without
    -- one, the rows that no share and no exact count accounts for.
    select h.job_type, h.status, round(h.freq * z.rows)::bigint as jobs
      from shares h
     cross join size z
     where h.status in (3, 4, 5)
    union all
    select t.job_type, 3,
           greatest(0, round(((1 - (select coalesce(sum(h.freq), 0) from shares h)) * z.rows - k.jobs)
                             / count(*) over ()))::bigint
      from pyjobq.job_type t
     cross join size z
     cross join known k
     where not exists (select from shares h where h.job_type = t.job_type and h.status = 3)
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
              else coalesce(de.jobs, 0)
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
  'while the table is at most 1 MiB; beyond, it is an estimate from the statistics of the last ANALYZE (before '
  'the first, from about 32 pages of the table), and exact is false.';

