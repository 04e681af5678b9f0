-- depends: 0017_fair_share

-- Schema 18: a schedule's ticks can count from a given time.
--
-- job_schedule_set takes p_start_at (a new trailing parameter that defaults to
-- null: now, as before): the next tick is the first after it, so a start in
-- the past makes the ticks since then due at once.

drop function pyjobq.job_schedule_set(text, text, int, jsonb, text, int, int, text, text, int);

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 18
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create function pyjobq.job_schedule_set(
  p_name text,
  p_cron text,
  p_job_type int,
  p_payload jsonb default null,
  p_time_zone text default null,
  p_priority int default null,
  p_max_attempts int default null,
  p_dedupe_key text default null,
  p_on_miss text default null,
  p_grace_seconds int default null,
  p_start_at timestamptz default null
)
returns table (name text, next_fire_at timestamptz)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_time_zone text := coalesce(p_time_zone, 'UTC');
  v_on_miss text := coalesce(p_on_miss, 'skip');
  v_grace_seconds int := coalesce(p_grace_seconds, 60);
  v_spec pyjobq.cron_spec;
  v_next timestamptz;
begin
  perform pyjobq._check_text('p_name', p_name, 200, false);
  v_spec := pyjobq._cron_parse(p_cron);
  perform pyjobq._check_job_type(p_job_type);
  perform pyjobq._check_payload('p_payload', coalesce(p_payload, '{}'));
  perform pyjobq._check_time_zone(v_time_zone);
  perform pyjobq._check_range('p_priority', coalesce(p_priority, 100), 0, 32767);
  if p_max_attempts is not null then
    perform pyjobq._check_range('p_max_attempts', p_max_attempts, 1, 1000);
  end if;
  perform pyjobq._check_text('p_dedupe_key', p_dedupe_key, 200, true);
  if v_on_miss not in ('skip', 'catch_up') then
    raise exception 'p_on_miss must be skip or catch_up'
      using errcode = '22023',
            detail = format('p_on_miss was %s.', v_on_miss),
            hint = 'skip: ticks found later than p_grace_seconds enqueue nothing; catch_up: one job for all of them.';
  end if;
  perform pyjobq._check_range('p_grace_seconds', v_grace_seconds, 1, 86400);
  perform pyjobq._check_time('p_start_at', p_start_at, v_now);
  v_next := pyjobq._cron_next(v_spec, v_time_zone, coalesce(p_start_at, v_now));
  if v_next is null then
    raise exception 'p_cron matches no date within eight years'
      using errcode = '22023',
            detail = format('p_cron was %s.', p_cron),
            hint = 'Check the day of month against the months, such as 30 or 31 in February.';
  end if;

  insert into pyjobq.schedule as s
    (name, cron, spec, time_zone, job_type, payload, priority, max_attempts, dedupe_key, on_miss,
     grace_seconds, next_fire_at, created_at, updated_at)
  values
    (p_name, p_cron, v_spec, v_time_zone, p_job_type, coalesce(p_payload, '{}'), coalesce(p_priority, 100),
     p_max_attempts, p_dedupe_key, v_on_miss, v_grace_seconds, v_next, v_now, v_now)
  on conflict on constraint schedule_pkey do update
    set cron = excluded.cron, spec = excluded.spec, time_zone = excluded.time_zone,
        job_type = excluded.job_type, payload = excluded.payload, priority = excluded.priority,
        max_attempts = excluded.max_attempts, dedupe_key = excluded.dedupe_key, on_miss = excluded.on_miss,
        grace_seconds = excluded.grace_seconds, next_fire_at = excluded.next_fire_at,
        updated_at = excluded.updated_at;
  return query select p_name, v_next;
end;
$$;

comment on function pyjobq.job_schedule_set(text, text, int, jsonb, text, int, int, text, text, int, timestamptz) is
  'Creates or replaces schedule p_name (1..200 chars): at each tick of p_cron (five fields or an @alias) in '
  'p_time_zone (default UTC) a job of type p_job_type with p_payload, p_priority, p_max_attempts and '
  'p_dedupe_key as job_enqueue takes them. Ticks found more than p_grace_seconds (1..86400, default 60) late '
  'are skipped (p_on_miss skip, the default) or enqueue one job for all of them (catch_up). The next tick is '
  'the first after p_start_at (default now; within 100 years of now), so a start in the past makes the ticks '
  'since then due; a paused schedule stays paused. Returns the name and the next tick.';

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
    pyjobq.job_types(), pyjobq.job_type_code(text), pyjobq.job_type_policies(), pyjobq.job_type_limits(),
    pyjobq.schema_version(), pyjobq.clock_now()
    to pyjobq_producer, pyjobq_worker, pyjobq_observer, pyjobq_admin;
  grant execute on function
    pyjobq.job_enqueue(int, jsonb, int, timestamptz, text, int, interval, text),
    pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int, interval, text[])
    to pyjobq_producer;
  grant execute on function
    pyjobq.job_claim(text, int, int, int[]),
    pyjobq.job_next_due(int[]),
    pyjobq.job_complete(uuid, text, int, jsonb, uuid),
    pyjobq.job_complete_many(text, uuid[], int[], jsonb[], uuid[]),
    pyjobq.job_fail(uuid, text, int, text, double precision, boolean, uuid),
    pyjobq.job_renew_lease(uuid, text, int, int, uuid),
    pyjobq.job_renew_lease_many(text, uuid[], int[], int, uuid[]),
    pyjobq.job_release(uuid, text, int, uuid),
    pyjobq.job_release_many(text, uuid[], int[], uuid[]),
    pyjobq.job_reap(int),
    pyjobq.job_schedule_tick()
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
    pyjobq.job_type_set_policy(int, int, double precision, double precision, double precision, double precision),
    pyjobq.job_settings(),
    pyjobq.job_settings_set(boolean),
    pyjobq.job_type_set_limits(int, int, int, int, interval, int, interval, boolean),
    pyjobq.job_reap(int),
    pyjobq.job_schedule_set(text, text, int, jsonb, text, int, int, text, text, int, timestamptz),
    pyjobq.job_schedule_delete(text),
    pyjobq.job_schedule_pause(text),
    pyjobq.job_schedule_resume(text),
    pyjobq.job_schedules(),
    pyjobq.job_schedule_tick()
    to pyjobq_admin;
end;
$$;

comment on function pyjobq.grant_roles() is
  'Creates the NOLOGIN group roles pyjobq_producer (enqueue, get, list, cancel, watch), pyjobq_worker (claim, '
  'next due, complete, fail, '
  'renew, release, reap, schedule tick), pyjobq_observer (counts) and pyjobq_admin (counts, get, list, cancel, '
  'watch, reap, redrive, prune, '
  'register types, per-type grants, limits, settings, schedules) '
  'when missing and the caller may create roles, and grants each EXECUTE on its functions. Run by the '
  'installation; run it again as a role with CREATEROLE when the installing role could not create them.';


-- The new function, like every function of the schema, is not PUBLIC's; the
-- group roles get what grant_roles grants.
revoke all on all functions in schema pyjobq from public;

do $$
begin
  perform pyjobq.grant_roles();
end;
$$;
