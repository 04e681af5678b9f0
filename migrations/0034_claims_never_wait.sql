-- depends: 0033_one_way_out

-- Schema 34: a claim never waits long for another claim, and never counts a
-- concurrency limit with an old snapshot. The lock of a limited type is
-- waited for 50 ms at most in all; a type whose lock another claim keeps
-- longer (a client claiming inside its own long transaction) is left out of
-- this claim, which takes every other type's jobs. A claim of a type with a
-- concurrency limit outside READ COMMITTED is refused with JQ007.
--
-- The dependency cascade ends the children it cancels through _finish too,
-- a generation at a time (p_follow false), the count of parents they still
-- waited for carried in job_end. And the holders' calls check their common
-- arguments with one function each (_check_holder, _check_held_batch).

alter type pyjobq.job_end add attribute waiting int;

comment on type pyjobq.job_end is
  'How one attempt ends, as _finish takes it: the job, the attempt and lease token its holder names (any token '
  'when null), the outcome (done, failed, dead, released, expired or cancelled), the result of a done attempt, '
  'the error of a failed or cancelled one, the delay before its retry (null: the type''s backoff), and the '
  'parents a cancelled one still waited for (null: as the row says).';

drop function pyjobq._finish(text, pyjobq.job_end[], timestamptz, smallint[]);

create or replace function pyjobq._check_holder(p_worker_id text, p_attempt int, p_lease_token uuid)
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_attempt', p_attempt, 1, 32767);
  perform pyjobq._check_lease_token('p_lease_token', p_lease_token is null);
end;
$$;

comment on function pyjobq._check_holder(text, int, uuid) is
  'Checks the arguments of a holder''s call on one job: p_worker_id as _check_text, p_attempt 1..32767, and '
  'p_lease_token as _check_lease_token.';

create or replace function pyjobq._check_held_batch(
  inout p_job_ids uuid[],
  inout p_attempts int[],
  inout p_lease_tokens uuid[],
  p_worker_id text
)
returns record
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
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
end;
$$;

comment on function pyjobq._check_held_batch(uuid[], int[], uuid[], text) is
  'Checks the arguments of a holder''s call on many jobs (p_worker_id, 1..10000 p_job_ids, as many p_attempts '
  'and p_lease_tokens) as _check_text, _check_range, _check_same_length and _check_lease_tokens do, and returns '
  'the arrays renumbered from 1 (_check_array).';

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
                else left(i.error, 10000)
              end as error,
              coalesce(i.waiting, j.waiting_on) as waiting
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
                              case when bool_or(m.outcome = 'cancelled')
                                   then array_agg(m.waiting) filter (where m.ends) end,
                              case when bool_or(m.outcome = 'expired')
                                   then array_agg(m.outcome = 'expired') filter (where m.ends) end),
           pyjobq._stat_add(p_now, p_worker_id,
                            array_agg(m.job_type) filter (where m.outcome <> 'cancelled'
                                                            and (m.outcome <> 'released' or m.status = 4)),
                            array_agg(m.status) filter (where m.outcome <> 'cancelled'
                                                          and (m.outcome <> 'released' or m.status = 4))),
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
  'p_retry_delays_seconds element (0..31536000) or the type''s backoff while tries are left, else DEAD) or dead '
  '(DEAD at once). Returns every input job id in input order with its new status (1 PENDING, 3 DONE, 4 DEAD) and '
  'run_after, or a null status for a job no longer held (left unchanged); an attempt this holder already ended '
  '(retrying after a lost reply is safe) is reported with the status it ended in. A retry notifies pyjobq_job '
  'as job_enqueue does.';

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

create or replace function pyjobq.job_release(
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
                       null, null)::pyjobq.job_end)
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
begin
  select c.p_job_ids, c.p_attempts, c.p_lease_tokens
    into p_job_ids, p_attempts, p_lease_tokens
    from pyjobq._check_held_batch(p_job_ids, p_attempts, p_lease_tokens, p_worker_id) c;
  perform pyjobq._check_range('p_lease_seconds', v_lease, 1, 86400);

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

create or replace function pyjobq.job_renew_lease(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_lease_seconds int default null,
  p_lease_token uuid default null
)
returns timestamptz
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_lease_until timestamptz;
begin
  perform pyjobq._check_holder(p_worker_id, p_attempt, p_lease_token);
  select r.lease_until
    into v_lease_until
    from pyjobq.job_renew_lease_many(p_worker_id, array[p_job_id], array[p_attempt], p_lease_seconds,
                                     case when p_lease_token is not null then array[p_lease_token] end) r;
  -- Not renewed: why, including JQ005 when the job was cancelled.
  if v_lease_until is null then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt, p_lease_token);
  end if;
  return v_lease_until;
end;
$$;

comment on function pyjobq.job_renew_lease(uuid, text, int, int, uuid) is
  'Heartbeat: extends the lease of attempt p_attempt of job p_job_id to now + p_lease_seconds (1..86400, '
  'default 300), never past the attempt''s deadline, if p_worker_id still holds it with lease token p_lease_token, and returns the new lease_until; raises JQ001/JQ002/JQ003 otherwise. '
  'A holder whose lease expired but was not yet reaped still holds the job.';

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
                        array(select row(c.id, null, null, 'cancelled', null, null, null, null)::pyjobq.job_end
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
  v_ends pyjobq.job_end[];
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
      select c.job_id, n.resolved, n.failure, c.waiting_on - n.resolved as waiting,
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
    )
    select (select array_agg(distinct ch.job_type) filter (where ch.status = 1) from changed ch),
           array(select row(n.job_id, null, null, 'cancelled', null, n.failure, null, n.waiting)::pyjobq.job_end
                   from locked n
                  where n.cancels)
      into v_types, v_ends;
    -- A parent that ended DEAD or CANCELLED ends the child CANCELLED, through
    -- the one way out; what follows its end (its dependants, its batch) is
    -- the next round's.
    select coalesce(array_agg(f.job_id) filter (where f.followed), '{}')
      into v_ended
      from pyjobq._finish(null, v_ends, p_now, '{}', false) f;
    v_members := v_members || v_ended;
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

create or replace function pyjobq._claim_limited(
  p_worker_id text,
  p_types smallint[],
  p_limit int,
  p_lease int,
  p_now timestamptz
)
returns table (
  job_id uuid,
  job_type int,
  priority int,
  payload jsonb,
  attempt int,
  max_attempts int,
  dedupe_key text,
  run_after timestamptz,
  lease_until timestamptz,
  created_at timestamptz,
  lease_token uuid,
  metadata jsonb,
  parent_results jsonb
)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
set enable_sort = off
set jit = off
-- Nothing but a type lock is waited for (below), and that 50 ms at most.
set lock_timeout = '100ms'
as $$
declare
  c_visits constant int := 10000;  -- due jobs a claim looks at, at most
  c_lock_wait constant interval := '50 milliseconds';  -- for type locks, in all
  v_waited_until timestamptz := clock_timestamp() + c_lock_wait;
  v_busy smallint[] := '{}';       -- types another claim holds: not claimed this time
  v_at timestamptz := p_now;       -- the claim's time
  v_type record;
  v_room jsonb := '{}';            -- room left, by "type" and "type/key", once counted
  v_keyed jsonb := '{}';           -- key limits, by "type": {max, rate, period}
  v_taken jsonb := '{}';           -- jobs taken, by "type" and "type/key", where a rate counts them
  v_rule jsonb;
  v_w record;
  v_plain refcursor;
  v_fair refcursor;
  v_p record;
  v_f record;
  v_p_found boolean;
  v_f_found boolean;
  v_fair_turn boolean := true;
  v_c record;
  v_key text;
  v_row record;
  v_claimed int := 0;
  v_ids uuid[];
  v_mine text[];
begin
  if current_setting('transaction_isolation') <> 'read committed'
     and exists (select from pyjobq.job_type t
                  where t.job_type = any (p_types)
                    and (t.max_running is not null or t.key_max_running is not null)) then
    raise exception 'job_claim of a type with a concurrency limit needs READ COMMITTED, not %',
                    upper(current_setting('transaction_isolation'))
      using errcode = 'JQ007',
            detail = 'Under it the RUNNING jobs would be counted with the transaction''s first snapshot, '
                     'which misses claims committed since.',
            hint = 'Claim in a transaction of its own, or at READ COMMITTED.';
  end if;
  for v_type in
    select t.job_type, t.max_running, t.rate_limit
      from pyjobq.job_type t
     where t.job_type = any (p_types)
       and (t.max_running is not null or t.rate_limit is not null)
     order by t.job_type
  loop
    if not pg_try_advisory_xact_lock(1887005297, v_type.job_type) then
      begin
        perform set_config('lock_timeout',
                           greatest(1, ceil(extract(epoch from v_waited_until - clock_timestamp()) * 1000))::text
                             || 'ms', true);
        perform pg_advisory_xact_lock(1887005297, v_type.job_type);
        perform set_config('lock_timeout', '100ms', true);
      exception when lock_not_available then
        v_busy := v_busy || v_type.job_type;
        continue;
      end;
    end if;
    if v_type.rate_limit is not null then
      -- A statement of its own: its snapshot follows the lock.
      v_at := greatest(v_at, (select w.claimed_at[cardinality(w.claimed_at)]
                                from pyjobq.rate_window w
                               where w.job_type = v_type.job_type and w.concurrency_key = ''));
    end if;
  end loop;
  p_types := array(select t from unnest(p_types) t where t <> all (v_busy));

  for v_type in
    select t.job_type, t.max_running, t.key_max_running, t.rate_limit, t.rate_period, t.key_rate_limit,
           t.key_rate_period, w.claimed_at, w.claimed
      from pyjobq.job_type t
      left join pyjobq.rate_window w on w.job_type = t.job_type and w.concurrency_key = ''
     where t.job_type = any (p_types)
  loop
    if v_type.max_running is not null then
      v_room := v_room || jsonb_build_object(v_type.job_type::text, v_type.max_running - (
        select count(*)
          from (select 1
                  from pyjobq.job r
                 where r.lease_until is not null  -- RUNNING: job_running_has_lease
                   and r.job_type = v_type.job_type
                 limit v_type.max_running) as r));
    end if;
    if v_type.rate_limit is not null then
      v_room := v_room || jsonb_build_object(v_type.job_type::text, least(
        (v_room ->> v_type.job_type::text)::int,
        v_type.rate_limit - pyjobq._rate_used(v_type.claimed_at, v_type.claimed, v_at - v_type.rate_period)));
      v_taken := v_taken || jsonb_build_object(v_type.job_type::text, 0);
    end if;
    if v_type.key_max_running is not null or v_type.key_rate_limit is not null then
      v_keyed := v_keyed || jsonb_build_object(v_type.job_type::text, jsonb_build_object(
        'max', v_type.key_max_running, 'rate', v_type.key_rate_limit, 'period', v_type.key_rate_period));
    end if;
  end loop;

  -- No limit can bind within this claim: no key has one, no type is fair, and
  -- every limited type has room for all p_limit jobs. Then the claim is the
  -- plain one, set-based and resuming from the session's claim front, at the
  -- claim's time; the rates count what it took. (A type limit that never binds
  -- costs its lock and its count, not the walk below.)
  if v_keyed = '{}'
     and not exists (select from jsonb_each_text(v_room) r where r.value::int < p_limit)
     and not exists (select from pyjobq.job_type t where t.job_type = any (p_types) and t.fair_share) then
    for v_row in select * from pyjobq._claim_pick(p_worker_id, p_types, p_limit, p_lease, v_at) loop
      v_taken := pyjobq._count_down(v_taken, v_row.job_type::text, null);
      job_id := v_row.job_id;
      job_type := v_row.job_type;
      priority := v_row.priority;
      payload := v_row.payload;
      attempt := v_row.attempt;
      max_attempts := v_row.max_attempts;
      dedupe_key := v_row.dedupe_key;
      run_after := v_row.run_after;
      lease_until := v_row.lease_until;
      created_at := v_row.created_at;
      lease_token := v_row.lease_token;
      metadata := v_row.metadata;
      parent_results := v_row.parent_results;
      return next;
    end loop;
    perform pyjobq._rate_record_taken(v_taken, v_at);
    return;
  end if;

  -- Keys with a limit on their RUNNING jobs and nothing else in the way (no key
  -- rate, no fair share): the first due jobs, a few times what the claim wants,
  -- are taken in one pass. One statement tries their keys' locks; the next,
  -- whose snapshot follows the locks, counts the keys' RUNNING jobs, picks the
  -- jobs their key and type have room for, in claim order, and leases them.
  -- What the pass could not fill, the walk below takes on from the head (its
  -- counts see what the pass took).
  if v_keyed <> '{}'
     and not exists (select from jsonb_each(v_keyed) k where k.value ->> 'rate' is not null)
     and not exists (select from pyjobq.job_type t where t.job_type = any (p_types) and t.fair_share) then
    select array_agg(c.job_id order by c.ord),
           array_agg(distinct c.job_type || '/' || c.concurrency_key)
             filter (where case when c.concurrency_key is not null and v_keyed ? c.job_type::text
                                then pg_try_advisory_xact_lock(-c.job_type, hashtext(c.concurrency_key))
                                else false end)
      into v_ids, v_mine
      from (select d.job_id, d.job_type, d.concurrency_key, row_number() over () as ord
              from (select d.job_id, d.job_type, d.concurrency_key
                      from pyjobq.job d
                     where d.status = 1
                       and d.run_after <= p_now
                       and d.job_type = any (p_types)
                       and d.fair_rank is null
                     order by d.priority, d.run_after, d.seq
                     limit 4 * p_limit) d) c;
    for v_row in
      with cand as (
        select u.ord, j.job_id, j.job_type, j.concurrency_key,
               j.job_type || '/' || j.concurrency_key as key
          from unnest(v_ids) with ordinality u(job_id, ord)
          join pyjobq.job j on j.job_id = u.job_id and j.status = 1
      ),
      room as (
        select k.key, (v_keyed -> split_part(k.key, '/', 1) ->> 'max')::int - (
                 select count(*)
                   from pyjobq.job r
                  where r.status = 2
                    and r.concurrency_key is not null
                    and r.job_type = split_part(k.key, '/', 1)::smallint
                    and r.concurrency_key = substr(k.key, position('/' in k.key) + 1)) as left_
          from unnest(v_mine) k(key)
      ),
      by_key as (
        select c.*, row_number() over (partition by c.key order by c.ord) as nth
          from cand c
      ),
      keyed as (
        select b.*
          from by_key b
          left join room r on r.key = b.key
         where b.concurrency_key is null
            or not v_keyed ? b.job_type::text
            or b.nth <= r.left_
      ),
      typed as (
        select k.*, row_number() over (partition by k.job_type order by k.ord) as nth_of_type
          from keyed k
      ),
      picked as (
        select t.job_id
          from typed t
         where t.nth_of_type <= coalesce((v_room ->> t.job_type::text)::int, p_limit)
         order by t.ord
         limit p_limit
      ),
      locked as (
        select l.job_id from pyjobq.job l
         where l.job_id in (select p.job_id from picked p) and l.status = 1
           for update skip locked
      ),
      claimed as (
        update pyjobq.job j
           set status = 2,
               attempts = j.attempts + 1,
               worker_id = p_worker_id,
               lease_token = gen_random_uuid(),
               lease_until = v_at + make_interval(secs => least(p_lease, t.timeout_seconds)),
               run_started_at = v_at,
               updated_at = v_at
          from locked l, pyjobq.job_type t
         where j.job_id = l.job_id
           and t.job_type = j.job_type
        returning j.job_id, j.job_type, j.priority, j.payload, j.attempts, j.max_attempts, j.dedupe_key,
                  j.run_after, j.lease_until, j.created_at, j.lease_token, j.metadata,
                  case when j.waiting_on is not null then pyjobq._parent_results(j.job_id) end as parent_results,
                  j.seq
      )
      select c.* from claimed c order by c.priority, c.run_after, c.seq
    loop
      v_room := pyjobq._count_down(v_room, v_row.job_type::text, null);
      v_taken := pyjobq._count_down(v_taken, v_row.job_type::text, null);
      job_id := v_row.job_id;
      job_type := v_row.job_type;
      priority := v_row.priority;
      payload := v_row.payload;
      attempt := v_row.attempts;
      max_attempts := v_row.max_attempts;
      dedupe_key := v_row.dedupe_key;
      run_after := v_row.run_after;
      lease_until := v_row.lease_until;
      created_at := v_row.created_at;
      lease_token := v_row.lease_token;
      metadata := v_row.metadata;
      parent_results := v_row.parent_results;
      return next;
      v_claimed := v_claimed + 1;
    end loop;
    if v_claimed >= p_limit or coalesce(cardinality(v_ids), 0) < 4 * p_limit then
      perform pyjobq._rate_record_taken(v_taken, v_at);
      return;
    end if;
  end if;

  -- Two streams of due jobs: in claim order, and the fair-share jobs in their
  -- turns (job.fair_rank); the more urgent priority first, and taking turns
  -- within one.
  open v_plain for
    select c.job_id, c.job_type, c.concurrency_key, c.priority
      from pyjobq.job c
     where c.status = 1
       and c.run_after <= p_now
       and c.job_type = any (p_types)
       and c.fair_rank is null
     order by c.priority, c.run_after, c.seq
     limit c_visits;
  open v_fair for
    select c.job_id, c.job_type, c.concurrency_key, c.priority
      from pyjobq.job c
     where c.status = 1
       and c.fair_rank is not null
       and c.run_after <= p_now
       and c.job_type = any (p_types)
     order by c.priority, c.fair_rank, c.seq
     limit c_visits;
  fetch v_plain into v_p;
  v_p_found := found;
  fetch v_fair into v_f;
  v_f_found := found;
  loop
    if v_f_found and (not v_p_found or v_f.priority < v_p.priority
                      or (v_f.priority = v_p.priority and v_fair_turn)) then
      v_c := v_f;
      fetch v_fair into v_f;
      v_f_found := found;
      v_fair_turn := false;
    elsif v_p_found then
      v_c := v_p;
      fetch v_plain into v_p;
      v_p_found := found;
      v_fair_turn := true;
    else
      exit;
    end if;
    continue when (v_room ->> v_c.job_type::text)::int <= 0;
    v_key := null;
    v_rule := v_keyed -> v_c.job_type::text;
    if v_c.concurrency_key is not null and v_rule is not null then
      v_key := v_c.job_type || '/' || v_c.concurrency_key;
      if not v_room ? v_key then
        v_room := v_room || jsonb_build_object(v_key, 0);
        if pg_try_advisory_xact_lock(-v_c.job_type, hashtext(v_c.concurrency_key)) then
          v_room := v_room || jsonb_build_object(v_key, 100000);
          if v_rule ->> 'max' is not null then
            v_room := v_room || jsonb_build_object(v_key, (v_rule ->> 'max')::int - (
              select count(*)
                from (select 1
                        from pyjobq.job r
                       where r.status = 2
                         and r.concurrency_key is not null
                         and r.job_type = v_c.job_type
                         and r.concurrency_key = v_c.concurrency_key
                       limit (v_rule ->> 'max')::int) as r));
          end if;
          if v_rule ->> 'rate' is not null then
            select w.claimed_at, w.claimed into v_w
              from pyjobq.rate_window w
             where w.job_type = v_c.job_type and w.concurrency_key = v_c.concurrency_key;
            v_room := v_room || jsonb_build_object(v_key, case
              when v_w.claimed_at[cardinality(v_w.claimed_at)] > v_at then 0
              else least((v_room ->> v_key)::int, (v_rule ->> 'rate')::int
                         - pyjobq._rate_used(v_w.claimed_at, v_w.claimed, v_at - (v_rule ->> 'period')::interval))
              end);
            v_taken := v_taken || jsonb_build_object(v_key, 0);
          end if;
        end if;
      end if;
      continue when (v_room ->> v_key)::int <= 0;
    end if;
    update pyjobq.job j
       set status = 2,
           attempts = j.attempts + 1,
           worker_id = p_worker_id,
           lease_token = gen_random_uuid(),
           lease_until = v_at + make_interval(secs => least(p_lease, t.timeout_seconds)),
           run_started_at = v_at,
           updated_at = v_at
      from pyjobq.job_type t
     where j.job_id = (select l.job_id from pyjobq.job l where l.job_id = v_c.job_id and l.status = 1
                          for update skip locked)
       and t.job_type = j.job_type
    returning j.job_id, j.job_type, j.priority, j.payload, j.attempts, j.max_attempts, j.dedupe_key,
              j.run_after, j.lease_until, j.created_at, j.lease_token, j.metadata,
              case when j.waiting_on is not null then pyjobq._parent_results(j.job_id) end as parent_results
      into v_row;
    continue when not found;  -- another claimer has it
    v_room := pyjobq._count_down(v_room, v_c.job_type::text, v_key);
    v_taken := pyjobq._count_down(v_taken, v_c.job_type::text, v_key);
    job_id := v_row.job_id;
    job_type := v_row.job_type;
    priority := v_row.priority;
    payload := v_row.payload;
    attempt := v_row.attempts;
    max_attempts := v_row.max_attempts;
    dedupe_key := v_row.dedupe_key;
    run_after := v_row.run_after;
    lease_until := v_row.lease_until;
    created_at := v_row.created_at;
    lease_token := v_row.lease_token;
    metadata := v_row.metadata;
    parent_results := v_row.parent_results;
    return next;
    v_claimed := v_claimed + 1;
    exit when v_claimed >= p_limit;
  end loop;
  close v_plain;
  close v_fair;

  perform pyjobq._rate_record_taken(v_taken, v_at);
end;
$$;

comment on function pyjobq._claim_limited(text, smallint[], int, int, timestamptz) is
  'job_claim for job types with concurrency or rate limits or fair share: takes up to p_limit due PENDING jobs, '
  'in claim order and the fair-share ones in their turns, while their type and concurrency key have room, '
  'counted under advisory locks; looks at 10000 due jobs of each order at most. A type whose lock another claim '
  'holds for more than 50 ms is left out of this claim. Raises JQ007 for a type with a concurrency limit outside '
  'READ COMMITTED.';


revoke all on all functions in schema pyjobq from public;

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 34
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';
