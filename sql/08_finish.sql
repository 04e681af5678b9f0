-- Finish ----------------------------------------------------------------------

-- Every attempt leaves RUNNING through _finish, whoever ends it and however:
-- job_complete(_many), job_fail(_many) and job_finish_many for its holder,
-- job_release(_many) when the holder gives it back, job_reap when its lease
-- ran out, job_cancel from outside. Each names the attempts it ends and how
-- (pyjobq.job_end); _finish tests holding once, moves the rows in one
-- statement and follows their ends up once: the history, the finish counts,
-- dependants and batches, the announcement of retries.

create type pyjobq.job_end as (
  job_id uuid,
  attempt int,
  lease_token uuid,
  outcome text,
  result jsonb,
  error text,
  delay interval,
  waiting int
);

comment on type pyjobq.job_end is
  'How one attempt ends, as _finish takes it: the job, the attempt and lease token its holder names (any token '
  'when null), the outcome (done, failed, dead, released, snoozed, waiting, expired or cancelled), the result '
  'of a done attempt, the error of a failed or cancelled one, the delay before its retry (null: the type''s '
  'backoff) or the end of its snooze or wait (null: now), and the '
  'parents a cancelled one still waited for (null: as the row says).';

-- The one test of holding: job row p_job is RUNNING attempt p_attempt of
-- worker p_worker_id (of any worker when null: the reaper) with lease token
-- p_lease_token (any when null), of a type the caller may work. A body in
-- standard SQL, bound when created, so that it is inlined into the
-- statements that test each row.
create function pyjobq._holds(p_job pyjobq.job, p_worker_id text, p_attempt int, p_lease_token uuid,
                              p_denied smallint[])
returns boolean
language sql
immutable
begin atomic
  select p_job.status = 2
     and (p_job.worker_id = p_worker_id or p_worker_id is null)
     and p_job.attempts = p_attempt
     and (p_job.lease_token = p_lease_token or p_lease_token is null)
     and p_job.job_type <> all (p_denied);
end;

comment on function pyjobq._holds(pyjobq.job, text, int, uuid, smallint[]) is
  'True when job row p_job is RUNNING attempt p_attempt of p_worker_id (any worker when null) with lease token '
  'p_lease_token (any when null), of a type outside p_denied.';

-- Where outcome p_outcome takes the RUNNING job p_job: 3 DONE, 4 DEAD, 5
-- CANCELLED, or 1 PENDING again for a failure or an expired lease with tries
-- left, and for a release, a snooze or a wait (which give their try back)
-- unless its claim counter is spent.
create function pyjobq._end_status(p_job pyjobq.job, p_outcome text)
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

-- The status in which the attempt p_attempt of worker p_worker_id (with
-- lease token p_lease_token, any when null) ended job p_job_id, if it did:
-- a retried call whose first reply was lost learns what its first call did.
create function pyjobq._ended_by(p_job_id uuid, p_worker_id text, p_attempt int, p_lease_token uuid,
                                 p_denied smallint[])
returns smallint
language sql
stable
begin atomic
  select k.status
    from pyjobq.job_history k
   where k.job_id = p_job_id
     and k.job_type <> all (p_denied)
     and k.worker_id = p_worker_id
     and k.attempts = p_attempt
     and (k.lease_token = p_lease_token or p_lease_token is null);
end;

comment on function pyjobq._ended_by(uuid, text, int, uuid, smallint[]) is
  'The status (DONE, DEAD or CANCELLED) in which attempt p_attempt of p_worker_id, with lease token '
  'p_lease_token (any when null), ended job p_job_id of a type outside p_denied; null if it did not.';

create function pyjobq._finish(p_worker_id text, p_ends pyjobq.job_end[], p_now timestamptz,
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

create function pyjobq.job_finish_many(
  p_worker_id text,
  p_job_ids uuid[],
  p_attempts int[],
  p_outcomes text[],
  p_results jsonb[] default null,
  p_errors text[] default null,
  p_retry_delays_seconds double precision[] default null,
  p_lease_tokens uuid[] default null
)
returns table (job_id uuid, status int, run_after timestamptz)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_denied smallint[] := pyjobq._denied_types('work');
  v_count int := coalesce(cardinality(p_job_ids), 0);
  v_bad int;
begin
  select c.p_job_ids, c.p_attempts, c.p_lease_tokens
    into p_job_ids, p_attempts, p_lease_tokens
    from pyjobq._check_held_batch(p_job_ids, p_attempts, p_lease_tokens, p_worker_id) c;
  p_outcomes := pyjobq._check_array('p_outcomes', p_outcomes);
  perform pyjobq._check_same_length('p_outcomes', coalesce(cardinality(p_outcomes), 0), v_count);
  -- Null: none given; else one, possibly null, per job.
  if p_results is not null then
    p_results := pyjobq._check_array('p_results', p_results);
    perform pyjobq._check_same_length('p_results', cardinality(p_results), v_count);
  end if;
  if p_errors is not null then
    p_errors := pyjobq._check_array('p_errors', p_errors);
    perform pyjobq._check_same_length('p_errors', cardinality(p_errors), v_count);
  end if;
  if p_retry_delays_seconds is not null then
    p_retry_delays_seconds := pyjobq._check_array('p_retry_delays_seconds', p_retry_delays_seconds);
    perform pyjobq._check_same_length('p_retry_delays_seconds', cardinality(p_retry_delays_seconds), v_count);
    v_bad := array_position(array(select d is null or d between 0 and 31536000
                                    from unnest(p_retry_delays_seconds) d), false);
    if v_bad is not null then
      raise exception 'p_retry_delays_seconds[%] must be between 0 and 31536000', v_bad
        using errcode = '22023',
              detail = format('p_retry_delays_seconds[%s] was %s.', v_bad, p_retry_delays_seconds[v_bad]),
              hint = 'Leave it null for the default exponential backoff.';
    end if;
  end if;
  if not (p_outcomes <@ array['done', 'failed', 'dead', 'snoozed'] and array_position(p_outcomes, null) is null) then
    v_bad := array_position(array(select o is not null and o in ('done', 'failed', 'dead', 'snoozed')
                                    from unnest(p_outcomes) o), false);
    raise exception 'p_outcomes[%] must be done, failed, dead or snoozed', v_bad
      using errcode = '22023',
            detail = format('p_outcomes[%s] was %s.', v_bad, coalesce(quote_literal(p_outcomes[v_bad]), 'null')),
            hint = 'done completes the attempt; failed retries the job while it has tries left; dead ends it; '
                   'snoozed puts it back to sleep for its delay, its try given back.';
  end if;
  -- A snooze past its type's bound (job_type_set_snoozes) ends the job DEAD,
  -- saying why. Read before the move: only the holder changes the count.
  if 'snoozed' = any (p_outcomes) then
    select array_agg(case when s.spent then 'dead' else u.outcome end order by u.ord),
           array_agg(case when s.spent
                          then format('snoozed %s times, the most its type allows (job_type_set_snoozes)',
                                      s.snoozes)
                          else p_errors[u.ord] end order by u.ord)
      into p_outcomes, p_errors
      from unnest(p_job_ids, p_outcomes) with ordinality as u(id, outcome, ord)
      left join lateral (select j.snoozes, j.snoozes >= t.max_snoozes as spent
                           from pyjobq.job j
                           join pyjobq.job_type t on t.job_type = j.job_type
                          where j.job_id = u.id
                            and u.outcome = 'snoozed') s on true;
  end if;

  return query
  with finished as materialized (
    select f.job_id, f.attempt, f.status, f.run_after
      from pyjobq._finish(p_worker_id,
                          array(select row(u.id, u.attempt, u.token, u.outcome, u.result, u.error,
                                           make_interval(secs => u.delay), null)::pyjobq.job_end
                                  from unnest(p_job_ids, p_attempts, p_lease_tokens, p_outcomes, p_results,
                                              p_errors, p_retry_delays_seconds)
                                       with ordinality as u(id, attempt, token, outcome, result, error, delay, ord)
                                 order by u.ord),
                          v_now, v_denied) f
  )
  -- An attempt this holder ended before (a retried call whose first reply was
  -- lost) is reported as it ended then, and stays as it is.
  select i.id,
         coalesce(f.status, pyjobq._ended_by(i.id, p_worker_id, i.attempt, i.token, v_denied))::int,
         f.run_after
    from unnest(p_job_ids, p_attempts, p_lease_tokens) with ordinality as i(id, attempt, token, ord)
    left join finished f on f.job_id = i.id and f.attempt = i.attempt
   order by i.ord;
end;
$$;

comment on function pyjobq.job_finish_many(text, uuid[], int[], text[], jsonb[], text[], double precision[], uuid[]) is
  'Ends up to 10000 attempts that p_worker_id holds, each with the lease token at its position in '
  'p_lease_tokens, as the outcome at its position in p_outcomes says: done (DONE with its p_results element), '
  'failed (its p_errors element, truncated to 10000 characters, as last_error; PENDING again after its '
  'p_retry_delays_seconds element (0..31536000) or the type''s backoff while tries are left, else DEAD), dead '
  '(DEAD at once) or snoozed (PENDING again after its p_retry_delays_seconds element, 0 when null, the try given '
  'back and counted in snoozes; DEAD once the type''s max_snoozes are spent, job_type_set_snoozes). Returns every input job id in input order with its new status (1 PENDING, 3 DONE, 4 DEAD) and '
  'run_after, or a null status for a job no longer held (left unchanged); an attempt this holder already ended '
  '(retrying after a lost reply is safe) is reported with the status it ended in. A retry notifies pyjobq_job '
  'as job_enqueue does.';

create function pyjobq.job_complete_many(
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
as $$
begin
  return query
  select f.job_id, coalesce(f.status = 3, false)
    from pyjobq.job_finish_many(p_worker_id, p_job_ids, p_attempts,
                                array_fill('done'::text, array[coalesce(cardinality(p_job_ids), 0)]),
                                p_results, null, null, p_lease_tokens) f;
end;
$$;

comment on function pyjobq.job_complete_many(text, uuid[], int[], jsonb[], uuid[]) is
  'job_complete for up to 10000 jobs in one call: each job whose attempt p_worker_id still holds, with the lease '
  'token at its position in p_lease_tokens, becomes DONE. '
  'Returns every input job id with completed = true when that attempt is DONE (now, or by an earlier call of '
  'the same holder: retrying after a lost reply is safe) and false for those no longer held (left unchanged).';

create function pyjobq.job_fail_many(
  p_worker_id text,
  p_job_ids uuid[],
  p_attempts int[],
  p_errors text[] default null,
  p_retry_delays_seconds double precision[] default null,
  p_dead_letters boolean[] default null,
  p_lease_tokens uuid[] default null
)
returns table (job_id uuid, status int, run_after timestamptz)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_count int := coalesce(cardinality(p_job_ids), 0);
begin
  p_dead_letters := pyjobq._check_array('p_dead_letters', p_dead_letters);
  if p_dead_letters is not null then
    perform pyjobq._check_same_length('p_dead_letters', cardinality(p_dead_letters), v_count);
  end if;
  return query
  select f.job_id, f.status, f.run_after
    from pyjobq.job_finish_many(p_worker_id, p_job_ids, p_attempts,
                                array(select case when coalesce(p_dead_letters[i], false) then 'dead' else 'failed' end
                                        from generate_series(1, v_count) i),
                                null, p_errors, p_retry_delays_seconds, p_lease_tokens) f;
end;
$$;

comment on function pyjobq.job_fail_many(text, uuid[], int[], text[], double precision[], boolean[], uuid[]) is
  'job_fail for up to 10000 attempts in one call, each with the error, retry delay (0..31536000 seconds, null: '
  'the type''s backoff), dead letter flag and lease token at its position. Returns every input job id in input '
  'order with its new status (1 PENDING, 4 DEAD) and run_after, or a null status for a job no longer held (left '
  'unchanged); an attempt this holder already ended is reported with the status it ended in.';

create function pyjobq.job_complete(
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
begin
  perform pyjobq._check_holder(p_worker_id, p_attempt, p_lease_token);
  if not exists (select
                   from pyjobq._finish(p_worker_id,
                                       array[row(p_job_id, p_attempt, p_lease_token, 'done', p_result, null,
                                                 null, null)::pyjobq.job_end],
                                       pyjobq.clock_now(), pyjobq._denied_types('work'))) then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt, p_lease_token);
  end if;
end;
$$;

comment on function pyjobq.job_complete(uuid, text, int, jsonb, uuid) is
  'Marks job p_job_id DONE with p_result, if p_worker_id still holds attempt p_attempt of it (RUNNING) with '
  'lease token p_lease_token; otherwise raises JQ001 lease_lost, JQ002 job_not_found or JQ003 '
  'job_already_finished and changes nothing. Without p_lease_token: 22004, unless the caller owns the schema '
  'or job_settings accepts such calls.';

create function pyjobq.job_fail(
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
begin
  perform pyjobq._check_holder(p_worker_id, p_attempt, p_lease_token);
  if not (p_retry_delay_seconds between 0 and 31536000) then
    raise exception 'p_retry_delay_seconds must be between 0 and 31536000'
      using errcode = '22023',
            detail = format('p_retry_delay_seconds was %s.', p_retry_delay_seconds),
            hint = 'Leave it out for the default exponential backoff.';
  end if;
  select f.status, f.run_after
    into status, run_after
    from pyjobq._finish(p_worker_id,
                        array[row(p_job_id, p_attempt, p_lease_token,
                                  case when p_dead_letter then 'dead' else 'failed' end, null, p_error,
                                  make_interval(secs => p_retry_delay_seconds), null)::pyjobq.job_end],
                        pyjobq.clock_now(), pyjobq._denied_types('work')) f;
  if status is null then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt, p_lease_token);
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

create function pyjobq.job_release_many(
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
as $$
begin
  select c.p_job_ids, c.p_attempts, c.p_lease_tokens
    into p_job_ids, p_attempts, p_lease_tokens
    from pyjobq._check_held_batch(p_job_ids, p_attempts, p_lease_tokens, p_worker_id) c;

  -- The try is given back; the claim counter, the fencing token, is not: a
  -- job whose counter is spent can never be claimed again, and is DEAD.
  return query
  with released as materialized (
    select f.job_id, f.attempt
      from pyjobq._finish(p_worker_id,
                          array(select row(u.id, u.attempt, u.token, 'released', null, null, null, null)::pyjobq.job_end
                                  from unnest(p_job_ids, p_attempts, p_lease_tokens)
                                       with ordinality as u(id, attempt, token, ord)
                                 order by u.ord),
                          pyjobq.clock_now(), pyjobq._denied_types('work')) f
  )
  select i.id, exists (select from released r where r.job_id = i.id and r.attempt = i.attempt)
    from unnest(p_job_ids, p_attempts) with ordinality as i(id, attempt, ord)
   order by i.ord;
end;
$$;

comment on function pyjobq.job_release_many(text, uuid[], int[], uuid[]) is
  'job_release for up to 10000 jobs in one call: each job whose attempt p_worker_id still holds, with the lease '
  'token at its position in p_lease_tokens, is PENDING '
  'again at its old place in the queue, the try given back (attempts_refunded + 1; attempts, the fencing token, '
  'stays). Returns every input job id, in input order, with released = false for a job no longer held (left '
  'unchanged).';

create function pyjobq.job_release(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_lease_token uuid default null
)
returns void
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
begin
  perform pyjobq._check_holder(p_worker_id, p_attempt, p_lease_token);
  if not (select r.released
            from pyjobq.job_release_many(p_worker_id, array[p_job_id], array[p_attempt],
                                         case when p_lease_token is not null then array[p_lease_token] end) r) then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt, p_lease_token);
  end if;
end;
$$;

comment on function pyjobq.job_release(uuid, text, int, uuid) is
  'Gives attempt p_attempt of job p_job_id, held with lease token p_lease_token, back unused (e.g. a worker shutting down before starting it): '
  'PENDING again at its old place in the queue, the try given back (the next claim is attempt p_attempt + 1 '
  'and does not count against max_attempts). Raises JQ001/JQ002/JQ003 like job_complete.';
