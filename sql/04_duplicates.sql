-- Replacing and debouncing ----------------------------------------------------

-- What an enqueue does with the active job of its type that holds its key.
-- keep (the default) returns it. replace gives it this enqueue's payload,
-- priority, run_after, max_attempts, concurrency key and metadata, as if it
-- had been enqueued now (under fair share, behind its key's pending jobs);
-- debounce moves its run_after out to this enqueue's, never in, and changes
-- nothing else. Either changes only a PENDING job that was never claimed: a
-- handler never finds its job changed under it, nor a later attempt what its
-- steps were made of. The fence is the update's own WHERE: a row a claim took
-- first is rechecked, no longer matches and is not locked, so a producer's
-- open transaction never holds a claimed job (nor a WAITING one, which a
-- parent's completion updates) and stalls no worker. That holder is returned
-- as it is (replaced false); claims skip a row changed here until the
-- enqueue commits.
create function pyjobq._check_on_duplicate(p_on_duplicate text, p_has_key boolean, p_has_window boolean)
returns text
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_on_duplicate is null or p_on_duplicate = 'keep' then
    return null;
  elsif p_on_duplicate not in ('replace', 'debounce') then
    raise exception 'p_on_duplicate must be ''keep'', ''replace'' or ''debounce'''
      using errcode = '22023',
            detail = format('p_on_duplicate was %s.', p_on_duplicate),
            hint = '''keep'' (the default) returns the job holding the key; ''replace'' gives it this enqueue''s '
                   'arguments; ''debounce'' moves its run_after out.';
  elsif not p_has_key then
    raise exception 'p_on_duplicate ''%'' needs a dedupe key', p_on_duplicate
      using errcode = '22023',
            hint = 'Pass p_dedupe_key: the job it changes is the one holding that key.';
  elsif p_has_window then
    raise exception 'p_on_duplicate ''%'' cannot be combined with p_unique_for', p_on_duplicate
      using errcode = '22023',
            hint = 'A job that ended cannot be changed: leave p_unique_for out.';
  end if;
  return p_on_duplicate;
end;
$$;

comment on function pyjobq._check_on_duplicate(text, boolean, boolean) is
  'The duplicate policy of an enqueue: null for p_on_duplicate ''keep'' or null, else ''replace'' or '
  '''debounce'', which need a dedupe key (p_has_key) and no p_unique_for window (p_has_window); 22023 otherwise.';

create function pyjobq._take_duplicate(
  p_job_type int,
  p_dedupe_key text,
  p_on_duplicate text,
  p_payload jsonb,
  p_priority int,
  p_run_after timestamptz,
  p_max_attempts int,
  p_concurrency_key text,
  p_metadata jsonb,
  p_fair_rank bigint,
  p_now timestamptz
)
returns table (job_id uuid, replaced boolean)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_id uuid;
  v_run_after timestamptz;
begin
  if p_on_duplicate = 'replace' then
    update pyjobq.job a
       set payload = p_payload, priority = p_priority, run_after = p_run_after, max_attempts = p_max_attempts,
           concurrency_key = p_concurrency_key, metadata = p_metadata, fair_rank = p_fair_rank, updated_at = p_now
     where a.job_type = p_job_type and a.dedupe_key = p_dedupe_key and a.status = 1 and a.attempts = 0
    returning a.job_id, a.run_after into v_id, v_run_after;
  elsif p_on_duplicate = 'debounce' then
    update pyjobq.job a
       set run_after = greatest(a.run_after, p_run_after), updated_at = p_now
     where a.job_type = p_job_type and a.dedupe_key = p_dedupe_key and a.status = 1 and a.attempts = 0
    returning a.job_id, a.run_after into v_id, v_run_after;
  end if;
  if v_id is not null then
    -- Due sooner than it was, it may sort before a claim front, and wake a worker.
    perform pyjobq._pending_from(v_run_after, p_now, false), pyjobq._announce(p_job_type, v_run_after, p_now);
    return query select v_id, true;
    return;
  end if;
  return query select pyjobq._active_holder(p_job_type, p_dedupe_key), false;
end;
$$;

comment on function pyjobq._take_duplicate(int, text, text, jsonb, int, timestamptz, int, text, jsonb, bigint, timestamptz) is
  'The active job of type p_job_type holding p_dedupe_key (null: none, the caller inserts its job), with '
  'replaced true when p_on_duplicate ''replace'' gave it the other arguments (payload, priority, run_after, '
  'max_attempts, concurrency key, metadata, fair rank), or ''debounce'' moved its run_after out to '
  'p_run_after; only a PENDING job never claimed is changed.';

-- A pending job changed by id: its payload, priority or run_after. The fence
-- is _take_duplicate's: only a PENDING job changes, and its payload only while
-- it was never claimed (its priority and run_after, which no handler reads,
-- also between attempts: "retry now" is a run_after of now).
create function pyjobq.job_update(
  p_job_id uuid,
  p_payload jsonb default null,
  p_priority int default null,
  p_run_after timestamptz default null
)
returns text
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_type int;
  v_status smallint;
  v_run_after timestamptz;
begin
  if p_job_id is null then
    raise exception 'p_job_id must not be null' using errcode = '22004';
  end if;
  if p_payload is null and p_priority is null and p_run_after is null then
    raise exception 'job_update needs p_payload, p_priority or p_run_after'
      using errcode = '22023',
            hint = 'Pass what should change; the others stay as they are.';
  end if;
  perform case when p_payload is not null then pyjobq._check_payload('p_payload', p_payload) end,
          case when p_priority is not null then pyjobq._check_range('p_priority', p_priority, 0, 32767) end,
          pyjobq._check_time('p_run_after', p_run_after, v_now);
  select j.job_type into v_type from pyjobq.job_all j where j.job_id = p_job_id;
  if not found then
    return 'not_found';
  end if;
  -- Changing a job is the producers' side of its type, as cancelling it is.
  perform pyjobq._check_privilege('enqueue', array[v_type]);
  update pyjobq.job a
     set payload = coalesce(p_payload, a.payload),
         priority = coalesce(p_priority, a.priority),
         run_after = coalesce(p_run_after, a.run_after),
         fair_rank = case when p_priority is distinct from a.priority and p_priority is not null
                          then (pyjobq._fair_ranks(a.job_type, p_priority, array[a.concurrency_key], 1, v_now))[1]
                          else a.fair_rank end,
         updated_at = v_now
   where a.job_id = p_job_id and a.status = 1 and (p_payload is null or a.attempts = 0)
  returning a.run_after into v_run_after;
  if found then
    perform pyjobq._pending_from(v_run_after, v_now, false), pyjobq._announce(v_type, v_run_after, v_now),
            pyjobq._audit('update', 1, jsonb_strip_nulls(jsonb_build_object(
              'job_ids', array[p_job_id], 'payload', p_payload is not null, 'priority', p_priority,
              'run_after', p_run_after)));
    return 'updated';
  end if;
  select j.status into v_status from pyjobq.job_all j where j.job_id = p_job_id;
  return case when v_status in (3, 4, 5) then 'finished'
              when v_status = 6 then 'waiting'
              when v_status is null then 'not_found'
              else 'claimed' end;
end;
$$;

comment on function pyjobq.job_update(uuid, jsonb, int, timestamptz) is
  'Changes a PENDING job: its payload (a JSON object; only while the job was never claimed), priority '
  '(0..32767) and run_after (within 100 years of now); what is null stays. Returns updated, claimed (RUNNING, or '
  'a payload asked of a job claimed before: a handler has seen it), waiting (WAITING for its parents), finished '
  'or not_found; only updated changed anything. Needs the enqueue privilege on the job''s type; an update '
  'writes a line to the audit log (job_audit).';
