-- Waits and signals ----------------------------------------------------------

-- A job waits for a named event (an approval, a webhook, another job's word)
-- with job_event_wait, and anyone with the enqueue privilege on its type sends
-- it with job_signal. The waiting attempt ends (PENDING until the timeout, its
-- try given back, nothing held); the signal makes it due at once, and the
-- next attempt's job_event_wait returns the payload. Both sides write one row
-- of pyjobq.job_event, whoever comes first inserting it, so a signal sent
-- before the wait is there when it comes, and one sent while the job is
-- about to wait is never missed.

-- A row per job and event name: the primary key orders the wait and the
-- signal, whichever comes first. Rows stay after the job ends and go with it
-- when job_prune deletes it.
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

create function pyjobq.job_event_wait(
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

create function pyjobq.job_signal(p_job_id uuid, p_name text, p_payload jsonb default null)
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

-- What a job waits for, and what was sent to it, for people watching.
create function pyjobq.job_event_list(p_job_id uuid)
returns table (name text, state text, wait_until timestamptz, signalled_at timestamptz, payload jsonb)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
begin
  perform pyjobq._check_observe(p_job_id);
  return query
  select e.name::text,
         case when e.signalled_at is not null and e.wait_until is null then 'sent'
              when e.signalled_at is not null then 'signalled'
              when e.wait_until <= v_now then 'timed_out'
              else 'waiting' end,
         e.wait_until, e.signalled_at, e.payload
    from pyjobq.job_event e
   where e.job_id = p_job_id
   order by e.name;
end;
$$;

comment on function pyjobq.job_event_list(uuid) is
  'The events of job p_job_id by name, each waited for (job_event_wait) or sent (job_signal), with its state: '
  'waiting (neither its signal nor its timeout yet), signalled, timed_out, or sent (signalled, not waited for '
  'yet); when the first wait times out, when the signal came, and its payload. For callers that may observe '
  'the job''s type; no rows for a job without events or that does not exist.';
