-- depends: 0067_one_size_check

-- Schema 68: the job table's pages keep 60 % free (fillfactor 40, was 70),
-- room for a second version of each of their rows. A claim of a page's jobs
-- writes their new versions while the old ones still live; with 30 % free,
-- about half of them did not fit, and each that moved to another page wrote
-- a row-lock record and the whole new row. A drain writes 834 bytes of WAL
-- per job instead of 913, at the same speed and server CPU per job.
-- Pages filled before keep their fill; new ones are filled to 40 %. ALTER
-- TABLE ... SET (fillfactor) takes a SHARE UPDATE EXCLUSIVE lock: enqueues,
-- claims and completions go on while it runs, and nothing is rewritten.

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 68
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

alter table pyjobq.job set (fillfactor = 40);
