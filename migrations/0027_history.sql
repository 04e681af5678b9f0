-- depends: 0026_cheaper_writes

-- Schema 27: the jobs that ended move to a history partitioned by day.
--
-- A job's end (DONE, DEAD, CANCELLED) deletes its row from pyjobq.job and
-- inserts it into pyjobq.job_history, partitioned by the day it ended;
-- job_redrive moves it back. The job table holds only the jobs yet to end,
-- so its indexes and its vacuum no longer grow with the history, and
-- retention drops a day's partition instead of deleting rows (job_prune).
-- The view pyjobq.job_all shows both.
--
-- The upgrade moves the ended jobs into the history in its transaction: it
-- reads and writes each of them once (docs/upgrading.md: prune first). The
-- job table keeps its name, so an enqueue under way as this runs (its
-- function's old body) still inserts into it.

lock table pyjobq.job in access exclusive mode;
drop trigger job_done_notify on pyjobq.job;
drop index pyjobq.job_dead_cancelled_idx;
drop index pyjobq.job_dedupe_ended_idx;
drop statistics pyjobq.job_type_status_stats;

comment on table pyjobq.job is
  'One row per job yet to end: status 1 PENDING, 2 RUNNING or 6 WAITING (for parent jobs). Its end (3 DONE, '
  '4 DEAD, 5 CANCELLED) moves the row to job_history. Written only by the pyjobq functions.';

-- History: the jobs that ended (DONE, DEAD, CANCELLED), in partitions by the
-- day they ended, so that retention drops a day's partition (job_prune)
-- instead of deleting its rows one by one and leaving them for vacuum. A
-- job's end deletes its row from pyjobq.job and inserts it here in the same
-- transaction, so every snapshot sees the job in exactly one of the two;
-- job_redrive moves it back. The rows of a day without its partition (not
-- yet created by job_history_maintain) go to job_history_default.
create table pyjobq.job_history (like pyjobq.job)
  partition by range (updated_at);

alter table pyjobq.job_history add constraint job_history_ended check (status between 3 and 5);

comment on table pyjobq.job_history is
  'The jobs that ended: status 3 DONE, 4 DEAD or 5 CANCELLED, updated_at when. Partitioned by the day they '
  'ended (job_history_maintain creates the partitions, job_prune drops them); written only by the pyjobq functions.';

create table pyjobq.job_history_default partition of pyjobq.job_history default;

comment on table pyjobq.job_history_default is
  'The jobs that ended on a day that had no partition of job_history yet; job_history_maintain moves them '
  'into the day''s partition when it makes it.';

-- job_get, job_list, the parents of a child: a job by its id (time-ordered,
-- so a day's inserts land at the right edge).
create index job_history_id_idx on pyjobq.job_history (job_id);

-- job_prune: what ended before a time, within the partitions it cannot drop
-- whole. Rows arrive in about that order, so a BRIN summary does it for
-- almost no write.
create index job_history_ended_idx on pyjobq.job_history using brin (updated_at);

-- job_counts: the DEAD and CANCELLED jobs, exactly, without reading the
-- DONE history. Jobs die so rarely, so the index costs the drain nothing.
create index job_dead_cancelled_idx on pyjobq.job_history (job_type, status) where status in (4, 5);

-- job_counts: the share of each (job_type, status) pair in the sample of the
-- last ANALYZE of the history, from which it estimates the DONE jobs without
-- reading them (autovacuum never analyzes a partitioned table: job_history_maintain does).
create statistics pyjobq.job_type_status_stats (mcv) on job_type, status from pyjobq.job_history;

-- Uniqueness over a window (job_enqueue's p_unique_for): the ended jobs with a
-- key, by when they ended. Only keyed jobs enter it.
create index job_dedupe_ended_idx on pyjobq.job_history (job_type, dedupe_key, updated_at)
  where dedupe_key is not null;

-- job_list(p_batch_id) and job_prune: a batch's members that ended.
create index job_history_batch_idx on pyjobq.job_history (batch_id) where batch_id is not null;

-- job_prune: the jobs of a day that are in a graph, whose edges go with them
-- and which stay while a dependant has yet to end. Only they enter it.
create index job_history_graph_idx on pyjobq.job_history (job_id)
  where has_dependants or waiting_on is not null;

-- Every job, live or ended: what the inspection functions read, and what a
-- person reads with psql.
create view pyjobq.job_all as
  select * from pyjobq.job
  union all
  select * from pyjobq.job_history;

comment on view pyjobq.job_all is
  'Every job: pyjobq.job (PENDING, RUNNING, WAITING) and job_history (DONE, DEAD, CANCELLED); a job is in '
  'exactly one of them in any snapshot.';

insert into pyjobq.job_history select * from pyjobq.job where status in (3, 4, 5);
delete from pyjobq.job where status in (3, 4, 5);
alter table pyjobq.job drop constraint job_status_valid;
alter table pyjobq.job add constraint job_status_active check (status in (1, 2, 6));

create trigger job_done_notify
  after insert on pyjobq.job_history
  for each row
  when (new.notify_done)
  execute function pyjobq._notify_done();

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 27
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq._raise_not_held(p_job_id uuid, p_worker_id text, p_attempt int, p_lease_token uuid)
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_status smallint;
  v_worker text;
  v_attempts smallint;
  v_job_type smallint;
  v_token uuid;
  v_deadline timestamptz;
begin
  if p_job_id is null then
    raise exception 'p_job_id must not be null'
      using errcode = '22004',
            hint = 'Pass the job_id that job_claim returned.';
  end if;
  select j.status, j.worker_id, j.attempts, j.job_type, j.lease_token,
         j.run_started_at + make_interval(secs => t.timeout_seconds)
    into v_status, v_worker, v_attempts, v_job_type, v_token, v_deadline
    from pyjobq.job_all j
    join pyjobq.job_type t on t.job_type = j.job_type
   where j.job_id = p_job_id;
  if found then
    perform pyjobq._check_privilege('work', array[v_job_type]);
  else
    raise exception 'job % does not exist', p_job_id
      using errcode = 'JQ002',
            hint = 'It may have been pruned, or the id is wrong.';
  end if;
  if v_status = 5 then
    raise exception 'job % was cancelled', p_job_id
      using errcode = 'JQ005',
            hint = 'Stop working on it: nothing this attempt does is recorded.';
  end if;
  if v_status in (3, 4) and v_worker = p_worker_id and v_attempts = p_attempt
     and (p_lease_token is null or v_token = p_lease_token) then
    raise exception 'job % is already %', p_job_id, pyjobq._status_name(v_status)
      using errcode = 'JQ003',
            detail = format('Attempt %s of worker %s already finished it.', p_attempt, p_worker_id),
            hint = 'Finish each claimed attempt once.';
  end if;
  if v_status = 2 and v_worker = p_worker_id and v_attempts = p_attempt
     and (p_lease_token is null or v_token = p_lease_token) then
    -- Still the caller's, but a renewal past the attempt's deadline.
    raise exception 'attempt % of job % is past its deadline', p_attempt, p_job_id
      using errcode = 'JQ001',
            detail = format('Its deadline was %s: the claim plus the timeout_seconds of its type.', v_deadline),
            hint = 'Stop working on it: once its lease runs out the reaper retries it elsewhere.';
  end if;
  -- The detail names the status only: nothing of the holder's fencing token
  -- (its worker id, attempt or lease token) is told to another caller.
  raise exception 'worker % no longer holds attempt % of job %', p_worker_id, p_attempt, p_job_id
    using errcode = 'JQ001',
          detail = format('The job is %s now.', pyjobq._status_name(v_status)),
          hint = 'The lease expired and the job was reaped or claimed again: drop this result, the job runs (or ran) elsewhere.';
end;
$$;

comment on function pyjobq._raise_not_held(uuid, text, int, uuid) is
  'Raises 22004 (null p_job_id), JQ002, JQ003 or JQ001 to explain why (p_worker_id, p_attempt, p_lease_token) '
  'could not act on job p_job_id.';

create or replace function pyjobq._ended_within(p_job_type int, p_dedupe_key text, p_window interval, p_now timestamptz)
returns uuid
language sql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select e.job_id
    from pyjobq.job_history e
   where e.job_type = p_job_type
     and e.dedupe_key = p_dedupe_key
     and e.updated_at >= p_now - p_window
   order by e.updated_at desc
   limit 1
$$;

comment on function pyjobq._ended_within(int, text, interval, timestamptz) is
  'The job of type p_job_type and key p_dedupe_key that ended last, if it ended within p_window before p_now.';

create or replace function pyjobq._enqueue_one(
  p_job_type int,
  p_payload jsonb,
  p_priority int,
  p_run_after timestamptz,
  p_dedupe_key text,
  p_max_attempts int,
  p_now timestamptz,
  p_unique_for interval default null,
  p_concurrency_key text default null,
  p_metadata jsonb default null,
  p_parents uuid[] default null,
  p_run_on_parent_failure boolean default null,
  p_batch_id uuid default null
)
returns table (job_id uuid, created boolean)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_seq bigint;
  v_new_id uuid;
  v_id uuid;
  v_ended uuid;
  v_status smallint := 1;
  v_waiting int;
  v_failure text;
begin
  if p_unique_for is not null then
    -- An active job with the key is the duplicate first: the one a window-less
    -- enqueue returns, and the one whose outcome is still to come.
    v_id := pyjobq._active_holder(p_job_type, p_dedupe_key);
    if v_id is null then
      v_id := pyjobq._ended_within(p_job_type, p_dedupe_key, p_unique_for, p_now);
    end if;
    if v_id is not null then
      return query select v_id, false;
      return;
    end if;
  end if;
  -- With parents: WAITING for those still to end, or CANCELLED at once by one
  -- that ended DEAD or CANCELLED (unless it runs on parent failure).
  if p_parents is not null then
    select l.waiting, l.failure into v_waiting, v_failure from pyjobq._lock_parents(p_parents) l;
    v_status := case when v_failure is not null and not p_run_on_parent_failure then 5
                     when v_waiting > 0 then 6
                     else 1 end;
    -- Born CANCELLED, it would take no key: an active job with the key is
    -- still the answer, as for any enqueue.
    if v_status = 5 and p_dedupe_key is not null then
      v_id := pyjobq._active_holder(p_job_type, p_dedupe_key);
      if v_id is not null then
        return query select v_id, false;
        return;
      end if;
    end if;
  end if;
  loop
    select n.seq, n.job_id into v_seq, v_new_id from pyjobq._new_job_ids(p_now, 1) n;
    -- The row in the tables' column order; born CANCELLED, it is history at once.
    with new_job as (
      select v_new_id as job_id, p_job_type::smallint as job_type, v_status as status,
             p_priority::smallint as priority, p_payload as payload, null::jsonb as result,
             p_dedupe_key::varchar(200) as dedupe_key, 0::smallint as attempts,
             p_max_attempts::smallint as max_attempts, p_run_after as run_after, null::timestamptz as lease_until,
             null::varchar(80) as worker_id, null::timestamptz as run_started_at,
             case when v_status = 5 then v_failure end as last_error, p_now as created_at, p_now as updated_at,
             v_seq as seq, 0::smallint as attempts_refunded, false as notify_done, null::uuid as lease_token,
             p_concurrency_key::varchar(200) as concurrency_key,
             (pyjobq._fair_ranks(p_job_type, p_priority, array[p_concurrency_key], 1, p_now))[1] as fair_rank,
             p_metadata as metadata, v_waiting as waiting_on,
             case when p_parents is not null then p_run_on_parent_failure end as run_on_parent_failure,
             false as has_dependants, p_batch_id as batch_id
    ), born_ended as (
      insert into pyjobq.job_history
      select n.* from new_job n where n.status = 5
    )
    insert into pyjobq.job as j
    select n.* from new_job n where n.status <> 5
    on conflict (job_type, dedupe_key) where status in (1, 2, 6) and dedupe_key is not null do nothing
    returning j.job_id into v_id;
    if v_status = 5 then
      v_id := v_new_id;
    end if;
    if v_id is not null and p_unique_for is not null and v_status <> 5 then
      v_ended := pyjobq._ended_within(p_job_type, p_dedupe_key, p_unique_for, p_now);
      if v_ended is not null then
        delete from pyjobq.job d where d.job_id = v_id;
        return query select v_ended, false;
        return;
      end if;
    end if;
    if v_id is not null then
      if p_parents is not null then
        perform pyjobq._link_parents(v_id, p_parents);
      end if;
      if p_batch_id is not null then
        perform pyjobq._batch_add(p_batch_id, 1);
        if v_status = 5 then
          perform pyjobq._batch_count(array[v_id], p_now);  -- born CANCELLED: it ended
        end if;
      end if;
      if v_status = 1 then
        perform pyjobq._pending_from(p_run_after, p_now, true);
        perform pyjobq._announce(p_job_type, p_run_after, p_now);
      end if;
      return query select v_id, true;
      return;
    end if;
    v_id := pyjobq._active_holder(p_job_type, p_dedupe_key);
    if v_id is not null then
      return query select v_id, false;
      return;
    end if;
  end loop;
end;
$$;

comment on function pyjobq._enqueue_one(int, jsonb, int, timestamptz, text, int, timestamptz, interval, text, jsonb, uuid[], boolean, uuid) is
  'Inserts one PENDING job from checked arguments (WAITING, or CANCELLED, with parents p_parents that have not '
  'all ended, or one ended DEAD or CANCELLED), or returns the active job of p_job_type holding '
  'p_dedupe_key, or else, with p_unique_for, the one that ended last within that window (created false); '
  'counts a new job in batch p_batch_id (locked by the caller); voids claim fronts and announces as every enqueue '
  'does.';

create or replace function pyjobq.job_complete(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_result jsonb default null,
  p_lease_token uuid default null
)
returns void
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_denied smallint[] := pyjobq._denied_types('work');
  v_row pyjobq.job;
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_attempt', p_attempt, 1, 32767);
  perform pyjobq._check_lease_token('p_lease_token', p_lease_token is null);
  delete from pyjobq.job j
   where j.job_id = p_job_id
     and j.status = 2
     and j.worker_id = p_worker_id
     and j.job_type <> all (v_denied)
     and j.attempts = p_attempt
     and (j.lease_token = p_lease_token or p_lease_token is null)
  returning j.* into v_row;
  if not found then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt, p_lease_token);
  end if;
  perform pyjobq._to_history(array[v_row], 3::smallint, v_now, array[p_result]);
  perform pyjobq._stat_add(v_now, p_worker_id, array[v_row.job_type], array[3::smallint]);
  if v_row.has_dependants or v_row.batch_id is not null then
    perform pyjobq._ended(array[p_job_id], v_now);
  end if;
end;
$$;

comment on function pyjobq.job_complete(uuid, text, int, jsonb, uuid) is
  'Marks job p_job_id DONE with p_result, if p_worker_id still holds attempt p_attempt of it (RUNNING) with '
  'lease token p_lease_token; otherwise raises JQ001 lease_lost, JQ002 job_not_found or JQ003 '
  'job_already_finished and changes nothing. Without p_lease_token: 22004, unless the caller owns the schema '
  'or job_settings accepts such calls.';

create or replace function pyjobq.job_complete_many(
  p_worker_id text,
  p_job_ids uuid[],
  p_attempts int[],
  p_results jsonb[] default null,
  p_lease_tokens uuid[] default null
)
returns table (job_id uuid, completed boolean)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
-- One statement for the batch, its plan pinned: input rows on the outside, each
-- job found by its primary key (the only index the update's predicate allows),
-- whatever the statistics say. The penalties of the disabled methods would
-- otherwise tip the plan into JIT compilation.
set enable_seqscan = off
set enable_bitmapscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_denied smallint[] := pyjobq._denied_types('work');
  v_count int := coalesce(cardinality(p_job_ids), 0);
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  p_attempts := pyjobq._check_array('p_attempts', p_attempts);
  p_results := pyjobq._check_array('p_results', p_results);
  p_lease_tokens := pyjobq._check_array('p_lease_tokens', p_lease_tokens);
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  perform pyjobq._check_same_length('p_attempts', coalesce(cardinality(p_attempts), 0), v_count);
  if p_results is not null then  -- null: no results; else one, possibly null, per job
    perform pyjobq._check_same_length('p_results', cardinality(p_results), v_count);
  end if;
  perform pyjobq._check_lease_tokens(p_lease_tokens, v_count);

  return query
  with input as (
    select u.id, u.attempt, u.result, u.token, u.ord
      from unnest(p_job_ids, p_attempts, p_results, p_lease_tokens)
           with ordinality as u(id, attempt, result, token, ord)
  ), first_mention as (
    -- A job listed twice is completed once, with the result of its first mention.
    select distinct on (i.id, i.attempt) i.id, i.attempt, i.result, i.token
      from input i
     order by i.id, i.attempt, i.ord
  ), done as (
    delete from pyjobq.job j
     using first_mention f
     where j.job_id = f.id
       and j.status = 2
       and j.worker_id = p_worker_id
       and j.job_type <> all (v_denied)
       and j.attempts = f.attempt
       and (j.lease_token = f.token or f.token is null)
    returning j as ended, f.result, j.job_id, j.attempts, j.job_type,
              j.has_dependants or j.batch_id is not null as followed
  ), counted as (
    -- One row (an aggregate), so the cross join below records the batch once,
    -- and follows up the ends of parents and batch members together (none: no
    -- call), after the rows are in the history, where the follow-up reads them.
    select pyjobq._to_history(array_agg(d.ended), 3::smallint, v_now, array_agg(d.result)),
           pyjobq._stat_add(v_now, p_worker_id, array_agg(d.job_type), array_agg(3::smallint)),
           case when bool_or(d.followed)
                then pyjobq._ended(array_agg(d.job_id) filter (where d.followed), v_now) end
      from done d
  )
  -- A job this very attempt completed before (a retried call whose first reply
  -- was lost) counts as completed: the result stored then stays.
  select i.id,
         case when (i.id, i.attempt) in (select d.job_id, d.attempts from done d) then true
              else exists (select from pyjobq.job_history k
                            where k.job_id = i.id
                              and k.job_type <> all (v_denied)
                              and k.status = 3
                              and k.worker_id = p_worker_id
                              and k.attempts = i.attempt
                              and (k.lease_token = i.token or i.token is null))
         end
    from input i
   cross join counted
   order by i.ord;
end;
$$;

comment on function pyjobq.job_complete_many(text, uuid[], int[], jsonb[], uuid[]) is
  'job_complete for up to 10000 jobs in one call: each job whose attempt p_worker_id still holds, with the lease '
  'token at its position in p_lease_tokens, becomes DONE. '
  'Returns every input job id with completed = true when that attempt is DONE (now, or by an earlier call of '
  'the same holder: retrying after a lost reply is safe) and false for those no longer held (left unchanged).';

create or replace function pyjobq.job_fail(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_error text default null,
  p_retry_delay_seconds double precision default null,
  p_dead_letter boolean default null,
  p_lease_token uuid default null
)
returns table (status int, run_after timestamptz)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_denied smallint[] := pyjobq._denied_types('work');
  v_dead_letter boolean := coalesce(p_dead_letter, false);
  v_delay interval;
  v_job_type int;
  v_ended pyjobq.job[];
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_attempt', p_attempt, 1, 32767);
  perform pyjobq._check_lease_token('p_lease_token', p_lease_token is null);
  if p_retry_delay_seconds is not null then
    if not (p_retry_delay_seconds between 0 and 31536000) then
      raise exception 'p_retry_delay_seconds must be between 0 and 31536000'
        using errcode = '22023',
              detail = format('p_retry_delay_seconds was %s.', p_retry_delay_seconds),
              hint = 'Leave it out for the default exponential backoff.';
    end if;
    v_delay := make_interval(secs => p_retry_delay_seconds);
  end if;

  -- The attempt, if the caller holds it, in one statement: with tries left,
  -- PENDING again after the backoff; else DEAD, its row into the history.
  with held as materialized (
    select j.job_id,
           v_dead_letter or pyjobq._tries_left(j.attempts, j.attempts_refunded, j.max_attempts) <= 0 as dies
      from pyjobq.job j
     where j.job_id = p_job_id
       and j.status = 2
       and j.worker_id = p_worker_id
       and j.job_type <> all (v_denied)
       and j.attempts = p_attempt
       and (j.lease_token = p_lease_token or p_lease_token is null)
       for update
  ), retried as (
    update pyjobq.job j
       set status = 1,
           run_after = pyjobq._retry_at(j.job_type, j.attempts - j.attempts_refunded, v_delay, v_now),
           worker_id = null,
           lease_until = null,
           last_error = left(p_error, 10000),
           updated_at = v_now
      from held h
     where j.job_id = h.job_id
       and not h.dies
    returning j.status::int, j.run_after, j.job_type::int, null::pyjobq.job[] as ended
  ), died as (
    delete from pyjobq.job j
     using held h
     where j.job_id = h.job_id
       and h.dies
    returning 4, j.run_after, j.job_type::int, array[j] as ended
  )
  select x.* into status, run_after, v_job_type, v_ended
    from (select * from retried union all select * from died) x;
  if status is null then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt, p_lease_token);
  end if;
  if status = 4 then
    perform pyjobq._to_history(v_ended, 4::smallint, v_now, null, array[left(p_error, 10000)]);
  end if;
  perform pyjobq._stat_add(v_now, p_worker_id, array[v_job_type::smallint], array[status::smallint]);
  if status = 4 and ((v_ended[1]).has_dependants or (v_ended[1]).batch_id is not null) then
    perform pyjobq._ended(array[p_job_id], v_now);
  end if;
  -- The retry is announced like a new job: idle workers learn when it is due.
  if status = 1 then
    perform pyjobq._announce(v_job_type, run_after, v_now);
  end if;
  return next;
end;
$$;

comment on function pyjobq.job_fail(uuid, text, int, text, double precision, boolean, uuid) is
  'Records a failed attempt p_attempt of job p_job_id held by p_worker_id with lease token p_lease_token, keeping p_error (truncated to 10000 '
  'characters) as last_error. With attempts left the job is PENDING again after p_retry_delay_seconds '
  '(0..31536000) or, by default, pyjobq.retry_backoff(attempt); with none left, or p_dead_letter, it is DEAD. '
  'Returns the new status and run_after; raises JQ001/JQ002/JQ003 like job_complete. A retry notifies '
  'pyjobq_job as job_enqueue does.';

create or replace function pyjobq.job_renew_lease_many(
  p_worker_id text,
  p_job_ids uuid[],
  p_attempts int[],
  p_lease_seconds int default null,
  p_lease_tokens uuid[] default null
)
returns table (job_id uuid, renewed boolean, lease_until timestamptz, cancelled boolean)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
-- Each job found by its primary key whatever the statistics say, as in
-- job_complete_many.
set enable_seqscan = off
set enable_bitmapscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_denied smallint[] := pyjobq._denied_types('work');
  v_lease int := coalesce(p_lease_seconds, 300);
  v_count int := coalesce(cardinality(p_job_ids), 0);
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  p_attempts := pyjobq._check_array('p_attempts', p_attempts);
  p_lease_tokens := pyjobq._check_array('p_lease_tokens', p_lease_tokens);
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  perform pyjobq._check_range('p_lease_seconds', v_lease, 1, 86400);
  perform pyjobq._check_same_length('p_attempts', coalesce(cardinality(p_attempts), 0), v_count);
  perform pyjobq._check_lease_tokens(p_lease_tokens, v_count);

  return query
  with input as (
    select u.id, u.attempt, u.token, u.ord
      from unnest(p_job_ids, p_attempts, p_lease_tokens) with ordinality as u(id, attempt, token, ord)
  ), renewed as (
    -- Up to the attempt's deadline, never past it; once it has passed, the lease
    -- runs out and the reaper retries the job elsewhere.
    update pyjobq.job j
       set lease_until = least(v_now + make_interval(secs => v_lease),
                               j.run_started_at + make_interval(secs => t.timeout_seconds)),
           updated_at = v_now
      from (select distinct i.id, i.attempt, i.token from input i) f, pyjobq.job_type t
     where j.job_id = f.id
       and t.job_type = j.job_type
       and j.run_started_at + make_interval(secs => t.timeout_seconds) > v_now
       and j.status = 2
       and j.worker_id = p_worker_id
       and j.job_type <> all (v_denied)
       and j.attempts = f.attempt
       and (j.lease_token = f.token or f.token is null)
    returning j.job_id, j.attempts, j.lease_until
  )
  select i.id, r.job_id is not null, r.lease_until,
         -- cancelled while this holder had it: stop the handler
         r.job_id is null and exists (select from pyjobq.job_history k
                                       where k.job_id = i.id
                                         and k.job_type <> all (v_denied)
                                         and k.status = 5
                                         and k.worker_id = p_worker_id
                                         and k.attempts = i.attempt
                                         and (k.lease_token = i.token or i.token is null))
    from input i
    left join renewed r on r.job_id = i.id and r.attempts = i.attempt
   order by i.ord;
end;
$$;

comment on function pyjobq.job_renew_lease_many(text, uuid[], int[], int, uuid[]) is
  'Heartbeat for up to 10000 jobs in one call: extends to now + p_lease_seconds (1..86400, default 300) the '
  'lease of each job whose attempt p_worker_id still holds with the lease token at its position in p_lease_tokens, '
  'but never past the attempt''s deadline (claimed + its type''s timeout_seconds; once passed, not renewed). Returns every input job id, in input order, with '
  'renewed and the new lease_until, or renewed = false and a null lease_until for a job no longer held (left '
  'unchanged), with cancelled = true when job_cancel took it from this holder. A holder whose lease expired but '
  'was not yet reaped still holds the job.';

create or replace function pyjobq.job_release_many(
  p_worker_id text,
  p_job_ids uuid[],
  p_attempts int[],
  p_lease_tokens uuid[] default null
)
returns table (job_id uuid, released boolean)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
set enable_seqscan = off
set enable_bitmapscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_denied smallint[] := pyjobq._denied_types('work');
  v_count int := coalesce(cardinality(p_job_ids), 0);
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  p_attempts := pyjobq._check_array('p_attempts', p_attempts);
  p_lease_tokens := pyjobq._check_array('p_lease_tokens', p_lease_tokens);
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  perform pyjobq._check_same_length('p_attempts', coalesce(cardinality(p_attempts), 0), v_count);
  perform pyjobq._check_lease_tokens(p_lease_tokens, v_count);

  return query
    with input as (
      select u.id, u.attempt, u.token, u.ord
        from unnest(p_job_ids, p_attempts, p_lease_tokens) with ordinality as u(id, attempt, token, ord)
    ), held as materialized (
      -- The attempts the caller holds, locked. The try is given back; the claim
      -- counter, the fencing token, is not: a job whose counter is spent can
      -- never be claimed again, and is DEAD.
      select j.job_id, j.attempts as attempt,
             pyjobq._tries_left(j.attempts, j.attempts_refunded + 1, j.max_attempts) <= 0 as spent
        from (select distinct i.id, i.attempt, i.token from input i) f
        join pyjobq.job j on j.job_id = f.id
       where j.status = 2
         and j.worker_id = p_worker_id
         and j.job_type <> all (v_denied)
         and j.attempts = f.attempt
         and (j.lease_token = f.token or f.token is null)
         for update of j
    ), given_back as (
      update pyjobq.job j
         set status = 1,
             -- Back at its old place in the queue, before claim fronts.
             run_after = pyjobq._pending_from(j.run_after, v_now, false),
             attempts_refunded = j.attempts_refunded + 1,
             worker_id = null,
             lease_until = null,
             updated_at = v_now
        from held h
       where j.job_id = h.job_id
         and not h.spent
      returning j.job_id
    ), spent as (
      delete from pyjobq.job j
       using held h
       where j.job_id = h.job_id
         and h.spent
      returning j as ended, j.job_id, j.has_dependants or j.batch_id is not null as followed
    ), resolved as (
      -- A job released DEAD ends: its end is followed up (one row, one call).
      select pyjobq._to_history(array_agg(g.ended), 4::smallint, v_now, null,
                                array_agg('released with its claim counter spent (32767 claims)'::text)),
             case when bool_or(g.followed)
                  then pyjobq._ended(array_agg(g.job_id) filter (where g.followed), v_now) end
        from spent g
    )
    select i.id, (i.id, i.attempt) in (select h.job_id, h.attempt from held h)
      from input i
     cross join resolved
     order by i.ord;
end;
$$;

comment on function pyjobq.job_release_many(text, uuid[], int[], uuid[]) is
  'job_release for up to 10000 jobs in one call: each job whose attempt p_worker_id still holds, with the lease '
  'token at its position in p_lease_tokens, is PENDING '
  'again at its old place in the queue, the try given back (attempts_refunded + 1; attempts, the fencing token, '
  'stays). Returns every input job id, in input order, with released = false for a job no longer held (left '
  'unchanged).';

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
    select r.job_id, r.worker_id, r.attempts
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
           last_error = format('lease expired: worker %s did not finish attempt %s', j.worker_id, j.attempts),
           lease_until = null,
           updated_at = v_now
      from picked p
     where j.job_id = p.job_id
       and j.status = 2
       and j.lease_until < v_now
       and pyjobq._tries_left(j.attempts, j.attempts_refunded, j.max_attempts) > 0
    returning j.job_id, j.job_type, j.status, j.run_after
  ), died as (
    -- The worker is cleared even for DEAD: the worker that lost the lease gets
    -- JQ001 (lease_lost), never JQ003, which means "your attempt finished it".
    delete from pyjobq.job j
     using picked p
     where j.job_id = p.job_id
       and j.status = 2
       and j.lease_until < v_now
       and pyjobq._tries_left(j.attempts, j.attempts_refunded, j.max_attempts) <= 0
    returning j as ended, j.job_id, j.job_type, 4::smallint as status, j.run_after,
              format('lease expired: worker %s did not finish attempt %s', j.worker_id, j.attempts) as error,
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
    union all
    select j.job_type, 6, count(*), null, null
      from pyjobq.job j
     where j.status = 6
     group by j.job_type
  ), ended_counts as (
    -- DEAD and CANCELLED grow with history too: each type's counted through
    -- job_dead_cancelled_idx up to 10001 entries, no further.
    select t.job_type, e.status,
           (select count(*)
              from (select 1
                      from pyjobq.job_history j
                     where j.status in (4, 5)  -- the index's predicate, for the planner
                       and j.job_type = t.job_type
                       and j.status = e.status
                     limit 10001) as k) as jobs
      from pyjobq.job_type t
     cross join (values (4), (5)) as e(status)
  ), size as (
    -- The history's rows now, partition by partition: rows per page at the
    -- partition's last ANALYZE times its pages now, or, before its first
    -- ANALYZE, the server's count of its live rows.
    select coalesce(sum(p.bytes), 0) <= 1048576 as small,
           coalesce(sum(p.bytes), 0) / current_setting('block_size')::int as pages,
           coalesce(sum(case when c.reltuples >= 0 and c.relpages > 0
                             then c.reltuples / c.relpages * (p.bytes / current_setting('block_size')::int)
                             else pg_stat_get_live_tuples(c.oid)
                        end), 0) as rows
      from pg_partition_tree('pyjobq.job_history') t
      join pg_class c on c.oid = t.relid
     cross join lateral (select pg_relation_size(c.oid) as bytes) p
     where t.isleaf
  ), done_counted as (
    -- A table of at most 1 MiB (a few thousand jobs) is cheap to read: exact.
    select j.job_type, count(*) as jobs
      from pyjobq.job_history j
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
      from pyjobq.job_history j
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
    -- History rows counted exactly now whose (type, status) has no share.
    select coalesce(sum(k.jobs), 0) as jobs
      from ended_counts k
     where k.jobs <= 10000
       and not exists (select from shares h where (h.job_type, h.status) = (k.job_type, k.status))
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
         case when s.status in (1, 2, 6) then coalesce(c.jobs, 0)
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
         s.status in (1, 2, 6) or (s.status in (4, 5) and e.jobs <= 10000) or (s.status = 3 and z.small)
    from pyjobq.job_type t
   cross join (select g.status, pyjobq._status_name(g.status) as status_name
                 from generate_series(1, 6) as g(status)) as s
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
  'PENDING, RUNNING and WAITING are exact and read through indexes; so are DEAD and CANCELLED up to 10000 per type, '
  'beyond which they are at least 10001, from the statistics of the last ANALYZE (exact false). DONE is exact '
  'while the history is at most 1 MiB; beyond, it is an estimate from the statistics of the last ANALYZE of '
  'job_history (before the first, from about 32 pages of it), and exact is false.';

create or replace function pyjobq.job_get(p_job_id uuid)
returns table (
  job_id uuid,
  job_type int,
  job_type_name text,
  status int,
  status_name text,
  priority int,
  attempts int,
  max_attempts int,
  payload jsonb,
  result jsonb,
  last_error text,
  dedupe_key text,
  run_after timestamptz,
  lease_until timestamptz,
  worker_id text,
  run_started_at timestamptz,
  finished_at timestamptz,
  created_at timestamptz,
  updated_at timestamptz,
  metadata jsonb,
  waiting_on int,
  batch_id uuid
)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_job_id is null then
    raise exception 'p_job_id must not be null'
      using errcode = '22004',
            hint = 'Pass the job_id that job_enqueue returned.';
  end if;
  perform pyjobq._check_privilege('observe', array(select j.job_type::int from pyjobq.job_all j where j.job_id = p_job_id));
  -- No job is an empty result, not an error: a pruned job is simply gone.
  return query
  select j.job_id, j.job_type::int, t.name::text, j.status::int,
         pyjobq._status_name(j.status),
         j.priority::int, j.attempts::int, j.max_attempts::int, j.payload, j.result, j.last_error,
         j.dedupe_key::text, j.run_after, j.lease_until, j.worker_id::text, j.run_started_at,
         case when j.status in (3, 4, 5) then j.updated_at end, j.created_at, j.updated_at, j.metadata,
         j.waiting_on, j.batch_id
    from pyjobq.job_all j
    join pyjobq.job_type t on t.job_type = j.job_type
   where j.job_id = p_job_id;
end;
$$;

comment on function pyjobq.job_get(uuid) is
  'One job as a person needs it to see what happened: type, status, priority, attempts, payload, result, '
  'last_error, dedupe key, run_after, its lease and worker while RUNNING, when its last attempt started '
  '(run_started_at) and when it ended (DONE, DEAD or CANCELLED), the metadata of its enqueue, how many parents it '
  'still waits for (waiting_on; null without parents: job_dependencies lists them) and its batch. No row when there is no such job (never enqueued, '
  'or pruned).';

create or replace function pyjobq.job_list(
  p_job_type int default null,
  p_status int default null,
  p_dedupe_key text default null,
  p_created_after timestamptz default null,
  p_created_before timestamptz default null,
  p_oldest_first boolean default null,
  p_after uuid default null,
  p_limit int default null,
  p_error text default null,
  p_batch_id uuid default null
)
returns table (
  job_id uuid,
  job_type int,
  job_type_name text,
  status int,
  status_name text,
  priority int,
  attempts int,
  max_attempts int,
  dedupe_key text,
  run_after timestamptz,
  worker_id text,
  last_error text,
  created_at timestamptz,
  updated_at timestamptz
)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
-- Index scans only, whatever the statistics: a bitmap scan of job_pkey's
-- range would read every page of the history to sort it.
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
declare
  v_limit int := coalesce(p_limit, 100);
  v_oldest boolean := coalesce(p_oldest_first, false);
  v_from uuid;
  v_to uuid;
  v_denied smallint[] := pyjobq._denied_types('observe');
begin
  perform pyjobq._check_range('p_limit', v_limit, 1, 1000);
  if p_status is not null then
    perform pyjobq._check_range('p_status', p_status, 1, 6);
  end if;
  if p_job_type is not null then
    perform pyjobq._check_job_type(p_job_type);
  end if;
  perform pyjobq._check_text('p_dedupe_key', p_dedupe_key, 200, true);
  perform pyjobq._check_text('p_error', p_error, 200, true);
  perform pyjobq._check_time('p_created_after', p_created_after, pyjobq.clock_now());
  perform pyjobq._check_time('p_created_before', p_created_before, pyjobq.clock_now());
  v_from := coalesce(pyjobq._job_id_floor(p_created_after), '00000000-0000-0000-0000-000000000000');
  v_to := coalesce(pyjobq._job_id_floor(p_created_before), 'ffffffff-ffff-ffff-ffff-ffffffffffff');
  -- Keyset pagination: the next page continues after the last id of this one.
  if p_after is not null and v_oldest then
    v_from := greatest(v_from, p_after);
  elsif p_after is not null then
    v_to := least(v_to, p_after);
  end if;

  -- One of three ways runs, chosen by the arguments (the others are cut off
  -- before they read a row): the statuses with few jobs (PENDING, RUNNING,
  -- WAITING, DEAD, CANCELLED: the queue's work, not its history) through their partial
  -- indexes, then sorted; DONE or any status along job_pkey in order, up to
  -- the limit. No way reads the whole history for one page.
  return query
  with matching as not materialized (
    select j.job_id, j.status, j.lease_until, j.batch_id
      from pyjobq.job_all j
     where (p_job_type is null or j.job_type = p_job_type)
       and (p_dedupe_key is null or j.dedupe_key = p_dedupe_key)
       and (p_error is null or strpos(lower(j.last_error), lower(p_error)) > 0)
       and (p_batch_id is null or j.batch_id = p_batch_id)
       and j.job_type <> all (v_denied)
  ), few as materialized (
    -- Every job of the status, through its partial index, before any limit or
    -- id range could tempt the planner into walking job_pkey instead (as it
    -- would on a table never analyzed, where rows look common); or every
    -- member of the batch, through job_batch_idx.
    select m.job_id from matching m where p_batch_id is null and p_status = 1 and m.status = 1
    union all
    select m.job_id from matching m
     where p_batch_id is null and p_status = 2 and m.status = 2 and m.lease_until is not null
    union all
    select m.job_id from matching m where p_batch_id is null and p_status = 6 and m.status = 6
    union all
    select m.job_id from matching m
     where p_batch_id is null and p_status in (4, 5) and m.status in (4, 5) and m.status = p_status
    union all
    select m.job_id from matching m
     where p_batch_id is not null and m.batch_id is not null and m.status = coalesce(p_status, m.status)
  ), ranged as not materialized (
    select m.job_id, m.status
      from matching m
     where p_batch_id is null
       and m.job_id >= v_from and m.job_id < v_to and m.job_id is distinct from p_after
  ), page as (
    (select f.job_id
       from few f
      where f.job_id >= v_from and f.job_id < v_to and f.job_id is distinct from p_after
      order by case when v_oldest then f.job_id end, case when not v_oldest then f.job_id end desc
      limit v_limit)
    union all
    (select r.job_id
       from ranged r
      where coalesce(p_status, 3) = 3 and v_oldest and r.status = coalesce(p_status, r.status)
      order by r.job_id
      limit v_limit)
    union all
    (select r.job_id
       from ranged r
      where coalesce(p_status, 3) = 3 and not v_oldest and r.status = coalesce(p_status, r.status)
      order by r.job_id desc
      limit v_limit)
  )
  select j.job_id, j.job_type::int, t.name::text, j.status::int,
         pyjobq._status_name(j.status),
         j.priority::int, j.attempts::int, j.max_attempts::int, j.dedupe_key::text, j.run_after,
         j.worker_id::text, j.last_error, j.created_at, j.updated_at
    from page p
    join pyjobq.job_all j on j.job_id = p.job_id
    join pyjobq.job_type t on t.job_type = j.job_type
   order by case when v_oldest then j.job_id end, case when not v_oldest then j.job_id end desc;
end;
$$;

comment on function pyjobq.job_list(int, int, text, timestamptz, timestamptz, boolean, uuid, int, text, uuid) is
  'Lists jobs newest first (or oldest, p_oldest_first), up to p_limit (1..1000, default 100), filtered by job '
  'type, status (1..6), dedupe key, creation time [p_created_after, p_created_before), batch (p_batch_id) and text in last_error '
  '(p_error, any case; read row by row, so give a status other than DONE or a creation range to keep it '
  'short on a long history). Keyset pages: pass the '
  'last job_id of a page as p_after for the next. Without payload and result (job_get has them); only the types '
  'the caller may observe.';

create or replace function pyjobq.job_cancel(p_job_ids uuid[])
returns table (job_id uuid, outcome text)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
set enable_seqscan = off
set enable_bitmapscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_count int := coalesce(cardinality(p_job_ids), 0);
  v_cancelled uuid[];
  v_running uuid[];
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  -- Cancelling is the producers' side of a type: its enqueue privilege.
  perform pyjobq._check_privilege('enqueue', array(select distinct j.job_type::int
                                                      from pyjobq.job_all j
                                                     where j.job_id = any (p_job_ids)));
  -- A RUNNING job is CANCELLED at once, like a PENDING one: its holder keeps
  -- its worker id on the row but holds nothing any more, so its every later
  -- call is refused (JQ005), and job_renew_lease_many tells it at the next
  -- heartbeat (cancelled = true) to stop the handler. Rows are locked in id
  -- order, so two cancels of overlapping sets cannot deadlock; WAITING jobs
  -- last, as a completion takes them (after the parents it ends), so that a
  -- cancel holding a child never waits for a parent whose completer waits
  -- for that child; and the WAITING ones together with every WAITING job
  -- the cancel reaches below them, in one statement (see _lock_reach).
  perform
    from pyjobq.job k
   where k.job_id = any (p_job_ids)
     and k.status <> 6
   order by k.job_id
     for no key update;
  perform pyjobq._lock_reach(p_job_ids, true);
  with locked as materialized (
    select k.job_id, k.status
      from pyjobq.job k
     where k.job_id = any (p_job_ids)
     order by k.status = 6, k.job_id
       for no key update
  ), cancelled as (
    delete from pyjobq.job j
     using locked l
     where j.job_id = l.job_id
    returning j as ended, j.job_id, j.status, coalesce(j.last_error, 'cancelled') as error,
              j.has_dependants or j.batch_id is not null as followed
  ), ended as (
    -- One row (an aggregate): the rows go to the history, one line is written
    -- to the audit log, and the ends of the cancelled jobs are followed up
    -- once, together, after the history has them.
    select pyjobq._to_history(array_agg(c.ended), 5::smallint, v_now, null, array_agg(c.error)),
           pyjobq._audit('cancel', count(*),
                         jsonb_build_object('job_ids', (array_agg(c.job_id order by c.job_id))[1:100])),
           case when bool_or(c.followed)
                then pyjobq._ended(array_agg(c.job_id) filter (where c.followed), v_now) end,
           coalesce(array_agg(c.job_id), '{}') as ids,
           coalesce(array_agg(c.job_id) filter (where c.status = 2), '{}') as running
      from cancelled c
  )
  select e.ids, e.running into v_cancelled, v_running from ended e;
  -- The others, as they are now (one that ended while this call waited for
  -- its row is in the history by now).
  return query
  select u.id,
         case when u.id = any (v_running) then 'cancelled_running'
              when u.id = any (v_cancelled) then 'cancelled'
              when exists (select from pyjobq.job_all j where j.job_id = u.id) then 'finished'
              else 'not_found'
         end
    from unnest(p_job_ids) with ordinality as u(id, ord)
   order by u.ord;
end;
$$;

comment on function pyjobq.job_cancel(uuid[]) is
  'Cancels up to 10000 jobs: PENDING, WAITING and RUNNING ones become CANCELLED (final, frees the dedupe key, '
  'redrivable, pruned like DONE); their dependants are resolved as at any end: CANCELLED in turn, unless they '
  'run on parent failure. A RUNNING job''s holder is fenced out at once (its calls get JQ005) and learns '
  'it at its next job_renew_lease_many. Returns every input id in input order with its outcome: cancelled, '
  'cancelled_running, finished (already DONE, DEAD or CANCELLED: unchanged) or not_found. A call that '
  'cancelled jobs writes a line to the audit log (job_audit) with the first 100 of their ids.';

create or replace function pyjobq.job_watch(p_job_ids uuid[])
returns table (job_id uuid, status int, status_name text)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
set enable_seqscan = off
set jit = off
as $$
declare
  v_count int := coalesce(cardinality(p_job_ids), 0);
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  perform pyjobq._check_privilege('observe', array(select distinct j.job_type::int
                                                      from pyjobq.job_all j
                                                     where j.job_id = any (p_job_ids)));
  update pyjobq.job j
     set notify_done = true
   where j.job_id = any (p_job_ids)
     and j.status in (1, 2, 6)
     and not j.notify_done;
  -- The status after the update: a job that already ended is not announced,
  -- so the caller reads it from here.
  return query
  select u.id, j.status::int,
         pyjobq._status_name(j.status)
    from unnest(p_job_ids) with ordinality as u(id, ord)
    left join pyjobq.job_all j on j.job_id = u.id
   order by u.ord;
end;
$$;

comment on function pyjobq.job_watch(uuid[]) is
  'Asks for the end (DONE, DEAD or CANCELLED) of up to 10000 jobs to be announced: NOTIFY pyjobq_done with the '
  'job id, on the commit that ends it. LISTEN pyjobq_done before calling it. Returns each input id in input order '
  'with its status now (null when there is no such job): a job that already ended is not announced.';

create or replace function pyjobq._redrive_rows(p_ids uuid[], p_now timestamptz)
returns uuid[]
language sql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  with free as (
    select distinct on (d.job_type, coalesce(d.dedupe_key, d.job_id::text)) d.job_id
      from pyjobq.job_history d
     where d.job_id = any (p_ids)
       and d.status in (4, 5)
       and pyjobq._tries_left(d.attempts, d.attempts, d.max_attempts) > 0
       and (d.dedupe_key is null
            or not exists (select 1
                             from pyjobq.job a
                            where a.job_type = d.job_type
                              and a.dedupe_key = d.dedupe_key
                              and a.status in (1, 2, 6)))
     order by d.job_type, coalesce(d.dedupe_key, d.job_id::text), d.updated_at, d.job_id
  ),
  moved as (
    delete from pyjobq.job_history h
     using free f
     where h.job_id = f.job_id
       and h.status in (4, 5)
    returning h.*
  ),
  back as (
    -- PENDING again, due at p_now with its old seq, with a fresh budget (the
    -- fencing token, attempts, goes on); its worker and result cleared.
    insert into pyjobq.job
      (job_id, job_type, status, priority, payload, result, dedupe_key, attempts, max_attempts, run_after,
       lease_until, worker_id, run_started_at, last_error, created_at, updated_at, seq, attempts_refunded,
       notify_done, lease_token, concurrency_key, fair_rank, metadata, waiting_on, run_on_parent_failure,
       has_dependants, batch_id)
    select m.job_id, m.job_type, 1, m.priority, m.payload, null, m.dedupe_key, m.attempts, m.max_attempts,
           pyjobq._pending_from(p_now, p_now, false), null, null, m.run_started_at, m.last_error, m.created_at,
           p_now, m.seq, m.attempts, m.notify_done, m.lease_token, m.concurrency_key, m.fair_rank, m.metadata,
           m.waiting_on, m.run_on_parent_failure, m.has_dependants, m.batch_id
      from moved m
    returning job_id
  )
  select coalesce(array_agg(b.job_id), '{}') from back b
$$;

comment on function pyjobq._redrive_rows(uuid[], timestamptz) is
  'job_redrive''s move: the DEAD and CANCELLED jobs of p_ids whose dedupe key is free from job_history back '
  'to pyjobq.job, PENDING; returns their ids.';

create or replace function pyjobq.job_redrive(
  p_job_ids uuid[] default null,
  p_job_type int default null,
  p_limit int default null
)
returns table (job_id uuid)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_limit int := coalesce(p_limit, 1000);
  v_id uuid;
  v_picked uuid[];
  v_statuses smallint[];
  v_ids uuid[];
  v_moved uuid[];
  v_left smallint[];
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  perform pyjobq._check_range('p_limit', v_limit, 1, 100000);
  if p_job_type is not null then
    perform pyjobq._check_job_type(p_job_type);
  end if;
  if p_job_ids is not null and cardinality(p_job_ids) > 100000 then
    raise exception 'cardinality(p_job_ids) must be between 0 and 100000'
      using errcode = '22023';
  end if;
  -- The batch is locked once, then moved in one statement. Only when a
  -- concurrent enqueue takes a key between this snapshot and the update (a
  -- unique violation) is it moved a row at a time, each row in a
  -- subtransaction of its own; a subtransaction per row on every call would
  -- overflow the subtransaction cache past 64 rows.
  -- Only jobs that can move count against the limit: a backlog of jobs whose
  -- key an active job holds must not stop every later call from reaching the
  -- rest, and of the jobs that share a key only the oldest can move (the next
  -- call may take the next), so only it is a candidate.
  select coalesce(array_agg(d.job_id order by d.updated_at, d.job_id), '{}'),
         coalesce(array_agg(d.status order by d.updated_at, d.job_id), '{}')
    into v_picked, v_statuses
    from (select p.job_id, p.updated_at, p.status
            from pyjobq.job_history p
           where p.job_id in (select c.job_id
                                from (select e.job_id,
                                             row_number() over (
                                               partition by e.job_type, coalesce(e.dedupe_key, e.job_id::text)
                                               order by e.updated_at, e.job_id) as n
                                        from pyjobq.job_history e
                                       where e.status in (4, 5)
                                         and (p_job_ids is null or e.job_id = any (p_job_ids))
                                         and (p_job_type is null or e.job_type = p_job_type)
                                         and pyjobq._tries_left(e.attempts, e.attempts, e.max_attempts) > 0
                                         and (e.dedupe_key is null
                                              or not exists (select 1
                                                               from pyjobq.job a
                                                              where a.job_type = e.job_type
                                                                and a.dedupe_key = e.dedupe_key
                                                                and a.status in (1, 2, 6)))) c
                               where c.n = 1)
             and p.status in (4, 5)  -- again, on the row as it is when locked
           order by p.updated_at, p.job_id
           limit v_limit
             for update skip locked) d;
  begin
    v_ids := pyjobq._redrive_rows(v_picked, v_now);
  exception when unique_violation then
    v_ids := '{}';
    foreach v_id in array v_picked loop
      begin
        v_ids := v_ids || pyjobq._redrive_rows(array[v_id], v_now);
      exception when unique_violation then
        null;
      end;
    end loop;
  end;
  -- The moved ones come off their batches' counts, as the statuses they left.
  select array_agg(u.id), array_agg(u.status)
    into v_moved, v_left
    from unnest(v_picked, v_statuses) u(id, status)
   where u.id = any (v_ids);
  perform pyjobq._batch_count(v_moved, v_now, v_left);
  perform pyjobq._audit('redrive', cardinality(v_ids),
                        jsonb_build_object('job_ids', v_ids[1:100], 'job_type', p_job_type, 'limit', v_limit,
                                           'given', cardinality(p_job_ids)));
  return query select u.id from unnest(v_ids) as u(id);
  if cardinality(v_ids) > 0 then
    perform pg_notify('pyjobq_job', '');
  end if;
end;
$$;

comment on function pyjobq.job_redrive(uuid[], int, int) is
  'Moves DEAD and CANCELLED jobs back to PENDING, due now, with a fresh budget of max_attempts tries '
  '(attempts, the fencing token, goes on from where it was): the ids in p_job_ids, or else every DEAD or '
  'CANCELLED job (of p_job_type when given), up to p_limit (1..100000, default 1000) oldest first. A job whose '
  'dedupe key an active job holds stays where it is. The dependants that its end cancelled stay CANCELLED '
  '(redrive them too: they run at once, without waiting for their parents again). Returns the ids it moved; '
  'a call that moved jobs writes '
  'a line to the audit log (job_audit) with the first 100 of their ids.';

create or replace function pyjobq._lock_parents(p_parents uuid[], out waiting int, out failure text)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_found int;
  v_wanted int := (select count(distinct u.id) from unnest(p_parents) u(id));
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
  -- Live parents, then ended ones. A parent that moves between the two while
  -- this statement waits for its lock is in neither of its snapshot's: the
  -- next statement, with a snapshot of its own, finds it where it went.
  for v_try in 1 .. 3 loop
    with live as materialized (
      select p.job_id, p.status
        from pyjobq.job p
       where p.job_id = any (p_parents)
       order by p.job_id
         for no key update
    ), ended as materialized (
      select p.job_id, p.status
        from pyjobq.job_history p
       where p.job_id = any (p_parents)
       order by p.job_id
         for no key update
    ), locked as (
      select l.job_id, l.status from live l
      union all
      select e.job_id, e.status from ended e
    )
    select count(*), count(*) filter (where l.status in (1, 2, 6)),
           min(format('parent %s ended %s', l.job_id, pyjobq._status_name(l.status))) filter (where l.status in (4, 5))
      into v_found, waiting, failure
      from locked l;
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
end;
$$;

comment on function pyjobq._lock_parents(uuid[]) is
  'Locks the jobs p_parents (FOR NO KEY UPDATE, in id order) for the enqueue of their child: JQ002 when one '
  'does not exist, 42501 when the caller may not observe one''s type. Returns how many have not ended, and a '
  'text naming one that ended DEAD or CANCELLED (null when none did).';

create or replace function pyjobq._enqueue_graph(
  p_job_type int,
  p_payloads jsonb[],
  p_priority int,
  p_run_after timestamptz,
  p_max_attempts int,
  p_now timestamptz,
  p_concurrency_keys text[],
  p_metadata jsonb,
  p_depends_on jsonb[],
  p_run_on_parent_failure boolean,
  p_batch_id uuid
)
returns table (ord int, job_id uuid, created boolean)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_count int := cardinality(p_payloads);
  v_ids uuid[];
  v_seqs bigint[];
  v_ranks bigint[];
  v_child int[];      -- the edges, by child row then place in its list
  v_k int[];
  v_pos int[];
  v_parent uuid[];
  v_status smallint[];
  v_external uuid[];
  v_has_parents boolean[] := array_fill(false, array[v_count]);
  v_cancel boolean[] := array_fill(false, array[v_count]);
  v_named boolean[] := array_fill(false, array[v_count]);
  v_wait int[] := array_fill(0, array[v_count]);
  v_failure text[] := array_fill(null::text, array[v_count]);
  v_active boolean[];
  v_e int;
  v_c int;
  v_failed boolean;
begin
  select array_agg(n.seq order by n.seq), array_agg(n.job_id order by n.seq)
    into v_seqs, v_ids
    from pyjobq._new_job_ids(p_now, v_count) n;
  -- Every edge, checked, its parent resolved to a job id; a parent named twice by
  -- one row counts once.
  select array_agg(e.child order by e.child, e.k), array_agg(e.k order by e.child, e.k),
         array_agg(e.pos order by e.child, e.k), array_agg(e.parent order by e.child, e.k)
    into v_child, v_k, v_pos, v_parent
    from (select distinct on (u.i, coalesce(v_ids[r.pos], r.id))
                 u.i::int as child, r.k, r.pos, coalesce(v_ids[r.pos], r.id) as parent
            from unnest(p_depends_on) with ordinality u(spec, i)
           cross join lateral pyjobq._row_parents(u.spec, u.i::int) r
           order by u.i, coalesce(v_ids[r.pos], r.id), r.k) e;
  v_external := array(select distinct x.id from unnest(v_parent, v_pos) x(id, pos) where x.pos is null);
  if cardinality(v_external) > 0 then
    perform pyjobq._lock_parents(v_external);
  end if;
  select array_agg(j.status order by x.n)
    into v_status
    from unnest(v_parent) with ordinality x(id, n)
    left join pyjobq.job_all j on j.job_id = x.id;
  v_active := array_fill(false, array[coalesce(cardinality(v_child), 0)]);
  for v_e in 1 .. coalesce(cardinality(v_child), 0) loop
    v_c := v_child[v_e];
    v_has_parents[v_c] := true;
    if v_pos[v_e] is not null then
      v_named[v_pos[v_e]] := true;
      v_failed := v_cancel[v_pos[v_e]];
      v_active[v_e] := not v_failed;
      if v_failed then
        v_status[v_e] := 5;
      end if;
    else
      v_failed := v_status[v_e] in (4, 5);
      v_active[v_e] := v_status[v_e] in (1, 2, 6);
    end if;
    if v_failed and not p_run_on_parent_failure and not v_cancel[v_c] then
      v_cancel[v_c] := true;
      v_failure[v_c] := format('parent %s ended %s', v_parent[v_e], pyjobq._status_name(v_status[v_e]));
    end if;
    if v_active[v_e] then
      v_wait[v_c] := v_wait[v_c] + 1;
    end if;
  end loop;
  v_ranks := pyjobq._fair_ranks(p_job_type, p_priority, p_concurrency_keys, v_count, p_now);

  -- The rows in the tables' column order; those born CANCELLED are history at once.
  with new_job as (
    select v_ids[i] as job_id, p_job_type::smallint as job_type,
           (case when v_cancel[i] then 5 when v_wait[i] > 0 then 6 else 1 end)::smallint as status,
           p_priority::smallint as priority, p_payloads[i] as payload, null::jsonb as result,
           null::varchar(200) as dedupe_key, 0::smallint as attempts, p_max_attempts::smallint as max_attempts,
           p_run_after as run_after, null::timestamptz as lease_until, null::varchar(80) as worker_id,
           null::timestamptz as run_started_at, v_failure[i] as last_error, p_now as created_at,
           p_now as updated_at, v_seqs[i] as seq, 0::smallint as attempts_refunded, false as notify_done,
           null::uuid as lease_token, p_concurrency_keys[i]::varchar(200) as concurrency_key,
           v_ranks[i] as fair_rank, p_metadata as metadata,
           case when v_has_parents[i] then v_wait[i] end as waiting_on,
           case when v_has_parents[i] then p_run_on_parent_failure end as run_on_parent_failure,
           v_named[i] as has_dependants, p_batch_id as batch_id
      from generate_series(1, v_count) i
  ), born_ended as (
    insert into pyjobq.job_history
    select n.* from new_job n where n.status = 5
  )
  insert into pyjobq.job
  select n.* from new_job n where n.status <> 5 order by n.seq;
  insert into pyjobq.job_edge (parent_id, child_id, ord, resolved)
  select v_parent[e], v_ids[v_child[e]], v_k[e], not v_active[e]
    from generate_series(1, coalesce(cardinality(v_child), 0)) e;
  if cardinality(v_external) > 0 then
    perform pyjobq._mark_parents(v_external);
  end if;
  if p_batch_id is not null then
    perform pyjobq._batch_add(p_batch_id, v_count);
    if true = any (v_cancel) then
      perform pyjobq._batch_count(array(select v_ids[i] from generate_series(1, v_count) i where v_cancel[i]), p_now);
    end if;
  end if;
  if exists (select from generate_series(1, v_count) i where not v_cancel[i] and v_wait[i] = 0) then
    perform pyjobq._pending_from(p_run_after, p_now, true);
    perform pyjobq._announce(p_job_type, p_run_after, p_now);
  end if;
  return query select i, v_ids[i], true from generate_series(1, v_count) i order by i;
end;
$$;

comment on function pyjobq._enqueue_graph(int, jsonb[], int, timestamptz, int, timestamptz, text[], jsonb, jsonb[], boolean, uuid) is
  'job_enqueue_many''s rows with parents p_depends_on (and no dedupe keys), checked, written in one statement '
  'each for the jobs, their edges and their parents'' marks: WAITING, PENDING or CANCELLED at birth as '
  'job_enqueue makes each. Returns every row, created.';

create or replace function pyjobq._mark_parents(p_parents uuid[])
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  update pyjobq.job p
     set has_dependants = true
   where p.job_id = any (p_parents)
     and not p.has_dependants;
  update pyjobq.job_history p
     set has_dependants = true
   where p.job_id = any (p_parents)
     and not p.has_dependants;
end;
$$;

comment on function pyjobq._mark_parents(uuid[]) is
  'Marks the jobs p_parents, live or ended, as having dependants (has_dependants).';

create or replace function pyjobq._link_parents(p_child uuid, p_parents uuid[])
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  insert into pyjobq.job_edge (parent_id, child_id, ord, resolved)
  select p.job_id, p_child, u.ord, p.status in (3, 4, 5)
    from (select d.id, min(d.ord)::int as ord
            from unnest(p_parents) with ordinality d(id, ord)
           group by d.id) u
    join pyjobq.job_all p on p.job_id = u.id;
  perform pyjobq._mark_parents(p_parents);
end;
$$;

comment on function pyjobq._link_parents(uuid, uuid[]) is
  'Writes the job_edge rows of new job p_child for its parents p_parents (resolved for those that ended) and '
  'marks the parents as having dependants.';

create or replace function pyjobq._lock_reach(p_jobs uuid[], p_cancelling boolean)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  perform
    from pyjobq.job j
   where j.job_id in (
           with recursive reach (job_id, root, cancels) as (
             select r.job_id, true, p_cancelling or r.status in (4, 5)
               from pyjobq.job_all r
              where r.job_id = any (p_jobs)
             union
             select c.job_id, false, r.cancels and not c.run_on_parent_failure
               from reach r
               join pyjobq.job_edge e on e.parent_id = r.job_id and not e.resolved
               join pyjobq.job c on c.job_id = e.child_id
              where (r.root or r.cancels)
                and c.status = 6
           )
           select r.job_id from reach r)
     and j.status = 6
   order by j.job_id
     for no key update;
end;
$$;

comment on function pyjobq._lock_reach(uuid[], boolean) is
  'Locks, in id order, the WAITING jobs among p_jobs and every WAITING job their ends can reach: their '
  'children, and the children of each child a failed parent cancels, and so on down. p_jobs end CANCELLED '
  'when p_cancelling, else as their status says (DEAD and CANCELLED cascade, DONE does not).';

create or replace function pyjobq._ended(p_ended uuid[], p_now timestamptz)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_ended uuid[] := p_ended;
  v_members uuid[] := p_ended;
  v_cancelled uuid[];
  v_types smallint[];
  v_type smallint;
begin
  -- A completion takes one generation, in id order (below); a failure may
  -- take several, so it takes them all first (_lock_reach).
  if exists (select from pyjobq.job_history p where p.job_id = any (p_ended) and p.status <> 3) then
    perform pyjobq._lock_reach(p_ended, false);
  end if;
  while cardinality(v_ended) > 0 loop
    with resolved as (
      update pyjobq.job_edge e
         set resolved = true
        from pyjobq.job_history p
       where e.parent_id = any (v_ended)
         and not e.resolved
         and p.job_id = e.parent_id
      returning e.child_id, e.parent_id, p.status
    ), per_child as (
      select r.child_id, count(*)::int as resolved,
             min(format('parent %s ended %s', r.parent_id, pyjobq._status_name(r.status)))
               filter (where r.status <> 3) as failure
        from resolved r
       group by r.child_id
    ), locked as materialized (
      -- Each child with what resolved for it, in one row: the statements below
      -- find each child by its key, never by walking two lists against each
      -- other (a parent of 10,000 children would make that quadratic).
      select c.job_id, n.resolved, n.failure,
             n.failure is not null and not c.run_on_parent_failure as cancels
        from pyjobq.job c
        join per_child n on n.child_id = c.job_id
       where c.status = 6
       order by c.job_id
         for no key update of c
    ), changed as (
      update pyjobq.job c
         set waiting_on = c.waiting_on - n.resolved,
             status = case when c.waiting_on = n.resolved then 1 else 6 end,
             run_after = case when c.waiting_on = n.resolved
                              then pyjobq._pending_from(greatest(c.run_after, p_now), p_now, false)
                              else c.run_after end,
             updated_at = p_now
        from locked n
       where c.job_id = n.job_id
         and c.status = 6
         and not n.cancels
      returning c.job_id, c.status, c.job_type
    ), cancelled as (
      -- A parent that ended DEAD or CANCELLED ends the child CANCELLED.
      delete from pyjobq.job c
       using locked n
       where c.job_id = n.job_id
         and c.status = 6
         and n.cancels
      returning c as ended, c.job_id, c.has_dependants, c.batch_id, n.failure, c.waiting_on - n.resolved as waiting
    ), moved as (
      select pyjobq._to_history(array_agg(x.ended), 5::smallint, p_now, null, array_agg(x.failure),
                                array_agg(x.waiting)),
             array_agg(x.job_id) filter (where x.has_dependants) as next,
             array_agg(x.job_id) filter (where x.batch_id is not null) as members
        from cancelled x
    )
    select m.next, m.members, (select array_agg(distinct ch.job_type) filter (where ch.status = 1) from changed ch)
      into v_ended, v_cancelled, v_types
      from moved m;
    v_members := v_members || v_cancelled;
    foreach v_type in array coalesce(v_types, '{}') loop
      perform pyjobq._announce(v_type, p_now, p_now);
    end loop;
  end loop;
  perform pyjobq._batch_count(v_members, p_now);
end;
$$;

comment on function pyjobq._ended(uuid[], timestamptz) is
  'Counts the jobs p_ended, which just ended (DONE, DEAD or CANCELLED), in their batches, and resolves their '
  'edges: each WAITING child '
  'counts them down and is PENDING at 0, or CANCELLED by a parent that ended DEAD or CANCELLED unless it runs '
  'on parent failure; children so cancelled resolve their own dependants. Announces the types of the jobs '
  'made PENDING.';

create or replace function pyjobq._parent_results(p_job_id uuid)
returns jsonb
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
-- The child's edges through job_edge_child_idx whatever the statistics say: a
-- plan made while job_edge was small would read all of it for every child.
set enable_seqscan = off
set enable_bitmapscan = off
as $$
begin
  return (select jsonb_agg(jsonb_build_object('job_id', e.parent_id, 'job_type', p.job_type,
                                              'status', pyjobq._status_name(p.status), 'result', p.result)
                           order by e.ord)
            from pyjobq.job_edge e
            left join pyjobq.job_all p on p.job_id = e.parent_id
           where e.child_id = p_job_id);
end;
$$;

comment on function pyjobq._parent_results(uuid) is
  'The parents of job p_job_id in the order its enqueue named them, as a JSON array of {job_id, job_type, '
  'status, result} (status and result null for a parent since pruned); null when it has none.';

create or replace function pyjobq.job_dependencies(p_job_id uuid)
returns table (relation text, job_id uuid, job_type int, status int, status_name text, resolved boolean)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_job_id is null then
    raise exception 'p_job_id must not be null'
      using errcode = '22004',
            hint = 'Pass the job_id that job_enqueue returned.';
  end if;
  perform pyjobq._check_privilege('observe', array(select j.job_type::int from pyjobq.job_all j where j.job_id = p_job_id));
  return query
  select 'parent', e.parent_id, p.job_type::int, p.status::int, pyjobq._status_name(p.status), e.resolved
    from pyjobq.job_edge e
    left join pyjobq.job_all p on p.job_id = e.parent_id
   where e.child_id = p_job_id
   order by e.ord;
  return query
  select 'dependant', e.child_id, c.job_type::int, c.status::int, pyjobq._status_name(c.status), e.resolved
    from pyjobq.job_edge e
    left join pyjobq.job_all c on c.job_id = e.child_id
   where e.parent_id = p_job_id
   order by c.seq, e.child_id;
end;
$$;

comment on function pyjobq.job_dependencies(uuid) is
  'The graph around job p_job_id: its parents (relation parent, in the order its enqueue named them) and its '
  'dependants (relation dependant, in enqueue order), each with its type and status now (null once pruned) and whether '
  'the edge is resolved (the parent ended). No rows for a job without either.';

create or replace function pyjobq._batch_count(p_ids uuid[], p_now timestamptz, p_left smallint[] default null)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_sign int := case when p_left is null then 1 else -1 end;
  v_batches uuid[];
begin
  with members as (
    select j.batch_id, coalesce(u.left_as, j.status) as status
      from unnest(p_ids, p_left) u(id, left_as)
      join pyjobq.job_all j on j.job_id = u.id
     where j.batch_id is not null
  ), locked as materialized (
    -- In id order: two calls counting members of the same batches cannot deadlock.
    select b.batch_id
      from pyjobq.job_batch b
     where b.batch_id in (select m.batch_id from members m)
     order by b.batch_id
       for no key update
  ), counted as (
    update pyjobq.job_batch b
       set done = b.done + v_sign * m.done,
           dead = b.dead + v_sign * m.dead,
           cancelled = b.cancelled + v_sign * m.cancelled,
           finished_at = case when v_sign > 0 then b.finished_at end
      from (select m.batch_id,
                   count(*) filter (where m.status = 3)::int as done,
                   count(*) filter (where m.status = 4)::int as dead,
                   count(*) filter (where m.status = 5)::int as cancelled
              from members m
             group by m.batch_id) m, locked l
     where b.batch_id = m.batch_id
       and l.batch_id = b.batch_id
    returning b.batch_id
  )
  select array_agg(c.batch_id) into v_batches from counted c;
  if v_sign > 0 and v_batches is not null then
    perform pyjobq._batch_fire(v_batches, p_now);
  end if;
end;
$$;

comment on function pyjobq._batch_count(uuid[], timestamptz, smallint[]) is
  'Counts the jobs p_ids that just ended in their batches (DONE, DEAD or CANCELLED), and enqueues the callbacks '
  'that makes due; with p_left, the statuses redriven jobs p_ids left (paired), takes them off the counts '
  'and unfinishes their batches.';

create or replace function pyjobq._to_history(
  p_rows pyjobq.job[],
  p_status smallint,
  p_now timestamptz,
  p_results jsonb[] default null,
  p_errors text[] default null,
  p_waiting int[] default null,
  p_clear_worker boolean default false
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
  select r.job_id, r.job_type, p_status, r.priority, r.payload,
         case when p_results is null then r.result else p_results[r.ordinality] end,
         r.dedupe_key, r.attempts, r.max_attempts, r.run_after, null,
         case when not p_clear_worker then r.worker_id end, r.run_started_at,
         case when p_errors is null then r.last_error else p_errors[r.ordinality] end,
         r.created_at, p_now, r.seq, r.attempts_refunded, r.notify_done, r.lease_token, r.concurrency_key,
         r.fair_rank, r.metadata,
         case when p_waiting is null then r.waiting_on else p_waiting[r.ordinality] end,
         r.run_on_parent_failure, r.has_dependants, r.batch_id
    from unnest(p_rows) with ordinality as r;
end;
$$;

comment on function pyjobq._to_history(pyjobq.job[], smallint, timestamptz, jsonb[], text[], int[], boolean) is
  'Inserts the rows p_rows, just deleted from pyjobq.job, into job_history as ended p_status at p_now, with '
  'p_results, p_errors and p_waiting (position by position) where given, and without the worker when '
  'p_clear_worker.';

create or replace function pyjobq._history_day(p_day date)
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

create or replace function pyjobq.job_history_maintain(p_days_ahead int default null)
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
                   '                where (h.has_dependants or h.waiting_on is not null) and h.has_dependants)',
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
    exception when lock_not_available then
      null;
    end;
    perform set_config('lock_timeout', '5s', true);
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

create or replace function pyjobq.grant_roles()
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_missing text[];
begin
  select array_agg(r.name order by r.name)
    into v_missing
    from unnest(array['pyjobq_producer', 'pyjobq_worker', 'pyjobq_observer', 'pyjobq_admin']) as r(name)
   where not exists (select 1 from pg_roles g where g.rolname = r.name);
  if v_missing is not null then
    if not exists (select 1 from pg_roles g
                    where g.rolname = current_user and (g.rolsuper or g.rolcreaterole)) then
      raise notice 'pyjobq: group roles % not created: role % may not create roles', v_missing, current_user
        using hint = 'Have a role with CREATEROLE run: select pyjobq.grant_roles();';
      return;
    end if;
    if 'pyjobq_producer' = any (v_missing) then create role pyjobq_producer nologin; end if;
    if 'pyjobq_worker' = any (v_missing) then create role pyjobq_worker nologin; end if;
    if 'pyjobq_observer' = any (v_missing) then create role pyjobq_observer nologin; end if;
    if 'pyjobq_admin' = any (v_missing) then create role pyjobq_admin nologin; end if;
  end if;

  grant usage on schema pyjobq to pyjobq_producer, pyjobq_worker, pyjobq_observer, pyjobq_admin;
  grant execute on function
    pyjobq.job_types(), pyjobq.job_type_code(text), pyjobq.job_type_policies(), pyjobq.job_type_limits(),
    pyjobq.schema_version(), pyjobq.clock_now()
    to pyjobq_producer, pyjobq_worker, pyjobq_observer, pyjobq_admin;
  grant execute on function
    pyjobq.job_enqueue(int, jsonb, int, timestamptz, text, int, interval, text, jsonb, uuid[], text, uuid),
    pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int, interval, text[], jsonb, jsonb[], text, uuid),
    pyjobq.job_batch_open(jsonb),
    pyjobq.job_batch_close(uuid)
    to pyjobq_producer;
  grant execute on function
    pyjobq.job_claim(text, int, int, int[]),
    pyjobq.job_next_due(int[]),
    pyjobq.job_complete(uuid, text, int, jsonb, uuid),
    pyjobq.job_complete_many(text, uuid[], int[], jsonb[], uuid[]),
    pyjobq.job_fail(uuid, text, int, text, double precision, boolean, uuid),
    pyjobq.job_renew_lease(uuid, text, int, int, uuid),
    pyjobq.job_renew_lease_many(text, uuid[], int[], int, uuid[]),
    pyjobq.job_release(uuid, text, int, uuid),
    pyjobq.job_release_many(text, uuid[], int[], uuid[]),
    pyjobq.job_reap(int),
    pyjobq.job_schedule_tick()
    to pyjobq_worker;
  grant execute on function
    pyjobq.job_counts(),
    pyjobq.job_throughput(int),
    pyjobq.job_workers(interval)
    to pyjobq_observer, pyjobq_admin;
  -- Payloads and results are the application's data: producers read back what they
  -- enqueued, admins what they operate on; observers see figures only.
  grant execute on function pyjobq.job_get(uuid) to pyjobq_producer, pyjobq_admin;
  -- The graph around a job shows ids and statuses, no payload.
  grant execute on function pyjobq.job_dependencies(uuid) to pyjobq_producer, pyjobq_observer, pyjobq_admin;
  grant execute on function pyjobq.job_batch_get(uuid) to pyjobq_producer, pyjobq_observer, pyjobq_admin;
  -- Producers cancel what they enqueued; admins anything.
  grant execute on function pyjobq.job_cancel(uuid[]) to pyjobq_producer, pyjobq_admin;
  grant execute on function pyjobq.job_watch(uuid[]) to pyjobq_producer, pyjobq_admin;
  grant execute on function
    pyjobq.job_list(int, int, text, timestamptz, timestamptz, boolean, uuid, int, text, uuid)
    to pyjobq_producer, pyjobq_admin;
  grant execute on function
    pyjobq.job_redrive(uuid[], int, int),
    pyjobq.job_audit(bigint, int),
    pyjobq.job_prune(interval, int),
    pyjobq.job_history_maintain(int),
    pyjobq.job_type_register(int, text),
    pyjobq.job_type_grant(int, text, text),
    pyjobq.job_type_revoke(int, text, text),
    pyjobq.job_type_grants(),
    pyjobq.job_type_set_policy(int, int, double precision, double precision, double precision, double precision),
    pyjobq.job_settings(),
    pyjobq.job_settings_set(boolean),
    pyjobq.job_type_set_limits(int, int, int, int, interval, int, interval, boolean),
    pyjobq.job_reap(int),
    pyjobq.job_schedule_set(text, text, int, jsonb, text, int, int, text, text, int, timestamptz),
    pyjobq.job_schedule_delete(text),
    pyjobq.job_schedule_pause(text),
    pyjobq.job_schedule_resume(text),
    pyjobq.job_schedules(),
    pyjobq.job_schedule_tick()
    to pyjobq_admin;
end;
$$;

revoke all on function pyjobq.grant_roles() from public;

comment on function pyjobq.grant_roles() is
  'Creates the NOLOGIN group roles pyjobq_producer (enqueue, batches, get, dependencies, list, cancel, watch), pyjobq_worker (claim, '
  'next due, complete, fail, '
  'renew, release, reap, schedule tick), pyjobq_observer (counts, throughput, workers, dependencies, batch get) and pyjobq_admin (counts, '
  'throughput, workers, get, dependencies, batch get, list, cancel, watch, reap, redrive, prune, history '
  'maintenance, audit, '
  'register types, per-type grants, limits, settings, schedules) '
  'when missing and the caller may create roles, and grants each EXECUTE on its functions. Run by the '
  'installation; run it again as a role with CREATEROLE when the installing role could not create them.';


-- The functions created again, like every function of the schema, are not
-- PUBLIC's; the group roles get what grant_roles grants.
revoke all on all functions in schema pyjobq from public;

do $$
begin
  perform pyjobq.grant_roles();
end;
$$;
