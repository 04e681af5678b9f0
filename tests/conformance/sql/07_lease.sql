-- Leases: renew (heartbeat) and release (give the attempt back).
\set VERBOSITY sqlstate
set timezone = 'UTC';
set search_path = public, pyjobq;
set pyjobq.fake_now = '2030-01-01 00:00:00+00';
select job_id as j from job_enqueue(1, '{}') \gset
select attempt, lease_until from job_claim('w1', 1, 60);
set pyjobq.fake_now = '2030-01-01 00:00:50+00';
select job_renew_lease(:'j', 'w1', 1);
select job_renew_lease(:'j', 'w1', 1, 600);
-- An expired lease that nobody reaped yet is still the holder's.
set pyjobq.fake_now = '2030-01-01 00:30:00+00';
select job_renew_lease(:'j', 'w1', 1, 1);
-- A lease reaches its attempt's deadline (the claim + 3600 s, its type's default) and no further;
-- past it, no renewal: JQ001, and the reaper retries the job once the lease runs out.
select job_renew_lease(:'j', 'w1', 1, 86400);
set pyjobq.fake_now = '2030-01-01 01:00:00+00';
select job_renew_lease(:'j', 'w1', 1, 1);
select job_renew_lease(:'j', 'w2', 1);
select job_renew_lease(:'j', 'w1', 2);
select job_renew_lease(:'j', 'w1', 1, 0);
select job_renew_lease(:'j', 'w1', 1, 86401);
-- Release: PENDING again at its place in the queue, the try given back; the
-- token is not: the next claim is attempt 2.
select job_release(:'j', 'w1', 1);
select status, attempts, attempts_refunded, worker_id, lease_until, run_after from pyjobq.job_all where job_id = :'j';
select job_release(:'j', 'w1', 1);
select job_renew_lease(:'j', 'w1', 1);
select job_id = :'j' as same_job, attempt, run_after from job_claim('w2', 1);
select job_complete(:'j', 'w2', 2);
select job_release(:'j', 'w2', 2);
select job_release('00000000-0000-0000-0000-000000000000', 'w2', 1);
select job_renew_lease('00000000-0000-0000-0000-000000000000', 'w2', 1);
