-- depends: 0059_tries_and_error_summaries

-- Schema 60: pausing a job type. job_type_pause and job_type_resume (admins,
-- audited) set job_type.paused_at; the claims leave a paused type out
-- (_work_types), and job_type_policies says since when a type is paused. A
-- column added at the end of job_type, without default: a change of the
-- catalog alone, and this step touches no other table.

alter table pyjobq.job_type add column paused_at timestamptz;

drop function pyjobq.job_type_policies();

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 60
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create function pyjobq.job_type_policies()
returns table (
  job_type int,
  name text,
  max_attempts int,
  backoff_base_seconds double precision,
  backoff_cap_seconds double precision,
  backoff_jitter double precision,
  timeout_seconds double precision,
  keep_done boolean,
  max_snoozes int,
  paused_at timestamptz
)
language sql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select t.job_type::int, t.name::text, coalesce(t.max_attempts, 3)::int,
         coalesce(t.backoff_base_seconds, 2), coalesce(t.backoff_cap_seconds, 3600),
         coalesce(t.backoff_jitter, 0.25), t.timeout_seconds, t.keep_done, t.max_snoozes, t.paused_at
    from pyjobq.job_type t
   order by t.job_type
$$;

comment on function pyjobq.job_type_policies() is
  'Each registered job type''s retry policy as it applies, defaults filled in: max_attempts, backoff base, '
  'cap and jitter, the deadline of an attempt in seconds from its claim, whether its DONE jobs are kept in '
  'job_history (job_type_set_history), how many times a job may snooze (job_type_set_snoozes), and since when '
  'it is paused (job_type_pause; null when it is not).';

create or replace function pyjobq.job_type_pause(p_job_type int)
returns boolean
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_paused boolean;
begin
  perform pyjobq._check_job_type(p_job_type);
  update pyjobq.job_type t
     set paused_at = pyjobq.clock_now()
   where t.job_type = p_job_type
     and t.paused_at is null;
  v_paused := found;
  perform pyjobq._audit('pause', 0, jsonb_build_object('job_type', p_job_type), v_paused);
  return v_paused;
end;
$$;

comment on function pyjobq.job_type_pause(int) is
  'Pauses job type p_job_type: its jobs stay PENDING, enqueues go on, and no claim that starts after this '
  'commits takes one (under REPEATABLE READ or SERIALIZABLE, a claim whose snapshot is older fails with 40001 '
  'instead); the jobs running finish as they would. Returns true, or false when it was paused already. '
  'Audited (job_audit).';

create or replace function pyjobq.job_type_resume(p_job_type int)
returns boolean
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_resumed boolean;
begin
  perform pyjobq._check_job_type(p_job_type);
  update pyjobq.job_type t
     set paused_at = null
   where t.job_type = p_job_type
     and t.paused_at is not null;
  v_resumed := found;
  if v_resumed then
    perform pyjobq._announce(p_job_type, v_now, v_now);  -- its due jobs wake the sleeping workers
  end if;
  perform pyjobq._audit('resume', 0, jsonb_build_object('job_type', p_job_type), v_resumed);
  return v_resumed;
end;
$$;

comment on function pyjobq.job_type_resume(int) is
  'Resumes job type p_job_type after job_type_pause: claims take its jobs again, and the workers asleep are '
  'told its jobs are due. Returns true, or false when it was not paused. Audited (job_audit).';

create or replace function pyjobq._work_types(p_job_types int[])
returns smallint[]
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
-- Planned once per session: the plans do not depend on the arguments' values.
set plan_cache_mode = force_generic_plan
as $$
declare
  v_types smallint[];
  v_codes int[];
  v_bad boolean;
  v_denied smallint[] := pyjobq._denied_types('work');
begin
  p_job_types := pyjobq._check_array('p_job_types', p_job_types);
  if p_job_types is null then
    select array_agg(t.job_type order by t.job_type)
      into v_types
      from pyjobq.job_type t
     where t.job_type <> all (v_denied)
       and t.paused_at is null;
    return coalesce(v_types, '{}');
  end if;
  -- One statement checks the codes and leaves the paused types out.
  select bool_or(u.code is null or u.code not between 1 and 32767),
         coalesce(array_agg(u.code order by u.ord)
                    filter (where not exists (select from pyjobq.job_type t
                                               where t.job_type = u.code and t.paused_at is not null)),
                  '{}')
    into v_bad, v_codes
    from unnest(p_job_types) with ordinality as u(code, ord);
  if v_bad then
    raise exception 'p_job_types elements must be job type codes between 1 and 32767'
      using errcode = '22023',
            hint = 'Pass null for every registered type.';
  end if;
  if cardinality(v_denied) > 0 then
    perform pyjobq._check_privilege('work', p_job_types);
  end if;
  return v_codes::smallint[];
end;
$$;

comment on function pyjobq._work_types(int[]) is
  'The job types a worker''s call looks at: p_job_types checked (22023 for a code out of range, 42501 for a '
  'type the caller may not work), or every registered type the caller may work when null; paused types '
  'left out either way.';

create or replace function pyjobq.job_claim(
  p_worker_id text,
  p_limit int default null,
  p_lease_seconds int default null,
  p_job_types int[] default null
)
returns setof pyjobq.claimed_job
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_limit int := coalesce(p_limit, 1);
  v_lease int := coalesce(p_lease_seconds, 300);
  v_types smallint[];
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_limit', v_limit, 1, 1000);
  perform pyjobq._check_range('p_lease_seconds', v_lease, 1, 86400);
  v_types := pyjobq._work_types(p_job_types);
  if current_setting('transaction_isolation') <> 'read committed' then
    -- The types as this transaction's first snapshot saw them: a pause
    -- committed since fails the claim (40001) instead of letting it past.
    perform from pyjobq.job_type t where t.job_type = any (v_types) for share;
  end if;
  if exists (select 1 from pyjobq.job_type t
              where t.job_type = any (v_types)
                and (t.max_running is not null or t.key_max_running is not null or t.rate_limit is not null
                     or t.key_rate_limit is not null or t.fair_share)) then
    return query select * from pyjobq._claim_limited(p_worker_id, v_types, v_limit, v_lease, v_now);
  else
    return query select * from pyjobq._lease(p_worker_id, pyjobq._claim_pick(v_types, v_limit, v_now), v_lease, v_now);
  end if;
end;
$$;

comment on function pyjobq.job_claim(text, int, int, int[]) is
  'Atomically takes up to p_limit (1..1000, default 1) due PENDING jobs, lowest priority value then earliest '
  'run_after first, of the given job types (default all), and leases them to p_worker_id (1..80 chars) for '
  'p_lease_seconds (1..86400, default 300): RUNNING, attempts + 1. Rows locked by other claimers are skipped, '
  'never waited for. A type with concurrency limits (job_type_set_limits) never has more RUNNING, or more '
  'claims in a period, than they allow, in all and per concurrency key; a fair-share type''s jobs are taken '
  'round robin across their concurrency keys; a paused type''s (job_type_pause) are not taken. Returns the claimed jobs with their metadata, and for a job with '
  'parents (job_enqueue''s p_depends_on) their results (parent_results: a JSON array of {job_id, job_type, '
  'status, result} in the order the enqueue named them); attempt and lease_token '
  '(random, shown by nothing else) are the fencing token to pass to complete/fail/renew/release. An empty result means nothing '
  'is due.';


insert into pyjobq.api_grant (function, roles) values
  ('pyjobq.job_type_pause(int)', '{pyjobq_admin}'),
  ('pyjobq.job_type_resume(int)', '{pyjobq_admin}');

do $$ begin perform pyjobq.grant_roles(); end; $$;

revoke all on all functions in schema pyjobq from public;
