-- depends: 0066_one_check_per_job_row

-- Schema 67: job_step_save and job_progress check the size of what they
-- store through one function, _check_size, where each wrote the test and its
-- error out. The same limits, SQLSTATE, message and hint. Two functions
-- changed, their signatures unchanged, and one added. No table changes.

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 67
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq._check_size(p_name text, p_value jsonb, p_max_bytes int, p_hint text)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if pg_column_size(p_value) > p_max_bytes then
    raise exception '% must be at most %', p_name,
                    case when p_max_bytes % 1048576 = 0 then format('%s MiB', p_max_bytes / 1048576)
                         when p_max_bytes % 1024 = 0 then format('%s KiB', p_max_bytes / 1024)
                         else format('%s bytes', p_max_bytes) end
      using errcode = '22023',
            detail = format('%s took %s bytes.', p_name, pg_column_size(p_value)),
            hint = p_hint;
  end if;
end;
$$;

comment on function pyjobq._check_size(text, jsonb, int, text) is
  'Raises 22023, with p_hint, when p_value takes more than p_max_bytes as stored (compressed, if it is).';

create or replace function pyjobq.job_step_save(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_name text,
  p_result jsonb default null,
  p_lease_token uuid default null
)
returns table (saved boolean, result jsonb, attempt int, saved_at timestamptz)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
begin
  perform pyjobq._check_text('p_name', p_name, 200, false);
  perform pyjobq._check_size('p_result', p_result, 1048576,
                             'Store a large result elsewhere and keep its key in the step.');
  perform pyjobq._check_holds(p_job_id, p_worker_id, p_attempt, p_lease_token);
  -- The primary key is the fence between two attempts that both ran the step
  -- (the first one's lease was lost meanwhile): the second insert waits for
  -- the first one's transaction and, once it committed, stores nothing.
  return query
  insert into pyjobq.job_step as s (job_id, name, attempt, worker_id, saved_at, result)
  values (p_job_id, p_name, p_attempt, p_worker_id, v_now, p_result)
  on conflict on constraint job_step_pkey do nothing
  returning true, s.result, s.attempt::int, s.saved_at;
  if not found then
    return query
    select false, s.result, s.attempt::int, s.saved_at
      from pyjobq.job_step s
     where s.job_id = p_job_id
       and s.name = p_name;
  end if;
end;
$$;

comment on function pyjobq.job_step_save(uuid, text, int, text, jsonb, uuid) is
  'Records that step p_name (1 to 200 characters) of job p_job_id finished with p_result (any JSON up to '
  '1 MiB, or null), if p_worker_id holds attempt p_attempt of it with lease token p_lease_token; raises JQ001, '
  'JQ002, JQ003 or JQ005 as job_complete does when it does not. Returns saved = true and what it stored, or, '
  'when the step was recorded before (by this attempt or an earlier one), saved = false and the stored result, '
  'attempt and time, which stay. Called in the transaction that makes the step''s own writes, it makes them '
  'happen once: an attempt that gets saved = false must roll that transaction back and take the stored result.';

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
  perform pyjobq._check_size('p_progress', p_progress, 8192, 'Report a few figures, e.g. {"done": 40, "of": 100}.');
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


revoke all on all functions in schema pyjobq from public;
