-- Job types: codes registered once under one name.
\set VERBOSITY sqlstate
set timezone = 'UTC';
set search_path = public, pyjobq;
select * from job_types();
select * from job_type_register(3, 'EMAIL');
select * from job_type_register(3, 'EMAIL');
select * from job_type_register(3, 'MAIL');
select * from job_type_register(4, 'EMAIL');
select * from job_type_register(0, 'ZERO');
select * from job_type_register(32768, 'BIG');
select * from job_type_register(5, '');
select * from job_type_register(5, repeat('n', 64));
select * from job_type_register(5, null);
select * from job_types();
select created from job_enqueue(3, '{}');
select job_type, attempt from job_claim('w1', 10, p_job_types => '{3}');
select job_type_name, status_name, jobs from job_counts() where job_type = 3;
