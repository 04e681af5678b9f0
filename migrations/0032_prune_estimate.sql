-- depends: 0031_audit_retention

-- Schema 32: job_prune_estimate tells what job_prune would delete before it
-- runs, from the statistics of the whole days and a count of the rest.
create function pyjobq.job_prune_estimate(p_older_than interval)
returns table (jobs bigint, exact boolean)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set timezone = 'UTC'
as $$
declare
  v_cutoff timestamptz;
  v_whole_until timestamptz;
  v_whole_days int;
  v_estimated bigint;
  v_unanalyzed int;
begin
  if p_older_than is null or p_older_than < interval '0' or p_older_than > interval '100 years' then
    raise exception 'p_older_than must be an interval between 0 and 100 years'
      using errcode = case when p_older_than is null then '22004' else '22023' end,
            detail = format('p_older_than was %s.', coalesce(p_older_than::text, 'null')),
            hint = 'e.g. ''7 days''.';
  end if;
  v_cutoff := pyjobq.clock_now() - p_older_than;
  -- The partitions job_prune would drop whole: those whose day ended by the cutoff.
  select count(*), coalesce(sum(greatest(c.reltuples, 0)), 0)::bigint, count(*) filter (where c.reltuples < 0),
         max((to_date(substr(c.relname, 13), 'YYYYMMDD') + 1)::timestamp)
    into v_whole_days, v_estimated, v_unanalyzed, v_whole_until
    from pg_partition_tree('pyjobq.job_history') t
    join pg_class c on c.oid = t.relid
   where t.isleaf
     and c.relname ~ '^job_history_[0-9]{8}$'
     and (to_date(substr(c.relname, 13), 'YYYYMMDD') + 1)::timestamp <= v_cutoff;
  if v_whole_days = 0 or v_unanalyzed > 0 then
    return query select count(*), true from pyjobq.job_history h where h.updated_at < v_cutoff;
    return;
  end if;
  -- The rest, counted: what ended after the last whole day (its partitions
  -- alone are read), and what the default partition holds from before it.
  return query
  select v_estimated
         + (select count(*) from pyjobq.job_history h
             where h.updated_at >= v_whole_until and h.updated_at < v_cutoff)
         + (select count(*) from pyjobq.job_history_default d where d.updated_at < v_whole_until),
         false;
end;
$$;

comment on function pyjobq.job_prune_estimate(interval) is
  'How many DONE, DEAD and CANCELLED jobs ended more than p_older_than (0 to 100 years) ago: what job_prune '
  'with the same p_older_than would delete at most (it keeps a parent whose dependant has yet to end). exact '
  'is false when whole days are counted from ANALYZE''s statistics of their partitions (a read of the '
  'catalog), true when every job was counted.';


insert into pyjobq.api_grant (function, roles) values
  ('pyjobq.job_prune_estimate(interval)', '{pyjobq_admin}');

revoke all on all functions in schema pyjobq from public;

do $$
begin
  perform pyjobq.grant_roles();
end;
$$;

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 32
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';
