-- depends: 0004_one_way_into_pending

-- Schema 5: jobs by name.
--
-- job_type_code(name) gives the code of a registered job type, for every
-- function that takes one: job_enqueue(job_type_code('SEND_EMAIL'), ...). The
-- name as registered wins, else the one name equal to it ignoring case. Every
-- group role may call it, as it may call job_types(). The hint of an
-- unregistered type now says that registering one is an admin's act.

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 5
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq.job_type_code(p_name text)
returns int
language plpgsql
stable
strict
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_code int;
begin
  select t.job_type into v_code from pyjobq.job_type t where t.name = p_name;
  if not found then
    select min(t.job_type) into v_code
      from pyjobq.job_type t
     where lower(t.name) = lower(p_name)
    having count(*) = 1;
  end if;
  if v_code is null then
    raise exception 'p_name % is not the name of a registered job type', p_name
      using errcode = '22023',
            hint = 'pyjobq.job_types() lists the registered names; an admin registers one with '
                   'pyjobq.job_type_register(code, name).';
  end if;
  return v_code;
end;
$$;

comment on function pyjobq.job_type_code(text) is
  'The code of the job type named p_name (as registered, else the one name equal to it ignoring case), for '
  'the functions that take a code: job_enqueue(job_type_code(''SEND_EMAIL''), ...). Null for null; 22023 '
  'for a name no type has.';

create or replace function pyjobq._check_job_type(p_job_type int)
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  perform pyjobq._check_range('p_job_type', p_job_type, 1, 32767);
  perform 1 from pyjobq.job_type t where t.job_type = p_job_type;
  if not found then
    raise exception 'p_job_type % is not a registered job type', p_job_type
      using errcode = '22023',
            hint = 'pyjobq.job_types() lists the known ones; an admin (pyjobq_admin) registers a type with '
                   'pyjobq.job_type_register(code, name).';
  end if;
end;
$$;

comment on function pyjobq._check_job_type(int) is
  'Raises 22023 unless p_job_type is a registered job type code.';

create or replace function pyjobq.grant_roles()
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_missing text[];
begin
  select array_agg(r.name order by r.name)
    into v_missing
    from unnest(array['pyjobq_producer', 'pyjobq_worker', 'pyjobq_observer', 'pyjobq_admin']) as r(name)
   where not exists (select 1 from pg_roles g where g.rolname = r.name);
  if v_missing is not null then
    if not exists (select 1 from pg_roles g
                    where g.rolname = current_user and (g.rolsuper or g.rolcreaterole)) then
      raise notice 'pyjobq: group roles % not created: role % may not create roles', v_missing, current_user
        using hint = 'Have a role with CREATEROLE run: select pyjobq.grant_roles();';
      return;
    end if;
    if 'pyjobq_producer' = any (v_missing) then create role pyjobq_producer nologin; end if;
    if 'pyjobq_worker' = any (v_missing) then create role pyjobq_worker nologin; end if;
    if 'pyjobq_observer' = any (v_missing) then create role pyjobq_observer nologin; end if;
    if 'pyjobq_admin' = any (v_missing) then create role pyjobq_admin nologin; end if;
  end if;

  grant usage on schema pyjobq to pyjobq_producer, pyjobq_worker, pyjobq_observer, pyjobq_admin;
  grant execute on function
    pyjobq.job_types(), pyjobq.job_type_code(text), pyjobq.schema_version(), pyjobq.clock_now()
    to pyjobq_producer, pyjobq_worker, pyjobq_observer, pyjobq_admin;
  grant execute on function
    pyjobq.job_enqueue(int, jsonb, int, timestamptz, text, int),
    pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int)
    to pyjobq_producer;
  grant execute on function
    pyjobq.job_claim(text, int, int, int[]),
    pyjobq.job_complete(uuid, text, int, jsonb),
    pyjobq.job_complete_many(text, uuid[], int[], jsonb[]),
    pyjobq.job_fail(uuid, text, int, text, double precision, boolean),
    pyjobq.job_renew_lease(uuid, text, int, int),
    pyjobq.job_renew_lease_many(text, uuid[], int[], int),
    pyjobq.job_release(uuid, text, int),
    pyjobq.job_release_many(text, uuid[], int[]),
    pyjobq.job_reap(int)
    to pyjobq_worker;
  grant execute on function pyjobq.job_counts() to pyjobq_observer, pyjobq_admin;
  -- Payloads and results are the application's data: producers read back what they
  -- enqueued, admins what they operate on; observers see figures only.
  grant execute on function pyjobq.job_get(uuid) to pyjobq_producer, pyjobq_admin;
  -- Producers cancel what they enqueued; admins anything.
  grant execute on function pyjobq.job_cancel(uuid[]) to pyjobq_producer, pyjobq_admin;
  grant execute on function pyjobq.job_watch(uuid[]) to pyjobq_producer, pyjobq_admin;
  grant execute on function
    pyjobq.job_list(int, int, text, timestamptz, timestamptz, boolean, uuid, int)
    to pyjobq_producer, pyjobq_admin;
  grant execute on function
    pyjobq.job_redrive(uuid[], int, int),
    pyjobq.job_prune(interval, int),
    pyjobq.job_type_register(int, text),
    pyjobq.job_type_grant(int, text, text),
    pyjobq.job_type_revoke(int, text, text),
    pyjobq.job_type_grants(),
    pyjobq.job_reap(int)
    to pyjobq_admin;
end;
$$;

comment on function pyjobq.grant_roles() is
  'Creates the NOLOGIN group roles pyjobq_producer (enqueue, get, list, cancel, watch), pyjobq_worker (claim, '
  'complete, fail, '
  'renew, release, reap), pyjobq_observer (counts) and pyjobq_admin (counts, get, list, cancel, watch, reap, '
  'redrive, prune, '
  'register types, per-type grants) '
  'when missing and the caller may create roles, and grants each EXECUTE on its functions. Run by the '
  'installation; run it again as a role with CREATEROLE when the installing role could not create them.';


-- New functions, like every function of the schema, are not PUBLIC's; the
-- group roles get what grant_roles now grants.
revoke all on all functions in schema pyjobq from public;
revoke all on function pyjobq.grant_roles() from public;

do $$
begin
  perform pyjobq.grant_roles();
end;
$$;
