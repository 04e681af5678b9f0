-- depends: 0051_steps

-- Schema 52: the count of a job's snoozes (schema 53 makes use of it), in a
-- step of its own. A step that holds pyjobq.job's lock while it waits for
-- job_type's (or the other way round) can deadlock with the enqueues that
-- read job_type before they insert a job, or with the completions that read
-- it after they changed one; one table a step never can.

-- A constant default: a change of the catalog, no rewrite.
alter table pyjobq.job add column snoozes smallint not null default 0;

comment on column pyjobq.job.snoozes is
  'How many times a handler put the job back to sleep (job_finish_many''s snoozed): each gives its claim back, '
  'as attempts_refunded counts, and job_type_set_snoozes bounds them. Not kept in the history.';

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 52
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';
