-- depends: 0025_batches

-- Schema 26: job pages keep 30 % free for the updates of their own jobs.
--
-- A claim and a completion each write a new version of the job's row. On a
-- full page the new version goes to another page: PostgreSQL then writes a
-- row-lock record first and the whole new row after, where an update within
-- the page writes neither the lock nor the bytes the two versions share. A
-- page of bulk-enqueued jobs is full (fillfactor 100); at 70 the drain wrote
-- 12 % less WAL per job and drained as fast (docs/performance.md). Pages
-- written from now on keep the room; pages written before gain it as vacuum
-- frees them. No rewrite, no lock beyond a moment's.

alter table pyjobq.job set (fillfactor = 70);

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 26
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';
