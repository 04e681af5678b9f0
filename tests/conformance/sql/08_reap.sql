-- Reaping: expired leases are taken back; the old holder is fenced off.
\set VERBOSITY sqlstate
set timezone = 'UTC';
set search_path = public, pyjobq;
set pyjobq.fake_now = '2030-01-01 00:00:00+00';
select job_id as j from job_enqueue(1, '{}', p_max_attempts => 2) \gset
select job_id as k from job_enqueue(2, '{}', p_priority => 200) \gset
select attempt, lease_until from job_claim('w1', 10, 60);
-- Not expired yet: the lease ends at 00:01:00, reaping needs it to be in the past.
set pyjobq.fake_now = '2030-01-01 00:01:00+00';
select * from job_reap();
select expired_leases from job_counts() where status = 2 order by job_type;
set pyjobq.fake_now = '2030-01-01 00:01:01+00';
select expired_leases from job_counts() where status = 2 order by job_type;
select job_id = :'j' as is_j, job_type, status, worker_id, attempt,
       run_after > clock_now() and run_after <= clock_now() + interval '2 seconds' as backing_off
  from job_reap(1);
select job_id = :'k' as is_k, job_type, status, worker_id, attempt
  from job_reap();
select * from job_reap();
select last_error from pyjobq.job_all where job_id = :'j';
-- The old holder can no longer finish, fail, renew or release.
select job_complete(:'j', 'w1', 1);
select * from job_fail(:'j', 'w1', 1);
select job_renew_lease(:'j', 'w1', 1);
select job_release(:'j', 'w1', 1);
-- Claimed again by a worker with the same id: the attempt tells them apart.
set pyjobq.fake_now = '2030-01-01 00:02:00+00';
select job_id = :'j' as is_j, attempt from job_claim('w1', 1, 60, '{1}');
select job_complete(:'j', 'w1', 1);
-- Its last attempt expiring makes the job DEAD.
set pyjobq.fake_now = '2030-01-01 00:03:01+00';
select job_id = :'j' as is_j, status, worker_id, attempt from job_reap();
select status, attempts, worker_id from pyjobq.job_all where job_id = :'j';
select job_complete(:'j', 'w1', 2);
select * from job_reap(0);
select * from job_reap(100001);
