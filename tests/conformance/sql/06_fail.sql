-- Failing: PENDING again after a backoff while attempts remain, then DEAD.
\set VERBOSITY sqlstate
set timezone = 'UTC';
set search_path = public, pyjobq;
set pyjobq.fake_now = '2030-01-01 00:00:00+00';
select job_id as j from job_enqueue(1, '{}', p_max_attempts => 3) \gset
select attempt from job_claim('w1', 1);
-- Default backoff after attempt 1: 2 s minus up to 25% jitter.
select status, run_after >= '2030-01-01 00:00:01.5+00' and run_after <= '2030-01-01 00:00:02+00' as backoff_1
  from job_fail(:'j', 'w1', 1, 'boom');
select last_error, worker_id, lease_until from pyjobq.job_all where job_id = :'j';
-- Not claimable while backing off.
SELECT job_claim('w1', 1);
set pyjobq.fake_now = '2030-01-01 00:00:02+00';
select attempt from job_claim('w1', 1);
-- An explicit delay replaces the backoff.
select * from job_fail(:'j', 'w1', 2, 'boom again', 10);
set pyjobq.fake_now = '2030-01-01 00:00:12+00';
select attempt from job_claim('w2', 1);
-- The last attempt failing makes the job DEAD; the last holder is kept.
select * from job_fail(:'j', 'w2', 3, 'gave up', 10);
select status, attempts, worker_id, last_error, lease_until from pyjobq.job_all where job_id = :'j';
select job_fail(:'j', 'w2', 3);
set pyjobq.fake_now = '2030-01-01 01:00:00+00';
SELECT job_claim('w1', 1);
-- p_dead_letter: DEAD at once, whatever attempts remain.
select job_id as p from job_enqueue(1, '{}', p_max_attempts => 10) \gset
select attempt from job_claim('w1', 1);
select * from job_fail(:'p', 'w1', 1, 'poison', p_dead_letter => true);
-- The backoff doubles per attempt up to one hour, jitter taking off at most 25%.
select a as attempt,
       retry_backoff(a) between least(3600, 2 * 2 ^ (a - 1)) * 0.75 * interval '1 second'
                            and least(3600, 2 * 2 ^ (a - 1)) * interval '1 second' as within_bounds
  from generate_series(1, 13, 3) as a;
-- Errors: not held, bad delay.
select job_id as q from job_enqueue(1, '{}') \gset
select attempt from job_claim('w1', 1);
select * from job_fail(:'q', 'w2', 1);
select * from job_fail(:'q', 'w1', 1, 'x', -1);
select * from job_fail(:'q', 'w1', 1, 'x', 31536001);
select * from job_fail('00000000-0000-0000-0000-000000000000', 'w1', 1);
select * from job_fail(:'q', 'w1', 1, repeat('x', 20000), 0);
select status, length(last_error) as error_length from pyjobq.job_all where job_id = :'q';
