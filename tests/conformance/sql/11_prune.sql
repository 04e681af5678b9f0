-- Prune: DONE and DEAD jobs deleted once they are old enough.
\set VERBOSITY sqlstate
set timezone = 'UTC';
set search_path = public, pyjobq;
set pyjobq.fake_now = '2030-01-01 00:00:00+00';
select count(*) from job_enqueue_many(1, '{"{}", "{}", "{}", "{}"}', p_max_attempts => 1);
select job_id as d1 from job_claim('w1', 1) \gset
select job_complete(:'d1', 'w1', 1);
select job_id as d2 from job_claim('w1', 1) \gset
select status from job_fail(:'d2', 'w1', 1);
select job_id as r from job_claim('w1', 1) \gset
set pyjobq.fake_now = '2030-01-02 00:00:00+00';
select job_id as d3 from job_claim('w1', 1) \gset
select job_complete(:'d3', 'w1', 1);
-- d1 (DONE) and d2 (DEAD) changed exactly one day ago: not *more* than a day.
select job_prune('1 day');
-- In batches: call again until it returns less than the limit.
select job_prune('23 hours', 1);
select job_prune('23 hours', 1);
select job_prune('23 hours', 1);
-- d3 just finished; the RUNNING and PENDING jobs are never pruned.
set pyjobq.fake_now = '2030-01-02 00:00:01+00';
select job_prune('0 seconds');
select status, count(*) from pyjobq.job_all group by status order by status;
select job_prune('-1 second');
select job_prune(null);
select job_prune('1 day', 0);
select job_prune('1 day', 100001);
