-- Leases and the reaper ------------------------------------------------------

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

-- The reaper: the attempts whose lease ran out end through _finish as
-- expired, retried after a backoff while they have tries left.
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
