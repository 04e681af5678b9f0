-- depends: 0047_one_concern_a_function

-- Schema 48: a one-job enqueue makes no set-returning call for its id, and
-- asks for a fair-share rank only for a type with fair share.

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 48
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq._job_id_prefix(p_now timestamptz)
returns text
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  return lpad(to_hex((extract(epoch from p_now) * 1000)::bigint & 281474976710655), 12, '0')
         || '8' || lpad(to_hex(floor(random() * 4096)::int), 3, '0');
end;
$$;

comment on function pyjobq._job_id_prefix(timestamptz) is
  'The first 16 hex digits of the ids of jobs created at p_now: its milliseconds, the version, 12 random bits. '
  'A job''s id is this prefix followed by to_hex(seq | (1 << 63)).';

create or replace function pyjobq._new_job_ids(p_now timestamptz, p_count int)
returns table (seq bigint, job_id uuid)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
set plan_cache_mode = force_generic_plan
as $$
begin
  -- One prefix for the call. PL/pgSQL, its plan generic: kept for the
  -- session, where a SQL body, or custom plans for each p_count, are made at
  -- every call.
  return query
  select s.seq, (p.prefix || to_hex(s.seq | (-9223372036854775808)::bigint))::uuid
    from (select pyjobq._job_id_prefix(p_now) as prefix) p,
         lateral (select nextval('pyjobq.job_seq') as seq from generate_series(1, p_count)) s;
end;
$$;

comment on function pyjobq._new_job_ids(timestamptz, int) is
  'p_count new (seq, job_id) pairs in increasing seq order: seq from pyjobq.job_seq, job_id time-ordered by p_now.';

create or replace function pyjobq._enqueue_one(
  p_job_type int,
  p_payload jsonb,
  p_priority int,
  p_run_after timestamptz,
  p_dedupe_key text,
  p_max_attempts int,
  p_now timestamptz,
  p_unique_for interval default null,
  p_concurrency_key text default null,
  p_metadata jsonb default null,
  p_parents uuid[] default null,
  p_run_on_parent_failure boolean default null,
  p_batch_id uuid default null
)
returns table (job_id uuid, created boolean)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_seq bigint;
  v_new_id uuid;
  v_row pyjobq.job;
  v_id uuid;
  v_ended uuid;
  v_status smallint := 1;
  v_waiting int;
  v_failure text;
  v_read_ids uuid[];
  v_read_statuses smallint[];
begin
  if p_unique_for is not null then
    -- An active job with the key is the duplicate first: the one a window-less
    -- enqueue returns, and the one whose outcome is still to come.
    v_id := pyjobq._active_holder(p_job_type, p_dedupe_key);
    if v_id is null then
      v_id := pyjobq._ended_within(p_job_type, p_dedupe_key, p_unique_for, p_now);
    end if;
    if v_id is not null then
      return query select v_id, false;
      return;
    end if;
  end if;
  -- With parents: WAITING for those still to end, or CANCELLED at once by one
  -- that ended DEAD or CANCELLED (unless it runs on parent failure).
  if p_parents is not null then
    select l.waiting, l.failure, l.ids, l.statuses
      into v_waiting, v_failure, v_read_ids, v_read_statuses
      from pyjobq._read_parents(p_parents) l;
    v_status := case when v_failure is not null and not p_run_on_parent_failure then 5
                     when v_waiting > 0 then 6
                     else 1 end;
    -- Born CANCELLED, it would take no key: an active job with the key is
    -- still the answer, as for any enqueue.
    if v_status = 5 and p_dedupe_key is not null then
      v_id := pyjobq._active_holder(p_job_type, p_dedupe_key);
      if v_id is not null then
        return query select v_id, false;
        return;
      end if;
    end if;
  end if;
  loop
    -- One id: _new_job_ids's, without the set-returning call that a batch needs.
    v_seq := nextval('pyjobq.job_seq');
    v_new_id := (pyjobq._job_id_prefix(p_now) || to_hex(v_seq | (-9223372036854775808)::bigint))::uuid;
    -- The row in the tables' column order; born CANCELLED, it is history at
    -- once. A fair rank only for a type with fair share: asked in the row's
    -- own statement, it costs the others no call.
    v_row := row(v_new_id, p_job_type, v_status, p_priority, p_payload, null, p_dedupe_key, 0, p_max_attempts,
                 p_run_after, null, null, null, case when v_status = 5 then v_failure end, p_now, p_now, v_seq, 0,
                 false, null, p_concurrency_key,
                 (select (pyjobq._fair_ranks(p_job_type, p_priority, array[p_concurrency_key], 1, p_now))[1]
                    from pyjobq.job_type t
                   where t.job_type = p_job_type and t.fair_share),
                 p_metadata, v_waiting, case when p_parents is not null then p_run_on_parent_failure end, false,
                 p_batch_id);
    if v_status = 5 then
      insert into pyjobq.job_history select (v_row).*;
      v_id := v_new_id;
    else
      insert into pyjobq.job as j select (v_row).*
      on conflict (job_type, dedupe_key) where status in (1, 2, 6) and dedupe_key is not null do nothing
      returning j.job_id into v_id;
    end if;
    if v_id is not null and p_unique_for is not null and v_status <> 5 then
      v_ended := pyjobq._ended_within(p_job_type, p_dedupe_key, p_unique_for, p_now);
      if v_ended is not null then
        delete from pyjobq.job d where d.job_id = v_id;
        return query select v_ended, false;
        return;
      end if;
    end if;
    if v_id is not null then
      if p_parents is not null then
        perform pyjobq._link_parents(v_id, p_parents, v_read_ids, v_read_statuses);
      end if;
      if p_batch_id is not null then
        perform pyjobq._batch_add(p_batch_id, 1, case when v_status = 5 then 1 else 0 end);
      end if;
      if v_status = 1 then
        perform pyjobq._pending_from(p_run_after, p_now, true);
        perform pyjobq._announce(p_job_type, p_run_after, p_now);
      end if;
      return query select v_id, true;
      return;
    end if;
    v_id := pyjobq._active_holder(p_job_type, p_dedupe_key);
    if v_id is not null then
      return query select v_id, false;
      return;
    end if;
  end loop;
end;
$$;

comment on function pyjobq._enqueue_one(int, jsonb, int, timestamptz, text, int, timestamptz, interval, text, jsonb, uuid[], boolean, uuid) is
  'Inserts one PENDING job from checked arguments (WAITING, or CANCELLED, with parents p_parents that have not '
  'all ended, or one ended DEAD or CANCELLED), or returns the active job of p_job_type holding '
  'p_dedupe_key, or else, with p_unique_for, the one that ended last within that window (created false); '
  'counts a new job in batch p_batch_id (locked by the caller); voids claim fronts and announces as every enqueue '
  'does.';


revoke all on all functions in schema pyjobq from public;
