-- History -----------------------------------------------------------------------
--
-- The jobs that ended are in job_history, partitioned by the day (UTC) they
-- ended: job_history_YYYYMMDD holds [that day, the next). Its partitions are
-- made ahead by job_history_maintain, which every job_reap calls (so every
-- worker keeps them, whatever its language), and which ANALYZEs the history
-- as it makes a day's partition: autovacuum never analyzes a partitioned
-- table, and job_counts estimates the DONE jobs from those statistics. A job
-- that ends on a day that has no partition yet goes to job_history_default,
-- and moves to the day's partition when it is made.
--
-- Retention drops partitions: job_prune drops whole each day that ended
-- before its cutoff (a moment's exclusive lock on job_history, no dead rows,
-- nothing left to vacuum), and deletes row by row only what is older than the
-- cutoff in the others (the day the cutoff falls in, the default partition).

-- The end of jobs: p_rows, just deleted from pyjobq.job by the caller (which
-- checked that it may end them), go to job_history as ended at p_now, each
-- with its status from p_statuses and its result, last error and waiting_on
-- from p_results, p_errors and p_waiting where those are given (null arrays:
-- kept), without its lease, and without its worker where p_clear_workers is
-- true. (Text and jsonb elements are found by walking their array: a caller
-- passes those arrays only when they change something.)
create function pyjobq._to_history(
  p_rows pyjobq.job[],
  p_statuses smallint[],
  p_now timestamptz,
  p_results jsonb[] default null,
  p_errors text[] default null,
  p_waiting int[] default null,
  p_clear_workers boolean[] default null
)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  insert into pyjobq.job_history
    (job_id, job_type, status, priority, payload, result, dedupe_key, attempts, max_attempts, run_after,
     lease_until, worker_id, run_started_at, last_error, created_at, updated_at, seq, attempts_refunded,
     notify_done, lease_token, concurrency_key, fair_rank, metadata, waiting_on, run_on_parent_failure,
     has_dependants, batch_id)
  select r.job_id, r.job_type, p_statuses[r.ordinality], r.priority, r.payload,
         case when p_results is null then r.result else p_results[r.ordinality] end,
         r.dedupe_key, r.attempts, r.max_attempts, r.run_after, null,
         case when p_clear_workers[r.ordinality] then null else r.worker_id end, r.run_started_at,
         case when p_errors is null then r.last_error else p_errors[r.ordinality] end,
         r.created_at, p_now, r.seq, r.attempts_refunded, r.notify_done, r.lease_token, r.concurrency_key,
         r.fair_rank, r.metadata,
         case when p_waiting is null then r.waiting_on else p_waiting[r.ordinality] end,
         r.run_on_parent_failure, r.has_dependants, r.batch_id
    from unnest(p_rows) with ordinality as r
   -- A DONE job of a type that keeps none (job_type_set_history) ends with its
   -- delete, unless something reads it after its end: its dependants or its
   -- batch, a unique window over its key, a watcher.
   where p_statuses[r.ordinality] <> 3
      or r.job_type <> all (array(select t.job_type from pyjobq.job_type t where not t.keep_done))
      or r.has_dependants or r.batch_id is not null or r.dedupe_key is not null or r.notify_done;
end;
$$;

comment on function pyjobq._to_history(pyjobq.job[], smallint[], timestamptz, jsonb[], text[], int[], boolean[]) is
  'Inserts the rows p_rows, just deleted from pyjobq.job, into job_history as ended at p_now, each with the '
  'status, and the result, error and waiting count (where those arrays are given) at its position, and '
  'without its worker where p_clear_workers says so; leaves out the DONE jobs of types that keep none, but '
  'for those with dependants, a batch, a dedupe key or a watcher.';

-- The partition of day p_day, made if it is missing: created alone, given
-- the rows the default partition holds for its day, then attached, while
-- inserts into job_history wait (readers do not, except of the default
-- partition, which the attach checks for rows of the day).
create function pyjobq._history_day(p_day date)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
set timezone = 'UTC'
as $$
declare
  v_name text := 'job_history_' || to_char(p_day, 'YYYYMMDD');
  v_from timestamptz := p_day::timestamp;
  v_to timestamptz := (p_day + 1)::timestamp;
begin
  if to_regclass('pyjobq.' || v_name) is not null then
    return false;
  end if;
  execute format('create table pyjobq.%I (like pyjobq.job_history including constraints)', v_name);
  execute format('alter table pyjobq.%I set (autovacuum_vacuum_insert_scale_factor = 0, '
                 'autovacuum_vacuum_insert_threshold = 100000)', v_name);
  execute format('comment on table pyjobq.%I is %L', v_name,
                 format('The jobs that ended on %s (UTC): a partition of job_history.', p_day));
  -- No job ends from here to the commit: an insert routed to the default
  -- partition by the partitions it knew before the attach would fail the
  -- default's new constraint instead. Ends wait for the few milliseconds
  -- this takes, once a day.
  lock table pyjobq.job_history in share row exclusive mode;
  lock table pyjobq.job_history_default in access exclusive mode;
  execute format('with moved as (delete from pyjobq.job_history_default d'
                 '                where d.updated_at >= $1 and d.updated_at < $2 returning d.*)'
                 ' insert into pyjobq.%I select * from moved', v_name)
    using v_from, v_to;
  execute format('alter table pyjobq.job_history attach partition pyjobq.%I for values from (%L) to (%L)',
                 v_name, v_from, v_to);
  return true;
end;
$$;

comment on function pyjobq._history_day(date) is
  'Makes job_history_YYYYMMDD, the history''s partition of day p_day (UTC), with the rows the default '
  'partition holds for it, unless it exists; true when it made it.';

create function pyjobq.job_history_maintain(p_days_ahead int default null)
returns int
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set timezone = 'UTC'
set lock_timeout = '100ms'
as $$
declare
  v_ahead int := coalesce(p_days_ahead, 1);
  v_today date := pyjobq.clock_now()::date;
  v_made int := 0;
begin
  perform pyjobq._check_range('p_days_ahead', v_ahead, 0, 31);
  -- Nothing to do, the common case: one catalog lookup.
  if to_regclass('pyjobq.job_history_' || to_char(v_today + v_ahead, 'YYYYMMDD')) is not null then
    return 0;
  end if;
  -- One maintainer at a time; the others have nothing to add.
  if not pg_try_advisory_xact_lock(hashtext('pyjobq.job_history_maintain')) then
    return 0;
  end if;
  for v_day in 0 .. v_ahead loop
    if pyjobq._history_day(v_today + v_day) then
      v_made := v_made + 1;
    end if;
  end loop;
  -- A day's partitions are made even when the ANALYZE must wait (an
  -- autovacuum of a partition holds its lock): the next day's call analyzes.
  begin
    analyze pyjobq.job_history;
  exception when lock_not_available then
    null;
  end;
  return v_made;
end;
$$;

comment on function pyjobq.job_history_maintain(int) is
  'Makes the partitions of job_history for today and the next p_days_ahead (0..31, default 1) days (UTC) '
  'that are missing, moving into each the rows the default partition holds for its day, and then ANALYZEs '
  'job_history, which autovacuum never does. Returns how many partitions it made (0 at once when the last '
  'one exists). job_reap calls it; waits at most 100 ms for a lock (55P03 otherwise: call again later), so '
  'that the sessions queued behind it wait no longer.';

-- The day partitions of the history whose day ended by p_cutoff: those
-- job_prune drops whole, named job_history_YYYYMMDD after their (last) day.
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

-- The age argument of job_prune and job_prune_estimate.
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

create function pyjobq.job_prune(p_older_than interval, p_limit int default null)
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
  -- The steps, events and attempts of the jobs gone, up to p_limit jobs: those
  -- of a job enqueued before the cutoff (its id says when) that is neither
  -- active nor in the history.
  with gone as (
    select distinct d.job_id
      from (select s.job_id from pyjobq.job_step s
            union all
            select e.job_id from pyjobq.job_event e
            union all
            select a.job_id from pyjobq.job_attempt a) d
     where d.job_id < pyjobq._job_id_floor(v_cutoff)
       and not exists (select from pyjobq.job_all j where j.job_id = d.job_id)
     limit v_limit
  ), steps as (
    delete from pyjobq.job_step s using gone g where s.job_id = g.job_id
  ), attempts as (
    delete from pyjobq.job_attempt a using gone g where a.job_id = g.job_id
  )
  delete from pyjobq.job_event e using gone g where e.job_id = g.job_id;
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
  'a parent with a dependant yet to end), with their dependency edges, steps, events and attempts: first every day of history that ended '
  'by then, whole, by dropping its partition of job_history (waiting at most 100 ms for its lock, else left to '
  'the next call), then up to p_limit (1..100000, default 10000) of the rest, row by row; and the batches '
  'finished as long ago whose jobs are all gone. Returns how many jobs it deleted; call it again until it '
  'returns less than p_limit. Also deletes the audit lines older than the install''s audit_retention '
  '(job_settings) and drops the rate windows with no claim in the last 25 hours, which count nothing. A call '
  'that deleted jobs or audit lines writes a line to the audit log (job_audit), with the days it dropped and '
  'the audit lines it deleted.';

-- What job_prune would delete, told before it runs (an operator's preview):
-- the whole days from the statistics ANALYZE keeps of each day's partition
-- (job_history_maintain analyzes the history every day), the rest counted.
-- Cheap whatever the history holds: a catalog read, and a count within the
-- cutoff's own day. A day never analyzed yet is counted, and makes the
-- figure exact.
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
