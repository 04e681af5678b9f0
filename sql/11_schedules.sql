-- Schedules -------------------------------------------------------------------
--
-- Periodic jobs: a schedule names a cron expression, a time zone and the job
-- each tick enqueues. job_schedule_tick enqueues every due tick exactly once,
-- whoever calls it and however many call it at once: it locks each due
-- schedule row (SKIP LOCKED: a concurrent ticker takes the others), enqueues,
-- and moves next_fire_at past the tick in the same transaction. A ticker that
-- dies rolls back both; one that commits has moved the tick on for everyone.
--
-- Cron is the standard five fields (minute, hour, day of month, month, day of
-- week: numbers, names, *, ranges, lists and steps) or an @alias, evaluated in
-- the schedule's time zone. When day of month and day of week are both
-- restricted, a day matching either matches (as cron does). Daylight saving:
-- a local time that does not exist (the hour skipped in spring) fires at the
-- instant PostgreSQL maps it to, one hour later on the wall clock; a local
-- time that occurs twice (the hour repeated in autumn) fires at its first
-- occurrence only, unless the hour field is *, whose schedules follow real
-- time and fire in both.

create type pyjobq.cron_spec as (
  minutes int[],            -- 0..59
  hours int[],              -- 0..23
  days int[],               -- 1..31
  months int[],             -- 1..12
  weekdays int[],           -- 0..6, Sunday 0
  days_restricted boolean,  -- the day-of-month field is not *
  weekdays_restricted boolean,
  every_hour boolean        -- the hour field is *
);

comment on type pyjobq.cron_spec is
  'A parsed cron expression: the values each field allows, and which fields were *.';

create table pyjobq.schedule (
  name text primary key,
  cron text not null,
  spec pyjobq.cron_spec not null,
  time_zone text not null,
  job_type smallint not null references pyjobq.job_type (job_type),
  payload jsonb not null,
  priority smallint not null,
  max_attempts smallint,                 -- null: the type's policy when the job is enqueued
  dedupe_key text,
  on_miss text not null constraint schedule_on_miss check (on_miss in ('skip', 'catch_up')),
  grace_seconds int not null,
  paused boolean not null default false,
  next_fire_at timestamptz not null,     -- the next tick not yet fired (kept while paused)
  last_fire_at timestamptz,              -- the last tick fired
  last_job_id uuid,                      -- the job it enqueued (or the active job with its dedupe key)
  fired bigint not null default 0,       -- ticks fired, a catch-up counted once
  misses bigint not null default 0,      -- times ticks were found later than the grace
  created_at timestamptz not null,
  updated_at timestamptz not null
);

create index schedule_due_idx on pyjobq.schedule (next_fire_at) where not paused;

comment on table pyjobq.schedule is
  'Periodic jobs; see job_schedule_set and job_schedule_tick.';

-- One field of a cron expression: a comma list of *, n or a-b, each optionally
-- followed by /step (a/step runs from a to the field's end), with names where
-- the field has them. p_field names it in errors. Day of week takes 0..7, 7
-- being Sunday as 0 is.
create function pyjobq._cron_field(p_text text, p_field text, p_low int, p_high int, p_names text[])
returns int[]
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_item text;
  v_part text[];
  v_bounds int[];
  v_bound text;
  v_n int;
  v_low int;
  v_high int;
  v_values int[] := '{}';
begin
  foreach v_item in array string_to_array(p_text, ',') loop
    v_part := regexp_match(v_item, '^(\*|[a-z0-9]+(?:-[a-z0-9]+)?)(?:/(\d{1,2}))?$');
    if v_part is null or v_part[2]::int = 0 then
      raise exception 'p_cron''s % field has a malformed item "%"', p_field, v_item
        using errcode = '22023',
              hint = 'Items are *, n or a-b, each optionally followed by /step (1..99), separated by commas.';
    end if;
    if v_part[1] = '*' then
      v_low := p_low;
      v_high := p_high;
    else
      v_bounds := '{}';
      foreach v_bound in array string_to_array(v_part[1], '-') loop
        v_n := case when v_bound ~ '^\d{1,2}$' then v_bound::int
                    else array_position(p_names, v_bound) - 1 + p_low end;
        if v_n is null or v_n < p_low or v_n > p_high then
          raise exception 'p_cron''s % field must be within % and %', p_field, p_low, p_high
            using errcode = '22023',
                  detail = format('The item was "%s".', v_item),
                  hint = case when p_names is null then 'Use numbers.'
                              else format('Use numbers or the names %s.', array_to_string(p_names, ', ')) end;
        end if;
        v_bounds := v_bounds || v_n;
      end loop;
      v_low := v_bounds[1];
      v_high := coalesce(v_bounds[2], case when v_part[2] is null then v_low else p_high end);
      if v_high < v_low then
        raise exception 'p_cron''s % field has a range that runs backwards: "%"', p_field, v_item
          using errcode = '22023';
      end if;
    end if;
    v_values := v_values || array(select g from generate_series(v_low, v_high, coalesce(v_part[2]::int, 1)) g);
  end loop;
  return array(select distinct case when p_field = 'day of week' then v % 7 else v end
                 from unnest(v_values) as v order by 1);
end;
$$;

comment on function pyjobq._cron_field(text, text, int, int, text[]) is
  'The sorted values one cron field allows; raises 22023 naming the field (p_field) when it is malformed.';

create function pyjobq._cron_parse(p_cron text)
returns pyjobq.cron_spec
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_text text := btrim(lower(p_cron));
  v_fields text[];
  c_months constant text[] := '{jan,feb,mar,apr,may,jun,jul,aug,sep,oct,nov,dec}';
  c_weekdays constant text[] := '{sun,mon,tue,wed,thu,fri,sat}';
begin
  perform pyjobq._check_text('p_cron', p_cron, 200, false);
  v_text := case v_text
              when '@yearly' then '0 0 1 1 *'
              when '@annually' then '0 0 1 1 *'
              when '@monthly' then '0 0 1 * *'
              when '@weekly' then '0 0 * * 0'
              when '@daily' then '0 0 * * *'
              when '@midnight' then '0 0 * * *'
              when '@hourly' then '0 * * * *'
              else v_text end;
  if v_text like '@%' then
    raise exception 'p_cron has an unknown alias "%"', v_text
      using errcode = '22023',
            hint = 'The aliases are @yearly, @annually, @monthly, @weekly, @daily, @midnight and @hourly.';
  end if;
  v_fields := regexp_split_to_array(v_text, '\s+');
  if cardinality(v_fields) <> 5 then
    raise exception 'p_cron must have 5 fields (minute hour day-of-month month day-of-week), not %',
                    cardinality(v_fields)
      using errcode = '22023',
            hint = 'For example ''30 2 * * *'' (02:30 every day) or ''*/15 9-17 * * mon-fri''.';
  end if;
  return row(
    pyjobq._cron_field(v_fields[1], 'minute', 0, 59, null),
    pyjobq._cron_field(v_fields[2], 'hour', 0, 23, null),
    pyjobq._cron_field(v_fields[3], 'day of month', 1, 31, null),
    pyjobq._cron_field(v_fields[4], 'month', 1, 12, c_months),
    pyjobq._cron_field(v_fields[5], 'day of week', 0, 7, c_weekdays),
    v_fields[3] <> '*',
    v_fields[5] <> '*',
    v_fields[2] = '*'
  )::pyjobq.cron_spec;
end;
$$;

comment on function pyjobq._cron_parse(text) is
  'Parses a five-field cron expression or an @alias; raises 22023 naming the field that is wrong.';

-- The first tick of p_spec in time zone p_tz strictly after p_after, or null
-- when none falls within eight years (a day that never comes, such as 30 Feb).
-- Local times are walked in order from three hours before p_after's, so that
-- the second occurrence of a repeated hour is seen; the earliest instant after
-- p_after wins, and once the walk is three hours past it, none can be earlier.
create function pyjobq._cron_next(p_spec pyjobq.cron_spec, p_tz text, p_after timestamptz)
returns timestamptz
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_start timestamp := date_trunc('minute', p_after at time zone p_tz) - interval '3 hours';
  v_day date;
  v_local timestamp;
  v_best timestamptz;
  v_mapped timestamptz;
  v_at timestamptz;
  v_seen int;
  v_hour int;
  v_minute int;
begin
  for v_offset in 0 .. 366 * 8 + 1 loop
    v_day := v_start::date + v_offset;
    continue when not (extract(month from v_day)::int = any (p_spec.months));
    continue when not (case
      when p_spec.days_restricted and p_spec.weekdays_restricted then
        extract(day from v_day)::int = any (p_spec.days) or extract(dow from v_day)::int = any (p_spec.weekdays)
      when p_spec.days_restricted then extract(day from v_day)::int = any (p_spec.days)
      when p_spec.weekdays_restricted then extract(dow from v_day)::int = any (p_spec.weekdays)
      else true end);
    foreach v_hour in array p_spec.hours loop
      foreach v_minute in array p_spec.minutes loop
        v_local := v_day + make_time(v_hour, v_minute, 0);
        continue when v_local < v_start;
        if v_best is not null and v_local > (v_best at time zone p_tz) + interval '3 hours' then
          return v_best;
        end if;
        v_mapped := v_local at time zone p_tz;
        v_seen := 0;
        for v_at in
          select o.at
            from unnest(array[v_mapped - interval '1 hour', v_mapped - interval '30 minutes', v_mapped,
                              v_mapped + interval '30 minutes', v_mapped + interval '1 hour']) as o(at)
           where (o.at at time zone p_tz) = v_local
           order by o.at
        loop
          v_seen := v_seen + 1;
          -- A repeated local time: its first occurrence, or every one for an hourly field.
          continue when v_seen > 1 and not p_spec.every_hour;
          if v_at > p_after and (v_best is null or v_at < v_best) then
            v_best := v_at;
          end if;
        end loop;
        -- A local time the clock skips: where PostgreSQL maps it, an hour on.
        if v_seen = 0 and v_mapped > p_after and (v_best is null or v_mapped < v_best) then
          v_best := v_mapped;
        end if;
      end loop;
    end loop;
  end loop;
  return v_best;
end;
$$;

comment on function pyjobq._cron_next(pyjobq.cron_spec, text, timestamptz) is
  'The first tick of p_spec in time zone p_tz after p_after (null if none within eight years).';

-- The time zone p_time_zone names, checked: 22023 naming the argument.
create function pyjobq._check_time_zone(p_time_zone text)
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  perform pyjobq._check_text('p_time_zone', p_time_zone, 64, false);
  perform now() at time zone p_time_zone;
exception
  when invalid_parameter_value then
    raise exception 'p_time_zone must name a time zone PostgreSQL knows'
      using errcode = '22023',
            detail = format('p_time_zone was %s.', p_time_zone),
            hint = 'Use an IANA name such as ''Europe/Berlin'' or ''UTC'' (see pg_timezone_names).';
end;
$$;

comment on function pyjobq._check_time_zone(text) is
  'Raises 22023 naming p_time_zone unless PostgreSQL knows the time zone.';

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

create function pyjobq.job_schedule_delete(p_name text)
returns boolean
language sql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
  with gone as (delete from pyjobq.schedule s where s.name = p_name returning 1)
  select exists (select from gone)
$$;

comment on function pyjobq.job_schedule_delete(text) is
  'Deletes schedule p_name; jobs it enqueued stay. Returns whether it existed.';

create function pyjobq.job_schedule_pause(p_name text)
returns boolean
language sql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
  with paused as (
    update pyjobq.schedule s set paused = true, updated_at = pyjobq.clock_now()
     where s.name = p_name
    returning 1
  )
  select exists (select from paused)
$$;

comment on function pyjobq.job_schedule_pause(text) is
  'Stops schedule p_name from firing until job_schedule_resume. Returns whether it exists.';

create function pyjobq.job_schedule_resume(p_name text)
returns boolean
language sql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
  -- Ticks that passed while paused are not fired: the next is the first after now.
  with resumed as (
    update pyjobq.schedule s
       set paused = false,
           next_fire_at = coalesce(pyjobq._cron_next(s.spec, s.time_zone, pyjobq.clock_now()), s.next_fire_at),
           updated_at = pyjobq.clock_now()
     where s.name = p_name and s.paused
    returning 1
  )
  select exists (select from resumed) or exists (select from pyjobq.schedule s where s.name = p_name)
$$;

comment on function pyjobq.job_schedule_resume(text) is
  'Lets paused schedule p_name fire again from its first tick after now (ticks while paused are not fired). '
  'Returns whether it exists.';

create function pyjobq.job_schedules()
returns table (
  name text,
  cron text,
  time_zone text,
  job_type int,
  job_type_name text,
  payload jsonb,
  priority int,
  max_attempts int,
  dedupe_key text,
  on_miss text,
  grace_seconds int,
  paused boolean,
  next_fire_at timestamptz,
  last_fire_at timestamptz,
  last_job_id uuid,
  fired bigint,
  misses bigint
)
language sql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select s.name, s.cron, s.time_zone, s.job_type::int, t.name::text, s.payload, s.priority::int,
         s.max_attempts::int, s.dedupe_key, s.on_miss, s.grace_seconds, s.paused, s.next_fire_at,
         s.last_fire_at, s.last_job_id, s.fired, s.misses
    from pyjobq.schedule s
    join pyjobq.job_type t on t.job_type = s.job_type
   order by s.name
$$;

comment on function pyjobq.job_schedules() is
  'Every schedule with its settings, its next tick (next_fire_at), the last tick fired and the job it '
  'enqueued, how many ticks it fired and how many times ticks were found later than its grace.';

create function pyjobq.job_schedule_tick()
returns table (name text, tick timestamptz, job_id uuid, created boolean, catch_up boolean)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_s record;
  v_next timestamptz;
  v_fired bigint;
  v_missed boolean;
  v_last timestamptz;
  v_job uuid;
  v_created boolean;
begin
  for v_s in
    select s.*
      from pyjobq.schedule s
     where not s.paused
       and s.next_fire_at <= v_now
     order by s.next_fire_at, s.name
       for update skip locked
  loop
    v_next := v_s.next_fire_at;
    v_fired := 0;
    v_missed := false;
    v_last := v_s.last_fire_at;
    v_job := v_s.last_job_id;
    -- Ticks later than the grace: nothing, or one job standing for all of them.
    if v_next < v_now - make_interval(secs => v_s.grace_seconds) then
      v_missed := true;
      if v_s.on_miss = 'catch_up' then
        select e.job_id, e.created into v_job, v_created
          from pyjobq._enqueue_one(v_s.job_type, v_s.payload, v_s.priority, v_now, v_s.dedupe_key,
                                   pyjobq._max_attempts(v_s.job_type, v_s.max_attempts), v_now) e;
        v_fired := v_fired + 1;
        v_last := v_next;
        return query select v_s.name, v_next, v_job, v_created, true;
      end if;
      -- The first tick not later than the grace.
      v_next := pyjobq._cron_next(v_s.spec, v_s.time_zone,
                                  v_now - make_interval(secs => v_s.grace_seconds) - interval '1 microsecond');
    end if;
    while v_next <= v_now loop
      select e.job_id, e.created into v_job, v_created
        from pyjobq._enqueue_one(v_s.job_type, v_s.payload, v_s.priority, v_now, v_s.dedupe_key,
                                 pyjobq._max_attempts(v_s.job_type, v_s.max_attempts), v_now) e;
      v_fired := v_fired + 1;
      v_last := v_next;
      return query select v_s.name, v_next, v_job, v_created, false;
      v_next := pyjobq._cron_next(v_s.spec, v_s.time_zone, v_next);
    end loop;
    update pyjobq.schedule s
       set next_fire_at = v_next,
           last_fire_at = v_last,
           last_job_id = v_job,
           fired = s.fired + v_fired,
           misses = s.misses + v_missed::int,
           updated_at = v_now
     where s.name = v_s.name;
  end loop;
end;
$$;

comment on function pyjobq.job_schedule_tick() is
  'Enqueues every due tick of every schedule not paused, exactly once however many sessions call it at once: '
  'each schedule row is locked (others skip it) and its next tick moved on in the same transaction. Ticks '
  'more than the schedule''s grace late are skipped or, with on_miss catch_up, enqueue one job (catch_up '
  'true). Returns one row per job enqueued: the schedule, the tick, the job (or the active job holding the '
  'schedule''s dedupe key, created false).';

-- When a worker's other chores are next due: the next tick of a schedule not
-- paused (job_schedule_tick), and the first lease to expire (job_reap). A
-- worker reads it in its claim's statement, beside job_next_due, and ticks
-- and reaps only when these times come: with no schedule and no job RUNNING,
-- its claims are all an idle worker sends. Each is one probe of an index.
create function pyjobq.job_next_chores(out next_tick timestamptz, out next_expiry timestamptz)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  next_tick := (select min(s.next_fire_at) from pyjobq.schedule s where not s.paused);
  next_expiry := (select min(j.lease_until) from pyjobq.job j where j.lease_until is not null);
end;
$$;

comment on function pyjobq.job_next_chores() is
  'When a worker should next tick the schedules and reap: the next tick of a schedule not paused (next_tick) '
  'and the earliest lease of a RUNNING job to expire (next_expiry), each null when there is none. A worker '
  'reads it with its claim, and calls job_schedule_tick and job_reap when these times come.';
