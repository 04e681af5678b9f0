-- Concurrency limits ----------------------------------------------------------
--
-- An admin gives a job type a limit on its RUNNING jobs, in all and per
-- concurrency key (a customer, a tenant, an account: job_enqueue's
-- p_concurrency_key); job_claim keeps them through _claim_limited.

create function pyjobq.job_type_set_limits(
  p_job_type int,
  p_max_running int default null,
  p_key_max_running int default null
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
  if p_max_running is not null then
    perform pyjobq._check_range('p_max_running', p_max_running, 1, 100000);
  end if;
  if p_key_max_running is not null then
    perform pyjobq._check_range('p_key_max_running', p_key_max_running, 1, 100000);
  end if;
  update pyjobq.job_type t
     set max_running = p_max_running,
         key_max_running = p_key_max_running
   where t.job_type = p_job_type;
end;
$$;

comment on function pyjobq.job_type_set_limits(int, int, int) is
  'Sets job type p_job_type''s concurrency limits: at most p_max_running (1..100000) of its jobs RUNNING at '
  'once, and at most p_key_max_running (1..100000) per concurrency key; null removes a limit. job_claim keeps '
  'them exactly, across all workers; jobs already RUNNING beyond a lowered limit run on. Admins only.';

create function pyjobq.job_type_limits()
returns table (job_type int, name text, max_running int, key_max_running int)
language sql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select t.job_type::int, t.name::text, t.max_running, t.key_max_running
    from pyjobq.job_type t
   where t.max_running is not null or t.key_max_running is not null
   order by t.job_type
$$;

comment on function pyjobq.job_type_limits() is
  'The job types with a concurrency limit, and their limits (null: none).';

-- Concurrency limits. A claim that may take jobs of a type with a limit
-- (job_type_set_limits) walks the due jobs in claim order and takes a job only
-- while its type, and its concurrency key, have room. Room is counted under a
-- transaction-level advisory lock, so that no two claims count the same room:
-- for the type, taken for every limited type up front in type order (a claim
-- waits for another's claim of the type to commit, and never in a cycle); for
-- a key, tried as the walk reaches it, and a key another claim holds has no
-- room for this one (it takes the key's jobs next time). Every way out of
-- RUNNING only frees room, so a count read under the lock can only be high,
-- and the limits hold under any interleaving. Locks are in the two-integer
-- space: (1887005297, type) for a type, (-type, hashtext(key)) for a key.
-- Claims of types without limits never come here.
create function pyjobq._claim_limited(
  p_worker_id text,
  p_types smallint[],
  p_limit int,
  p_lease int,
  p_now timestamptz
)
returns table (
  job_id uuid,
  job_type int,
  priority int,
  payload jsonb,
  attempt int,
  max_attempts int,
  dedupe_key text,
  run_after timestamptz,
  lease_until timestamptz,
  created_at timestamptz,
  lease_token uuid
)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
set enable_sort = off
set jit = off
as $$
declare
  c_visits constant int := 10000;  -- due jobs a claim looks at, at most
  v_type record;
  v_room jsonb := '{}';            -- room left, by "type" and "type/key", once counted
  v_key_limit jsonb := '{}';       -- key_max_running, by "type"
  v_c record;
  v_key text;
  v_row record;
  v_claimed int := 0;
begin
  for v_type in
    select t.job_type, t.max_running, t.key_max_running
      from pyjobq.job_type t
     where t.job_type = any (p_types)
     order by t.job_type
  loop
    if v_type.max_running is not null then
      perform pg_advisory_xact_lock(1887005297, v_type.job_type);
      -- A statement of its own: its snapshot follows the lock.
      v_room := v_room || jsonb_build_object(v_type.job_type::text, v_type.max_running - (
        select count(*)
          from (select 1
                  from pyjobq.job r
                 where r.lease_until is not null  -- RUNNING: job_running_has_lease
                   and r.job_type = v_type.job_type
                 limit v_type.max_running) as r));
    end if;
    if v_type.key_max_running is not null then
      v_key_limit := v_key_limit || jsonb_build_object(v_type.job_type::text, v_type.key_max_running);
    end if;
  end loop;

  for v_c in
    select c.job_id, c.job_type, c.concurrency_key
      from pyjobq.job c
     where c.status = 1
       and c.run_after <= p_now
       and c.job_type = any (p_types)
     order by c.priority, c.run_after, c.seq
     limit c_visits
  loop
    continue when (v_room ->> v_c.job_type::text)::int <= 0;
    v_key := null;
    if v_c.concurrency_key is not null and v_key_limit ? v_c.job_type::text then
      v_key := v_c.job_type || '/' || v_c.concurrency_key;
      if not v_room ? v_key then
        if pg_try_advisory_xact_lock(-v_c.job_type, hashtext(v_c.concurrency_key)) then
          v_room := v_room || jsonb_build_object(v_key, (v_key_limit ->> v_c.job_type::text)::int - (
            select count(*)
              from (select 1
                      from pyjobq.job r
                     where r.status = 2
                       and r.concurrency_key is not null
                       and r.job_type = v_c.job_type
                       and r.concurrency_key = v_c.concurrency_key
                     limit (v_key_limit ->> v_c.job_type::text)::int) as r));
        else
          v_room := v_room || jsonb_build_object(v_key, 0);
        end if;
      end if;
      continue when (v_room ->> v_key)::int <= 0;
    end if;
    update pyjobq.job j
       set status = 2,
           attempts = j.attempts + 1,
           worker_id = p_worker_id,
           lease_token = gen_random_uuid(),
           lease_until = p_now + make_interval(secs => least(p_lease, t.timeout_seconds)),
           run_started_at = p_now,
           updated_at = p_now
      from pyjobq.job_type t
     where j.job_id = (select l.job_id from pyjobq.job l where l.job_id = v_c.job_id and l.status = 1
                          for update skip locked)
       and t.job_type = j.job_type
    returning j.job_id, j.job_type, j.priority, j.payload, j.attempts, j.max_attempts, j.dedupe_key,
              j.run_after, j.lease_until, j.created_at, j.lease_token
      into v_row;
    continue when not found;  -- another claimer has it
    if v_room ? v_c.job_type::text then
      v_room := jsonb_set(v_room, array[v_c.job_type::text], to_jsonb((v_room ->> v_c.job_type::text)::int - 1));
    end if;
    if v_key is not null then
      v_room := jsonb_set(v_room, array[v_key], to_jsonb((v_room ->> v_key)::int - 1));
    end if;
    job_id := v_row.job_id;
    job_type := v_row.job_type;
    priority := v_row.priority;
    payload := v_row.payload;
    attempt := v_row.attempts;
    max_attempts := v_row.max_attempts;
    dedupe_key := v_row.dedupe_key;
    run_after := v_row.run_after;
    lease_until := v_row.lease_until;
    created_at := v_row.created_at;
    lease_token := v_row.lease_token;
    return next;
    v_claimed := v_claimed + 1;
    exit when v_claimed >= p_limit;
  end loop;
end;
$$;

comment on function pyjobq._claim_limited(text, smallint[], int, int, timestamptz) is
  'job_claim for job types with concurrency limits: takes up to p_limit due PENDING jobs in claim order while '
  'their type and concurrency key have room, counted under advisory locks; looks at 10000 due jobs at most.';
