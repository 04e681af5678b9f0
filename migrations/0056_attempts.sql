-- depends: 0055_progress

-- Schema 56: the story of a job's attempts. Each attempt that ends otherwise
-- than done keeps a row of pyjobq.job_attempt (a job's last 25), written by
-- _finish; job_attempts reads them with the attempt running or done.

create table pyjobq.job_attempt (
  job_id uuid not null,
  attempt smallint not null,
  worker_id varchar(80),
  started_at timestamptz,
  ended_at timestamptz not null,
  outcome text not null,
  error text,
  constraint job_attempt_pkey primary key (job_id, attempt)
);

comment on table pyjobq.job_attempt is
  'The attempts of jobs that ended otherwise than done: worker, start, end, outcome and error; a job''s last '
  '25. Written by _finish, read by job_attempts, deleted by job_prune with their jobs.';

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 56
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq._to_story(p_job_ids uuid[], p_attempts int[], p_workers text[],
                                 p_started timestamptz[], p_outcomes text[], p_errors text[],
                                 p_now timestamptz)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  insert into pyjobq.job_attempt as a (job_id, attempt, worker_id, started_at, ended_at, outcome, error)
  select u.job_id, u.attempt, u.worker_id, u.started_at, p_now, u.outcome, u.error
    from unnest(p_job_ids, p_attempts, p_workers, p_started, p_outcomes, p_errors)
         as u(job_id, attempt, worker_id, started_at, outcome, error)
  on conflict on constraint job_attempt_pkey do nothing;
  delete from pyjobq.job_attempt a
   using unnest(p_job_ids, p_attempts) as u(job_id, attempt)
   where a.job_id = u.job_id
     and a.attempt <= u.attempt - 25;
end;
$$;

comment on function pyjobq._to_story(uuid[], int[], text[], timestamptz[], text[], text[], timestamptz) is
  'Records the attempts that just ended otherwise than done (job p_job_ids[i], attempt p_attempts[i], its '
  'worker, start, outcome and error), ended at p_now, and deletes each job''s attempts older than its last 25.';

create or replace function pyjobq._error_summary(p_error text)
returns text
language sql
immutable
begin atomic
  select left(btrim((regexp_match(p_error, '([^\n]*\S)\s*$'))[1]), 200);
end;

comment on function pyjobq._error_summary(text) is
  'The last line of p_error that is not blank, trimmed, at most 200 characters; null for null.';

create or replace function pyjobq.job_attempts(p_job_id uuid)
returns table (
  attempt int,
  worker_id text,
  started_at timestamptz,
  ended_at timestamptz,
  outcome text,
  error_summary text,
  error text
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
  perform pyjobq._check_privilege('observe', array(select j.job_type::int from pyjobq.job_all j
                                                    where j.job_id = p_job_id));
  return query
  select s.attempt, s.worker_id, s.started_at, s.ended_at, s.outcome, pyjobq._error_summary(s.error), s.error
    from (select a.attempt::int, a.worker_id::text, a.started_at, a.ended_at, a.outcome, a.error
            from pyjobq.job_attempt a
           where a.job_id = p_job_id
          union all
          -- The attempt running, or the one that made the job DONE, from its row.
          select j.attempts::int, j.worker_id::text, j.run_started_at,
                 case when j.status = 3 then j.updated_at end,
                 case when j.status = 2 then 'running' else 'done' end, null::text
            from pyjobq.job_all j
           where j.job_id = p_job_id
             and j.status in (2, 3)) s
   order by s.attempt;
end;
$$;

comment on function pyjobq.job_attempts(uuid) is
  'The attempts of job p_job_id, in order: each that ended otherwise than done (failed, dead, expired, '
  'cancelled, snoozed, waiting; its last 25) with its worker, start, end, outcome, error and the error''s last '
  'line (error_summary), then the one running or the one that made it DONE. No rows for a job that never ran or '
  'no longer exists.';

create or replace function pyjobq._finish(p_worker_id text, p_ends pyjobq.job_end[], p_now timestamptz,
                               p_denied smallint[], p_follow boolean default true)
returns table (ord int, job_id uuid, attempt int, job_type smallint, status smallint, run_after timestamptz,
               followed boolean)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
-- One statement for the batch, its plan pinned: input rows on the outside, each
-- job found by its primary key (the only index the predicates allow),
-- whatever the statistics say. The penalties of the disabled methods would
-- otherwise tip the plan into JIT compilation.
set enable_seqscan = off
set enable_bitmapscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
set plan_cache_mode = force_generic_plan
as $$
begin
  return query
  with input as (
    -- An attempt named twice ends once, as its first mention says.
    select distinct on (e.job_id, e.attempt) e.*
      from unnest(p_ends) with ordinality
           as e(job_id, attempt, lease_token, outcome, result, error, delay, waiting, ord)
     order by e.job_id, e.attempt, e.ord
  ), ended as (
    delete from pyjobq.job j
     using input i
     where j.job_id = i.job_id
       and (i.outcome = 'cancelled' or pyjobq._holds(j, p_worker_id, i.attempt, i.lease_token, p_denied))
       and pyjobq._end_status(j, i.outcome) <> 1
    returning i.ord, j as row, pyjobq._end_status(j, i.outcome) as status, i.outcome,
              case when i.outcome = 'done' then i.result else j.result end as result,
              case i.outcome
                when 'done' then j.last_error
                when 'cancelled' then coalesce(i.error, j.last_error, 'cancelled')
                when 'released' then 'released with its claim counter spent (32767 claims)'
                when 'snoozed' then 'snoozed with its claim counter spent (32767 claims)'
                when 'waiting' then 'waited with its claim counter spent (32767 claims)'
                else left(i.error, 10000)
              end as error,
              coalesce(i.waiting, j.waiting_on) as waiting
  ), retried as (
    update pyjobq.job j
       set status = 1,
           -- A release puts the job back at its old place in the queue, before
           -- claim fronts, and gives its try back; a snooze or a wait gives it
           -- back too and sleeps its delay; a failure waits its backoff.
           run_after = case when i.outcome = 'released' then pyjobq._pending_from(j.run_after, p_now, false)
                            when i.outcome in ('snoozed', 'waiting')
                            then pyjobq._pending_from(p_now + coalesce(i.delay, interval '0'), p_now, false)
                            else pyjobq._retry_at(j.job_type, j.attempts - j.attempts_refunded, i.delay, p_now)
                       end,
           attempts_refunded = j.attempts_refunded + (i.outcome in ('released', 'snoozed', 'waiting'))::int,
           snoozes = j.snoozes + (i.outcome = 'snoozed')::int,
           last_error = case when i.outcome in ('released', 'snoozed', 'waiting') then j.last_error
                             else left(i.error, 10000) end,
           worker_id = null,
           lease_until = null,
           updated_at = p_now
      from input i
     where i.outcome in ('failed', 'expired', 'released', 'snoozed', 'waiting')
       and j.job_id = i.job_id
       and pyjobq._holds(j, p_worker_id, i.attempt, i.lease_token, p_denied)
       and pyjobq._end_status(j, i.outcome) = 1
    returning i.ord, j.job_id, j.attempts, j.job_type, j.status, j.run_after, i.outcome,
              -- the worker before this update (the statement's snapshot), for the story
              (select o.worker_id from pyjobq.job o where o.job_id = j.job_id) as worker_id,
              j.run_started_at, left(i.error, 10000) as error
  ), moved as (
    select d.ord, (d.row).job_id, (d.row).attempts, (d.row).job_type, d.status, (d.row).run_after, d.outcome,
           true as ends, d.row, d.result, d.error, d.waiting,
           (d.row).has_dependants or (d.row).batch_id is not null as followed,
           (d.row).worker_id, (d.row).run_started_at, (d.row).status = 2 and d.outcome <> 'done' as told,
           d.outcome <> 'cancelled' and (d.outcome not in ('released', 'snoozed', 'waiting') or d.status = 4)
             as counted
      from ended d
    union all
    select r.ord, r.job_id, r.attempts, r.job_type, r.status, r.run_after, r.outcome,
           false, null, null, r.error, null, false, r.worker_id, r.run_started_at, r.outcome <> 'released',
           r.outcome not in ('released', 'snoozed', 'waiting')
      from retried r
  ), followed as (
    -- One row (an aggregate), so that each follow-up runs once for the call,
    -- in this order: the ended rows into the history, the story of attempts
    -- that did not complete, the finish counts (a release, snooze or wait only
    -- when it made the job DEAD), what follows the ends of parents and batch
    -- members (which reads the history), each type's retries announced once.
    -- A worker that lost its lease gets JQ001 (lease_lost) later, never JQ003.
    select pyjobq._to_history(array_agg(m.row) filter (where m.ends),
                              array_agg(m.status) filter (where m.ends), p_now,
                              case when bool_or(m.outcome = 'done')
                                   then array_agg(m.result) filter (where m.ends) end,
                              case when bool_or(m.outcome <> 'done')
                                   then array_agg(m.error) filter (where m.ends) end,
                              case when bool_or(m.outcome = 'cancelled')
                                   then array_agg(m.waiting) filter (where m.ends) end,
                              case when bool_or(m.outcome = 'expired')
                                   then array_agg(m.outcome = 'expired') filter (where m.ends) end),
           case when bool_or(m.told)
                then pyjobq._to_story(array_agg(m.job_id) filter (where m.told),
                                      array_agg(m.attempts::int) filter (where m.told),
                                      array_agg(m.worker_id::text) filter (where m.told),
                                      array_agg(m.run_started_at) filter (where m.told),
                                      array_agg(m.outcome) filter (where m.told),
                                      array_agg(m.error) filter (where m.told), p_now) end,
           pyjobq._stat_add(p_now, p_worker_id, array_agg(m.job_type) filter (where m.counted),
                            array_agg(m.status) filter (where m.counted)),
           case when p_follow and bool_or(m.followed)
                then pyjobq._ended(array_agg(m.job_id) filter (where m.followed), p_now) end,
           (select count(pyjobq._announce(r.job_type, r.due, p_now))
              from (select r.job_type, min(r.run_after) as due from retried r group by r.job_type) r)
      from moved m
  )
  select m.ord::int, m.job_id, m.attempts::int, m.job_type, m.status, m.run_after, m.followed
    from moved m
   cross join followed;
end;
$$;

comment on function pyjobq._finish(text, pyjobq.job_end[], timestamptz, smallint[], boolean) is
  'Ends the attempts p_ends that p_worker_id (any worker when null) holds, of types outside p_denied, as their '
  'outcomes say (a cancelled one whatever its status): DONE, DEAD or CANCELLED into the history, or PENDING '
  'again; counts them in job_stat, follows up dependants and batches (unless p_follow is false: the cascade '
  'follows up its own, a generation at a time), announces retries. Returns one row per attempt it moved, with '
  'its position in p_ends, its new status and whether its end is to be followed up.';

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

insert into pyjobq.api_grant (function, roles) values
  ('pyjobq.job_attempts(uuid)', '{pyjobq_producer,pyjobq_admin}');

do $$ begin perform pyjobq.grant_roles(); end; $$;

revoke all on all functions in schema pyjobq from public;
