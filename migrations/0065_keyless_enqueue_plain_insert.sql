-- depends: 0064_claim_in_small_steps

-- Schema 65: a job enqueued without a dedupe key is inserted without ON
-- CONFLICT. Nothing can conflict with it, and a speculative insert writes one
-- more WAL record, its confirmation, for every job. One function, its
-- signature unchanged. No table changes.

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 65
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

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
  p_batch_id uuid default null,
  p_on_duplicate text default null
)
returns table (job_id uuid, created boolean, replaced boolean)
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
  v_replaced boolean;
begin
  if p_unique_for is not null then
    v_id := pyjobq._active_holder(p_job_type, p_dedupe_key);
    if v_id is null then
      v_id := pyjobq._ended_within(p_job_type, p_dedupe_key, p_unique_for, p_now);
    end if;
    if v_id is not null then
      return query select v_id, false, false;
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
    -- Born CANCELLED it would take no key: an active holder is the answer.
    if v_status = 5 and p_dedupe_key is not null then
      v_id := pyjobq._active_holder(p_job_type, p_dedupe_key);
      if v_id is not null then
        return query select v_id, false, false;
        return;
      end if;
    end if;
  end if;
  loop
    v_seq := nextval('pyjobq.job_seq');
    v_new_id := (pyjobq._job_id_prefix(p_now) || to_hex(v_seq | (-9223372036854775808)::bigint))::uuid;
    -- The row, built once; born CANCELLED, it is history at once. A fair rank
    -- only for a type with fair share: asked in the row's own statement, it
    -- costs the others no call.
    v_row := row(v_new_id, p_job_type, p_priority, p_max_attempts, p_now, v_seq,
                 (select (pyjobq._fair_ranks(p_job_type, p_priority, array[p_concurrency_key], 1, p_now))[1]
                    from pyjobq.job_type t
                   where t.job_type = p_job_type and t.fair_share),
                 p_payload, p_dedupe_key, p_concurrency_key, p_metadata, p_batch_id,
                 case when p_parents is not null then p_run_on_parent_failure end, null, false, false, v_waiting,
                 0, p_run_after, case when v_status = 5 then v_failure end, v_status, 0, null, null, null, null,
                 p_now, 0, null);
    if v_status = 5 then
      perform pyjobq._to_history(array[v_row], array[5]::smallint[], p_now);
      v_id := v_new_id;
    elsif p_dedupe_key is null then
      -- Nothing can conflict: no speculative insert, whose confirmation is WAL too.
      insert into pyjobq.job select (v_row).*;
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
        return query select v_ended, false, false;
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
      return query select v_id, true, false;
      return;
    end if;
    select d.job_id, d.replaced into v_id, v_replaced
      from pyjobq._take_duplicate(p_job_type, p_dedupe_key, p_on_duplicate, p_payload, p_priority, p_run_after,
                                  p_max_attempts, p_concurrency_key, p_metadata, v_row.fair_rank, p_now) d;
    if v_id is not null then
      return query select v_id, false, v_replaced;
      return;
    end if;
  end loop;
end;
$$;

comment on function pyjobq._enqueue_one(int, jsonb, int, timestamptz, text, int, timestamptz, interval, text, jsonb, uuid[], boolean, uuid, text) is
  'Inserts one PENDING job from checked arguments (WAITING, or CANCELLED, with parents p_parents that have not '
  'all ended, or one ended DEAD or CANCELLED), or returns the active job of p_job_type holding '
  'p_dedupe_key (changed first as p_on_duplicate says, replaced true: see _take_duplicate), or else, with '
  'p_unique_for, the one that ended last within that window (created false); counts a new job in batch '
  'p_batch_id (locked by the caller); voids claim fronts and announces as every enqueue does.';

