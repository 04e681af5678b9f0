-- Counts: every registered type and status, with health figures.
\set VERBOSITY sqlstate
set timezone = 'UTC';
set search_path = public, pyjobq;
set pyjobq.fake_now = '2030-01-01 00:00:00+00';
select * from job_counts();
select count(*) from job_enqueue_many(1, '{"{}", "{}", "{}", "{}", "{}"}');
select count(*) from job_enqueue_many(2, '{"{}", "{}"}', p_run_after => '2030-01-01 00:05:00+00');
select count(*) from job_claim('w1', 2, 30, '{1}');
set pyjobq.fake_now = '2030-01-01 00:01:30+00';
select job_id as j from job_claim('w1', 1, 600, '{1}') \gset
select job_complete(:'j', 'w1', 1);
select job_id as j from job_claim('w1', 1, 600, '{1}') \gset
select status from job_fail(:'j', 'w1', 1, p_dead_letter => true);
select * from job_counts();
set pyjobq.fake_now = '2030-01-01 00:06:00+00';
select job_type_name, status_name, jobs, oldest_due_seconds, expired_leases
  from job_counts() where status in (1, 2);
