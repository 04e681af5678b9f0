-- depends: 0045_cheaper_enqueue

-- Schema 46: a one-job enqueue checks only the arguments it was given (one
-- left out takes its default, which needs no check), and reads the job's type
-- once for its registration, the caller's grant and its retry policy.

drop function pyjobq._max_attempts(int, int);

create or replace function pyjobq._max_attempts(p_job_type int, p_max_attempts int, p_privilege text default null)
returns int
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_max_attempts int;
  v_granted boolean;
begin
  select t.max_attempts,
         exists (select 1 from pyjobq.job_type_grant g where g.job_type = t.job_type and g.privilege = p_privilege)
    into v_max_attempts, v_granted
    from pyjobq.job_type t
   where t.job_type = p_job_type;
  if p_privilege is not null and (not found or v_granted) then
    perform pyjobq._check_job_type(p_job_type), pyjobq._check_privilege(p_privilege, array[p_job_type]);
  end if;
  return coalesce(p_max_attempts, v_max_attempts, 3);
end;
$$;

comment on function pyjobq._max_attempts(int, int, text) is
  'p_max_attempts, else the max_attempts of job type p_job_type''s policy, else 3. With p_privilege, first '
  'raises unless p_job_type is a registered type (22023) and the session holds p_privilege on it (42501).';

create or replace function pyjobq.job_enqueue(
  p_job_type int,
  p_payload jsonb default null,
  p_priority int default null,
  p_run_after timestamptz default null,
  p_dedupe_key text default null,
  p_max_attempts int default null,
  p_unique_for interval default null,
  p_concurrency_key text default null,
  p_metadata jsonb default null,
  p_depends_on uuid[] default null,
  p_on_parent_failure text default null,
  p_batch_id uuid default null
)
returns table (job_id uuid, created boolean)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_payload jsonb := coalesce(p_payload, '{}');
  v_priority int := coalesce(p_priority, 100);
  v_run_after timestamptz := coalesce(p_run_after, v_now);
  v_run_on_parent_failure boolean := case when p_on_parent_failure is not null
                                          then pyjobq._check_on_parent_failure(p_on_parent_failure) else false end;
  v_max_attempts int := pyjobq._max_attempts(p_job_type, p_max_attempts, 'enqueue');
begin
  -- The arguments given, checked in this order, in one statement (each
  -- statement is an executor run, each call a function's setup): one left out
  -- takes its default, which needs no check.
  perform case when p_payload is not null then pyjobq._check_payload('p_payload', p_payload) end,
          case when p_priority is not null then pyjobq._check_range('p_priority', p_priority, 0, 32767) end,
          case when p_max_attempts is not null then pyjobq._check_range('p_max_attempts', p_max_attempts, 1, 1000) end,
          case when p_dedupe_key is not null then pyjobq._check_text('p_dedupe_key', p_dedupe_key, 200, true) end,
          case when p_run_after is not null then pyjobq._check_time('p_run_after', p_run_after, v_now) end,
          case when p_unique_for is not null then pyjobq._check_unique_for(p_unique_for, p_dedupe_key is not null) end,
          case when p_concurrency_key is not null
               then pyjobq._check_text('p_concurrency_key', p_concurrency_key, 200, true) end,
          case when p_metadata is not null then pyjobq._check_payload('p_metadata', p_metadata) end;
  if p_batch_id is not null then
    perform pyjobq._batch_join(p_batch_id);
  end if;

  return query
    select e.job_id, e.created
      from pyjobq._enqueue_one(p_job_type, v_payload, v_priority, v_run_after, p_dedupe_key, v_max_attempts, v_now,
                               p_unique_for, p_concurrency_key, p_metadata,
                               case when p_depends_on is not null then pyjobq._check_array('p_depends_on', p_depends_on) end,
                               v_run_on_parent_failure, p_batch_id) e;
end;
$$;

comment on function pyjobq.job_enqueue(int, jsonb, int, timestamptz, text, int, interval, text, jsonb, uuid[], text, uuid) is
  'Adds one PENDING job of registered type p_job_type (payload: a JSON object, default {}; priority 0..32767, '
  'default 100, lower runs first; run_after default now; max_attempts 1..1000, default the type''s policy or 3). With p_dedupe_key '
  '(1..200 chars) an active (PENDING or RUNNING) job of the same type with that key is returned with created = '
  'false instead; with p_unique_for (over 0, at most 365 days) also the job of the type with that key that '
  'ended (DONE, DEAD or CANCELLED) within that window. p_concurrency_key (1..200 chars) counts the job against '
  'its type''s per-key concurrency limit. p_metadata (a JSON object) is kept with the job and returned by '
  'job_claim and job_get: traceparent and tracestate carry the enqueue''s W3C trace context. '
  'With p_depends_on (existing jobs the caller may observe, at most 100000) the job is WAITING until they have all '
  'ended, then PENDING; a parent ending DEAD or CANCELLED cancels it, unless p_on_parent_failure is ''run'' '
  '(default ''cancel''); job_claim returns the parents'' results with it. A duplicate returned for its key keeps '
  'its own parents and batch. With p_batch_id the job joins that open batch (job_batch_open; JQ002 when there '
  'is none, JQ006 when it is closed). '
  'While a worker is asleep (job_worker_idle), notifies channel pyjobq_job on commit with the job type, and '
  '@run_after (seconds since 1970) when the job becomes due later.';

create or replace function pyjobq.job_enqueue_many(
  p_job_type int,
  p_payloads jsonb[],
  p_dedupe_keys text[] default null,
  p_priority int default null,
  p_run_after timestamptz default null,
  p_max_attempts int default null,
  p_unique_for interval default null,
  p_concurrency_keys text[] default null,
  p_metadata jsonb default null,
  p_depends_on jsonb[] default null,
  p_on_parent_failure text default null,
  p_batch_id uuid default null
)
returns table (ord int, job_id uuid, created boolean)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
-- A batch of thousands of rows costs enough to cross jit_above_cost, and
-- compiling the plan took longer than running it (270 of 450 ms for 20000).
set jit = off
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_priority int := coalesce(p_priority, 100);
  v_run_after timestamptz := coalesce(p_run_after, v_now);
  v_max_attempts int;
  v_count int := coalesce(cardinality(p_payloads), 0);
  v_bad int;
  v_row record;
  v_run_on_parent_failure boolean := pyjobq._check_on_parent_failure(p_on_parent_failure);
  v_ids uuid[] := '{}';
begin
  p_payloads := pyjobq._check_array('p_payloads', p_payloads);
  p_dedupe_keys := pyjobq._check_array('p_dedupe_keys', p_dedupe_keys);
  v_max_attempts := pyjobq._max_attempts(p_job_type, p_max_attempts, 'enqueue');
  perform pyjobq._check_range('cardinality(p_payloads)', v_count, 1, 100000);
  perform pyjobq._check_range('p_priority', v_priority, 0, 32767);
  perform pyjobq._check_range('p_max_attempts', v_max_attempts, 1, 1000);
  perform pyjobq._check_time('p_run_after', v_run_after, v_now);
  select min(u.i) into v_bad
    from unnest(p_payloads) with ordinality as u(payload, i)
   where u.payload is null or jsonb_typeof(u.payload) <> 'object';
  if v_bad is not null then
    raise exception 'p_payloads[%] must be a JSON object', v_bad
      using errcode = '22023',
            hint = 'Every payload must be a JSON object, e.g. {"value": ...}.';
  end if;
  perform pyjobq._check_keys('p_dedupe_keys', p_dedupe_keys, v_count);

  perform pyjobq._check_unique_for(p_unique_for, p_dedupe_keys is not null);
  p_concurrency_keys := pyjobq._check_array('p_concurrency_keys', p_concurrency_keys);
  perform pyjobq._check_keys('p_concurrency_keys', p_concurrency_keys, v_count);
  perform pyjobq._check_payload('p_metadata', p_metadata);

  p_depends_on := pyjobq._check_array('p_depends_on', p_depends_on);
  if p_depends_on is not null then
    perform pyjobq._check_same_length('p_depends_on', cardinality(p_depends_on), v_count);
  end if;
  if p_batch_id is not null then
    perform pyjobq._batch_join(p_batch_id);
  end if;

  -- Parents without keys: set-based.
  if p_depends_on is not null and p_dedupe_keys is null then
    return query
      select g.ord, g.job_id, g.created
        from pyjobq._enqueue_graph(p_job_type, p_payloads, v_priority, v_run_after, v_max_attempts, v_now,
                                   p_concurrency_keys, p_metadata, p_depends_on, v_run_on_parent_failure,
                                   p_batch_id) g;
    return;
  end if;
  -- Parents with keys, which may be earlier rows of this call: one job at a
  -- time, in input order, each as job_enqueue takes it.
  if p_depends_on is not null then
    for v_row in
      select u.i::int as i, u.payload
        from unnest(p_payloads) with ordinality as u(payload, i)
       order by u.i
    loop
      select e.job_id, e.created into job_id, created
        from pyjobq._enqueue_one(p_job_type, v_row.payload, v_priority, v_run_after, p_dedupe_keys[v_row.i],
                                 v_max_attempts, v_now,
                                 case when p_dedupe_keys[v_row.i] is not null then p_unique_for end,
                                 p_concurrency_keys[v_row.i], p_metadata,
                                 array(select coalesce(v_ids[r.pos], r.id)
                                         from pyjobq._row_parents(p_depends_on[v_row.i], v_row.i) r
                                        order by r.k),
                                 v_run_on_parent_failure, p_batch_id) e;
      v_ids := v_ids || job_id;
      ord := v_row.i;
      return next;
    end loop;
    return;
  end if;

  -- A window over ended jobs: one job at a time, each as job_enqueue takes it.
  if p_unique_for is not null then
    return query
      select u.i::int, e.job_id, e.created
        from unnest(p_payloads, p_dedupe_keys) with ordinality as u(payload, dedupe_key, i)
       cross join lateral pyjobq._enqueue_one(p_job_type, u.payload, v_priority, v_run_after, u.dedupe_key,
                                              v_max_attempts, v_now,
                                              case when u.dedupe_key is not null then p_unique_for end,
                                              p_concurrency_keys[u.i], p_metadata, null, null, p_batch_id) e
       order by u.i;
    return;
  end if;

  -- Without parents and without a window: set-based.
  return query
    select r.ord, r.job_id, r.created
      from pyjobq._enqueue_rows(p_job_type, p_payloads, p_dedupe_keys, v_priority, v_run_after, v_max_attempts,
                                v_now, p_concurrency_keys, p_metadata, p_batch_id) r;
end;
$$;

comment on function pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int, interval, text[], jsonb, jsonb[], text, uuid) is
  'Adds up to 100000 jobs of one type in one call, with job_enqueue''s checks, defaults and dedupe; '
  'p_dedupe_keys, when given, pairs a key (or null) with each payload, and p_unique_for applies to the rows '
  'with a key as job_enqueue applies it; p_concurrency_keys likewise pairs a concurrency key (or null) with '
  'each payload; p_metadata is every job''s metadata, as job_enqueue keeps it. p_depends_on pairs with each '
  'payload null or a JSON array of its parents: job ids, or the 1-based positions of earlier payloads of the '
  'same call; p_on_parent_failure and p_batch_id apply to every job, as job_enqueue applies them. Returns one row per payload in input '
  'order: its 1-based position, the job id, and whether it was newly created. Notifies pyjobq_job as '
  'job_enqueue does.';

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 46
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';


revoke all on all functions in schema pyjobq from public;
