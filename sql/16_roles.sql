-- Privileges ------------------------------------------------------------------

-- The tables are private: roles other than the owner reach the queue only
-- through the job_* functions, which run with the owner's rights (security
-- definer) and pin their search_path, so a caller can neither touch rows
-- directly nor redirect a name to an object of its own. Nothing is executable
-- by PUBLIC; the group roles below get exactly what their job needs.
revoke all on all functions in schema pyjobq from public;

-- Who may execute each public function: a row a function, named by its
-- signature, with the group roles that get EXECUTE on it. grant_roles makes
-- the grants what this table says; a change to the API changes its rows (a
-- migration inserts, updates or deletes them and calls grant_roles) and
-- never grant_roles itself.
create table pyjobq.api_grant (
  function text not null,
  roles text[] not null,
  constraint api_grant_pkey primary key (function),
  constraint api_grant_roles_valid check (
    cardinality(roles) > 0
    and roles <@ array['pyjobq_producer', 'pyjobq_worker', 'pyjobq_observer', 'pyjobq_admin'])
);

comment on table pyjobq.api_grant is
  'The group roles that may execute each public function (function: its signature, as regprocedure reads '
  'it); grant_roles grants exactly these.';

insert into pyjobq.api_grant (function, roles) values
  ('pyjobq.job_types()',
   '{pyjobq_producer,pyjobq_worker,pyjobq_observer,pyjobq_admin}'),
  ('pyjobq.job_type_code(text)',
   '{pyjobq_producer,pyjobq_worker,pyjobq_observer,pyjobq_admin}'),
  ('pyjobq.job_type_policies()',
   '{pyjobq_producer,pyjobq_worker,pyjobq_observer,pyjobq_admin}'),
  ('pyjobq.job_type_limits()',
   '{pyjobq_producer,pyjobq_worker,pyjobq_observer,pyjobq_admin}'),
  ('pyjobq.schema_version()',
   '{pyjobq_producer,pyjobq_worker,pyjobq_observer,pyjobq_admin}'),
  ('pyjobq.clock_now()',
   '{pyjobq_producer,pyjobq_worker,pyjobq_observer,pyjobq_admin}'),
  ('pyjobq.job_enqueue(int, jsonb, int, timestamptz, text, int, interval, text, jsonb, uuid[], text, uuid, text)',
   '{pyjobq_producer}'),
  ('pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int, interval, text[], jsonb, jsonb[], text, uuid, text)',
   '{pyjobq_producer}'),
  ('pyjobq.job_batch_open(jsonb)',
   '{pyjobq_producer}'),
  ('pyjobq.job_batch_close(uuid)',
   '{pyjobq_producer}'),
  ('pyjobq.job_claim(text, int, int, int[])',
   '{pyjobq_worker}'),
  ('pyjobq.job_next_due(int[])',
   '{pyjobq_worker}'),
  ('pyjobq.job_complete(uuid, text, int, jsonb, uuid)',
   '{pyjobq_worker}'),
  ('pyjobq.job_complete_many(text, uuid[], int[], jsonb[], uuid[])',
   '{pyjobq_worker}'),
  ('pyjobq.job_fail(uuid, text, int, text, double precision, boolean, uuid)',
   '{pyjobq_worker}'),
  ('pyjobq.job_fail_many(text, uuid[], int[], text[], double precision[], boolean[], uuid[])',
   '{pyjobq_worker}'),
  ('pyjobq.job_finish_many(text, uuid[], int[], text[], jsonb[], text[], double precision[], uuid[])',
   '{pyjobq_worker}'),
  ('pyjobq.job_renew_lease(uuid, text, int, int, uuid)',
   '{pyjobq_worker}'),
  ('pyjobq.job_renew_lease_many(text, uuid[], int[], int, uuid[])',
   '{pyjobq_worker}'),
  ('pyjobq.job_step_save(uuid, text, int, text, jsonb, uuid)',
   '{pyjobq_worker}'),
  ('pyjobq.job_steps(uuid, text, int, uuid)',
   '{pyjobq_worker}'),
  ('pyjobq.job_progress(uuid, text, int, jsonb, uuid)',
   '{pyjobq_worker}'),
  ('pyjobq.job_event_wait(uuid, text, int, text, double precision, uuid)',
   '{pyjobq_worker}'),
  ('pyjobq.job_signal(uuid, text, jsonb)',
   '{pyjobq_producer,pyjobq_admin}'),
  ('pyjobq.job_release(uuid, text, int, uuid)',
   '{pyjobq_worker}'),
  ('pyjobq.job_release_many(text, uuid[], int[], uuid[])',
   '{pyjobq_worker}'),
  ('pyjobq.job_reap(int)',
   '{pyjobq_worker,pyjobq_admin}'),
  ('pyjobq.job_schedule_tick()',
   '{pyjobq_worker,pyjobq_admin}'),
  ('pyjobq.job_next_chores()',
   '{pyjobq_worker,pyjobq_admin}'),
  ('pyjobq.job_worker_idle()',
   '{pyjobq_worker}'),
  ('pyjobq.job_worker_busy()',
   '{pyjobq_worker}'),
  ('pyjobq.job_counts()',
   '{pyjobq_observer,pyjobq_admin}'),
  ('pyjobq.job_throughput(int)',
   '{pyjobq_observer,pyjobq_admin}'),
  ('pyjobq.job_workers(interval)',
   '{pyjobq_observer,pyjobq_admin}'),
  ('pyjobq.job_get(uuid)',
   '{pyjobq_producer,pyjobq_admin}'),
  ('pyjobq.job_attempts(uuid)',
   '{pyjobq_producer,pyjobq_admin}'),
  ('pyjobq.job_step_list(uuid)',
   '{pyjobq_producer,pyjobq_admin}'),
  ('pyjobq.job_event_list(uuid)',
   '{pyjobq_producer,pyjobq_admin}'),
  ('pyjobq.job_dependencies(uuid)',
   '{pyjobq_producer,pyjobq_observer,pyjobq_admin}'),
  ('pyjobq.job_batch_get(uuid)',
   '{pyjobq_producer,pyjobq_observer,pyjobq_admin}'),
  ('pyjobq.job_cancel(uuid[])',
   '{pyjobq_producer,pyjobq_admin}'),
  ('pyjobq.job_update(uuid, jsonb, int, timestamptz)',
   '{pyjobq_producer,pyjobq_admin}'),
  ('pyjobq.job_watch(uuid[])',
   '{pyjobq_producer,pyjobq_admin}'),
  ('pyjobq.job_list(int, int, text, timestamptz, timestamptz, boolean, uuid, int, text, uuid)',
   '{pyjobq_producer,pyjobq_admin}'),
  ('pyjobq.job_redrive(uuid[], int, int)',
   '{pyjobq_admin}'),
  ('pyjobq.job_audit(bigint, int)',
   '{pyjobq_admin}'),
  ('pyjobq.job_prune(interval, int)',
   '{pyjobq_admin}'),
  ('pyjobq.job_prune_estimate(interval)',
   '{pyjobq_admin}'),
  ('pyjobq.job_history_maintain(int)',
   '{pyjobq_admin}'),
  ('pyjobq.job_type_register(int, text)',
   '{pyjobq_admin}'),
  ('pyjobq.job_type_allocate(text)',
   '{pyjobq_admin}'),
  ('pyjobq.job_type_grant(int, text, text)',
   '{pyjobq_admin}'),
  ('pyjobq.job_type_revoke(int, text, text)',
   '{pyjobq_admin}'),
  ('pyjobq.job_type_grants()',
   '{pyjobq_admin}'),
  ('pyjobq.job_type_set_policy(int, int, double precision, double precision, double precision, double precision)',
   '{pyjobq_admin}'),
  ('pyjobq.job_type_set_history(int, boolean)',
   '{pyjobq_admin}'),
  ('pyjobq.job_type_set_snoozes(int, int)',
   '{pyjobq_admin}'),
  ('pyjobq.job_type_pause(int)',
   '{pyjobq_admin}'),
  ('pyjobq.job_type_resume(int)',
   '{pyjobq_admin}'),
  ('pyjobq.job_settings()',
   '{pyjobq_admin}'),
  ('pyjobq.job_settings_set(boolean, interval)',
   '{pyjobq_admin}'),
  ('pyjobq.job_type_set_limits(int, int, int, int, interval, int, interval, boolean)',
   '{pyjobq_admin}'),
  ('pyjobq.job_schedule_set(text, text, int, jsonb, text, int, int, text, text, int, timestamptz)',
   '{pyjobq_admin}'),
  ('pyjobq.job_schedule_delete(text)',
   '{pyjobq_admin}'),
  ('pyjobq.job_schedule_pause(text)',
   '{pyjobq_admin}'),
  ('pyjobq.job_schedule_resume(text)',
   '{pyjobq_admin}'),
  ('pyjobq.job_schedules()',
   '{pyjobq_admin}');

create function pyjobq.grant_roles()
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_missing text[];
  v_grant record;
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
  revoke execute on all functions in schema pyjobq
    from pyjobq_producer, pyjobq_worker, pyjobq_observer, pyjobq_admin;
  -- The only names this builds SQL from are the table's, owner-written:
  -- each signature read back as a regprocedure (which must exist), each role
  -- one of the four the table's check allows, quoted.
  for v_grant in
    select g.function::regprocedure as function, g.roles
      from pyjobq.api_grant g
     order by g.function
  loop
    execute format('grant execute on function %s to %s', v_grant.function,
                   (select string_agg(quote_ident(r.name), ', ') from unnest(v_grant.roles) r(name)));
  end loop;
end;
$$;

revoke all on function pyjobq.grant_roles() from public;

comment on function pyjobq.grant_roles() is
  'Creates the NOLOGIN group roles pyjobq_producer, pyjobq_worker, pyjobq_observer and pyjobq_admin when '
  'missing and the caller may create roles, and makes their EXECUTE grants on the schema''s functions exactly '
  'what pyjobq.api_grant lists. Run by the installation and by each migration that changes the API; run it '
  'again as a role with CREATEROLE when the installing role could not create them.';

do $$
begin
  perform pyjobq.grant_roles();
end;
$$;
