-- depends: 0023_job_metadata

-- Schema 24: jobs that wait for jobs.
--
-- job_enqueue and job_enqueue_many take p_depends_on and p_on_parent_failure:
-- a job with parents is WAITING (status 6) until they have all ended, then
-- PENDING, or CANCELLED by a parent that ended DEAD or CANCELLED. The edges
-- live in job_edge; job_claim returns a child's parent_results; every
-- transition that ends a job resolves its dependants; job_dependencies shows
-- the graph. A WAITING job holds its dedupe key like a PENDING one, so the
-- active-duplicate index is built again with the new status in its predicate
-- (under the name it had, in one transaction: enqueues wait for the build).

drop function pyjobq.job_enqueue(int, jsonb, int, timestamptz, text, int, interval, text, jsonb);
drop function pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int, interval, text[], jsonb);
drop function pyjobq._enqueue_one(int, jsonb, int, timestamptz, text, int, timestamptz, interval, text, jsonb);
drop function pyjobq.job_claim(text, int, int, int[]);
drop function pyjobq._claim_pick(text, smallint[], int, int, timestamptz);
drop function pyjobq._claim_limited(text, smallint[], int, int, timestamptz);

-- New columns without a default, or with a constant one: no rewrite. The
-- checks are added unvalidated and validated after, under a lock that lets
-- claims and completions go on.
alter table pyjobq.job add column waiting_on int;
alter table pyjobq.job add column run_on_parent_failure boolean;
alter table pyjobq.job add column has_dependants boolean not null default false;
alter table pyjobq.job drop constraint job_status_valid;
alter table pyjobq.job add constraint job_status_valid check (status between 1 and 6) not valid;
alter table pyjobq.job validate constraint job_status_valid;
alter table pyjobq.job add constraint job_waiting_counts
  check ((status <> 6 or waiting_on > 0) and (waiting_on is null) = (run_on_parent_failure is null)) not valid;
alter table pyjobq.job validate constraint job_waiting_counts;

comment on table pyjobq.job is
  'One row per job. Written only by the pyjobq functions; status 1 PENDING, 2 RUNNING, 3 DONE, 4 DEAD, '
  '5 CANCELLED, 6 WAITING (for parent jobs).';
comment on column pyjobq.job.waiting_on is
  'For a job enqueued with parents (p_depends_on): while it is WAITING, how many of them have not ended yet '
  '(its unresolved job_edge rows); 0 once they all have. Null: the job has no parents.';

comment on column pyjobq.job.run_on_parent_failure is
  'For a job with parents: true when it runs even after a parent ended DEAD or CANCELLED (p_on_parent_failure '
  '=> ''run''), false when it is then CANCELLED (''cancel'', the default). Null: no parents.';

comment on column pyjobq.job.has_dependants is
  'Set when a job is named as a parent: its end resolves its job_edge rows (job_complete and the other '
  'transitions to DONE, DEAD or CANCELLED look for dependants only when it is set).';

drop index pyjobq.job_dedupe_active_idx;
create unique index job_dedupe_active_idx on pyjobq.job (job_type, dedupe_key)
  where status in (1, 2, 6) and dedupe_key is not null;
create index job_waiting_idx on pyjobq.job (job_type) where status = 6;

create table pyjobq.job_edge (
  parent_id uuid not null,
  child_id uuid not null,
  ord int not null,
  resolved boolean not null,
  constraint job_edge_pkey primary key (parent_id, child_id)
);

create index job_edge_child_idx on pyjobq.job_edge (child_id, ord);

comment on table pyjobq.job_edge is
  'Dependencies: child_id waits for parent_id (its ord-th parent); resolved once the parent ended. Written by '
  'job_enqueue(_many) with p_depends_on and by the end of the parent.';

drop trigger job_done_notify on pyjobq.job;
create trigger job_done_notify
  after update of status on pyjobq.job
  for each row
  when (new.notify_done and new.status in (3, 4, 5) and old.status in (1, 2, 6))
  execute function pyjobq._notify_done();

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 24
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq._status_name(p_status int)
returns text
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  return (array['PENDING', 'RUNNING', 'DONE', 'DEAD', 'CANCELLED', 'WAITING'])[p_status];
end;
$$;

comment on function pyjobq._status_name(int) is
  'PENDING, RUNNING, DONE, DEAD, CANCELLED or WAITING for status 1..6 (job_status_valid).';

create or replace function pyjobq._check_on_parent_failure(p_on_parent_failure text)
returns boolean
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_on_parent_failure is null or p_on_parent_failure = 'cancel' then
    return false;
  elsif p_on_parent_failure = 'run' then
    return true;
  end if;
  raise exception 'p_on_parent_failure must be ''cancel'' or ''run'''
    using errcode = '22023',
          detail = format('p_on_parent_failure was %s.', p_on_parent_failure),
          hint = '''cancel'' (the default): a parent ending DEAD or CANCELLED cancels the job; ''run'': it runs anyway.';
end;
$$;

comment on function pyjobq._check_on_parent_failure(text) is
  'Whether a job runs after a parent ended DEAD or CANCELLED: false for p_on_parent_failure ''cancel'' or null, '
  'true for ''run''; 22023 for anything else.';

create or replace function pyjobq._lock_parents(p_parents uuid[], out waiting int, out failure text)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_found int;
  v_missing uuid;
begin
  if cardinality(p_parents) > 100000 then
    raise exception 'p_depends_on must name at most 100000 parents'
      using errcode = '22023',
            detail = format('It named %s.', cardinality(p_parents));
  end if;
  if array_position(p_parents, null) is not null then
    raise exception 'p_depends_on must not contain null'
      using errcode = '22004',
            hint = 'Name each parent by the job_id its enqueue returned.';
  end if;
  with locked as materialized (
    select p.job_id, p.job_type, p.status
      from pyjobq.job p
     where p.job_id = any (p_parents)
     order by p.job_id
       for no key update
  )
  select count(*), count(*) filter (where l.status in (1, 2, 6)),
         min(format('parent %s ended %s', l.job_id, pyjobq._status_name(l.status))) filter (where l.status in (4, 5))
    into v_found, waiting, failure
    from locked l;
  if v_found < (select count(distinct u.id) from unnest(p_parents) u(id)) then
    select u.id into v_missing
      from unnest(p_parents) u(id)
     where not exists (select from pyjobq.job p where p.job_id = u.id)
     limit 1;
    raise exception 'parent job % not found', v_missing
      using errcode = 'JQ002',
            hint = 'A job can depend only on jobs that exist: enqueue the parents first (pruned jobs are gone).';
  end if;
  -- The child will see its parents' results: the caller must be allowed to see them.
  perform pyjobq._check_privilege('observe', array(select distinct p.job_type::int
                                                      from pyjobq.job p
                                                     where p.job_id = any (p_parents)));
end;
$$;

comment on function pyjobq._lock_parents(uuid[]) is
  'Locks the jobs p_parents (FOR NO KEY UPDATE, in id order) for the enqueue of their child: JQ002 when one '
  'does not exist, 42501 when the caller may not observe one''s type. Returns how many have not ended, and a '
  'text naming one that ended DEAD or CANCELLED (null when none did).';

create or replace function pyjobq._link_parents(p_child uuid, p_parents uuid[])
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  insert into pyjobq.job_edge (parent_id, child_id, ord, resolved)
  select p.job_id, p_child, u.ord, p.status in (3, 4, 5)
    from (select d.id, min(d.ord)::int as ord
            from unnest(p_parents) with ordinality d(id, ord)
           group by d.id) u
    join pyjobq.job p on p.job_id = u.id;
  -- Ended parents too: job_prune keeps them while the child has yet to end,
  -- and deletes the edges with them.
  update pyjobq.job p
     set has_dependants = true
   where p.job_id = any (p_parents)
     and not p.has_dependants;
end;
$$;

comment on function pyjobq._link_parents(uuid, uuid[]) is
  'Writes the job_edge rows of new job p_child for its parents p_parents (resolved for those that ended) and '
  'marks the parents as having dependants.';

create or replace function pyjobq._resolve_parents(p_ended uuid[], p_now timestamptz)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_ended uuid[] := p_ended;
  v_types smallint[];
  v_type smallint;
begin
  while cardinality(v_ended) > 0 loop
    with resolved as (
      update pyjobq.job_edge e
         set resolved = true
        from pyjobq.job p
       where e.parent_id = any (v_ended)
         and not e.resolved
         and p.job_id = e.parent_id
         and p.status in (3, 4, 5)
      returning e.child_id, e.parent_id, p.status
    ), per_child as (
      select r.child_id, count(*)::int as resolved,
             min(format('parent %s ended %s', r.parent_id, pyjobq._status_name(r.status)))
               filter (where r.status <> 3) as failure
        from resolved r
       group by r.child_id
    ), locked as materialized (
      select c.job_id
        from pyjobq.job c
       where c.job_id in (select n.child_id from per_child n)
         and c.status = 6
       order by c.job_id
         for no key update
    ), changed as (
      update pyjobq.job c
         set waiting_on = c.waiting_on - n.resolved,
             status = case when n.failure is not null and not c.run_on_parent_failure then 5
                           when c.waiting_on = n.resolved then 1
                           else 6 end,
             run_after = case when (n.failure is null or c.run_on_parent_failure) and c.waiting_on = n.resolved
                              then pyjobq._pending_from(greatest(c.run_after, p_now), p_now, false)
                              else c.run_after end,
             last_error = case when n.failure is not null and not c.run_on_parent_failure then n.failure
                               else c.last_error end,
             updated_at = p_now
        from per_child n, locked l
       where c.job_id = n.child_id
         and l.job_id = c.job_id
         and c.status = 6
      returning c.job_id, c.status, c.job_type, c.has_dependants
    )
    select array_agg(ch.job_id) filter (where ch.status = 5 and ch.has_dependants),
           array_agg(distinct ch.job_type) filter (where ch.status = 1)
      into v_ended, v_types
      from changed ch;
    foreach v_type in array coalesce(v_types, '{}') loop
      perform pyjobq._announce(v_type, p_now, p_now);
    end loop;
  end loop;
end;
$$;

comment on function pyjobq._resolve_parents(uuid[], timestamptz) is
  'Resolves the edges of the jobs p_ended, which just ended (DONE, DEAD or CANCELLED): each WAITING child '
  'counts them down and is PENDING at 0, or CANCELLED by a parent that ended DEAD or CANCELLED unless it runs '
  'on parent failure; children so cancelled resolve their own dependants. Announces the types of the jobs '
  'made PENDING.';

create or replace function pyjobq._parent_results(p_job_id uuid)
returns jsonb
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  return (select jsonb_agg(jsonb_build_object('job_id', e.parent_id, 'job_type', p.job_type,
                                              'status', pyjobq._status_name(p.status), 'result', p.result)
                           order by e.ord)
            from pyjobq.job_edge e
            left join pyjobq.job p on p.job_id = e.parent_id
           where e.child_id = p_job_id);
end;
$$;

comment on function pyjobq._parent_results(uuid) is
  'The parents of job p_job_id in the order its enqueue named them, as a JSON array of {job_id, job_type, '
  'status, result} (status and result null for a parent since pruned); null when it has none.';

create or replace function pyjobq.job_dependencies(p_job_id uuid)
returns table (relation text, job_id uuid, job_type int, status int, status_name text, resolved boolean)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_job_id is null then
    raise exception 'p_job_id must not be null'
      using errcode = '22004',
            hint = 'Pass the job_id that job_enqueue returned.';
  end if;
  perform pyjobq._check_privilege('observe', array(select j.job_type::int from pyjobq.job j where j.job_id = p_job_id));
  return query
  select 'parent', e.parent_id, p.job_type::int, p.status::int, pyjobq._status_name(p.status), e.resolved
    from pyjobq.job_edge e
    left join pyjobq.job p on p.job_id = e.parent_id
   where e.child_id = p_job_id
   order by e.ord;
  return query
  select 'dependant', e.child_id, c.job_type::int, c.status::int, pyjobq._status_name(c.status), e.resolved
    from pyjobq.job_edge e
    left join pyjobq.job c on c.job_id = e.child_id
   where e.parent_id = p_job_id
   order by c.seq, e.child_id;
end;
$$;

comment on function pyjobq.job_dependencies(uuid) is
  'The graph around job p_job_id: its parents (relation parent, in the order its enqueue named them) and its '
  'dependants (relation dependant, in enqueue order), each with its type and status now (null once pruned) and whether '
  'the edge is resolved (the parent ended). No rows for a job without either.';

create function pyjobq._enqueue_one(
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
  p_run_on_parent_failure boolean default null
)
returns table (job_id uuid, created boolean)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_seq bigint;
  v_new_id uuid;
  v_id uuid;
  v_ended uuid;
  v_status smallint := 1;
  v_waiting int;
  v_failure text;
begin
  if p_unique_for is not null then
    -- An active job with the key is the duplicate first: the one a window-less
    -- enqueue returns, and the one whose outcome is still to come.
    select a.job_id into v_id
      from pyjobq.job a
     where a.job_type = p_job_type and a.dedupe_key = p_dedupe_key and a.status in (1, 2, 6);
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
    select l.waiting, l.failure into v_waiting, v_failure from pyjobq._lock_parents(p_parents) l;
    v_status := case when v_failure is not null and not p_run_on_parent_failure then 5
                     when v_waiting > 0 then 6
                     else 1 end;
    -- Born CANCELLED, it would take no key: an active job with the key is
    -- still the answer, as for any enqueue.
    if v_status = 5 and p_dedupe_key is not null then
      select a.job_id into v_id
        from pyjobq.job a
       where a.job_type = p_job_type and a.dedupe_key = p_dedupe_key and a.status in (1, 2, 6);
      if v_id is not null then
        return query select v_id, false;
        return;
      end if;
    end if;
  end if;
  loop
    select n.seq, n.job_id into v_seq, v_new_id from pyjobq._new_job_ids(p_now, 1) n;
    insert into pyjobq.job as j
      (job_id, seq, job_type, status, payload, priority, run_after, dedupe_key, max_attempts, created_at, updated_at,
       concurrency_key, fair_rank, metadata, waiting_on, run_on_parent_failure, last_error)
    values
      (v_new_id, v_seq, p_job_type, v_status, p_payload, p_priority, p_run_after, p_dedupe_key, p_max_attempts, p_now,
       p_now, p_concurrency_key,
       (pyjobq._fair_ranks(p_job_type, p_priority, array[p_concurrency_key], 1, p_now))[1],
       p_metadata, v_waiting, case when p_parents is not null then p_run_on_parent_failure end,
       case when v_status = 5 then v_failure end)
    on conflict (job_type, dedupe_key) where status in (1, 2, 6) and dedupe_key is not null do nothing
    returning j.job_id into v_id;
    if v_id is not null and p_unique_for is not null then
      v_ended := pyjobq._ended_within(p_job_type, p_dedupe_key, p_unique_for, p_now);
      if v_ended is not null then
        delete from pyjobq.job d where d.job_id = v_id;
        return query select v_ended, false;
        return;
      end if;
    end if;
    if v_id is not null then
      if p_parents is not null then
        perform pyjobq._link_parents(v_id, p_parents);
      end if;
      if v_status = 1 then
        perform pyjobq._pending_from(p_run_after, p_now, true);
        perform pyjobq._announce(p_job_type, p_run_after, p_now);
      end if;
      return query select v_id, true;
      return;
    end if;
    select a.job_id into v_id
      from pyjobq.job a
     where a.job_type = p_job_type and a.dedupe_key = p_dedupe_key and a.status in (1, 2, 6);
    if v_id is not null then
      return query select v_id, false;
      return;
    end if;
  end loop;
end;
$$;

comment on function pyjobq._enqueue_one(int, jsonb, int, timestamptz, text, int, timestamptz, interval, text, jsonb, uuid[], boolean) is
  'Inserts one PENDING job from checked arguments (WAITING, or CANCELLED, with parents p_parents that have not '
  'all ended, or one ended DEAD or CANCELLED), or returns the active job of p_job_type holding '
  'p_dedupe_key, or else, with p_unique_for, the one that ended last within that window (created false); '
  'voids claim fronts and announces as every enqueue does.';

create function pyjobq.job_enqueue(
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
  p_on_parent_failure text default null
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
  v_max_attempts int;
  v_run_on_parent_failure boolean := pyjobq._check_on_parent_failure(p_on_parent_failure);
begin
  perform pyjobq._check_job_type(p_job_type);
  perform pyjobq._check_privilege('enqueue', array[p_job_type]);
  v_max_attempts := pyjobq._max_attempts(p_job_type, p_max_attempts);
  perform pyjobq._check_payload('p_payload', v_payload);
  perform pyjobq._check_range('p_priority', v_priority, 0, 32767);
  perform pyjobq._check_range('p_max_attempts', v_max_attempts, 1, 1000);
  perform pyjobq._check_text('p_dedupe_key', p_dedupe_key, 200, true);
  perform pyjobq._check_time('p_run_after', v_run_after, v_now);
  perform pyjobq._check_unique_for(p_unique_for, p_dedupe_key is not null);
  perform pyjobq._check_text('p_concurrency_key', p_concurrency_key, 200, true);
  perform pyjobq._check_payload('p_metadata', p_metadata);

  return query
    select e.job_id, e.created
      from pyjobq._enqueue_one(p_job_type, v_payload, v_priority, v_run_after, p_dedupe_key, v_max_attempts, v_now,
                               p_unique_for, p_concurrency_key, p_metadata,
                               pyjobq._check_array('p_depends_on', p_depends_on), v_run_on_parent_failure) e;
end;
$$;

comment on function pyjobq.job_enqueue(int, jsonb, int, timestamptz, text, int, interval, text, jsonb, uuid[], text) is
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
  'its own parents. '
  'Notifies channel pyjobq_job on commit with the job type, and @run_after (seconds since 1970) when the job '
  'becomes due later.';

create or replace function pyjobq._row_parents(p_spec jsonb, p_row int, p_ids uuid[])
returns uuid[]
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_parents uuid[] := '{}';
  v_item jsonb;
begin
  if p_spec is null or jsonb_typeof(p_spec) = 'null' then
    return null;
  end if;
  if jsonb_typeof(p_spec) <> 'array' then
    raise exception 'p_depends_on[%] must be null or a JSON array', p_row
      using errcode = '22023',
            hint = 'e.g. ''["0190a0b1-...", 1]'': job ids, and positions of earlier payloads of the call.';
  end if;
  for v_item in select a.item from jsonb_array_elements(p_spec) a(item) loop
    if jsonb_typeof(v_item) = 'number' and v_item::numeric = floor(v_item::numeric)
       and v_item::numeric between 1 and p_row - 1 then
      v_parents := v_parents || p_ids[v_item::int];
    elsif jsonb_typeof(v_item) = 'string' and (v_item #>> '{}') ~* '^[0-9a-f]{8}-?([0-9a-f]{4}-?){3}[0-9a-f]{12}$' then
      v_parents := v_parents || (v_item #>> '{}')::uuid;
    else
      raise exception 'p_depends_on[%] must hold job ids and positions of earlier rows (1 to %)', p_row, p_row - 1
        using errcode = '22023',
              detail = format('It held %s.', v_item),
              hint = 'A row may depend on the rows before it in the same call, by their 1-based position.';
    end if;
  end loop;
  return v_parents;
end;
$$;

comment on function pyjobq._row_parents(jsonb, int, uuid[]) is
  'The parent ids of row p_row of job_enqueue_many from p_spec (null, JSON null, or a JSON array of job ids and of '
  'positions 1..p_row - 1 of earlier rows, whose jobs are p_ids); 22023 for anything else.';

create function pyjobq.job_enqueue_many(
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
  p_on_parent_failure text default null
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
  v_ranks bigint[];
  v_run_on_parent_failure boolean := pyjobq._check_on_parent_failure(p_on_parent_failure);
  v_ids uuid[] := '{}';
begin
  p_payloads := pyjobq._check_array('p_payloads', p_payloads);
  p_dedupe_keys := pyjobq._check_array('p_dedupe_keys', p_dedupe_keys);
  perform pyjobq._check_job_type(p_job_type);
  perform pyjobq._check_privilege('enqueue', array[p_job_type]);
  v_max_attempts := pyjobq._max_attempts(p_job_type, p_max_attempts);
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

  -- Parents, which may be earlier rows of this call: one job at a time, in
  -- input order, each as job_enqueue takes it.
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
                                 pyjobq._row_parents(p_depends_on[v_row.i], v_row.i, v_ids),
                                 v_run_on_parent_failure) e;
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
                                              p_concurrency_keys[u.i], p_metadata) e
       order by u.i;
    return;
  end if;

  perform pyjobq._pending_from(v_run_after, v_now, true);
  v_ranks := pyjobq._fair_ranks(p_job_type, v_priority, p_concurrency_keys, v_count, v_now);

  -- Without keys nothing can conflict: every row is inserted, and the ids
  -- drawn beforehand are the answer, in input order, without a row-by-row loop.
  if p_dedupe_keys is null then
    return query
    with input as materialized (
      select u.i::int as ord, u.payload, u.seq, u.new_id
        from rows from (unnest(p_payloads), pyjobq._new_job_ids(v_now, v_count))
             with ordinality as u(payload, seq, new_id, i)
    ),
    inserted as (
      insert into pyjobq.job as j
        (job_id, seq, job_type, payload, priority, run_after, max_attempts, created_at, updated_at, concurrency_key,
         fair_rank, metadata)
      select i.new_id, i.seq, p_job_type, i.payload, v_priority, v_run_after, v_max_attempts, v_now, v_now,
             p_concurrency_keys[i.ord], v_ranks[i.ord], p_metadata
        from input i
       order by i.ord
    )
    select i.ord, i.new_id, true
      from input i
     order by i.ord;
    perform pyjobq._announce(p_job_type, v_run_after, v_now);
    return;
  end if;

  -- Ids are drawn before the insert so that inserted rows can be matched back
  -- to their input position. A key repeated within the batch, or already held
  -- by an active job, yields that job with created = false.
  for v_row in
    with input as materialized (
      select u.i::int as ord, u.payload, p_dedupe_keys[u.i] as dedupe_key, u.seq, u.new_id
        from rows from (unnest(p_payloads), pyjobq._new_job_ids(v_now, v_count))
             with ordinality as u(payload, seq, new_id, i)
    ),
    inserted as (
      insert into pyjobq.job as j
        (job_id, seq, job_type, payload, priority, run_after, dedupe_key, max_attempts, created_at, updated_at,
         concurrency_key, fair_rank, metadata)
      select i.new_id, i.seq, p_job_type, i.payload, v_priority, v_run_after, i.dedupe_key, v_max_attempts, v_now, v_now,
             p_concurrency_keys[i.ord], v_ranks[i.ord], p_metadata
        from input i
       order by i.ord
      on conflict (job_type, dedupe_key) where status in (1, 2, 6) and dedupe_key is not null do nothing
      returning j.job_id, j.dedupe_key
    )
    select i.ord,
           i.dedupe_key,
           coalesce(mine.job_id, sibling.job_id, active.job_id) as job_id,
           mine.job_id is not null as created
      from input i
      left join inserted mine on mine.job_id = i.new_id
      left join inserted sibling on mine.job_id is null and sibling.dedupe_key = i.dedupe_key
      left join pyjobq.job active
             on mine.job_id is null and sibling.job_id is null
            and active.job_type = p_job_type and active.dedupe_key = i.dedupe_key
            and active.status in (1, 2, 6)
     order by i.ord
  loop
    ord := v_row.ord;
    job_id := v_row.job_id;
    created := v_row.created;
    if job_id is null then
      -- The active job holding this key finished while we inserted.
      select e.job_id, e.created into job_id, created
        from pyjobq._enqueue_one(p_job_type, p_payloads[ord], v_priority, v_run_after,
                                 v_row.dedupe_key, v_max_attempts, v_now, null, p_concurrency_keys[ord],
                                 p_metadata) e;
    end if;
    return next;
  end loop;
  perform pyjobq._announce(p_job_type, v_run_after, v_now);
end;
$$;

comment on function pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int, interval, text[], jsonb, jsonb[], text) is
  'Adds up to 100000 jobs of one type in one call, with job_enqueue''s checks, defaults and dedupe; '
  'p_dedupe_keys, when given, pairs a key (or null) with each payload, and p_unique_for applies to the rows '
  'with a key as job_enqueue applies it; p_concurrency_keys likewise pairs a concurrency key (or null) with '
  'each payload; p_metadata is every job''s metadata, as job_enqueue keeps it. p_depends_on pairs with each '
  'payload null or a JSON array of its parents: job ids, or the 1-based positions of earlier payloads of the '
  'same call; p_on_parent_failure applies to every job, as job_enqueue applies both. Returns one row per payload in input '
  'order: its 1-based position, the job id, and whether it was newly created. Notifies pyjobq_job as '
  'job_enqueue does.';

create function pyjobq._claim_pick(
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
  lease_token uuid,
  metadata jsonb,
  parent_results jsonb
)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
-- On a freshly bulk-loaded, never-analyzed table the planner guesses that few
-- rows are due and prefers a bitmap scan plus a sort of every due row. Taking
-- sorts off the table leaves the ordered scan of job_claim_idx, which stops
-- after p_limit rows, whatever the statistics say. The penalty that disabling
-- adds to a plan's cost would otherwise also trigger JIT compilation on
-- every call (hundreds of milliseconds), so JIT is off here too.
set enable_sort = off
set jit = off
as $$
declare
  v_now_us bigint := (extract(epoch from p_now) * 1000000)::bigint;
  v_front pyjobq.claim_front;
  v_bounded boolean;
  -- Without a front these match nothing yet keep every scan an index scan.
  v_priority smallint := -1;
  v_run_after timestamptz := '-infinity';
  v_seq bigint := 0;
  v_row record;
  v_head_last record;
  v_last record;
  v_claimed int := 0;
  v_from_head int := 0;
begin
  -- Resume after this session's claim front, if it still holds (see "Claim
  -- fronts" above); the scan from the head comes after, and alone without one.
  v_front := pyjobq._claim_front_read(p_types::text, v_now_us);
  v_bounded := v_front.seq is not null;
  if v_bounded then
    v_priority := v_front.priority;
    v_run_after := v_front.run_after;
    v_seq := v_front.seq;
  end if;

  -- One statement: each MATERIALIZED CTE locks at most its limit exactly once
  -- (a plain subquery may be re-run by a nested loop and lock more), and SKIP
  -- LOCKED lets concurrent claimers take the next rows instead of waiting.
  -- The urgent jobs ahead of the front come first, then the jobs after it,
  -- then the scan from the head. Without a front, "ahead" and "after" have
  -- limit 0 and read nothing.
  for v_row in
  with ahead as materialized (
    select c.job_id, 1 as part
      from pyjobq.job c
     where c.status = 1
       and c.priority < v_priority
       and c.run_after <= p_now
       and c.job_type = any (p_types)
     order by c.priority, c.run_after, c.seq
     limit case when v_bounded then p_limit else 0 end
       for update skip locked
  ),
  after as materialized (
    select c.job_id, 2 as part
      from pyjobq.job c
     where c.status = 1
       and (c.priority, c.run_after, c.seq) > (v_priority, v_run_after, v_seq)
       and c.run_after <= p_now
       and c.job_type = any (p_types)
     order by c.priority, c.run_after, c.seq
     limit case when v_bounded then p_limit else 0 end
       for update skip locked
  ),
  head as materialized (
    select c.job_id, 3 as part
      from pyjobq.job c
     where c.status = 1
       and c.run_after <= p_now
       and c.job_type = any (p_types)
       and c.job_id not in (select a.job_id from ahead a union all select f.job_id from after f)
     order by c.priority, c.run_after, c.seq
     limit p_limit
       for update skip locked
  ),
  -- CTEs run as far as they are read: once p_limit jobs are picked, the
  -- scans not yet reached never start and lock nothing.
  picked as (
    (select a.job_id, a.part from ahead a
     union all
     select f.job_id, f.part from after f
     union all
     select h.job_id, h.part from head h)
    limit p_limit
  ),
  claimed as (
    update pyjobq.job j
       set status = 2,
           attempts = j.attempts + 1,
           worker_id = p_worker_id,
           lease_token = gen_random_uuid(),
           -- The lease, but never past the attempt's deadline.
           lease_until = p_now + make_interval(secs => least(p_lease, t.timeout_seconds)),
           run_started_at = p_now,
           updated_at = p_now
      from picked p, pyjobq.job_type t
     where j.job_id = p.job_id
       and t.job_type = j.job_type
    returning j.job_id, j.job_type, j.priority, j.payload, j.attempts, j.max_attempts,
              j.dedupe_key, j.run_after, j.lease_until, j.created_at, j.lease_token, j.metadata,
              case when j.waiting_on is not null then pyjobq._parent_results(j.job_id) end as parent_results,
              j.seq, p.part
  )
  select c.*
    from claimed c
   order by c.priority, c.run_after, c.seq
  loop
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
    metadata := v_row.metadata;
    parent_results := v_row.parent_results;
    return next;
    v_claimed := v_claimed + 1;
    v_last := v_row;
    if v_row.part = 3 then
      v_from_head := v_from_head + 1;
      v_head_last := v_row;
    end if;
  end loop;
  -- The new front: the last job taken, or, when the head scan took any, the
  -- last of those (due jobs may remain between it and the old front). A head
  -- scan starts a new second of life; resuming keeps the old front's.
  if v_from_head > 0 then
    v_last := v_head_last;
  end if;
  if v_claimed > 0 then
    perform pyjobq._claim_front_write(row(
      v_front.epoch, case when v_from_head > 0 then v_now_us else v_front.started_us end, p_types::text,
      v_now_us, v_last.priority, v_last.run_after, v_last.seq)::pyjobq.claim_front);
  end if;
end;
$$;

comment on function pyjobq._claim_pick(text, smallint[], int, int, timestamptz) is
  'job_claim once its arguments are checked: takes up to p_limit due PENDING jobs of p_types for p_worker_id, '
  'resuming from this session''s claim front, and writes the new front.';

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
  lease_token uuid,
  metadata jsonb,
  parent_results jsonb
)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
set enable_sort = off
set jit = off
as $$
declare
  c_visits constant int := 10000;  -- due jobs a claim looks at, at most
  v_at timestamptz := p_now;       -- the claim's time
  v_type record;
  v_room jsonb := '{}';            -- room left, by "type" and "type/key", once counted
  v_keyed jsonb := '{}';           -- key limits, by "type": {max, rate, period}
  v_taken jsonb := '{}';           -- jobs taken, by "type" and "type/key", where a rate counts them
  v_rule jsonb;
  v_w record;
  v_plain refcursor;
  v_fair refcursor;
  v_p record;
  v_f record;
  v_p_found boolean;
  v_f_found boolean;
  v_fair_turn boolean := true;
  v_c record;
  v_key text;
  v_row record;
  v_claimed int := 0;
  v_ids uuid[];
  v_mine text[];
begin
  for v_type in
    select t.job_type, t.max_running, t.rate_limit
      from pyjobq.job_type t
     where t.job_type = any (p_types)
       and (t.max_running is not null or t.rate_limit is not null)
     order by t.job_type
  loop
    perform pg_advisory_xact_lock(1887005297, v_type.job_type);
    if v_type.rate_limit is not null then
      -- A statement of its own: its snapshot follows the lock.
      v_at := greatest(v_at, (select w.claimed_at[cardinality(w.claimed_at)]
                                from pyjobq.rate_window w
                               where w.job_type = v_type.job_type and w.concurrency_key = ''));
    end if;
  end loop;

  for v_type in
    select t.job_type, t.max_running, t.key_max_running, t.rate_limit, t.rate_period, t.key_rate_limit,
           t.key_rate_period, w.claimed_at, w.claimed
      from pyjobq.job_type t
      left join pyjobq.rate_window w on w.job_type = t.job_type and w.concurrency_key = ''
     where t.job_type = any (p_types)
  loop
    if v_type.max_running is not null then
      v_room := v_room || jsonb_build_object(v_type.job_type::text, v_type.max_running - (
        select count(*)
          from (select 1
                  from pyjobq.job r
                 where r.lease_until is not null  -- RUNNING: job_running_has_lease
                   and r.job_type = v_type.job_type
                 limit v_type.max_running) as r));
    end if;
    if v_type.rate_limit is not null then
      v_room := v_room || jsonb_build_object(v_type.job_type::text, least(
        (v_room ->> v_type.job_type::text)::int,
        v_type.rate_limit - pyjobq._rate_used(v_type.claimed_at, v_type.claimed, v_at - v_type.rate_period)));
      v_taken := v_taken || jsonb_build_object(v_type.job_type::text, 0);
    end if;
    if v_type.key_max_running is not null or v_type.key_rate_limit is not null then
      v_keyed := v_keyed || jsonb_build_object(v_type.job_type::text, jsonb_build_object(
        'max', v_type.key_max_running, 'rate', v_type.key_rate_limit, 'period', v_type.key_rate_period));
    end if;
  end loop;

  -- No limit can bind within this claim: no key has one, no type is fair, and
  -- every limited type has room for all p_limit jobs. Then the claim is the
  -- plain one, set-based and resuming from the session's claim front, at the
  -- claim's time; the rates count what it took. (A type limit that never binds
  -- costs its lock and its count, not the walk below.)
  if v_keyed = '{}'
     and not exists (select from jsonb_each_text(v_room) r where r.value::int < p_limit)
     and not exists (select from pyjobq.job_type t where t.job_type = any (p_types) and t.fair_share) then
    for v_row in select * from pyjobq._claim_pick(p_worker_id, p_types, p_limit, p_lease, v_at) loop
      v_taken := pyjobq._count_down(v_taken, v_row.job_type::text, null);
      job_id := v_row.job_id;
      job_type := v_row.job_type;
      priority := v_row.priority;
      payload := v_row.payload;
      attempt := v_row.attempt;
      max_attempts := v_row.max_attempts;
      dedupe_key := v_row.dedupe_key;
      run_after := v_row.run_after;
      lease_until := v_row.lease_until;
      created_at := v_row.created_at;
      lease_token := v_row.lease_token;
      metadata := v_row.metadata;
      parent_results := v_row.parent_results;
      return next;
    end loop;
    perform pyjobq._rate_record_taken(v_taken, v_at);
    return;
  end if;

  -- Keys with a limit on their RUNNING jobs and nothing else in the way (no key
  -- rate, no fair share): the first due jobs, a few times what the claim wants,
  -- are taken in one pass. One statement tries their keys' locks; the next,
  -- whose snapshot follows the locks, counts the keys' RUNNING jobs, picks the
  -- jobs their key and type have room for, in claim order, and leases them.
  -- What the pass could not fill, the walk below takes on from the head (its
  -- counts see what the pass took).
  if v_keyed <> '{}'
     and not exists (select from jsonb_each(v_keyed) k where k.value ->> 'rate' is not null)
     and not exists (select from pyjobq.job_type t where t.job_type = any (p_types) and t.fair_share) then
    select array_agg(c.job_id order by c.ord),
           array_agg(distinct c.job_type || '/' || c.concurrency_key)
             filter (where case when c.concurrency_key is not null and v_keyed ? c.job_type::text
                                then pg_try_advisory_xact_lock(-c.job_type, hashtext(c.concurrency_key))
                                else false end)
      into v_ids, v_mine
      from (select d.job_id, d.job_type, d.concurrency_key, row_number() over () as ord
              from (select d.job_id, d.job_type, d.concurrency_key
                      from pyjobq.job d
                     where d.status = 1
                       and d.run_after <= p_now
                       and d.job_type = any (p_types)
                       and d.fair_rank is null
                     order by d.priority, d.run_after, d.seq
                     limit 4 * p_limit) d) c;
    for v_row in
      with cand as (
        select u.ord, j.job_id, j.job_type, j.concurrency_key,
               j.job_type || '/' || j.concurrency_key as key
          from unnest(v_ids) with ordinality u(job_id, ord)
          join pyjobq.job j on j.job_id = u.job_id and j.status = 1
      ),
      room as (
        select k.key, (v_keyed -> split_part(k.key, '/', 1) ->> 'max')::int - (
                 select count(*)
                   from pyjobq.job r
                  where r.status = 2
                    and r.concurrency_key is not null
                    and r.job_type = split_part(k.key, '/', 1)::smallint
                    and r.concurrency_key = substr(k.key, position('/' in k.key) + 1)) as left_
          from unnest(v_mine) k(key)
      ),
      by_key as (
        select c.*, row_number() over (partition by c.key order by c.ord) as nth
          from cand c
      ),
      keyed as (
        select b.*
          from by_key b
          left join room r on r.key = b.key
         where b.concurrency_key is null
            or not v_keyed ? b.job_type::text
            or b.nth <= r.left_
      ),
      typed as (
        select k.*, row_number() over (partition by k.job_type order by k.ord) as nth_of_type
          from keyed k
      ),
      picked as (
        select t.job_id
          from typed t
         where t.nth_of_type <= coalesce((v_room ->> t.job_type::text)::int, p_limit)
         order by t.ord
         limit p_limit
      ),
      locked as (
        select l.job_id from pyjobq.job l
         where l.job_id in (select p.job_id from picked p) and l.status = 1
           for update skip locked
      ),
      claimed as (
        update pyjobq.job j
           set status = 2,
               attempts = j.attempts + 1,
               worker_id = p_worker_id,
               lease_token = gen_random_uuid(),
               lease_until = v_at + make_interval(secs => least(p_lease, t.timeout_seconds)),
               run_started_at = v_at,
               updated_at = v_at
          from locked l, pyjobq.job_type t
         where j.job_id = l.job_id
           and t.job_type = j.job_type
        returning j.job_id, j.job_type, j.priority, j.payload, j.attempts, j.max_attempts, j.dedupe_key,
                  j.run_after, j.lease_until, j.created_at, j.lease_token, j.metadata,
                  case when j.waiting_on is not null then pyjobq._parent_results(j.job_id) end as parent_results,
                  j.seq
      )
      select c.* from claimed c order by c.priority, c.run_after, c.seq
    loop
      v_room := pyjobq._count_down(v_room, v_row.job_type::text, null);
      v_taken := pyjobq._count_down(v_taken, v_row.job_type::text, null);
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
      metadata := v_row.metadata;
      parent_results := v_row.parent_results;
      return next;
      v_claimed := v_claimed + 1;
    end loop;
    if v_claimed >= p_limit or coalesce(cardinality(v_ids), 0) < 4 * p_limit then
      perform pyjobq._rate_record_taken(v_taken, v_at);
      return;
    end if;
  end if;

  -- Two streams of due jobs: in claim order, and the fair-share jobs in their
  -- turns (job.fair_rank); the more urgent priority first, and taking turns
  -- within one.
  open v_plain for
    select c.job_id, c.job_type, c.concurrency_key, c.priority
      from pyjobq.job c
     where c.status = 1
       and c.run_after <= p_now
       and c.job_type = any (p_types)
       and c.fair_rank is null
     order by c.priority, c.run_after, c.seq
     limit c_visits;
  open v_fair for
    select c.job_id, c.job_type, c.concurrency_key, c.priority
      from pyjobq.job c
     where c.status = 1
       and c.fair_rank is not null
       and c.run_after <= p_now
       and c.job_type = any (p_types)
     order by c.priority, c.fair_rank, c.seq
     limit c_visits;
  fetch v_plain into v_p;
  v_p_found := found;
  fetch v_fair into v_f;
  v_f_found := found;
  loop
    if v_f_found and (not v_p_found or v_f.priority < v_p.priority
                      or (v_f.priority = v_p.priority and v_fair_turn)) then
      v_c := v_f;
      fetch v_fair into v_f;
      v_f_found := found;
      v_fair_turn := false;
    elsif v_p_found then
      v_c := v_p;
      fetch v_plain into v_p;
      v_p_found := found;
      v_fair_turn := true;
    else
      exit;
    end if;
    continue when (v_room ->> v_c.job_type::text)::int <= 0;
    v_key := null;
    v_rule := v_keyed -> v_c.job_type::text;
    if v_c.concurrency_key is not null and v_rule is not null then
      v_key := v_c.job_type || '/' || v_c.concurrency_key;
      if not v_room ? v_key then
        v_room := v_room || jsonb_build_object(v_key, 0);
        if pg_try_advisory_xact_lock(-v_c.job_type, hashtext(v_c.concurrency_key)) then
          v_room := v_room || jsonb_build_object(v_key, 100000);
          if v_rule ->> 'max' is not null then
            v_room := v_room || jsonb_build_object(v_key, (v_rule ->> 'max')::int - (
              select count(*)
                from (select 1
                        from pyjobq.job r
                       where r.status = 2
                         and r.concurrency_key is not null
                         and r.job_type = v_c.job_type
                         and r.concurrency_key = v_c.concurrency_key
                       limit (v_rule ->> 'max')::int) as r));
          end if;
          if v_rule ->> 'rate' is not null then
            select w.claimed_at, w.claimed into v_w
              from pyjobq.rate_window w
             where w.job_type = v_c.job_type and w.concurrency_key = v_c.concurrency_key;
            v_room := v_room || jsonb_build_object(v_key, case
              when v_w.claimed_at[cardinality(v_w.claimed_at)] > v_at then 0
              else least((v_room ->> v_key)::int, (v_rule ->> 'rate')::int
                         - pyjobq._rate_used(v_w.claimed_at, v_w.claimed, v_at - (v_rule ->> 'period')::interval))
              end);
            v_taken := v_taken || jsonb_build_object(v_key, 0);
          end if;
        end if;
      end if;
      continue when (v_room ->> v_key)::int <= 0;
    end if;
    update pyjobq.job j
       set status = 2,
           attempts = j.attempts + 1,
           worker_id = p_worker_id,
           lease_token = gen_random_uuid(),
           lease_until = v_at + make_interval(secs => least(p_lease, t.timeout_seconds)),
           run_started_at = v_at,
           updated_at = v_at
      from pyjobq.job_type t
     where j.job_id = (select l.job_id from pyjobq.job l where l.job_id = v_c.job_id and l.status = 1
                          for update skip locked)
       and t.job_type = j.job_type
    returning j.job_id, j.job_type, j.priority, j.payload, j.attempts, j.max_attempts, j.dedupe_key,
              j.run_after, j.lease_until, j.created_at, j.lease_token, j.metadata,
              case when j.waiting_on is not null then pyjobq._parent_results(j.job_id) end as parent_results
      into v_row;
    continue when not found;  -- another claimer has it
    v_room := pyjobq._count_down(v_room, v_c.job_type::text, v_key);
    v_taken := pyjobq._count_down(v_taken, v_c.job_type::text, v_key);
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
    metadata := v_row.metadata;
    parent_results := v_row.parent_results;
    return next;
    v_claimed := v_claimed + 1;
    exit when v_claimed >= p_limit;
  end loop;
  close v_plain;
  close v_fair;

  perform pyjobq._rate_record_taken(v_taken, v_at);
end;
$$;

comment on function pyjobq._claim_limited(text, smallint[], int, int, timestamptz) is
  'job_claim for job types with concurrency or rate limits or fair share: takes up to p_limit due PENDING jobs, '
  'in claim order and the fair-share ones in their turns, while their type and concurrency key have room, '
  'counted under advisory locks; looks at 10000 due jobs of each order at most.';

create function pyjobq.job_claim(
  p_worker_id text,
  p_limit int default null,
  p_lease_seconds int default null,
  p_job_types int[] default null
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
  lease_token uuid,
  metadata jsonb,
  parent_results jsonb
)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_limit int := coalesce(p_limit, 1);
  v_lease int := coalesce(p_lease_seconds, 300);
  v_types smallint[];
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_limit', v_limit, 1, 1000);
  perform pyjobq._check_range('p_lease_seconds', v_lease, 1, 86400);
  v_types := pyjobq._work_types(p_job_types);
  if exists (select 1 from pyjobq.job_type t
              where t.job_type = any (v_types)
                and (t.max_running is not null or t.key_max_running is not null or t.rate_limit is not null
                     or t.key_rate_limit is not null or t.fair_share)) then
    return query select * from pyjobq._claim_limited(p_worker_id, v_types, v_limit, v_lease, v_now);
  else
    return query select * from pyjobq._claim_pick(p_worker_id, v_types, v_limit, v_lease, v_now);
  end if;
end;
$$;

comment on function pyjobq.job_claim(text, int, int, int[]) is
  'Atomically takes up to p_limit (1..1000, default 1) due PENDING jobs, lowest priority value then earliest '
  'run_after first, of the given job types (default all), and leases them to p_worker_id (1..80 chars) for '
  'p_lease_seconds (1..86400, default 300): RUNNING, attempts + 1. Rows locked by other claimers are skipped, '
  'never waited for. A type with concurrency limits (job_type_set_limits) never has more RUNNING, or more '
  'claims in a period, than they allow, in all and per concurrency key; a fair-share type''s jobs are taken '
  'round robin across their concurrency keys. Returns the claimed jobs with their metadata, and for a job with '
  'parents (job_enqueue''s p_depends_on) their results (parent_results: a JSON array of {job_id, job_type, '
  'status, result} in the order the enqueue named them); attempt and lease_token '
  '(random, shown by nothing else) are the fencing token to pass to complete/fail/renew/release. An empty result means nothing '
  'is due.';

create or replace function pyjobq.job_complete(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_result jsonb default null,
  p_lease_token uuid default null
)
returns void
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_denied smallint[] := pyjobq._denied_types('work');
  v_job_type smallint;
  v_has_dependants boolean;
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_attempt', p_attempt, 1, 32767);
  perform pyjobq._check_lease_token('p_lease_token', p_lease_token is null);
  update pyjobq.job j
     set status = 3,
         result = p_result,
         lease_until = null,
         updated_at = v_now
   where j.job_id = p_job_id
     and j.status = 2
     and j.worker_id = p_worker_id
     and j.job_type <> all (v_denied)
     and j.attempts = p_attempt
     and (j.lease_token = p_lease_token or p_lease_token is null)
  returning j.job_type, j.has_dependants into v_job_type, v_has_dependants;
  if not found then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt, p_lease_token);
  end if;
  perform pyjobq._stat_add(v_now, p_worker_id, array[v_job_type], array[3::smallint]);
  if v_has_dependants then
    perform pyjobq._resolve_parents(array[p_job_id], v_now);
  end if;
end;
$$;

comment on function pyjobq.job_complete(uuid, text, int, jsonb, uuid) is
  'Marks job p_job_id DONE with p_result, if p_worker_id still holds attempt p_attempt of it (RUNNING) with '
  'lease token p_lease_token; otherwise raises JQ001 lease_lost, JQ002 job_not_found or JQ003 '
  'job_already_finished and changes nothing. Without p_lease_token: 22004, unless the caller owns the schema '
  'or job_settings accepts such calls.';

create or replace function pyjobq.job_complete_many(
  p_worker_id text,
  p_job_ids uuid[],
  p_attempts int[],
  p_results jsonb[] default null,
  p_lease_tokens uuid[] default null
)
returns table (job_id uuid, completed boolean)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
-- One statement for the batch, its plan pinned: input rows on the outside, each
-- job found by its primary key (the only index the update's predicate allows),
-- whatever the statistics say. The penalties of the disabled methods would
-- otherwise tip the plan into JIT compilation.
set enable_seqscan = off
set enable_bitmapscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_denied smallint[] := pyjobq._denied_types('work');
  v_count int := coalesce(cardinality(p_job_ids), 0);
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  p_attempts := pyjobq._check_array('p_attempts', p_attempts);
  p_results := pyjobq._check_array('p_results', p_results);
  p_lease_tokens := pyjobq._check_array('p_lease_tokens', p_lease_tokens);
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  perform pyjobq._check_same_length('p_attempts', coalesce(cardinality(p_attempts), 0), v_count);
  if p_results is not null then  -- null: no results; else one, possibly null, per job
    perform pyjobq._check_same_length('p_results', cardinality(p_results), v_count);
  end if;
  perform pyjobq._check_lease_tokens(p_lease_tokens, v_count);

  return query
  with input as (
    select u.id, u.attempt, u.result, u.token, u.ord
      from unnest(p_job_ids, p_attempts, p_results, p_lease_tokens)
           with ordinality as u(id, attempt, result, token, ord)
  ), first_mention as (
    -- A job listed twice is completed once, with the result of its first mention.
    select distinct on (i.id, i.attempt) i.id, i.attempt, i.result, i.token
      from input i
     order by i.id, i.attempt, i.ord
  ), done as (
    update pyjobq.job j
       set status = 3,
           result = f.result,
           lease_until = null,
           updated_at = v_now
      from first_mention f
     where j.job_id = f.id
       and j.status = 2
       and j.worker_id = p_worker_id
       and j.job_type <> all (v_denied)
       and j.attempts = f.attempt
       and (j.lease_token = f.token or f.token is null)
    returning j.job_id, j.attempts, j.job_type, j.has_dependants
  ), counted as (
    -- One row (an aggregate), so the cross join below records the batch once,
    -- and resolves the dependants of its parents together (none: no call).
    select pyjobq._stat_add(v_now, p_worker_id, array_agg(d.job_type), array_agg(3::smallint)),
           case when bool_or(d.has_dependants)
                then pyjobq._resolve_parents(array_agg(d.job_id) filter (where d.has_dependants), v_now) end
      from done d
  )
  -- A job this very attempt completed before (a retried call whose first reply
  -- was lost) counts as completed: the result stored then stays.
  select i.id,
         case when (i.id, i.attempt) in (select d.job_id, d.attempts from done d) then true
              else exists (select from pyjobq.job k
                            where k.job_id = i.id
                              and k.job_type <> all (v_denied)
                              and k.status = 3
                              and k.worker_id = p_worker_id
                              and k.attempts = i.attempt
                              and (k.lease_token = i.token or i.token is null))
         end
    from input i
   cross join counted
   order by i.ord;
end;
$$;

comment on function pyjobq.job_complete_many(text, uuid[], int[], jsonb[], uuid[]) is
  'job_complete for up to 10000 jobs in one call: each job whose attempt p_worker_id still holds, with the lease '
  'token at its position in p_lease_tokens, becomes DONE. '
  'Returns every input job id with completed = true when that attempt is DONE (now, or by an earlier call of '
  'the same holder: retrying after a lost reply is safe) and false for those no longer held (left unchanged).';

create or replace function pyjobq.job_fail(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_error text default null,
  p_retry_delay_seconds double precision default null,
  p_dead_letter boolean default null,
  p_lease_token uuid default null
)
returns table (status int, run_after timestamptz)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_denied smallint[] := pyjobq._denied_types('work');
  v_dead_letter boolean := coalesce(p_dead_letter, false);
  v_delay interval;
  v_job_type int;
  v_has_dependants boolean;
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_attempt', p_attempt, 1, 32767);
  perform pyjobq._check_lease_token('p_lease_token', p_lease_token is null);
  if p_retry_delay_seconds is not null then
    if not (p_retry_delay_seconds between 0 and 31536000) then
      raise exception 'p_retry_delay_seconds must be between 0 and 31536000'
        using errcode = '22023',
              detail = format('p_retry_delay_seconds was %s.', p_retry_delay_seconds),
              hint = 'Leave it out for the default exponential backoff.';
    end if;
    v_delay := make_interval(secs => p_retry_delay_seconds);
  end if;

  update pyjobq.job j
     set status = case when v_dead_letter or pyjobq._tries_left(j.attempts, j.attempts_refunded, j.max_attempts) <= 0 then 4 else 1 end,
         run_after = case when v_dead_letter or pyjobq._tries_left(j.attempts, j.attempts_refunded, j.max_attempts) <= 0 then j.run_after
                          else pyjobq._retry_at(j.job_type, j.attempts - j.attempts_refunded, v_delay, v_now) end,
         worker_id = case when v_dead_letter or pyjobq._tries_left(j.attempts, j.attempts_refunded, j.max_attempts) <= 0 then j.worker_id end,
         lease_until = null,
         last_error = left(p_error, 10000),
         updated_at = v_now
   where j.job_id = p_job_id
     and j.status = 2
     and j.worker_id = p_worker_id
     and j.job_type <> all (v_denied)
     and j.attempts = p_attempt
     and (j.lease_token = p_lease_token or p_lease_token is null)
  returning j.status::int, j.run_after, j.job_type, j.has_dependants
       into status, run_after, v_job_type, v_has_dependants;
  if not found then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt, p_lease_token);
  end if;
  perform pyjobq._stat_add(v_now, p_worker_id, array[v_job_type::smallint], array[status::smallint]);
  if status = 4 and v_has_dependants then
    perform pyjobq._resolve_parents(array[p_job_id], v_now);
  end if;
  -- The retry is announced like a new job: idle workers learn when it is due.
  if status = 1 then
    perform pyjobq._announce(v_job_type, run_after, v_now);
  end if;
  return next;
end;
$$;

comment on function pyjobq.job_fail(uuid, text, int, text, double precision, boolean, uuid) is
  'Records a failed attempt p_attempt of job p_job_id held by p_worker_id with lease token p_lease_token, keeping p_error (truncated to 10000 '
  'characters) as last_error. With attempts left the job is PENDING again after p_retry_delay_seconds '
  '(0..31536000) or, by default, pyjobq.retry_backoff(attempt); with none left, or p_dead_letter, it is DEAD. '
  'Returns the new status and run_after; raises JQ001/JQ002/JQ003 like job_complete. A retry notifies '
  'pyjobq_job as job_enqueue does.';

create or replace function pyjobq.job_release_many(
  p_worker_id text,
  p_job_ids uuid[],
  p_attempts int[],
  p_lease_tokens uuid[] default null
)
returns table (job_id uuid, released boolean)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
set enable_seqscan = off
set enable_bitmapscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_denied smallint[] := pyjobq._denied_types('work');
  v_count int := coalesce(cardinality(p_job_ids), 0);
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  p_attempts := pyjobq._check_array('p_attempts', p_attempts);
  p_lease_tokens := pyjobq._check_array('p_lease_tokens', p_lease_tokens);
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  perform pyjobq._check_same_length('p_attempts', coalesce(cardinality(p_attempts), 0), v_count);
  perform pyjobq._check_lease_tokens(p_lease_tokens, v_count);

  return query
    with input as (
      select u.id, u.attempt, u.token, u.ord
        from unnest(p_job_ids, p_attempts, p_lease_tokens) with ordinality as u(id, attempt, token, ord)
    ), given_back as (
      update pyjobq.job j
         -- The try is given back; the claim counter, the fencing token, is not.
         -- A job whose counter is spent can never be claimed again: DEAD.
         set status = case when pyjobq._tries_left(j.attempts, j.attempts_refunded + 1, j.max_attempts) <= 0
                           then 4 else 1 end,
             -- Back at its old place in the queue, before claim fronts.
             run_after = case when pyjobq._tries_left(j.attempts, j.attempts_refunded + 1, j.max_attempts) <= 0
                              then j.run_after else pyjobq._pending_from(j.run_after, v_now, false) end,
             attempts_refunded = j.attempts_refunded + 1,
             worker_id = case when pyjobq._tries_left(j.attempts, j.attempts_refunded + 1, j.max_attempts) <= 0
                              then j.worker_id end,
             last_error = case when pyjobq._tries_left(j.attempts, j.attempts_refunded + 1, j.max_attempts) <= 0
                               then 'released with its claim counter spent (32767 claims)' else j.last_error end,
             lease_until = null,
             updated_at = v_now
        from (select distinct i.id, i.attempt, i.token from input i) f
       where j.job_id = f.id
         and j.status = 2
         and j.worker_id = p_worker_id
         and j.job_type <> all (v_denied)
         and j.attempts = f.attempt
         and (j.lease_token = f.token or f.token is null)
      returning j.job_id, j.attempts as attempt, j.status, j.has_dependants
    ), resolved as (
      -- A job released DEAD ends: its dependants are resolved (one row, one call).
      select case when bool_or(g.status = 4 and g.has_dependants)
                  then pyjobq._resolve_parents(array_agg(g.job_id) filter (where g.status = 4 and g.has_dependants),
                                               v_now) end
        from given_back g
    )
    select i.id, (i.id, i.attempt) in (select g.job_id, g.attempt from given_back g)
      from input i
     cross join resolved
     order by i.ord;
end;
$$;

comment on function pyjobq.job_release_many(text, uuid[], int[], uuid[]) is
  'job_release for up to 10000 jobs in one call: each job whose attempt p_worker_id still holds, with the lease '
  'token at its position in p_lease_tokens, is PENDING '
  'again at its old place in the queue, the try given back (attempts_refunded + 1; attempts, the fencing token, '
  'stays). Returns every input job id, in input order, with released = false for a job no longer held (left '
  'unchanged).';

create or replace function pyjobq.job_reap(p_limit int default null)
returns table (job_id uuid, job_type int, status int, worker_id text, attempt int, run_after timestamptz)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
-- As in job_claim: the ordered scan of job_lease_idx, never a sort of every lease.
set enable_sort = off
set jit = off
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_limit int := coalesce(p_limit, 1000);
begin
  perform pyjobq._check_range('p_limit', v_limit, 1, 100000);
  -- The expiry test is repeated in the UPDATE: a row that a completer or a
  -- renewer changed after this statement's snapshot is re-checked on its
  -- newest version, so a reaper never overwrites a finished or renewed job.
  return query
  with picked as materialized (
    select r.job_id, r.worker_id, r.attempts
      from pyjobq.job r
     where r.status = 2
       and r.lease_until < v_now
     order by r.lease_until
     limit v_limit
       for update skip locked
  ),
  reaped as (
    update pyjobq.job j
       set status = case when pyjobq._tries_left(j.attempts, j.attempts_refunded, j.max_attempts) <= 0
                         then 4 else 1 end,
           run_after = case when pyjobq._tries_left(j.attempts, j.attempts_refunded, j.max_attempts) <= 0
                            then j.run_after
                            else pyjobq._retry_at(j.job_type, j.attempts - j.attempts_refunded, null, v_now) end,
           -- Cleared even for DEAD: the worker that lost the lease gets JQ001
           -- (lease_lost), never JQ003, which means "your attempt finished it".
           worker_id = null,
           last_error = format('lease expired: worker %s did not finish attempt %s',
                               j.worker_id, j.attempts),
           lease_until = null,
           updated_at = v_now
      from picked p
     where j.job_id = p.job_id
       and j.status = 2
       and j.lease_until < v_now
    returning j.job_id, j.job_type, j.status, j.run_after, j.has_dependants
  ), counted as (
    select pyjobq._stat_add(v_now, null, array_agg(r.job_type), array_agg(r.status)),
           case when bool_or(r.status = 4 and r.has_dependants)
                then pyjobq._resolve_parents(array_agg(r.job_id) filter (where r.status = 4 and r.has_dependants),
                                             v_now) end
      from reaped r
  )
  select r.job_id, r.job_type::int, r.status::int, p.worker_id::text, p.attempts::int, r.run_after
    from reaped r
    join picked p on p.job_id = r.job_id
   cross join counted;
  -- Finish counts older than job_throughput and job_workers look back.
  delete from pyjobq.job_stat s
   where s.minute < v_now - interval '25 hours';
end;
$$;

comment on function pyjobq.job_reap(int) is
  'Takes back up to p_limit (1..100000, default 1000) RUNNING jobs whose lease expired: PENDING after '
  'pyjobq.retry_backoff, or DEAD when their attempts are used up. Skips rows other sessions hold locked, so '
  'reapers never block claimers or each other; safe to run from every worker. Returns what it took back, '
  'with the worker and attempt that lost it. Also drops the finish counts (job_throughput) older than 25 '
  'hours.';

create or replace function pyjobq.job_counts()
returns table (
  job_type int,
  job_type_name text,
  status int,
  status_name text,
  jobs bigint,
  oldest_due_seconds double precision,
  expired_leases bigint,
  exact boolean
)
language sql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
-- PENDING, RUNNING, DEAD and CANCELLED through partial indexes whatever the
-- statistics say, so the cost follows the jobs in those states, never the
-- DONE history; plain index scans, which stop at a LIMIT (a bitmap scan reads
-- every matching entry first).
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
  -- (select pyjobq.clock_now()): read once, not once per row.
  with exact_counts as (
    select j.job_type, 1 as status, count(*) as jobs,
           min(j.run_after) filter (where j.run_after <= (select pyjobq.clock_now())) as oldest_due,
           null::bigint as expired_leases
      from pyjobq.job j
     where j.status = 1
     group by j.job_type
    union all
    select j.job_type, 2, count(*), null, count(*) filter (where j.lease_until < (select pyjobq.clock_now()))
      from pyjobq.job j
     where j.lease_until is not null  -- the RUNNING jobs exactly: job_running_has_lease
     group by j.job_type
    union all
    select j.job_type, 6, count(*), null, null
      from pyjobq.job j
     where j.status = 6
     group by j.job_type
  ), ended_counts as (
    -- DEAD and CANCELLED grow with history too: each type's counted through
    -- job_dead_cancelled_idx up to 10001 entries, no further.
    select t.job_type, e.status,
           (select count(*)
              from (select 1
                      from pyjobq.job j
                     where j.status in (4, 5)  -- the index's predicate, for the planner
                       and j.job_type = t.job_type
                       and j.status = e.status
                     limit 10001) as k) as jobs
      from pyjobq.job_type t
     cross join (values (4), (5)) as e(status)
  ), size as (
    -- The rows now: rows per page at the last ANALYZE times the pages now, or,
    -- before the first ANALYZE, the server's count of live rows.
    select pg_relation_size(c.oid) <= 1048576 as small,
           pg_relation_size(c.oid) / current_setting('block_size')::int as pages,
           case when c.reltuples >= 0 and c.relpages > 0
                then c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::int)
                else pg_stat_get_live_tuples(c.oid)
           end as rows
      from pg_class c
     where c.oid = 'pyjobq.job'::regclass
  ), done_counted as (
    -- A table of at most 1 MiB (a few thousand jobs) is cheap to read: exact.
    select j.job_type, count(*) as jobs
      from pyjobq.job j
     where j.status = 3
       and (select z.small from size z)
     group by j.job_type
  ), stats as (
    select s.most_common_vals as vals, s.most_common_freqs as freqs
      from pg_stats_ext s
     where s.statistics_schemaname = 'pyjobq'
       and s.statistics_name = 'job_type_status_stats'
       and s.most_common_freqs is not null
  ), listed as (
    -- Each (type, status)'s share of the rows in the sample of the last ANALYZE.
    select s.vals[i][1]::int as job_type, s.vals[i][2]::int as status, s.freqs[i] as freq
      from stats s
     cross join lateral generate_subscripts(s.freqs, 1) as i
  ), sample as materialized (
    -- Larger and never analyzed: about 32 of its pages, the same ones at every
    -- call while it does not grow. The condition is checked before the scan.
    select j.job_type, j.status
      from pyjobq.job j
           tablesample system ((select least(100, 100.0 * 32 / greatest(z.pages, 1)) from size z)) repeatable (0)
     where not (select z.small from size z)
       and not exists (select from stats)
  ), shares as (
    select l.job_type, l.status, l.freq from listed l
    union all
    select m.job_type, 3, count(*)::double precision / (select count(*) from sample)
      from sample m
     where m.status = 3
     group by m.job_type
  ), known as (
    -- Rows counted exactly now whose (type, status) has no share.
    select coalesce(sum(k.jobs), 0) as jobs
      from (select c.job_type, c.status, c.jobs from exact_counts c
            union all
            select e.job_type, e.status, e.jobs from ended_counts e where e.jobs <= 10000) as k
     where not exists (select from shares h where (h.job_type, h.status) = (k.job_type, k.status))
  ), estimated as (
    -- Not small: a share times the rows now. A type whose DONE jobs have no
    -- share (too few to be in the sample) gets, split with the others without
    -- one, the rows that no share and no exact count accounts for.
    select h.job_type, h.status, round(h.freq * z.rows)::bigint as jobs
      from shares h
     cross join size z
     where h.status in (3, 4, 5)
    union all
    select t.job_type, 3,
           greatest(0, round(((1 - (select coalesce(sum(h.freq), 0) from shares h)) * z.rows - k.jobs)
                             / count(*) over ()))::bigint
      from pyjobq.job_type t
     cross join size z
     cross join known k
     where not exists (select from shares h where h.job_type = t.job_type and h.status = 3)
  )
  select t.job_type::int,
         t.name::text,
         s.status,
         s.status_name,
         case when s.status in (1, 2, 6) then coalesce(c.jobs, 0)
              when s.status in (4, 5) and e.jobs <= 10000 then e.jobs
              -- More than 10000 DEAD or CANCELLED: the estimate, but at least what was counted.
              when s.status in (4, 5) then greatest(coalesce(de.jobs, 0), e.jobs)
              when z.small then coalesce(dc.jobs, 0)
              else coalesce(de.jobs, 0)
         end,
         case when s.status = 1 then
           coalesce(extract(epoch from pyjobq.clock_now() - c.oldest_due)::double precision, 0)
         end,
         case when s.status = 2 then coalesce(c.expired_leases, 0) end,
         s.status in (1, 2, 6) or (s.status in (4, 5) and e.jobs <= 10000) or (s.status = 3 and z.small)
    from pyjobq.job_type t
   cross join (select g.status, pyjobq._status_name(g.status) as status_name
                 from generate_series(1, 6) as g(status)) as s
   cross join size z
    left join exact_counts c on c.job_type = t.job_type and c.status = s.status
    left join ended_counts e on e.job_type = t.job_type and e.status = s.status
    left join done_counted dc on dc.job_type = t.job_type and s.status = 3
    left join estimated de on de.job_type = t.job_type and de.status = s.status and not z.small
   where t.job_type <> all ((select pyjobq._denied_types('observe'))::smallint[])  -- evaluated once
   order by t.job_type, s.status
$$;

comment on function pyjobq.job_counts() is
  'Jobs per registered type and status (zero rows included), with health figures: for PENDING, the age in '
  'seconds of the oldest due job (0 when none is due); for RUNNING, how many leases expired without being reaped. '
  'PENDING, RUNNING and WAITING are exact and read through indexes; so are DEAD and CANCELLED up to 10000 per type, '
  'beyond which they are at least 10001, from the statistics of the last ANALYZE (exact false). DONE is exact '
  'while the table is at most 1 MiB; beyond, it is an estimate from the statistics of the last ANALYZE (before '
  'the first, from about 32 pages of the table), and exact is false.';

create or replace function pyjobq.job_list(
  p_job_type int default null,
  p_status int default null,
  p_dedupe_key text default null,
  p_created_after timestamptz default null,
  p_created_before timestamptz default null,
  p_oldest_first boolean default null,
  p_after uuid default null,
  p_limit int default null,
  p_error text default null
)
returns table (
  job_id uuid,
  job_type int,
  job_type_name text,
  status int,
  status_name text,
  priority int,
  attempts int,
  max_attempts int,
  dedupe_key text,
  run_after timestamptz,
  worker_id text,
  last_error text,
  created_at timestamptz,
  updated_at timestamptz
)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
-- Index scans only, whatever the statistics: a bitmap scan of job_pkey's
-- range would read every page of the history to sort it.
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
declare
  v_limit int := coalesce(p_limit, 100);
  v_oldest boolean := coalesce(p_oldest_first, false);
  v_from uuid;
  v_to uuid;
  v_denied smallint[] := pyjobq._denied_types('observe');
begin
  perform pyjobq._check_range('p_limit', v_limit, 1, 1000);
  if p_status is not null then
    perform pyjobq._check_range('p_status', p_status, 1, 6);
  end if;
  if p_job_type is not null then
    perform pyjobq._check_job_type(p_job_type);
  end if;
  perform pyjobq._check_text('p_dedupe_key', p_dedupe_key, 200, true);
  perform pyjobq._check_text('p_error', p_error, 200, true);
  perform pyjobq._check_time('p_created_after', p_created_after, pyjobq.clock_now());
  perform pyjobq._check_time('p_created_before', p_created_before, pyjobq.clock_now());
  v_from := coalesce(pyjobq._job_id_floor(p_created_after), '00000000-0000-0000-0000-000000000000');
  v_to := coalesce(pyjobq._job_id_floor(p_created_before), 'ffffffff-ffff-ffff-ffff-ffffffffffff');
  -- Keyset pagination: the next page continues after the last id of this one.
  if p_after is not null and v_oldest then
    v_from := greatest(v_from, p_after);
  elsif p_after is not null then
    v_to := least(v_to, p_after);
  end if;

  -- One of three ways runs, chosen by the arguments (the others are cut off
  -- before they read a row): the statuses with few jobs (PENDING, RUNNING,
  -- WAITING, DEAD, CANCELLED: the queue's work, not its history) through their partial
  -- indexes, then sorted; DONE or any status along job_pkey in order, up to
  -- the limit. No way reads the whole history for one page.
  return query
  with matching as not materialized (
    select j.job_id, j.status, j.lease_until
      from pyjobq.job j
     where (p_job_type is null or j.job_type = p_job_type)
       and (p_dedupe_key is null or j.dedupe_key = p_dedupe_key)
       and (p_error is null or strpos(lower(j.last_error), lower(p_error)) > 0)
       and j.job_type <> all (v_denied)
  ), few as materialized (
    -- Every job of the status, through its partial index, before any limit or
    -- id range could tempt the planner into walking job_pkey instead (as it
    -- would on a table never analyzed, where rows look common).
    select m.job_id from matching m where p_status = 1 and m.status = 1
    union all
    select m.job_id from matching m where p_status = 2 and m.lease_until is not null
    union all
    select m.job_id from matching m where p_status = 6 and m.status = 6
    union all
    select m.job_id from matching m
     where p_status in (4, 5) and m.status in (4, 5) and m.status = p_status
  ), ranged as not materialized (
    select m.job_id, m.status
      from matching m
     where m.job_id >= v_from and m.job_id < v_to and m.job_id is distinct from p_after
  ), page as (
    (select f.job_id
       from few f
      where f.job_id >= v_from and f.job_id < v_to and f.job_id is distinct from p_after
      order by case when v_oldest then f.job_id end, case when not v_oldest then f.job_id end desc
      limit v_limit)
    union all
    (select r.job_id
       from ranged r
      where coalesce(p_status, 3) = 3 and v_oldest and r.status = coalesce(p_status, r.status)
      order by r.job_id
      limit v_limit)
    union all
    (select r.job_id
       from ranged r
      where coalesce(p_status, 3) = 3 and not v_oldest and r.status = coalesce(p_status, r.status)
      order by r.job_id desc
      limit v_limit)
  )
  select j.job_id, j.job_type::int, t.name::text, j.status::int,
         pyjobq._status_name(j.status),
         j.priority::int, j.attempts::int, j.max_attempts::int, j.dedupe_key::text, j.run_after,
         j.worker_id::text, j.last_error, j.created_at, j.updated_at
    from page p
    join pyjobq.job j on j.job_id = p.job_id
    join pyjobq.job_type t on t.job_type = j.job_type
   order by case when v_oldest then j.job_id end, case when not v_oldest then j.job_id end desc;
end;
$$;

comment on function pyjobq.job_list(int, int, text, timestamptz, timestamptz, boolean, uuid, int, text) is
  'Lists jobs newest first (or oldest, p_oldest_first), up to p_limit (1..1000, default 100), filtered by job '
  'type, status (1..6), dedupe key, creation time [p_created_after, p_created_before) and text in last_error '
  '(p_error, any case; read row by row, so give a status other than DONE or a creation range to keep it '
  'short on a long history). Keyset pages: pass the '
  'last job_id of a page as p_after for the next. Without payload and result (job_get has them); only the types '
  'the caller may observe.';

create or replace function pyjobq.job_cancel(p_job_ids uuid[])
returns table (job_id uuid, outcome text)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
set enable_seqscan = off
set enable_bitmapscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_count int := coalesce(cardinality(p_job_ids), 0);
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  -- Cancelling is the producers' side of a type: its enqueue privilege.
  perform pyjobq._check_privilege('enqueue', array(select distinct j.job_type::int
                                                      from pyjobq.job j
                                                     where j.job_id = any (p_job_ids)));
  -- A RUNNING job is CANCELLED at once, like a PENDING one: its holder keeps
  -- its worker id on the row but holds nothing any more, so its every later
  -- call is refused (JQ005), and job_renew_lease_many tells it at the next
  -- heartbeat (cancelled = true) to stop the handler. Rows are locked in id
  -- order, so two cancels of overlapping sets cannot deadlock.
  return query
  with input as (
    select u.id, u.ord
      from unnest(p_job_ids) with ordinality as u(id, ord)
  ), locked as materialized (
    select k.job_id, k.status
      from pyjobq.job k
     where k.job_id in (select i.id from input i)
     order by k.job_id
       for update
  ), cancelled as (
    update pyjobq.job j
       set status = 5,
           lease_until = null,
           last_error = coalesce(j.last_error, 'cancelled'),
           updated_at = v_now
      from locked l
     where j.job_id = l.job_id
       and l.status in (1, 2, 6)
    returning j.job_id, j.has_dependants
  ), audited as (
    -- One row (an aggregate), so the cross join below writes one line, and
    -- the dependants of the cancelled jobs are resolved once, together.
    select pyjobq._audit('cancel', count(*),
                         jsonb_build_object('job_ids', (array_agg(c.job_id order by c.job_id))[1:100])),
           pyjobq._resolve_parents(array_agg(c.job_id) filter (where c.has_dependants), v_now)
      from cancelled c
  )
  select i.id,
         case when l.job_id is null then 'not_found'
              when l.status in (1, 6) then 'cancelled'
              when l.status = 2 then 'cancelled_running'
              else 'finished'
         end
    from input i
    left join locked l on l.job_id = i.id
   cross join audited
   order by i.ord;
end;
$$;

comment on function pyjobq.job_cancel(uuid[]) is
  'Cancels up to 10000 jobs: PENDING, WAITING and RUNNING ones become CANCELLED (final, frees the dedupe key, '
  'redrivable, pruned like DONE); their dependants are resolved as at any end: CANCELLED in turn, unless they '
  'run on parent failure. A RUNNING job''s holder is fenced out at once (its calls get JQ005) and learns '
  'it at its next job_renew_lease_many. Returns every input id in input order with its outcome: cancelled, '
  'cancelled_running, finished (already DONE, DEAD or CANCELLED: unchanged) or not_found. A call that '
  'cancelled jobs writes a line to the audit log (job_audit) with the first 100 of their ids.';

create or replace function pyjobq.job_watch(p_job_ids uuid[])
returns table (job_id uuid, status int, status_name text)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
set enable_seqscan = off
set jit = off
as $$
declare
  v_count int := coalesce(cardinality(p_job_ids), 0);
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  perform pyjobq._check_privilege('observe', array(select distinct j.job_type::int
                                                      from pyjobq.job j
                                                     where j.job_id = any (p_job_ids)));
  update pyjobq.job j
     set notify_done = true
   where j.job_id = any (p_job_ids)
     and j.status in (1, 2, 6)
     and not j.notify_done;
  -- The status after the update: a job that already ended is not announced,
  -- so the caller reads it from here.
  return query
  select u.id, j.status::int,
         pyjobq._status_name(j.status)
    from unnest(p_job_ids) with ordinality as u(id, ord)
    left join pyjobq.job j on j.job_id = u.id
   order by u.ord;
end;
$$;

comment on function pyjobq.job_watch(uuid[]) is
  'Asks for the end (DONE, DEAD or CANCELLED) of up to 10000 jobs to be announced: NOTIFY pyjobq_done with the '
  'job id, on the commit that ends it. LISTEN pyjobq_done before calling it. Returns each input id in input order '
  'with its status now (null when there is no such job): a job that already ended is not announced.';

create or replace function pyjobq._redrive_rows(p_ids uuid[], p_now timestamptz)
returns uuid[]
language sql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  with free as (
    select distinct on (d.job_type, coalesce(d.dedupe_key, d.job_id::text)) d.job_id
      from pyjobq.job d
     where d.job_id = any (p_ids)
       and d.status in (4, 5)
       and pyjobq._tries_left(d.attempts, d.attempts, d.max_attempts) > 0
       and (d.dedupe_key is null
            or not exists (select 1
                             from pyjobq.job a
                            where a.job_type = d.job_type
                              and a.dedupe_key = d.dedupe_key
                              and a.status in (1, 2, 6)))
     order by d.job_type, coalesce(d.dedupe_key, d.job_id::text), d.updated_at, d.job_id
  ),
  moved as (
    update pyjobq.job j
       set status = 1,
           attempts_refunded = j.attempts,  -- a fresh budget; the fencing token goes on
           run_after = pyjobq._pending_from(p_now, p_now, false),  -- with its old seq
           worker_id = null,
           result = null,
           updated_at = p_now
      from free f
     where j.job_id = f.job_id
       and j.status in (4, 5)
    returning j.job_id
  )
  select coalesce(array_agg(m.job_id), '{}') from moved m
$$;

comment on function pyjobq._redrive_rows(uuid[], timestamptz) is
  'job_redrive''s update: the DEAD and CANCELLED jobs of p_ids whose dedupe key is free back to PENDING; '
  'returns their ids.';

create or replace function pyjobq.job_redrive(
  p_job_ids uuid[] default null,
  p_job_type int default null,
  p_limit int default null
)
returns table (job_id uuid)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_limit int := coalesce(p_limit, 1000);
  v_id uuid;
  v_picked uuid[];
  v_ids uuid[];
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  perform pyjobq._check_range('p_limit', v_limit, 1, 100000);
  if p_job_type is not null then
    perform pyjobq._check_job_type(p_job_type);
  end if;
  if p_job_ids is not null and cardinality(p_job_ids) > 100000 then
    raise exception 'cardinality(p_job_ids) must be between 0 and 100000'
      using errcode = '22023';
  end if;
  -- The batch is locked once, then moved in one statement. Only when a
  -- concurrent enqueue takes a key between this snapshot and the update (a
  -- unique violation) is it moved a row at a time, each row in a
  -- subtransaction of its own; a subtransaction per row on every call would
  -- overflow the subtransaction cache past 64 rows.
  -- Only jobs that can move count against the limit: a backlog of jobs whose
  -- key an active job holds must not stop every later call from reaching the
  -- rest, and of the jobs that share a key only the oldest can move (the next
  -- call may take the next), so only it is a candidate.
  select coalesce(array_agg(d.job_id order by d.updated_at, d.job_id), '{}')
    into v_picked
    from (select p.job_id, p.updated_at
            from pyjobq.job p
           where p.job_id in (select c.job_id
                                from (select e.job_id,
                                             row_number() over (
                                               partition by e.job_type, coalesce(e.dedupe_key, e.job_id::text)
                                               order by e.updated_at, e.job_id) as n
                                        from pyjobq.job e
                                       where e.status in (4, 5)
                                         and (p_job_ids is null or e.job_id = any (p_job_ids))
                                         and (p_job_type is null or e.job_type = p_job_type)
                                         and pyjobq._tries_left(e.attempts, e.attempts, e.max_attempts) > 0
                                         and (e.dedupe_key is null
                                              or not exists (select 1
                                                               from pyjobq.job a
                                                              where a.job_type = e.job_type
                                                                and a.dedupe_key = e.dedupe_key
                                                                and a.status in (1, 2, 6)))) c
                               where c.n = 1)
             and p.status in (4, 5)  -- again, on the row as it is when locked
           order by p.updated_at, p.job_id
           limit v_limit
             for update skip locked) d;
  begin
    v_ids := pyjobq._redrive_rows(v_picked, v_now);
  exception when unique_violation then
    v_ids := '{}';
    foreach v_id in array v_picked loop
      begin
        v_ids := v_ids || pyjobq._redrive_rows(array[v_id], v_now);
      exception when unique_violation then
        null;
      end;
    end loop;
  end;
  perform pyjobq._audit('redrive', cardinality(v_ids),
                        jsonb_build_object('job_ids', v_ids[1:100], 'job_type', p_job_type, 'limit', v_limit,
                                           'given', cardinality(p_job_ids)));
  return query select u.id from unnest(v_ids) as u(id);
  if cardinality(v_ids) > 0 then
    perform pg_notify('pyjobq_job', '');
  end if;
end;
$$;

comment on function pyjobq.job_redrive(uuid[], int, int) is
  'Moves DEAD and CANCELLED jobs back to PENDING, due now, with a fresh budget of max_attempts tries '
  '(attempts, the fencing token, goes on from where it was): the ids in p_job_ids, or else every DEAD or '
  'CANCELLED job (of p_job_type when given), up to p_limit (1..100000, default 1000) oldest first. A job whose '
  'dedupe key an active job holds stays where it is. The dependants that its end cancelled stay CANCELLED '
  '(redrive them too: they run at once, without waiting for their parents again). Returns the ids it moved; '
  'a call that moved jobs writes '
  'a line to the audit log (job_audit) with the first 100 of their ids.';

create or replace function pyjobq.job_prune(p_older_than interval, p_limit int default null)
returns bigint
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_limit int := coalesce(p_limit, 10000);
  v_deleted bigint;
begin
  perform pyjobq._check_range('p_limit', v_limit, 1, 100000);
  if p_older_than is null or p_older_than < interval '0' or p_older_than > interval '100 years' then
    raise exception 'p_older_than must be an interval between 0 and 100 years'
      using errcode = case when p_older_than is null then '22004' else '22023' end,
            detail = format('p_older_than was %s.', coalesce(p_older_than::text, 'null')),
            hint = 'e.g. ''7 days''.';
  end if;
  -- A parent stays while a dependant of it has yet to end: the dependant's
  -- handler reads its result. The edges go with the jobs.
  with doomed as (
    select d.job_id
      from pyjobq.job d
     where d.status in (3, 4, 5)
       and d.updated_at < v_now - p_older_than
       and not (d.has_dependants
                and exists (select from pyjobq.job_edge e
                              join pyjobq.job c on c.job_id = e.child_id
                             where e.parent_id = d.job_id
                               and c.status in (1, 2, 6)))
     limit v_limit
       for update skip locked
  ), deleted as (
    delete from pyjobq.job j
     using doomed d
     where j.job_id = d.job_id
    returning j.job_id, j.has_dependants, j.waiting_on is not null as has_parents
  ), edges_out as (
    delete from pyjobq.job_edge e using deleted x where x.has_dependants and e.parent_id = x.job_id
  ), edges_in as (
    delete from pyjobq.job_edge e using deleted x where x.has_parents and e.child_id = x.job_id
  )
  select count(*) into v_deleted from deleted;
  perform pyjobq._audit('prune', v_deleted, jsonb_build_object('older_than', p_older_than, 'limit', v_limit));
  -- A rate window with no claim for longer than any period (a day at most)
  -- counts nothing; an hour more leaves a claim that started before it alone.
  delete from pyjobq.rate_window w
   where w.claimed_at[cardinality(w.claimed_at)] < v_now - interval '25 hours';
  return v_deleted;
end;
$$;

comment on function pyjobq.job_prune(interval, int) is
  'Deletes up to p_limit (1..100000, default 10000) DONE, DEAD and CANCELLED jobs last changed more than '
  'p_older_than '
  '(0 to 100 years) ago (but not a parent with a dependant yet to end), with their dependency edges, '
  'and returns how many it deleted; call it again until it returns less than p_limit. Also drops the rate '
  'windows with no claim in the last 25 hours, which count nothing. A call that deleted jobs writes a line to '
  'the audit log (job_audit).';

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
    pyjobq.job_enqueue(int, jsonb, int, timestamptz, text, int, interval, text, jsonb, uuid[], text),
    pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int, interval, text[], jsonb, jsonb[], text)
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
  grant execute on function
    pyjobq.job_counts(),
    pyjobq.job_throughput(int),
    pyjobq.job_workers(interval)
    to pyjobq_observer, pyjobq_admin;
  -- Payloads and results are the application's data: producers read back what they
  -- enqueued, admins what they operate on; observers see figures only.
  grant execute on function pyjobq.job_get(uuid) to pyjobq_producer, pyjobq_admin;
  -- The graph around a job shows ids and statuses, no payload.
  grant execute on function pyjobq.job_dependencies(uuid) to pyjobq_producer, pyjobq_observer, pyjobq_admin;
  -- Producers cancel what they enqueued; admins anything.
  grant execute on function pyjobq.job_cancel(uuid[]) to pyjobq_producer, pyjobq_admin;
  grant execute on function pyjobq.job_watch(uuid[]) to pyjobq_producer, pyjobq_admin;
  grant execute on function
    pyjobq.job_list(int, int, text, timestamptz, timestamptz, boolean, uuid, int, text)
    to pyjobq_producer, pyjobq_admin;
  grant execute on function
    pyjobq.job_redrive(uuid[], int, int),
    pyjobq.job_audit(bigint, int),
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
  'Creates the NOLOGIN group roles pyjobq_producer (enqueue, get, dependencies, list, cancel, watch), pyjobq_worker (claim, '
  'next due, complete, fail, '
  'renew, release, reap, schedule tick), pyjobq_observer (counts, throughput, workers, dependencies) and pyjobq_admin (counts, '
  'throughput, workers, get, dependencies, list, cancel, watch, reap, redrive, prune, audit, '
  'register types, per-type grants, limits, settings, schedules) '
  'when missing and the caller may create roles, and grants each EXECUTE on its functions. Run by the '
  'installation; run it again as a role with CREATEROLE when the installing role could not create them.';


-- The functions created again, like every function of the schema, are not
-- PUBLIC's; the group roles get what grant_roles grants.
revoke all on all functions in schema pyjobq from public;

do $$
begin
  perform pyjobq.grant_roles();
end;
$$;
