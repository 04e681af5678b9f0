-- depends: 0053_snooze

-- Schema 54: waits and signals. A handler waits for a named event
-- (job_event_wait): its attempt ends, the job PENDING until the wait times
-- out, and job_signal makes it due at once; the next attempt reads the
-- payload. job_prune deletes the events with their jobs.

create table pyjobq.job_event (
  job_id uuid not null,
  name varchar(200) not null,
  wait_until timestamptz,
  payload jsonb,
  signalled_at timestamptz,
  constraint job_event_pkey primary key (job_id, name)
);

comment on table pyjobq.job_event is
  'The events of jobs: when the first wait for each times out (wait_until, set by job_event_wait) and the '
  'signal sent (payload and signalled_at, set once by job_signal). Deleted by job_prune with their jobs.';

comment on type pyjobq.job_end is
  'How one attempt ends, as _finish takes it: the job, the attempt and lease token its holder names (any token '
  'when null), the outcome (done, failed, dead, released, snoozed, waiting, expired or cancelled), the result '
  'of a done attempt, the error of a failed or cancelled one, the delay before its retry (null: the type''s '
  'backoff) or the end of its snooze or wait (null: now), and the '
  'parents a cancelled one still waited for (null: as the row says).';

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 54
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq._end_status(p_job pyjobq.job, p_outcome text)
returns smallint
language sql
immutable
begin atomic
  select case p_outcome
           when 'done' then 3
           when 'dead' then 4
           when 'cancelled' then 5
           else case when pyjobq._tries_left(p_job.attempts,
                                             p_job.attempts_refunded + (p_outcome in ('released', 'snoozed', 'waiting'))::int,
                                             p_job.max_attempts) > 0
                     then 1 else 4 end
         end::smallint;
end;

comment on function pyjobq._end_status(pyjobq.job, text) is
  'The status outcome p_outcome gives the RUNNING job p_job: 3 for done, 4 for dead, 5 for cancelled; for '
  'failed, expired, released, snoozed and waiting 1 (PENDING) with tries left, else 4.';

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
    returning i.ord, j.job_id, j.attempts, j.job_type, j.status, j.run_after, i.outcome
  ), moved as (
    select d.ord, (d.row).job_id, (d.row).attempts, (d.row).job_type, d.status, (d.row).run_after, d.outcome,
           true as ends, d.row, d.result, d.error, d.waiting,
           (d.row).has_dependants or (d.row).batch_id is not null as followed
      from ended d
    union all
    select r.ord, r.job_id, r.attempts, r.job_type, r.status, r.run_after, r.outcome,
           false, null, null, null, null, false
      from retried r
  ), followed as (
    -- One row (an aggregate), so that each follow-up runs once for the call,
    -- in this order: the ended rows into the history, the finish counts (what
    -- a holder or the reaper ended or failed, and a release, a snooze or a
    -- wait only when it made the job DEAD), then what follows the ends of parents and batch members,
    -- which reads the history; and each type's retries announced once. The
    -- worker that lost its lease is not the one that ended the job: it gets
    -- JQ001 (lease_lost) later, never JQ003.
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
           pyjobq._stat_add(p_now, p_worker_id,
                            array_agg(m.job_type) filter (where m.outcome <> 'cancelled'
                                                            and (m.outcome not in ('released', 'snoozed',
                                                                                   'waiting')
                                                                 or m.status = 4)),
                            array_agg(m.status) filter (where m.outcome <> 'cancelled'
                                                          and (m.outcome not in ('released', 'snoozed',
                                                                                 'waiting')
                                                               or m.status = 4))),
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

create or replace function pyjobq.job_event_wait(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_name text,
  p_timeout_seconds double precision default null,
  p_lease_token uuid default null
)
returns table (outcome text, payload jsonb, wait_until timestamptz)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_event pyjobq.job_event;
begin
  perform pyjobq._check_text('p_name', p_name, 200, false);
  perform pyjobq._check_seconds('p_timeout_seconds', p_timeout_seconds, 0, 31536000);
  perform pyjobq._check_holds(p_job_id, p_worker_id, p_attempt, p_lease_token);
  -- The first wait for the name sets its timeout; a later one (the attempt
  -- the signal or the timeout woke) reads how it ended. A signal being sent
  -- right now holds the row: this waits for its commit.
  insert into pyjobq.job_event as e (job_id, name, wait_until)
  values (p_job_id, p_name, v_now + make_interval(secs => coalesce(p_timeout_seconds, 86400)))
  on conflict on constraint job_event_pkey
  do update set wait_until = coalesce(e.wait_until, excluded.wait_until)
  returning e.* into v_event;
  if v_event.signalled_at is not null then
    return query select 'signalled', v_event.payload, v_event.wait_until;
  elsif v_event.wait_until <= v_now then
    return query select 'timed_out', null::jsonb, v_event.wait_until;
  else
    -- Asleep until the signal or the timeout: the attempt ends here.
    perform from pyjobq._finish(p_worker_id,
                                array[row(p_job_id, p_attempt, p_lease_token, 'waiting', null, null,
                                          v_event.wait_until - v_now, null)::pyjobq.job_end],
                                v_now, pyjobq._denied_types('work'));
    if not found then
      perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt, p_lease_token);
    end if;
    return query select 'waiting', null::jsonb, v_event.wait_until;
  end if;
end;
$$;

comment on function pyjobq.job_event_wait(uuid, text, int, text, double precision, uuid) is
  'Waits for event p_name (1 to 200 characters) of job p_job_id, if p_worker_id holds attempt p_attempt of it '
  'with lease token p_lease_token (raising as job_step_save does when it does not). Returns outcome signalled '
  'and the payload when job_signal sent it, before or after; timed_out once the first wait for the name has '
  'lasted p_timeout_seconds (0 to 31536000, a day when null); else waiting: the attempt ends, the job PENDING '
  'until the timeout with its try given back, and job_signal makes it due at once. The next attempt calls it '
  'again to learn how the wait ended.';

create or replace function pyjobq.job_signal(p_job_id uuid, p_name text, p_payload jsonb default null)
returns boolean
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_job_type smallint;
  v_ended boolean;
  v_wait timestamptz;
begin
  perform pyjobq._check_text('p_name', p_name, 200, false);
  if p_job_id is null then
    raise exception 'p_job_id must not be null'
      using errcode = '22004',
            hint = 'Pass the id of the job that waits for the event.';
  end if;
  select j.job_type, j.status in (3, 4, 5)
    into v_job_type, v_ended
    from pyjobq.job_all j
   where j.job_id = p_job_id;
  if not found then
    raise exception 'job % does not exist', p_job_id
      using errcode = 'JQ002',
            hint = 'It may have been pruned, or the id is wrong.';
  end if;
  perform pyjobq._check_privilege('enqueue', array[v_job_type]);
  if v_ended then
    raise exception 'job % has ended', p_job_id
      using errcode = 'JQ003',
            hint = 'A signal reaches a job that has yet to end.';
  end if;
  insert into pyjobq.job_event as e (job_id, name, payload, signalled_at)
  values (p_job_id, p_name, p_payload, v_now)
  on conflict on constraint job_event_pkey
  do update set payload = excluded.payload, signalled_at = excluded.signalled_at
          where e.signalled_at is null
  returning e.wait_until into v_wait;
  if not found then
    return false;  -- sent before: a signal is delivered once
  end if;
  if v_wait > v_now then
    -- The job sleeps for this event: due now. (Claims skip it until this
    -- commits; a job claimed meanwhile reads the signal at its next wait.)
    update pyjobq.job j
       set run_after = pyjobq._pending_from(v_now, v_now, false),
           updated_at = v_now
     where j.job_id = p_job_id
       and j.status = 1
       and j.run_after > v_now;
    if found then
      perform pyjobq._announce(v_job_type, v_now, v_now);
    end if;
  end if;
  return true;
end;
$$;

comment on function pyjobq.job_signal(uuid, text, jsonb) is
  'Sends event p_name (1 to 200 characters) with p_payload (any JSON, or null) to job p_job_id, of a type the '
  'caller may enqueue: a job waiting for it (job_event_wait) is due at once, and one that waits for it later '
  'gets it then. Returns true, or false when the job already had this event (a signal is delivered once; the '
  'first payload stays). Raises JQ002 for no such job and JQ003 for a job that has ended.';

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
  -- The steps and events of the jobs gone, up to p_limit jobs: those of a job
  -- enqueued before the cutoff (its id says when) that is neither active nor
  -- in the history.
  with gone as (
    select distinct d.job_id
      from (select s.job_id from pyjobq.job_step s
            union all
            select e.job_id from pyjobq.job_event e) d
     where d.job_id < pyjobq._job_id_floor(v_cutoff)
       and not exists (select from pyjobq.job_all j where j.job_id = d.job_id)
     limit v_limit
  ), steps as (
    delete from pyjobq.job_step s using gone g where s.job_id = g.job_id
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
  'a parent with a dependant yet to end), with their dependency edges, steps and events: first every day of history that ended '
  'by then, whole, by dropping its partition of job_history (waiting at most 100 ms for its lock, else left to '
  'the next call), then up to p_limit (1..100000, default 10000) of the rest, row by row; and the batches '
  'finished as long ago whose jobs are all gone. Returns how many jobs it deleted; call it again until it '
  'returns less than p_limit. Also deletes the audit lines older than the install''s audit_retention '
  '(job_settings) and drops the rate windows with no claim in the last 25 hours, which count nothing. A call '
  'that deleted jobs or audit lines writes a line to the audit log (job_audit), with the days it dropped and '
  'the audit lines it deleted.';

insert into pyjobq.api_grant (function, roles) values
  ('pyjobq.job_event_wait(uuid, text, int, text, double precision, uuid)', '{pyjobq_worker}'),
  ('pyjobq.job_signal(uuid, text, jsonb)', '{pyjobq_producer,pyjobq_admin}');

do $$ begin perform pyjobq.grant_roles(); end; $$;

revoke all on all functions in schema pyjobq from public;
