-- At most one PENDING or RUNNING job per dedupe key.
\set VERBOSITY sqlstate
set timezone = 'UTC';
set search_path = public, pyjobq;
set pyjobq.fake_now = '2030-01-01 00:00:00+00';
select job_id as first_id, created from job_enqueue(1, '{"v": 1}', p_dedupe_key => 'order-7') \gset
select :'created' as created;
-- The same key returns the active job, whatever the other arguments.
select job_id = :'first_id' as same_job, created
  from job_enqueue(1, '{"v": 2}', p_dedupe_key => 'order-7');
select job_id = :'first_id' as same_job, created
  from job_enqueue(1, '{"v": 3}', p_priority => 1, p_dedupe_key => 'order-7');
-- A RUNNING job still holds its key.
select payload, attempt from job_claim('w1', 10);
select job_id = :'first_id' as same_job, created
  from job_enqueue(1, '{"v": 4}', p_dedupe_key => 'order-7');
-- Once DONE the key is free again.
select job_complete(:'first_id', 'w1', 1);
select job_id as second_id, created from job_enqueue(1, '{"v": 5}', p_dedupe_key => 'order-7') \gset
select :'second_id' <> :'first_id' as new_job, :'created' as created;
-- Keys repeated within a batch, or held by an active job, yield that job.
select ord, created, job_id = :'second_id' as second_id
  from job_enqueue_many(1, '{"{\"v\": 6}", "{\"v\": 7}", "{\"v\": 8}", "{\"v\": 9}"}',
                        '{"order-7", "order-8", "order-8", null}');
select count(*) as active_order_8 from pyjobq.job_all where dedupe_key = 'order-8' and status in (1, 2);
select count(*) as active_jobs from pyjobq.job_all where status in (1, 2);
