-- depends: 0025_batches

-- Schema 26: job pages keep 30 % free for the updates of their own jobs, and
-- the enqueue's new ids come from a PL/pgSQL function.
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

-- As a SQL function, _new_job_ids was planned again at every enqueue: about
-- 110 us a call, against 65 us as a PL/pgSQL function, which keeps its plan.
create or replace function pyjobq._new_job_ids(p_now timestamptz, p_count int)
returns table (seq bigint, job_id uuid)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  -- Time-ordered ids in UUIDv7's layout (version 8 here): 48 bits of
  -- milliseconds, 12 random bits per call, then the job's (unique) seq under
  -- the variant bits: new keys land at the right edge of job_pkey. PL/pgSQL:
  -- its plan is kept for the session, where a SQL body is planned every call.
  return query
  select s.seq,
         (p.prefix || to_hex(s.seq | (-9223372036854775808)::bigint))::uuid
    from (select lpad(to_hex((extract(epoch from p_now) * 1000)::bigint & 281474976710655), 12, '0')
                 || '8' || lpad(to_hex(floor(random() * 4096)::int), 3, '0') as prefix) p,
         lateral (select nextval('pyjobq.job_seq') as seq from generate_series(1, p_count)) s;
end;
$$;

comment on function pyjobq._new_job_ids(timestamptz, int) is
  'p_count new (seq, job_id) pairs in increasing seq order: seq from pyjobq.job_seq, job_id time-ordered by p_now.';


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
