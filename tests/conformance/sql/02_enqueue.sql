-- Enqueue with untyped literals, as any client can send them.
\set VERBOSITY sqlstate
set timezone = 'UTC';
set search_path = public, pyjobq;
set pyjobq.fake_now = '2030-01-01 00:00:00+00';
select * from job_enqueue(1, '{}') \gset
select :'job_id'::uuid is not null as has_id, :'created' as created;
-- Every argument, by name.
select created
  from job_enqueue(2, '{"to": "a@example.com"}', p_priority => 5,
                   p_run_after => '2030-01-01 00:10:00+00', p_dedupe_key => 'mail-1',
                   p_max_attempts => 5);
-- Omitted and null arguments mean the same: the defaults.
select created from job_enqueue(1, null, null, null, null, null);
select ord, created from job_enqueue_many(1, '{"{\"n\": 1}", "{\"n\": 2}", "{}"}');
select ord, created
  from job_enqueue_many(2, array['{"n": 1}', '{"n": 2}']::jsonb[], array['k-1', null]);
-- What was stored, as a claim hands it out (only the due jobs; sorted here
-- because jobs of equal priority and due time come in no particular order).
select job_type, priority, payload, attempt, max_attempts, dedupe_key, run_after, lease_until
  from job_claim('w1', 100)
 order by job_type, payload::text, dedupe_key;
set pyjobq.fake_now = '2030-01-01 00:10:00+00';
select job_type, priority, payload, attempt, max_attempts, dedupe_key, run_after
  from job_claim('w1', 100);
-- Arguments out of range: 22023; null where a value is required: 22004.
select * from job_enqueue(3, '{}');
select * from job_enqueue(0, '{}');
select * from job_enqueue(null, '{}');
select * from job_enqueue(1, '[1, 2]');
select * from job_enqueue(1, '"text"');
select * from job_enqueue(1, '{}', p_priority => -1);
select * from job_enqueue(1, '{}', p_priority => 32768);
select * from job_enqueue(1, '{}', p_max_attempts => 0);
select * from job_enqueue(1, '{}', p_max_attempts => 1001);
select * from job_enqueue(1, '{}', p_run_after => 'infinity');
select * from job_enqueue(1, '{}', p_dedupe_key => ' ');
select * from job_enqueue(1, '{}', p_dedupe_key => repeat('k', 201));
select * from job_enqueue(1, 'not json');
select * from job_enqueue_many(1, '{}');
select * from job_enqueue_many(1, null);
select * from job_enqueue_many(1, '{"{}", "[]"}');
select * from job_enqueue_many(1, '{"{}", null}');
select * from job_enqueue_many(1, '{"{}", "{}"}', '{"k"}');
select * from job_enqueue_many(1, '{"{}"}', '{""}');
-- None of the failed calls left a job behind.
select count(*) as pending from pyjobq.job_all where status = 1;
