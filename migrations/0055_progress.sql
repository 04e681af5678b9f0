-- depends: 0054_waits_and_signals

-- Schema 55: progress. A handler reports how far it got (job_progress); its
-- latest report is in the job's row, and job_get shows it with the job's
-- snoozes.

-- No default: a change of the catalog alone, no rewrite.
alter table pyjobq.job add column progress jsonb;

comment on column pyjobq.job.progress is
  'What the handler last reported of its progress (job_progress), a JSON object; job_get shows it. Not kept '
  'in the history.';

drop function pyjobq.job_get(uuid);

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 55
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq.job_progress(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_progress jsonb,
  p_lease_token uuid default null
)
returns void
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
begin
  perform pyjobq._check_holder(p_worker_id, p_attempt, p_lease_token);
  perform pyjobq._check_payload('p_progress', p_progress);
  if pg_column_size(p_progress) > 8192 then
    raise exception 'p_progress must be at most 8 KiB'
      using errcode = '22023',
            detail = format('p_progress took %s bytes.', pg_column_size(p_progress)),
            hint = 'Report a few figures, e.g. {"done": 40, "of": 100}.';
  end if;
  update pyjobq.job j
     set progress = p_progress
   where j.job_id = p_job_id
     and pyjobq._holds(j, p_worker_id, p_attempt, p_lease_token, pyjobq._denied_types('work'));
  if not found then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt, p_lease_token);
  end if;
end;
$$;

comment on function pyjobq.job_progress(uuid, text, int, jsonb, uuid) is
  'Sets the progress of job p_job_id to p_progress (a JSON object of at most 8 KiB, or null to clear it), if '
  'p_worker_id holds attempt p_attempt of it with lease token p_lease_token; raises JQ001, JQ002, JQ003 or JQ005 '
  'as job_complete does when it does not. job_get shows the latest report while the job is yet to end.';

create or replace function pyjobq.job_get(p_job_id uuid)
returns table (
  job_id uuid,
  job_type int,
  job_type_name text,
  status int,
  status_name text,
  priority int,
  attempts int,
  max_attempts int,
  payload jsonb,
  result jsonb,
  last_error text,
  dedupe_key text,
  run_after timestamptz,
  lease_until timestamptz,
  worker_id text,
  run_started_at timestamptz,
  finished_at timestamptz,
  created_at timestamptz,
  updated_at timestamptz,
  metadata jsonb,
  waiting_on int,
  batch_id uuid,
  snoozes int,
  progress jsonb
)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_job_id is null then
    raise exception 'p_job_id must not be null'
      using errcode = '22004',
            hint = 'Pass the job_id that job_enqueue returned.';
  end if;
  perform pyjobq._check_privilege('observe', array(select j.job_type::int from pyjobq.job_all j where j.job_id = p_job_id));
  -- No job is an empty result, not an error: a pruned job is simply gone.
  return query
  select j.job_id, j.job_type::int, t.name::text, j.status::int,
         pyjobq._status_name(j.status),
         j.priority::int, j.attempts::int, j.max_attempts::int, j.payload, j.result, j.last_error,
         j.dedupe_key::text, j.run_after, j.lease_until, j.worker_id::text, j.run_started_at,
         case when j.status in (3, 4, 5) then j.updated_at end, j.created_at, j.updated_at, j.metadata,
         j.waiting_on, j.batch_id, a.snoozes::int, a.progress
    from pyjobq.job_all j
    join pyjobq.job_type t on t.job_type = j.job_type
    -- What only a job yet to end keeps.
    left join pyjobq.job a on a.job_id = j.job_id
   where j.job_id = p_job_id;
end;
$$;

comment on function pyjobq.job_get(uuid) is
  'One job as a person needs it to see what happened: type, status, priority, attempts, payload, result, '
  'last_error, dedupe key, run_after, its lease and worker while RUNNING, when its last attempt started '
  '(run_started_at) and when it ended (DONE, DEAD or CANCELLED), the metadata of its enqueue, how many parents it '
  'still waits for (waiting_on; null without parents: job_dependencies lists them), its batch, and, while it is '
  'yet to end, how many times it snoozed and the progress its handler last reported (job_progress; null once it '
  'ended). No row when there is no such job (never enqueued, or pruned).';

insert into pyjobq.api_grant (function, roles) values
  ('pyjobq.job_progress(uuid, text, int, jsonb, uuid)', '{pyjobq_worker}');

do $$ begin perform pyjobq.grant_roles(); end; $$;

revoke all on all functions in schema pyjobq from public;
