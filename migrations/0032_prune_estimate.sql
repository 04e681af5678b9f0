-- depends: 0031_audit_retention

-- Schema 32: job_prune_estimate tells what job_prune would delete before it
-- runs, from the statistics of the whole days and a count of the rest. It
-- finds the whole days and checks its age argument as job_prune does, with
-- the same functions.
create function pyjobq._history_days_by(p_cutoff timestamptz)
returns table (part regclass, day_end timestamptz, estimated_rows real)
language sql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select c.oid::regclass, (to_date(substr(c.relname, 13), 'YYYYMMDD') + 1)::timestamp at time zone 'UTC',
         c.reltuples
    from pg_partition_tree('pyjobq.job_history') t
    join pg_class c on c.oid = t.relid
   where t.isleaf
     and c.relname ~ '^job_history_[0-9]{8}$'
     and (to_date(substr(c.relname, 13), 'YYYYMMDD') + 1)::timestamp at time zone 'UTC' <= p_cutoff
   order by c.relname
$$;

comment on function pyjobq._history_days_by(timestamptz) is
  'The partitions of job_history whose day (UTC) ended by p_cutoff, oldest first: each with the end of its '
  'day and its row count as ANALYZE last estimated it (-1: never analyzed).';

create function pyjobq._check_older_than(p_older_than interval)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_older_than is null or p_older_than < interval '0' or p_older_than > interval '100 years' then
    raise exception 'p_older_than must be an interval between 0 and 100 years'
      using errcode = case when p_older_than is null then '22004' else '22023' end,
            detail = format('p_older_than was %s.', coalesce(p_older_than::text, 'null')),
            hint = 'e.g. ''7 days''.';
  end if;
end;
$$;

comment on function pyjobq._check_older_than(interval) is
  'Raises 22004 when p_older_than is null, 22023 when it is below 0 or above 100 years.';

create or replace function pyjobq.job_prune(p_older_than interval, p_limit int default null)
returns bigint
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set timezone = 'UTC'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_limit int := coalesce(p_limit, 10000);
  v_cutoff timestamptz;
  v_day record;
  v_rows bigint;
  v_kept boolean;
  v_deleted bigint := 0;
  v_dropped int := 0;
  v_lock_timeout text := current_setting('lock_timeout');
  v_lines bigint;
begin
  perform pyjobq._check_range('p_limit', v_limit, 1, 100000);
  perform pyjobq._check_older_than(p_older_than);
  v_cutoff := v_now - p_older_than;
  -- Whole days first: the partition of each day that ended by the cutoff is
  -- dropped, unless it holds a parent with a dependant yet to end (the
  -- dependant's handler reads its result; its day goes row by row, below).
  -- The drop waits at most 100 ms for its lock on job_history, which every
  -- completion's insert waits behind meanwhile; a day it cannot have now is
  -- left to the next call.
  for v_day in select d.part from pyjobq._history_days_by(v_cutoff) d loop
    execute format('select exists (select from %s h'
                   '                 join pyjobq.job_edge e on e.parent_id = h.job_id'
                   '                 join pyjobq.job c on c.job_id = e.child_id'
                   '                where h.has_dependants)',
                   v_day.part)
      into v_kept;
    continue when v_kept;
    begin
      perform set_config('lock_timeout', '100ms', true);
      execute format('lock table %s in access exclusive mode', v_day.part);
      execute format('select count(*) from %s', v_day.part) into v_rows;
      -- The edges go with the jobs (the index of graph jobs finds them).
      execute format('delete from pyjobq.job_edge e using %s h'
                     ' where (h.has_dependants or h.waiting_on is not null)'
                     '   and (e.parent_id = h.job_id or e.child_id = h.job_id)', v_day.part);
      execute format('drop table %s', v_day.part);
      v_deleted := v_deleted + v_rows;
      v_dropped := v_dropped + 1;
      -- The caller's own, for the rest of this call and of its transaction
      -- (a failed block undoes the 100 ms itself).
      perform set_config('lock_timeout', v_lock_timeout, true);
    exception when lock_not_available then
      null;
    end;
  end loop;
  -- Then row by row, up to p_limit: what is older than the cutoff in the
  -- partitions that stay (the day the cutoff falls in, the default one).
  -- A parent stays while a dependant of it has yet to end: the dependant's
  -- handler reads its result. The edges go with the jobs.
  with doomed as (
    select d.job_id
      from pyjobq.job_history d
     where d.updated_at < v_cutoff
       and not (d.has_dependants
                and exists (select from pyjobq.job_edge e
                              join pyjobq.job c on c.job_id = e.child_id
                             where e.parent_id = d.job_id))
     limit v_limit
       for update skip locked
  ), deleted as (
    delete from pyjobq.job_history j
     using doomed d
     where j.job_id = d.job_id
    returning j.job_id, j.has_dependants, j.waiting_on is not null as has_parents
  ), edges_out as (
    delete from pyjobq.job_edge e using deleted x where x.has_dependants and e.parent_id = x.job_id
  ), edges_in as (
    delete from pyjobq.job_edge e using deleted x where x.has_parents and e.child_id = x.job_id
  )
  select v_deleted + count(*) into v_deleted from deleted;
  -- A finished batch goes once its members have.
  delete from pyjobq.job_batch b
   where b.finished_at < v_cutoff
     and not exists (select from pyjobq.job_all j where j.batch_id = b.batch_id);
  -- The audit lines past the install's retention (job_settings) go too; the
  -- line this call writes says how many, when any did.
  delete from pyjobq.audit_log a
   where a.at < v_now - (select s.audit_retention from pyjobq.setting s);
  get diagnostics v_lines = row_count;
  perform pyjobq._audit('prune', v_deleted,
                        jsonb_build_object('older_than', p_older_than, 'limit', v_limit, 'days_dropped', v_dropped)
                        || case when v_lines > 0 then jsonb_build_object('audit_lines', v_lines) else '{}' end,
                        v_deleted > 0 or v_lines > 0);
  -- A rate window with no claim for longer than any period (a day at most)
  -- counts nothing; an hour more leaves a claim that started before it alone.
  delete from pyjobq.rate_window w
   where w.claimed_at[cardinality(w.claimed_at)] < v_now - interval '25 hours';
  return v_deleted;
end;
$$;

comment on function pyjobq.job_prune(interval, int) is
  'Deletes the DONE, DEAD and CANCELLED jobs that ended more than p_older_than (0 to 100 years) ago (but not '
  'a parent with a dependant yet to end), with their dependency edges: first every day of history that ended '
  'by then, whole, by dropping its partition of job_history (waiting at most 100 ms for its lock, else left to '
  'the next call), then up to p_limit (1..100000, default 10000) of the rest, row by row; and the batches '
  'finished as long ago whose jobs are all gone. Returns how many jobs it deleted; call it again until it '
  'returns less than p_limit. Also deletes the audit lines older than the install''s audit_retention '
  '(job_settings) and drops the rate windows with no claim in the last 25 hours, which count nothing. A call '
  'that deleted jobs or audit lines writes a line to the audit log (job_audit), with the days it dropped and '
  'the audit lines it deleted.';

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
  perform pyjobq._check_older_than(p_older_than);
  v_cutoff := pyjobq.clock_now() - p_older_than;
  -- The partitions job_prune would drop whole: those whose day ended by the cutoff.
  select count(*), coalesce(sum(greatest(d.estimated_rows, 0)), 0)::bigint,
         count(*) filter (where d.estimated_rows < 0), max(d.day_end)
    into v_whole_days, v_estimated, v_unanalyzed, v_whole_until
    from pyjobq._history_days_by(v_cutoff) d;
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
