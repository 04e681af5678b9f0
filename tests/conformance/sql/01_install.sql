-- Installed from sql/pyjobq.sql in one transaction (the runner does that).
\set VERBOSITY sqlstate
set timezone = 'UTC';
-- Without pyjobq on the search path the functions are not found by bare name.
select job_types();
-- The one setting a role or session needs for unqualified calls.
set search_path = public, pyjobq;
select schema_version();
select * from job_types();
-- The public API: every function not starting with an underscore.
select p.proname as function, pg_get_function_identity_arguments(p.oid) as arguments
  from pg_proc p
  join pg_namespace n on n.oid = p.pronamespace
 where n.nspname = 'pyjobq'
   and p.proname !~ '^_'
 order by 1, 2;
-- The clock: the database clock unless the session freezes it.
select clock_now() = statement_timestamp() as real_clock;
set pyjobq.fake_now = '2030-01-01 00:00:00+00';
select clock_now();
reset pyjobq.fake_now;
select clock_now() = statement_timestamp() as real_clock;
