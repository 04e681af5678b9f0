-- Redrive: DEAD jobs back to PENDING with a fresh budget of tries (attempts goes on).
\set VERBOSITY sqlstate
set timezone = 'UTC';
set search_path = public, pyjobq;
set pyjobq.fake_now = '2030-01-01 00:00:00+00';
select job_id as a from job_enqueue(1, '{"n": "a"}', p_max_attempts => 1, p_dedupe_key => 'key-a') \gset
select job_id as b from job_enqueue(1, '{"n": "b"}', p_max_attempts => 1) \gset
select job_id as c from job_enqueue(2, '{"n": "c"}', p_max_attempts => 1) \gset
select count(*) as claimed from job_claim('w1', 10);
select status from job_fail(:'a', 'w1', 1, 'x');
select status from job_fail(:'b', 'w1', 1, 'x');
select status from job_fail(:'c', 'w1', 1, 'x');
-- By id.
set pyjobq.fake_now = '2030-01-01 00:10:00+00';
select job_id = :'b' as is_b from job_redrive(array[:'b']::uuid[]);
select status, attempts, attempts_refunded, run_after, worker_id, last_error from pyjobq.job_all where job_id = :'b';
-- By type; a DEAD job whose key an active job now holds stays DEAD.
select job_id = :'a' as is_a, created from job_enqueue(1, '{"n": "a2"}', p_dedupe_key => 'key-a');
select * from job_redrive(p_job_type => 1);
select job_id = :'c' as is_c from job_redrive(p_job_type => 2);
select payload->>'n' as job, status, attempts from pyjobq.job_all order by payload->>'n';
-- Nothing DEAD left but job a: everything else untouched.
select job_id = :'a' as is_a from job_redrive();
select count(*) from job_redrive(p_limit => 1);
select * from job_redrive(p_job_type => 3);
select * from job_redrive(p_limit => 0);
