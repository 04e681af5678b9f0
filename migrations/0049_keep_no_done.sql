-- depends: 0048_one_job_one_id

-- Schema 49: a job type may keep none of its DONE jobs (job_type_set_history);
-- they then end with their delete, without the history's row and its index
-- entry.

alter table pyjobq.job_type add column keep_done boolean not null default true;

drop function pyjobq.job_type_policies();

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 49
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq.job_type_set_history(p_job_type int, p_keep_done boolean)
returns void
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
begin
  perform pyjobq._check_job_type(p_job_type);
  if p_keep_done is null then
    raise exception 'p_keep_done must not be null'
      using errcode = '22004',
            hint = 'true keeps the type''s DONE jobs in job_history (the default); false ends them with their delete.';
  end if;
  update pyjobq.job_type t
     set keep_done = p_keep_done
   where t.job_type = p_job_type;
end;
$$;

comment on function pyjobq.job_type_set_history(int, boolean) is
  'Sets whether job type p_job_type''s DONE jobs go to job_history (p_keep_done true, the default) or end with '
  'their delete from pyjobq.job (false), so that job_get and the history no longer show them. Even then a DONE '
  'job with dependants, in a batch, with a dedupe key or watched (job_watch) is kept; DEAD and CANCELLED jobs '
  'always are. Applies to the jobs that end from the commit on.';

create or replace function pyjobq.job_type_policies()
returns table (
  job_type int,
  name text,
  max_attempts int,
  backoff_base_seconds double precision,
  backoff_cap_seconds double precision,
  backoff_jitter double precision,
  timeout_seconds double precision,
  keep_done boolean
)
language sql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select t.job_type::int, t.name::text, coalesce(t.max_attempts, 3)::int,
         coalesce(t.backoff_base_seconds, 2), coalesce(t.backoff_cap_seconds, 3600),
         coalesce(t.backoff_jitter, 0.25), t.timeout_seconds, t.keep_done
    from pyjobq.job_type t
   order by t.job_type
$$;

comment on function pyjobq.job_type_policies() is
  'Each registered job type''s retry policy as it applies, defaults filled in: max_attempts, backoff base, '
  'cap and jitter, the deadline of an attempt in seconds from its claim, and whether its DONE jobs are kept '
  'in job_history (job_type_set_history).';

create or replace function pyjobq._to_history(
  p_rows pyjobq.job[],
  p_statuses smallint[],
  p_now timestamptz,
  p_results jsonb[] default null,
  p_errors text[] default null,
  p_waiting int[] default null,
  p_clear_workers boolean[] default null
)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  insert into pyjobq.job_history
    (job_id, job_type, status, priority, payload, result, dedupe_key, attempts, max_attempts, run_after,
     lease_until, worker_id, run_started_at, last_error, created_at, updated_at, seq, attempts_refunded,
     notify_done, lease_token, concurrency_key, fair_rank, metadata, waiting_on, run_on_parent_failure,
     has_dependants, batch_id)
  select r.job_id, r.job_type, p_statuses[r.ordinality], r.priority, r.payload,
         case when p_results is null then r.result else p_results[r.ordinality] end,
         r.dedupe_key, r.attempts, r.max_attempts, r.run_after, null,
         case when p_clear_workers[r.ordinality] then null else r.worker_id end, r.run_started_at,
         case when p_errors is null then r.last_error else p_errors[r.ordinality] end,
         r.created_at, p_now, r.seq, r.attempts_refunded, r.notify_done, r.lease_token, r.concurrency_key,
         r.fair_rank, r.metadata,
         case when p_waiting is null then r.waiting_on else p_waiting[r.ordinality] end,
         r.run_on_parent_failure, r.has_dependants, r.batch_id
    from unnest(p_rows) with ordinality as r
   -- A DONE job of a type that keeps none (job_type_set_history) ends with its
   -- delete, unless something reads it after its end: its dependants or its
   -- batch, a unique window over its key, a watcher.
   where p_statuses[r.ordinality] <> 3
      or r.job_type <> all (array(select t.job_type from pyjobq.job_type t where not t.keep_done))
      or r.has_dependants or r.batch_id is not null or r.dedupe_key is not null or r.notify_done;
end;
$$;

comment on function pyjobq._to_history(pyjobq.job[], smallint[], timestamptz, jsonb[], text[], int[], boolean[]) is
  'Inserts the rows p_rows, just deleted from pyjobq.job, into job_history as ended at p_now, each with the '
  'status, and the result, error and waiting count (where those arrays are given) at its position, and '
  'without its worker where p_clear_workers says so; leaves out the DONE jobs of types that keep none, but '
  'for those with dependants, a batch, a dedupe key or a watcher.';


insert into pyjobq.api_grant (function, roles) values
  ('pyjobq.job_type_set_history(int, boolean)', '{pyjobq_admin}');

do $$ begin perform pyjobq.grant_roles(); end; $$;

revoke all on all functions in schema pyjobq from public;
