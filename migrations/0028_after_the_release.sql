-- depends: 0027_history

-- Schema 28: what changed in schema 27 after 0.2.0 shipped it, for the
-- installs that already run 0.2.0's.
--
-- The upgrade by 0.2.0's schema 27 left the jobs that had ended before it in
-- job_history's default partition, and there they would stay: job_prune
-- drops day partitions only, and the attach of each new day reads the
-- default partition while it holds it exclusively, so every completion
-- waited for that read once a day, for longer as the old history was
-- larger. They go to one partition that reaches back to the first job and
-- up to the first day partition (to the end of today when no day was made
-- yet), named after its last day, so that job_prune drops it whole once
-- that day is past its cutoff. Completions and reads of the history wait for
-- the move, once; an install that has no such jobs skips it.
do $do$
declare
  v_first date;
  v_name text;
  v_bound timestamptz;
begin
  if not exists (select from pyjobq.job_history_default) then
    return;
  end if;
  select min(to_date(substr(c.relname, 13), 'YYYYMMDD'))
    into v_first
    from pg_partition_tree('pyjobq.job_history') t
    join pg_class c on c.oid = t.relid
   where t.isleaf
     and c.relname ~ '^job_history_[0-9]{8}$';
  v_first := coalesce(v_first, (pyjobq.clock_now() at time zone 'UTC')::date + 1);
  v_name := 'job_history_' || to_char(v_first - 1, 'YYYYMMDD');
  v_bound := v_first::timestamp at time zone 'UTC';
  -- One lock, on the parent (which takes its partitions after it): a worker
  -- that read the history and then writes to it holds the parent while it
  -- waits, so it goes ahead of this request instead of deadlocking with a
  -- migration that held the parent and waited for the default partition.
  lock table pyjobq.job_history in access exclusive mode;
  execute format('create table pyjobq.%I (like pyjobq.job_history including constraints)', v_name);
  execute format('alter table pyjobq.%I set (autovacuum_vacuum_insert_scale_factor = 0, '
                 'autovacuum_vacuum_insert_threshold = 100000)', v_name);
  execute format('comment on table pyjobq.%I is %L', v_name,
                 format('The jobs that ended on %s (UTC), and before it. A partition of job_history.', v_first - 1));
  execute format('with moved as (delete from pyjobq.job_history_default d where d.updated_at < $1 returning d.*)'
                 ' insert into pyjobq.%I select * from moved', v_name)
    using v_bound;
  execute format('alter table pyjobq.job_history attach partition pyjobq.%I for values from (minvalue) to (%L)',
                 v_name, v_bound);
end;
$do$;

-- job_reap works out once, in its locking pick, whether a job dies and the
-- lease-expired message (no change in what it does).
create or replace function pyjobq.job_reap(p_limit int default null)
returns table (job_id uuid, job_type int, status int, worker_id text, attempt int, run_after timestamptz)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
-- As in job_claim: the ordered scan of job_lease_idx, never a sort of every lease.
set enable_sort = off
set jit = off
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_limit int := coalesce(p_limit, 1000);
begin
  perform pyjobq._check_range('p_limit', v_limit, 1, 100000);
  -- The history's partitions for today and tomorrow (one catalog lookup
  -- when they exist), first, while this call holds no row: a maintainer that
  -- cannot have its locks at once leaves them to the next reap.
  begin
    perform pyjobq.job_history_maintain();
  exception when lock_not_available then
    null;
  end;
  -- The expiry test is repeated in the UPDATE: a row that a completer or a
  -- renewer changed after this statement's snapshot is re-checked on its
  -- newest version, so a reaper never overwrites a finished or renewed job.
  return query
  with picked as materialized (
    select r.job_id, r.worker_id, r.attempts,
           pyjobq._tries_left(r.attempts, r.attempts_refunded, r.max_attempts) <= 0 as dies,
           format('lease expired: worker %s did not finish attempt %s', r.worker_id, r.attempts) as error
      from pyjobq.job r
     where r.status = 2
       and r.lease_until < v_now
     order by r.lease_until
     limit v_limit
       for update skip locked
  ),
  retried as (
    update pyjobq.job j
       set status = 1,
           run_after = pyjobq._retry_at(j.job_type, j.attempts - j.attempts_refunded, null, v_now),
           worker_id = null,
           last_error = p.error,
           lease_until = null,
           updated_at = v_now
      from picked p
     where j.job_id = p.job_id
       and j.status = 2
       and j.lease_until < v_now
       and not p.dies
    returning j.job_id, j.job_type, j.status, j.run_after
  ), died as (
    -- The worker is cleared even for DEAD: the worker that lost the lease gets
    -- JQ001 (lease_lost), never JQ003, which means "your attempt finished it".
    delete from pyjobq.job j
     using picked p
     where j.job_id = p.job_id
       and j.status = 2
       and j.lease_until < v_now
       and p.dies
    returning j as ended, j.job_id, j.job_type, 4::smallint as status, j.run_after, p.error,
              j.has_dependants or j.batch_id is not null as followed
  ), reaped as (
    select r.job_id, r.job_type, r.status, r.run_after from retried r
    union all
    select d.job_id, d.job_type, d.status, d.run_after from died d
  ), counted as (
    select pyjobq._to_history((select array_agg(d.ended) from died d), 4::smallint, v_now, null,
                              (select array_agg(d.error) from died d), null, true),
           pyjobq._stat_add(v_now, null, array_agg(r.job_type), array_agg(r.status)),
           (select case when count(*) > 0 then pyjobq._ended(array_agg(d.job_id), v_now) end
              from died d
             where d.followed)
      from reaped r
  )
  select r.job_id, r.job_type::int, r.status::int, p.worker_id::text, p.attempts::int, r.run_after
    from reaped r
    join picked p on p.job_id = r.job_id
   cross join counted;
  -- Finish counts older than job_throughput and job_workers look back.
  delete from pyjobq.job_stat s
   where s.minute < v_now - interval '25 hours';
end;
$$;

comment on function pyjobq.job_reap(int) is
  'Takes back up to p_limit (1..100000, default 1000) RUNNING jobs whose lease expired: PENDING after '
  'pyjobq.retry_backoff, or DEAD when their attempts are used up. Skips rows other sessions hold locked, so '
  'reapers never block claimers or each other; safe to run from every worker. Returns what it took back, '
  'with the worker and attempt that lost it. Also drops the finish counts (job_throughput) older than 25 '
  'hours, and makes the history''s partitions of today and tomorrow when they are missing '
  '(job_history_maintain).';

-- job_prune leaves the caller's lock_timeout as it was: 0.2.0's left 5 s in
-- the caller's transaction after dropping a day. A day is kept while a
-- parent in it has a dependant yet to end (the check no longer repeats
-- has_dependants).
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
begin
  perform pyjobq._check_range('p_limit', v_limit, 1, 100000);
  if p_older_than is null or p_older_than < interval '0' or p_older_than > interval '100 years' then
    raise exception 'p_older_than must be an interval between 0 and 100 years'
      using errcode = case when p_older_than is null then '22004' else '22023' end,
            detail = format('p_older_than was %s.', coalesce(p_older_than::text, 'null')),
            hint = 'e.g. ''7 days''.';
  end if;
  v_cutoff := v_now - p_older_than;
  -- Whole days first: the partition of each day that ended by the cutoff is
  -- dropped, unless it holds a parent with a dependant yet to end (the
  -- dependant's handler reads its result; its day goes row by row, below).
  -- The drop waits at most 100 ms for its lock on job_history, which every
  -- completion's insert waits behind meanwhile; a day it cannot have now is
  -- left to the next call.
  for v_day in
    select c.oid::regclass as part
      from pg_partition_tree('pyjobq.job_history') t
      join pg_class c on c.oid = t.relid
     where t.isleaf
       and c.relname ~ '^job_history_[0-9]{8}$'
       and (to_date(substr(c.relname, 13), 'YYYYMMDD') + 1)::timestamp <= v_cutoff
     order by c.relname
  loop
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
  perform pyjobq._audit('prune', v_deleted, jsonb_build_object('older_than', p_older_than, 'limit', v_limit,
                                                               'days_dropped', v_dropped));
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
  'returns less than p_limit. Also drops the rate windows with no claim in the last 25 hours, which count '
  'nothing. A call that deleted jobs writes a line to the audit log (job_audit), with the days it dropped.';


create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 28
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';
