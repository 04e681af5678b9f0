-- depends: 0032_prune_estimate

-- Schema 33: one way out of RUNNING. Every attempt ends through _finish,
-- whoever ends it and however: the test of holding written once (_holds),
-- the rows moved in one statement, the history, the finish counts,
-- dependants, batches and the announcement of retries followed up once.
-- job_complete(_many), job_fail, job_release(_many), job_reap and job_cancel
-- keep their signatures and call it; job_fail_many and job_finish_many (a
-- worker's flush of successes and failures together) are new. A DEAD from a
-- spent release is now counted in job_stat, and reaped and released retries
-- are announced like failed ones.

create type pyjobq.job_end as (
  job_id uuid,
  attempt int,
  lease_token uuid,
  outcome text,
  result jsonb,
  error text,
  delay interval
);

comment on type pyjobq.job_end is
  'How one attempt ends, as _finish takes it: the job, the attempt and lease token its holder names (any token '
  'when null), the outcome (done, failed, dead, released, expired or cancelled), the result of a done attempt, '
  'the error of a failed one and the delay before its retry (null: the type''s backoff).';

drop function pyjobq._to_history(pyjobq.job[], smallint, timestamptz, jsonb[], text[], int[], boolean);

create or replace function pyjobq._holds(p_job pyjobq.job, p_worker_id text, p_attempt int, p_lease_token uuid,
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
                                             p_job.attempts_refunded + (p_outcome = 'released')::int,
                                             p_job.max_attempts) > 0
                     then 1 else 4 end
         end::smallint;
end;

comment on function pyjobq._end_status(pyjobq.job, text) is
  'The status outcome p_outcome gives the RUNNING job p_job: 3 for done, 4 for dead, 5 for cancelled; for '
  'failed, expired and released 1 (PENDING) with tries left, else 4.';

create or replace function pyjobq._ended_by(p_job_id uuid, p_worker_id text, p_attempt int, p_lease_token uuid,
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
    from unnest(p_rows) with ordinality as r;
end;
$$;

comment on function pyjobq._to_history(pyjobq.job[], smallint[], timestamptz, jsonb[], text[], int[], boolean[]) is
  'Inserts the rows p_rows, just deleted from pyjobq.job, into job_history as ended at p_now, each with the '
  'status, and the result, error and waiting count (where those arrays are given) at its position, and '
  'without its worker where p_clear_workers says so.';

create or replace function pyjobq._finish(p_worker_id text, p_ends pyjobq.job_end[], p_now timestamptz,
                               p_denied smallint[])
returns table (ord int, job_id uuid, attempt int, job_type smallint, status smallint, run_after timestamptz)
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
as $$
begin
  return query
  with input as (
    -- An attempt named twice ends once, as its first mention says.
    select distinct on (e.job_id, e.attempt) e.*
      from unnest(p_ends) with ordinality as e(job_id, attempt, lease_token, outcome, result, error, delay, ord)
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
                when 'cancelled' then coalesce(j.last_error, 'cancelled')
                when 'released' then 'released with its claim counter spent (32767 claims)'
                else left(i.error, 10000)
              end as error
  ), retried as (
    update pyjobq.job j
       set status = 1,
           -- A release puts the job back at its old place in the queue, before
           -- claim fronts, and gives its try back; a failure waits its backoff.
           run_after = case when i.outcome = 'released' then pyjobq._pending_from(j.run_after, p_now, false)
                            else pyjobq._retry_at(j.job_type, j.attempts - j.attempts_refunded, i.delay, p_now)
                       end,
           attempts_refunded = j.attempts_refunded + (i.outcome = 'released')::int,
           last_error = case when i.outcome = 'released' then j.last_error else left(i.error, 10000) end,
           worker_id = null,
           lease_until = null,
           updated_at = p_now
      from input i
     where i.outcome in ('failed', 'expired', 'released')
       and j.job_id = i.job_id
       and pyjobq._holds(j, p_worker_id, i.attempt, i.lease_token, p_denied)
       and pyjobq._end_status(j, i.outcome) = 1
    returning i.ord, j.job_id, j.attempts, j.job_type, j.status, j.run_after, i.outcome
  ), moved as (
    select d.ord, (d.row).job_id, (d.row).attempts, (d.row).job_type, d.status, (d.row).run_after, d.outcome,
           true as ends, d.row, d.result, d.error,
           (d.row).has_dependants or (d.row).batch_id is not null as followed
      from ended d
    union all
    select r.ord, r.job_id, r.attempts, r.job_type, r.status, r.run_after, r.outcome,
           false, null, null, null, false
      from retried r
  ), followed as (
    -- One row (an aggregate), so that each follow-up runs once for the call,
    -- in this order: the ended rows into the history, the finish counts (what
    -- a holder or the reaper ended or failed, and a release only when it made
    -- the job DEAD), then what follows the ends of parents and batch members,
    -- which reads the history; and each type's retries announced once. The
    -- worker that lost its lease is not the one that ended the job: it gets
    -- JQ001 (lease_lost) later, never JQ003.
    select pyjobq._to_history(array_agg(m.row) filter (where m.ends),
                              array_agg(m.status) filter (where m.ends), p_now,
                              case when bool_or(m.outcome = 'done')
                                   then array_agg(m.result) filter (where m.ends) end,
                              case when bool_or(m.outcome <> 'done')
                                   then array_agg(m.error) filter (where m.ends) end,
                              null,
                              case when bool_or(m.outcome = 'expired')
                                   then array_agg(m.outcome = 'expired') filter (where m.ends) end),
           pyjobq._stat_add(p_now, p_worker_id,
                            array_agg(m.job_type) filter (where m.outcome <> 'cancelled'
                                                            and (m.outcome <> 'released' or m.status = 4)),
                            array_agg(m.status) filter (where m.outcome <> 'cancelled'
                                                          and (m.outcome <> 'released' or m.status = 4))),
           case when bool_or(m.followed)
                then pyjobq._ended(array_agg(m.job_id) filter (where m.followed), p_now) end,
           (select count(pyjobq._announce(r.job_type, r.due, p_now))
              from (select r.job_type, min(r.run_after) as due from retried r group by r.job_type) r)
      from moved m
  )
  select m.ord::int, m.job_id, m.attempts::int, m.job_type, m.status, m.run_after
    from moved m
   cross join followed;
end;
$$;

comment on function pyjobq._finish(text, pyjobq.job_end[], timestamptz, smallint[]) is
  'Ends the attempts p_ends that p_worker_id (any worker when null) holds, of types outside p_denied, as their '
  'outcomes say (a cancelled one whatever its status): DONE, DEAD or CANCELLED into the history, or PENDING '
  'again; counts them in job_stat, follows up dependants and batches, announces retries. Returns one row per '
  'attempt it moved, with its position in p_ends and its new status.';

create or replace function pyjobq.job_finish_many(
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
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  p_attempts := pyjobq._check_array('p_attempts', p_attempts);
  p_outcomes := pyjobq._check_array('p_outcomes', p_outcomes);
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  perform pyjobq._check_same_length('p_attempts', coalesce(cardinality(p_attempts), 0), v_count);
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
  if p_lease_tokens is not null then
    p_lease_tokens := pyjobq._check_array('p_lease_tokens', p_lease_tokens);
  end if;
  perform pyjobq._check_lease_tokens(p_lease_tokens, v_count);
  if not (p_outcomes <@ array['done', 'failed', 'dead'] and array_position(p_outcomes, null) is null) then
    v_bad := array_position(array(select o is not null and o in ('done', 'failed', 'dead')
                                    from unnest(p_outcomes) o), false);
    raise exception 'p_outcomes[%] must be done, failed or dead', v_bad
      using errcode = '22023',
            detail = format('p_outcomes[%s] was %s.', v_bad, coalesce(quote_literal(p_outcomes[v_bad]), 'null')),
            hint = 'done completes the attempt; failed retries the job while it has tries left; dead ends it.';
  end if;

  return query
  with finished as materialized (
    select f.job_id, f.attempt, f.status, f.run_after
      from pyjobq._finish(p_worker_id,
                          array(select row(u.id, u.attempt, u.token, u.outcome, u.result, u.error,
                                           make_interval(secs => u.delay))::pyjobq.job_end
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
  'p_retry_delays_seconds element (0..31536000) or the type''s backoff while tries are left, else DEAD) or dead '
  '(DEAD at once). Returns every input job id in input order with its new status (1 PENDING, 3 DONE, 4 DEAD) and '
  'run_after, or a null status for a job no longer held (left unchanged); an attempt this holder already ended '
  '(retrying after a lost reply is safe) is reported with the status it ended in. A retry notifies pyjobq_job '
  'as job_enqueue does.';

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

create or replace function pyjobq.job_fail_many(
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
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_attempt', p_attempt, 1, 32767);
  perform pyjobq._check_lease_token('p_lease_token', p_lease_token is null);
  if not exists (select
                   from pyjobq._finish(p_worker_id,
                                       array[row(p_job_id, p_attempt, p_lease_token, 'done', p_result, null,
                                                 null)::pyjobq.job_end],
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
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_attempt', p_attempt, 1, 32767);
  perform pyjobq._check_lease_token('p_lease_token', p_lease_token is null);
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
                                  make_interval(secs => p_retry_delay_seconds))::pyjobq.job_end],
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
       and pyjobq._holds(j, p_worker_id, f.attempt, f.token, v_denied)
    returning j.job_id, j.attempts, j.lease_until
  )
  select i.id, r.job_id is not null, r.lease_until,
         -- cancelled while this holder had it: stop the handler
         r.job_id is null and pyjobq._ended_by(i.id, p_worker_id, i.attempt, i.token, v_denied) is not distinct from 5
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
as $$
declare
  v_count int := coalesce(cardinality(p_job_ids), 0);
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  p_attempts := pyjobq._check_array('p_attempts', p_attempts);
  p_lease_tokens := pyjobq._check_array('p_lease_tokens', p_lease_tokens);
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  perform pyjobq._check_same_length('p_attempts', coalesce(cardinality(p_attempts), 0), v_count);
  perform pyjobq._check_lease_tokens(p_lease_tokens, v_count);

  -- The try is given back; the claim counter, the fencing token, is not: a
  -- job whose counter is spent can never be claimed again, and is DEAD.
  return query
  with released as materialized (
    select f.job_id, f.attempt
      from pyjobq._finish(p_worker_id,
                          array(select row(u.id, u.attempt, u.token, 'released', null, null, null)::pyjobq.job_end
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
  v_ids uuid[];
  v_workers text[];
  v_ends pyjobq.job_end[];
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
  -- The expired leases, locked: no completer or renewer can change them
  -- before _finish ends them; those another session holds are skipped.
  select array_agg(r.job_id), array_agg(r.worker_id::text),
         array_agg(row(r.job_id, r.attempts, r.lease_token, 'expired', null,
                       format('lease expired: worker %s did not finish attempt %s', r.worker_id, r.attempts),
                       null)::pyjobq.job_end)
    into v_ids, v_workers, v_ends
    from (select k.job_id, k.worker_id, k.attempts, k.lease_token
            from pyjobq.job k
           where k.status = 2
             and k.lease_until < v_now
           order by k.lease_until
           limit v_limit
             for update skip locked) r;
  if v_ends is not null then
    return query
    select f.job_id, f.job_type::int, f.status::int, w.worker_id, f.attempt, f.run_after
      from pyjobq._finish(null, v_ends, v_now, '{}') f
      join unnest(v_ids, v_workers) as w(job_id, worker_id) on w.job_id = f.job_id;
  end if;
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
  v_locked uuid[];
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
  select array_agg(k.job_id order by k.status = 6, k.job_id),
         coalesce(array_agg(k.job_id) filter (where k.status = 2), '{}')
    into v_locked, v_running
    from (select k.job_id, k.status
            from pyjobq.job k
           where k.job_id = any (p_job_ids)
           order by k.status = 6, k.job_id
             for no key update) k;
  select coalesce(array_agg(f.job_id), '{}')
    into v_cancelled
    from pyjobq._finish(null,
                        array(select row(c.id, null, null, 'cancelled', null, null, null)::pyjobq.job_end
                                from unnest(v_locked) as c(id)),
                        v_now, '{}') f;
  -- One line in the audit log for the call.
  perform pyjobq._audit('cancel', cardinality(v_cancelled),
                        jsonb_build_object('job_ids', (array(select c from unnest(v_cancelled) c order by c))[1:100]));
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
      select pyjobq._to_history(array_agg(x.ended), array_agg(5::smallint), p_now, null, array_agg(x.failure),
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


insert into pyjobq.api_grant (function, roles) values
  ('pyjobq.job_fail_many(text, uuid[], int[], text[], double precision[], boolean[], uuid[])', '{pyjobq_worker}'),
  ('pyjobq.job_finish_many(text, uuid[], int[], text[], jsonb[], text[], double precision[], uuid[])',
   '{pyjobq_worker}');

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
  select 33
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';
