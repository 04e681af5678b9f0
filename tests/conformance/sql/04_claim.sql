-- Claiming: due PENDING jobs, lowest priority value first, leased to a worker.
\set VERBOSITY sqlstate
set timezone = 'UTC';
set search_path = public, pyjobq;
set pyjobq.fake_now = '2030-01-01 00:00:00+00';
-- Nothing due: an empty result, not an error and not a row of nulls.
SELECT job_claim('w1', 10);
select job_id as late from job_enqueue(1, '{"n": "late"}', p_run_after => '2030-01-01 00:01:00+00') \gset
select job_id as low from job_enqueue(1, '{"n": "low"}', p_priority => 200) \gset
select job_id as high from job_enqueue(1, '{"n": "high"}', p_priority => 10) \gset
select job_id as outbox from job_enqueue(2, '{"n": "outbox"}') \gset
-- The call exactly as a client types it; the job id and the random lease token are replaced
-- for the comparison.
SELECT job_claim('w1', 1) AS claim \gset
select regexp_replace(replace(:'claim', :'high', '<high>'), ',[0-9a-f-]{36},,\)$', ',<lease token>,,)')
       as claim;
-- Only the requested job types.
select job_id = :'outbox' as is_outbox, job_type, attempt, lease_until
  from job_claim('w2', 10, 30, '{2}');
-- The rest that is due; the late job is not due yet.
select job_id = :'low' as is_low, payload, attempt, lease_until from job_claim('w3', 10, 60);
SELECT job_claim('w1', 10);
set pyjobq.fake_now = '2030-01-01 00:01:00+00';
select job_id = :'late' as is_late, payload, attempt, run_after, lease_until, created_at
  from job_claim('w1', 10);
select status, count(*) as jobs, count(distinct worker_id) as workers
  from pyjobq.job_all group by status order by status;
-- Argument errors.
select * from job_claim('', 1);
select * from job_claim(repeat('w', 81), 1);
select * from job_claim(null, 1);
select * from job_claim('w1', 0);
select * from job_claim('w1', 1001);
select * from job_claim('w1', 1, 0);
select * from job_claim('w1', 1, 86401);
