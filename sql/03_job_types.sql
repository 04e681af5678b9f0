-- Job types -------------------------------------------------------------------

create function pyjobq.job_type_register(p_job_type int, p_name text)
returns table (job_type int, name text, created boolean)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_name text;
begin
  perform pyjobq._check_range('p_job_type', p_job_type, 1, 32767);
  perform pyjobq._check_text('p_name', p_name, 63, false);
  insert into pyjobq.job_type as t (job_type, name)
  values (p_job_type, p_name)
  on conflict do nothing;
  if found then
    return query select p_job_type, p_name, true;
    return;
  end if;
  select t.name into v_name from pyjobq.job_type t where t.job_type = p_job_type;
  if v_name is distinct from p_name then
    raise exception 'job type % or name % is already registered', p_job_type, p_name
      using errcode = 'JQ004',
            detail = format('Code %s is named %s.', p_job_type, coalesce(v_name, '(unregistered)')),
            hint = 'Codes and names are registered once; pick another code or name.';
  end if;
  return query select p_job_type, p_name, false;
end;
$$;

comment on function pyjobq.job_type_register(int, text) is
  'Registers job type code p_job_type (1..32767) under p_name; idempotent for the same pair, JQ004 when either is taken by another.';

-- A type declared by name alone (a task whose code nobody chose): the code of
-- the type registered as p_name, or the smallest free code from 1000 on,
-- registered for it. Two sessions that pick the same code meet at the primary
-- key: the later one's insert waits for the earlier, then finds the code taken
-- and picks the next; two that register the same name meet at its unique
-- index and both return the one code.
create function pyjobq.job_type_allocate(p_name text)
returns table (job_type int, name text, created boolean)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_code int;
begin
  perform pyjobq._check_text('p_name', p_name, 63, false);
  loop
    select t.job_type into v_code from pyjobq.job_type t where t.name = p_name;
    if found then
      return query select v_code, p_name, false;
      return;
    end if;
    select min(c.code) into v_code
      from generate_series(1000, 32767) c(code)
     where not exists (select from pyjobq.job_type t where t.job_type = c.code);
    if v_code is null then
      raise exception 'no job type code is left from 1000 to 32767 for %', p_name
        using errcode = '54000',
              hint = 'Register the type under a code below 1000 with job_type_register(code, name).';
    end if;
    insert into pyjobq.job_type as t (job_type, name)
    values (v_code, p_name)
    on conflict do nothing;
    if found then
      return query select v_code, p_name, true;
      return;
    end if;
  end loop;
end;
$$;

comment on function pyjobq.job_type_allocate(text) is
  'The code of the job type named p_name (1..63 characters), registering it first under the smallest free code '
  'from 1000 on when no type has that name (created true); safe when sessions allocate at once.';

create function pyjobq.job_types()
returns table (job_type int, name text)
language sql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select t.job_type::int, t.name::text from pyjobq.job_type t order by t.job_type
$$;

comment on function pyjobq.job_types() is 'The registered job type codes and names.';

-- Retry policy per type. Each type may set its own max_attempts (what an
-- enqueue that passes none gets), backoff (base * 2^(tries - 1) seconds,
-- capped, minus up to jitter of it at random) and execution timeout, which
-- workers read with job_type_policies(). Null is the default, for every
-- client alike: 3 tries, 2 s doubling to an hour, 25% jitter, no timeout.
create function pyjobq.job_type_set_policy(
  p_job_type int,
  p_max_attempts int default null,
  p_backoff_base_seconds double precision default null,
  p_backoff_cap_seconds double precision default null,
  p_backoff_jitter double precision default null,
  p_timeout_seconds double precision default null
)
returns void
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
begin
  perform pyjobq._check_job_type(p_job_type);
  if p_max_attempts is not null then
    perform pyjobq._check_range('p_max_attempts', p_max_attempts, 1, 1000);
  end if;
  perform pyjobq._check_seconds('p_backoff_base_seconds', p_backoff_base_seconds, 0, 86400);
  perform pyjobq._check_seconds('p_backoff_cap_seconds', p_backoff_cap_seconds,
                                coalesce(p_backoff_base_seconds, 2), 31536000);
  if p_backoff_jitter is not null and not (p_backoff_jitter between 0 and 1) then
    raise exception 'p_backoff_jitter must be between 0 and 1'
      using errcode = '22023',
            detail = format('p_backoff_jitter was %s.', p_backoff_jitter),
            hint = 'The share of the delay taken off at random; leave it out for 0.25.';
  end if;
  perform pyjobq._check_seconds('p_timeout_seconds', p_timeout_seconds, 0, 604800);
  update pyjobq.job_type t
     set max_attempts = p_max_attempts,
         backoff_base_seconds = p_backoff_base_seconds,
         backoff_cap_seconds = p_backoff_cap_seconds,
         backoff_jitter = p_backoff_jitter,
         timeout_seconds = coalesce(p_timeout_seconds, 3600)  -- the column's default
   where t.job_type = p_job_type;
end;
$$;

comment on function pyjobq.job_type_set_policy(int, int, double precision, double precision, double precision, double precision) is
  'Sets job type p_job_type''s retry policy, each null meaning the default: max_attempts for enqueues that '
  'pass none (1..1000, default 3), backoff base (0..86400 s, default 2) doubling per try up to the cap '
  '(base..31536000 s, default 3600) minus up to p_backoff_jitter of it (0..1, default 0.25), and the '
  'deadline of an attempt from its claim (0..604800 s, default 3600): workers stop the handler there, and no '
  'lease reaches past it, so the reaper retries the job elsewhere. Jobs already enqueued keep their max_attempts.';

-- What the end of a DONE job keeps. By default the whole row goes to
-- job_history, where job_get, the dashboard and the counts find it until
-- job_prune drops its day. A type whose results nobody reads after the
-- handler returns can keep none: its DONE jobs end with the delete alone, the
-- history's row and its index entry not written (a third of the WAL a drained
-- job writes). A DONE job that something reads after its end is kept all the
-- same: one with dependants or in a batch, one with a dedupe key (a unique
-- window looks back at the ended ones), one that job_watch announces. DEAD
-- and CANCELLED jobs are always kept, for an operator to see and redrive.
create function pyjobq.job_type_set_history(p_job_type int, p_keep_done boolean)
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

-- How many times a job may put itself back to sleep (a snooze: PENDING until
-- a time, its try given back). A handler that waits for something by snoozing
-- in a loop is bounded here; past the bound its job goes DEAD.
create function pyjobq.job_type_set_snoozes(p_job_type int, p_max_snoozes int)
returns void
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
begin
  perform pyjobq._check_job_type(p_job_type);
  perform pyjobq._check_range('p_max_snoozes', p_max_snoozes, 0, 10000);
  update pyjobq.job_type t
     set max_snoozes = p_max_snoozes
   where t.job_type = p_job_type;
end;
$$;

comment on function pyjobq.job_type_set_snoozes(int, int) is
  'Sets how many times a job of type p_job_type may snooze (0..10000; 1000 by default): the snooze past that '
  'makes it DEAD instead. Applies to the snoozes from the commit on.';

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

-- A paused type's jobs stay PENDING (enqueues go on) and no claim that
-- starts after the pause commits takes one (_work_types leaves the type
-- out); the jobs running finish as they would. Resuming announces its due
-- jobs to the sleeping workers. Both are admins' calls, audited.
create function pyjobq.job_type_pause(p_job_type int)
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

create function pyjobq.job_type_resume(p_job_type int)
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

-- The delay before the retry that follows p_tries used tries of a job of type
-- p_job_type, by its policy (retry_backoff's formula when it sets none).
create function pyjobq._backoff(p_job_type int, p_tries int)
returns interval
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_base double precision;
  v_cap double precision;
  v_jitter double precision;
begin
  select coalesce(t.backoff_base_seconds, 2), coalesce(t.backoff_cap_seconds, 3600),
         coalesce(t.backoff_jitter, 0.25)
    into v_base, v_cap, v_jitter
    from pyjobq.job_type t
   where t.job_type = p_job_type;
  return make_interval(secs => least(v_cap, v_base * power(2.0, greatest(p_tries, 1) - 1))
                               * (1.0 - v_jitter * random()));
end;
$$;

comment on function pyjobq._backoff(int, int) is
  'Delay before the retry after p_tries tries of a job of type p_job_type, by the type''s policy.';

-- Jobs by name: every function takes the code, and a client that knows the
-- name passes job_type_code('SEND_EMAIL') as the code. The name as registered
-- wins; else the one name equal to it but for case.
create function pyjobq.job_type_code(p_name text)
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

-- Privileges per job type ------------------------------------------------------
--
-- The group roles decide which functions a role may call; these rows narrow,
-- per job type, who may use them on that type's jobs. A privilege of a type
-- with no row is open to every role that may call the function (the group
-- roles' meaning); once a type has a row for a privilege, only members of the
-- roles named for it (and the schema owner) hold it:
--
--   enqueue  job_enqueue, job_enqueue_many
--   work     job_claim, and each transition a holder makes: complete, fail,
--            renew, release
--   observe  job_get, and the type's rows of job_counts
--
-- Membership is that of the session's role (session_user): inside a SECURITY
-- DEFINER function the role that called it is not otherwise known. A worker
-- whose type it may not work is told 42501 before anything about the job, so
-- it learns neither the holder nor the attempt.

create table pyjobq.job_type_grant (
  job_type smallint not null,
  privilege text not null,
  role_oid oid not null,
  constraint job_type_grant_pkey primary key (job_type, privilege, role_oid),
  constraint job_type_grant_job_type_fkey foreign key (job_type) references pyjobq.job_type (job_type),
  constraint job_type_grant_privilege_valid check (privilege in ('enqueue', 'work', 'observe'))
);

comment on table pyjobq.job_type_grant is
  'Per-type privileges: a (job_type, privilege) with rows is held only by members of the roles named.';

create function pyjobq._denied_types(p_privilege text)
returns smallint[]
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  -- PL/pgSQL, not SQL: its plans are kept for the session, where a SQL
  -- function's body is planned again at every call (tens of microseconds on
  -- every claim and completion). No grant of the privilege: nothing denied.
  if not exists (select 1 from pyjobq.job_type_grant g where g.privilege = p_privilege)
     or pyjobq._session_owns_schema() then
    return '{}';
  end if;
  return (select coalesce(array_agg(distinct g.job_type order by g.job_type), '{}')
            from pyjobq.job_type_grant g
           where g.privilege = p_privilege
             and not exists (select 1
                               from pyjobq.job_type_grant m
                               join pg_catalog.pg_roles r on r.oid = m.role_oid
                              where m.job_type = g.job_type
                                and m.privilege = p_privilege
                                and pg_has_role(session_user, m.role_oid, 'MEMBER')));
end;
$$;

comment on function pyjobq._denied_types(text) is
  'The job types whose p_privilege is granted to named roles, none of which the session''s role is a member of.';

create function pyjobq._check_privilege(p_privilege text, p_job_types int[])
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_denied int;
begin
  -- The denied types are computed once for the whole set: a batch of jobs
  -- costs one check, not one per job.
  select min(u.code) into v_denied
    from unnest(p_job_types) as u(code)
   where u.code = any (pyjobq._denied_types(p_privilege));
  if v_denied is not null then
    raise exception 'permission denied to % jobs of type %', p_privilege, v_denied
      using errcode = '42501',
            detail = format('Job type %s grants %s to named roles only, and role %s is in none of them.',
                            v_denied, p_privilege, session_user),
            hint = 'An admin grants it with pyjobq.job_type_grant(job_type, role, privilege); '
                   'pyjobq.job_type_grants() lists the grants.';
  end if;
end;
$$;

comment on function pyjobq._check_privilege(text, int[]) is
  'Raises 42501 when the session''s role does not hold p_privilege (enqueue, work, observe) on one of the job '
  'types p_job_types.';

-- A read of one job by id (job_get and the reads beside it): 22004 for a
-- null id, 42501 when its type grants observe to roles the caller is not in.
-- A job that does not exist passes: the read returns no rows.
create function pyjobq._check_observe(p_job_id uuid)
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_job_id is null then
    raise exception 'p_job_id must not be null'
      using errcode = '22004',
            hint = 'Pass the job_id that job_enqueue returned.';
  end if;
  perform pyjobq._check_privilege('observe', array(select j.job_type::int from pyjobq.job_all j
                                                    where j.job_id = p_job_id));
end;
$$;

comment on function pyjobq._check_observe(uuid) is
  'Raises 22004 for a null p_job_id and 42501 when the session''s role may not observe the job''s type; a job '
  'that does not exist passes.';

create function pyjobq.job_type_grant(p_job_type int, p_role text, p_privilege text)
returns boolean
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_role oid;
begin
  perform pyjobq._check_job_type(p_job_type);
  perform pyjobq._check_grant_privilege(p_privilege);
  v_role := pyjobq._check_role(p_role);
  insert into pyjobq.job_type_grant (job_type, privilege, role_oid)
  values (p_job_type, p_privilege, v_role)
  on conflict do nothing;
  return found;
end;
$$;

comment on function pyjobq.job_type_grant(int, text, text) is
  'Grants p_privilege (enqueue, work or observe) on the jobs of type p_job_type to the members of role p_role. '
  'From the first grant of a privilege on a type, only the roles granted it hold it. Returns true when newly '
  'granted, false when it was already.';

create function pyjobq.job_type_revoke(p_job_type int, p_role text, p_privilege text)
returns boolean
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_role oid;
begin
  perform pyjobq._check_job_type(p_job_type);
  perform pyjobq._check_grant_privilege(p_privilege);
  v_role := pyjobq._check_role(p_role);
  delete from pyjobq.job_type_grant g
   where g.job_type = p_job_type
     and g.privilege = p_privilege
     and g.role_oid = v_role;
  return found;
end;
$$;

comment on function pyjobq.job_type_revoke(int, text, text) is
  'Revokes p_privilege on the jobs of type p_job_type from role p_role; once no role holds a grant of it, the '
  'privilege is open to the group roles again. Returns true when a grant was removed.';

create function pyjobq.job_type_grants()
returns table (job_type int, job_type_name text, privilege text, role_name text)
language sql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select g.job_type::int, t.name::text, g.privilege, coalesce(r.rolname::text, g.role_oid::text)
    from pyjobq.job_type_grant g
    join pyjobq.job_type t on t.job_type = g.job_type
    left join pg_catalog.pg_roles r on r.oid = g.role_oid
   order by g.job_type, g.privilege, 4
$$;

comment on function pyjobq.job_type_grants() is
  'The per-type grants: job type, privilege and role (its oid when the role was dropped).';

create function pyjobq._check_grant_privilege(p_privilege text)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_privilege is null then
    raise exception 'p_privilege must not be null'
      using errcode = '22004',
            hint = 'Pass enqueue, work or observe.';
  end if;
  if p_privilege not in ('enqueue', 'work', 'observe') then
    raise exception 'p_privilege must be enqueue, work or observe'
      using errcode = '22023',
            detail = format('p_privilege was %s.', p_privilege),
            hint = 'enqueue: job_enqueue*; work: job_claim and what a holder does; observe: job_get, job_counts.';
  end if;
end;
$$;

comment on function pyjobq._check_grant_privilege(text) is
  'Raises 22004 or 22023 unless p_privilege is enqueue, work or observe.';

create function pyjobq._check_role(p_role text)
returns oid
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_role oid;
begin
  perform pyjobq._check_text('p_role', p_role, 63, false);
  select r.oid into v_role from pg_catalog.pg_roles r where r.rolname = p_role;
  if not found then
    raise exception 'p_role % is not a role', p_role
      using errcode = '22023',
            hint = 'Pass the exact name of an existing role: names are case-sensitive and never quoted here.';
  end if;
  return v_role;
end;
$$;

comment on function pyjobq._check_role(text) is
  'Returns the oid of the role named exactly p_role; raises 22004/22023 for no name or an unknown one.';
