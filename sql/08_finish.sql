-- Finish ----------------------------------------------------------------------

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

-- Leases ----------------------------------------------------------------------

create function pyjobq.job_renew_lease_many(
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

create function pyjobq.job_renew_lease(
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
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_attempt', p_attempt, 1, 32767);
  perform pyjobq._check_lease_token('p_lease_token', p_lease_token is null);
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
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_attempt', p_attempt, 1, 32767);
  perform pyjobq._check_lease_token('p_lease_token', p_lease_token is null);
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

create function pyjobq.job_reap(p_limit int default null)
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
