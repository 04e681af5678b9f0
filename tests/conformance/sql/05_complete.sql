-- Completing: only the holder of the current attempt may finish a job.
\set VERBOSITY sqlstate
set timezone = 'UTC';
set search_path = public, pyjobq;
set pyjobq.fake_now = '2030-01-01 00:00:00+00';
select job_id as a from job_enqueue(1, '{"n": "a"}', p_priority => 1) \gset
select job_id as b from job_enqueue(1, '{"n": "b"}', p_priority => 2) \gset
select job_id as c from job_enqueue(1, '{"n": "c"}', p_priority => 3) \gset
select job_id as d from job_enqueue(1, '{"n": "d"}', p_priority => 4) \gset
select payload, attempt from job_claim('w1', 4);
-- Another worker, another attempt, an unknown job: JQ001, JQ001, JQ002.
select job_complete(:'a', 'w2', 1);
select job_complete(:'a', 'w1', 2);
select job_complete('00000000-0000-0000-0000-000000000000', 'w1', 1);
select job_complete(:'a', 'w1', 1, '{"rows": 3}');
-- The same attempt again: JQ003.
select job_complete(:'a', 'w1', 1);
select status, result, lease_until, worker_id from pyjobq.job_all where job_id = :'a';
-- Many at once: a job this holder already completed (a) reports completed = true again
-- (a retry after a lost reply), its result unchanged; one not held comes back false.
select job_id = :'b' as is_b, job_id = :'c' as is_c, job_id = :'a' as is_a, completed
  from job_complete_many('w1', array[:'b', :'c', :'a']::uuid[], '{1, 1, 1}',
                         array['{"ok": "b"}', null, null]::jsonb[]);
select job_id = :'d' as is_d, completed from job_complete_many('w2', array[:'d']::uuid[], '{1}');
select payload->>'n' as job, status, result from pyjobq.job_all order by priority;
-- Argument errors.
select job_complete(:'d', '', 1);
select job_complete(:'d', 'w1', 0);
select job_complete(:'d', 'w1', null);
select * from job_complete_many('w1', '{}', '{}');
select * from job_complete_many('w1', array[:'d']::uuid[], '{1, 2}');
select * from job_complete_many('w1', array[:'d']::uuid[], '{1}', '{"{}", "{}"}');
select status from pyjobq.job_all where job_id = :'d';
