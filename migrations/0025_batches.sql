-- depends: 0024_dependencies

-- Schema 25: batches.
--
-- job_batch_open returns a batch's id, job_enqueue's and job_enqueue_many's
-- p_batch_id add jobs to it, job_batch_close closes it and job_batch_get
-- shows its counts and state. Its callbacks (on success, on finish, on a dead
-- member) are enqueued exactly once. The calls that end jobs follow up the
-- ends of batch members as they do those of parents, through _ended, which
-- takes _resolve_parents' place and counts a parent's children down without a
-- plan that grows with their square. job_enqueue_many adds rows with parents
-- and without keys set-based (_enqueue_graph). job_list filters by batch;
-- job_get shows the batch and how many parents a job still waits for.

drop function pyjobq.job_enqueue(int, jsonb, int, timestamptz, text, int, interval, text, jsonb, uuid[], text);
drop function pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int, interval, text[], jsonb, jsonb[], text);
drop function pyjobq._enqueue_one(int, jsonb, int, timestamptz, text, int, timestamptz, interval, text, jsonb, uuid[], boolean);
drop function pyjobq.job_list(int, int, text, timestamptz, timestamptz, boolean, uuid, int, text);
drop function pyjobq.job_get(uuid);

-- A new column with no default: no rewrite.
alter table pyjobq.job add column batch_id uuid;

comment on column pyjobq.job.batch_id is
  'The batch the job belongs to (job_enqueue''s p_batch_id), whose counts its end updates; null: none.';

-- Batches: a counter row per batch, which each member's enqueue and end
-- update (once per call), and whose callbacks are enqueued by the call that
-- makes them due, exactly once: that call holds the row's lock and sets the
-- callback's job id, which is null until then.
create table pyjobq.job_batch (
  batch_id uuid not null default gen_random_uuid(),
  created_at timestamptz not null,
  closed_at timestamptz,
  finished_at timestamptz,
  total int not null default 0,
  done int not null default 0,
  dead int not null default 0,
  cancelled int not null default 0,
  callbacks jsonb not null default '{}',
  success_job uuid,
  finish_job uuid,
  dead_job uuid,
  constraint job_batch_pkey primary key (batch_id),
  constraint job_batch_counts check (done >= 0 and dead >= 0 and cancelled >= 0 and done + dead + cancelled <= total)
);

comment on table pyjobq.job_batch is
  'Batches of jobs: how many joined (total) and how many ended DONE, DEAD or CANCELLED; the callbacks to '
  'enqueue (on success, finish, a dead member) and the jobs enqueued for them. Written by the pyjobq functions.';

-- job_list(p_batch_id): a batch's members. Only members enter it.
create index job_batch_idx on pyjobq.job (batch_id) where batch_id is not null;

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 25
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq._check_callbacks(p_callbacks jsonb)
returns jsonb
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_key text;
  v_spec jsonb;
  v_type int;
begin
  if p_callbacks is null then
    return '{}';
  end if;
  if jsonb_typeof(p_callbacks) <> 'object' then
    raise exception 'p_callbacks must be a JSON object'
      using errcode = '22023',
            hint = 'e.g. {"success": {"job_type": 3, "payload": {"report": 7}}}; keys: success, finish, dead.';
  end if;
  for v_key, v_spec in select e.key, e.value from jsonb_each(p_callbacks) e loop
    if v_key not in ('success', 'finish', 'dead') then
      raise exception 'p_callbacks has an unknown key %', v_key
        using errcode = '22023',
              hint = 'The callbacks are success (every member DONE), finish (every member ended) and dead (a member DEAD).';
    end if;
    if jsonb_typeof(v_spec) <> 'object' or jsonb_typeof(v_spec -> 'job_type') <> 'number'
       or (v_spec ? 'payload' and jsonb_typeof(v_spec -> 'payload') <> 'object')
       or exists (select from jsonb_object_keys(v_spec) k where k not in ('job_type', 'payload')) then
      raise exception 'p_callbacks.% must be {"job_type": a type code, "payload": a JSON object}', v_key
        using errcode = '22023',
              detail = format('It was %s.', v_spec);
    end if;
    v_type := (v_spec ->> 'job_type')::numeric::int;
    perform pyjobq._check_job_type(v_type);
    perform pyjobq._check_privilege('enqueue', array[v_type]);
  end loop;
  return p_callbacks;
end;
$$;

comment on function pyjobq._check_callbacks(jsonb) is
  'Checks job_batch_open''s p_callbacks (22023 naming what is wrong, 42501 for a type the caller may not '
  'enqueue) and returns it, {} for null.';

create or replace function pyjobq.job_batch_open(p_callbacks jsonb default null)
returns uuid
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_id uuid;
begin
  insert into pyjobq.job_batch (created_at, callbacks)
  values (pyjobq.clock_now(), pyjobq._check_callbacks(p_callbacks))
  returning batch_id into v_id;
  return v_id;
end;
$$;

comment on function pyjobq.job_batch_open(jsonb) is
  'Opens a batch and returns its id (random), which job_enqueue''s p_batch_id takes until job_batch_close. '
  'p_callbacks: null or {"success" | "finish" | "dead": {"job_type": code, "payload": object}}, jobs enqueued '
  'exactly once: success when the closed batch''s members are all DONE, finish when they have all ended, dead '
  'at the first member DEAD; each payload gets "batch": {batch_id, total, done, dead, cancelled}.';

create or replace function pyjobq._batch_join(p_batch_id uuid)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_closed timestamptz;
begin
  select b.closed_at into v_closed
    from pyjobq.job_batch b
   where b.batch_id = p_batch_id
     for no key update;
  if not found then
    raise exception 'batch % not found', p_batch_id
      using errcode = 'JQ002',
            hint = 'Open one with job_batch_open; a finished batch is pruned with its jobs.';
  end if;
  if v_closed is not null then
    raise exception 'batch % is closed', p_batch_id
      using errcode = 'JQ006',
            detail = format('It was closed at %s.', v_closed),
            hint = 'Jobs join a batch between job_batch_open and job_batch_close.';
  end if;
end;
$$;

comment on function pyjobq._batch_join(uuid) is
  'Locks batch p_batch_id for an enqueue of its members: JQ002 when it does not exist, JQ006 when it is closed.';

create or replace function pyjobq._batch_add(p_batch_id uuid, p_jobs int)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_batch_id is not null and p_jobs > 0 then
    update pyjobq.job_batch b set total = b.total + p_jobs where b.batch_id = p_batch_id;
  end if;
end;
$$;

comment on function pyjobq._batch_add(uuid, int) is
  'Counts p_jobs new members of batch p_batch_id (none when it is null).';

create or replace function pyjobq._batch_callback(p_batch pyjobq.job_batch, p_which text, p_now timestamptz)
returns uuid
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_spec jsonb := p_batch.callbacks -> p_which;
  v_type int := (v_spec ->> 'job_type')::numeric::int;
begin
  return (select e.job_id
            from pyjobq._enqueue_one(
                   v_type,
                   coalesce(v_spec -> 'payload', '{}')
                     || jsonb_build_object('batch', jsonb_build_object(
                          'batch_id', p_batch.batch_id, 'total', p_batch.total, 'done', p_batch.done,
                          'dead', p_batch.dead, 'cancelled', p_batch.cancelled)),
                   100, p_now, null, pyjobq._max_attempts(v_type, null), p_now) e);
end;
$$;

comment on function pyjobq._batch_callback(pyjobq.job_batch, text, timestamptz) is
  'Enqueues the p_which callback of batch p_batch (its payload with "batch" and the counts added); its job id.';

create or replace function pyjobq._batch_fire(p_batches uuid[], p_now timestamptz)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_batch pyjobq.job_batch;
  v_finished boolean;
begin
  for v_batch in
    select b.* from pyjobq.job_batch b where b.batch_id = any (p_batches) order by b.batch_id
  loop
    v_finished := v_batch.closed_at is not null
                  and v_batch.done + v_batch.dead + v_batch.cancelled = v_batch.total;
    update pyjobq.job_batch b
       set dead_job = case when b.dead_job is null and b.dead > 0 and b.callbacks ? 'dead'
                           then pyjobq._batch_callback(v_batch, 'dead', p_now) else b.dead_job end,
           finish_job = case when b.finish_job is null and v_finished and b.callbacks ? 'finish'
                             then pyjobq._batch_callback(v_batch, 'finish', p_now) else b.finish_job end,
           success_job = case when b.success_job is null and v_finished and b.done = b.total
                                   and b.callbacks ? 'success'
                              then pyjobq._batch_callback(v_batch, 'success', p_now) else b.success_job end,
           finished_at = case when v_finished then coalesce(b.finished_at, p_now) end
     where b.batch_id = v_batch.batch_id;
    if v_finished and v_batch.finished_at is null then
      perform pg_notify('pyjobq_batch', v_batch.batch_id::text);
    end if;
  end loop;
end;
$$;

comment on function pyjobq._batch_fire(uuid[], timestamptz) is
  'For the batches p_batches, locked by the caller: enqueues each callback that is due and not yet enqueued, '
  'and marks (finished_at) and announces on pyjobq_batch a batch that finished.';

create or replace function pyjobq._batch_count(p_ids uuid[], p_now timestamptz, p_left smallint[] default null)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_sign int := case when p_left is null then 1 else -1 end;
  v_batches uuid[];
begin
  with members as (
    select j.batch_id, coalesce(u.left_as, j.status) as status
      from unnest(p_ids, p_left) u(id, left_as)
      join pyjobq.job j on j.job_id = u.id
     where j.batch_id is not null
  ), locked as materialized (
    -- In id order: two calls counting members of the same batches cannot deadlock.
    select b.batch_id
      from pyjobq.job_batch b
     where b.batch_id in (select m.batch_id from members m)
     order by b.batch_id
       for no key update
  ), counted as (
    update pyjobq.job_batch b
       set done = b.done + v_sign * m.done,
           dead = b.dead + v_sign * m.dead,
           cancelled = b.cancelled + v_sign * m.cancelled,
           finished_at = case when v_sign > 0 then b.finished_at end
      from (select m.batch_id,
                   count(*) filter (where m.status = 3)::int as done,
                   count(*) filter (where m.status = 4)::int as dead,
                   count(*) filter (where m.status = 5)::int as cancelled
              from members m
             group by m.batch_id) m, locked l
     where b.batch_id = m.batch_id
       and l.batch_id = b.batch_id
    returning b.batch_id
  )
  select array_agg(c.batch_id) into v_batches from counted c;
  if v_sign > 0 and v_batches is not null then
    perform pyjobq._batch_fire(v_batches, p_now);
  end if;
end;
$$;

comment on function pyjobq._batch_count(uuid[], timestamptz, smallint[]) is
  'Counts the jobs p_ids that just ended in their batches (DONE, DEAD or CANCELLED), and enqueues the callbacks '
  'that makes due; with p_left, the statuses redriven jobs p_ids left (paired), takes them off the counts '
  'and unfinishes their batches.';

create or replace function pyjobq.job_batch_close(p_batch_id uuid)
returns void
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
begin
  if p_batch_id is null then
    raise exception 'p_batch_id must not be null'
      using errcode = '22004',
            hint = 'Pass the id job_batch_open returned.';
  end if;
  update pyjobq.job_batch b
     set closed_at = coalesce(b.closed_at, v_now)
   where b.batch_id = p_batch_id;
  if not found then
    raise exception 'batch % not found', p_batch_id
      using errcode = 'JQ002';
  end if;
  perform pyjobq._batch_fire(array[p_batch_id], v_now);
end;
$$;

comment on function pyjobq.job_batch_close(uuid) is
  'Closes batch p_batch_id: no job joins it any more (JQ006), and once its members have all ended it is '
  'finished (at once when they have), its callbacks enqueued. Closing a closed batch changes nothing. JQ002 '
  'when there is no such batch.';

create or replace function pyjobq.job_batch_get(p_batch_id uuid)
returns table (
  batch_id uuid,
  state text,
  total int,
  active int,
  done int,
  dead int,
  cancelled int,
  created_at timestamptz,
  closed_at timestamptz,
  finished_at timestamptz,
  success_job uuid,
  finish_job uuid,
  dead_job uuid
)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_batch_id is null then
    raise exception 'p_batch_id must not be null'
      using errcode = '22004',
            hint = 'Pass the id job_batch_open returned.';
  end if;
  return query
  select b.batch_id,
         case when b.finished_at is not null then 'finished'
              when b.closed_at is not null then 'closed'
              else 'open' end,
         b.total, b.total - b.done - b.dead - b.cancelled, b.done, b.dead, b.cancelled,
         b.created_at, b.closed_at, b.finished_at, b.success_job, b.finish_job, b.dead_job
    from pyjobq.job_batch b
   where b.batch_id = p_batch_id;
end;
$$;

comment on function pyjobq.job_batch_get(uuid) is
  'Batch p_batch_id: its state (open, closed, finished: closed with every member ended), how many jobs joined '
  '(total), how many have yet to end (active) and how many ended DONE, DEAD and CANCELLED, and the callback '
  'jobs enqueued so far. No row when there is no such batch.';

-- A row's parents come back as positions and ids, and rows with parents but
-- no keys are enqueued set-based.
drop function pyjobq._row_parents(jsonb, int, uuid[]);

create function pyjobq._row_parents(p_spec jsonb, p_row int)
returns table (k int, pos int, id uuid)
language plpgsql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_item jsonb;
  v_k int := 0;
begin
  if p_spec is null or jsonb_typeof(p_spec) = 'null' then
    return;
  end if;
  if jsonb_typeof(p_spec) <> 'array' then
    raise exception 'p_depends_on[%] must be null or a JSON array', p_row
      using errcode = '22023',
            hint = 'e.g. ''["0190a0b1-...", 1]'': job ids, and positions of earlier payloads of the call.';
  end if;
  for v_item in select a.item from jsonb_array_elements(p_spec) a(item) loop
    v_k := v_k + 1;
    k := v_k;
    if jsonb_typeof(v_item) = 'number' and v_item::numeric = floor(v_item::numeric)
       and v_item::numeric between 1 and p_row - 1 then
      pos := v_item::int;
      id := null;
    elsif jsonb_typeof(v_item) = 'string' and (v_item #>> '{}') ~* '^[0-9a-f]{8}-?([0-9a-f]{4}-?){3}[0-9a-f]{12}$' then
      pos := null;
      id := (v_item #>> '{}')::uuid;
    else
      raise exception 'p_depends_on[%] must hold job ids and positions of earlier rows (1 to %)', p_row, p_row - 1
        using errcode = '22023',
              detail = format('It held %s.', v_item),
              hint = 'A row may depend on the rows before it in the same call, by their 1-based position.';
    end if;
    return next;
  end loop;
end;
$$;

comment on function pyjobq._row_parents(jsonb, int) is
  'The parents of row p_row of job_enqueue_many from p_spec (null, JSON null, or a JSON array of job ids and of '
  'positions 1..p_row - 1 of earlier rows), in order: each a position (pos) or a job id; 22023 for anything else.';

create or replace function pyjobq._enqueue_graph(
  p_job_type int,
  p_payloads jsonb[],
  p_priority int,
  p_run_after timestamptz,
  p_max_attempts int,
  p_now timestamptz,
  p_concurrency_keys text[],
  p_metadata jsonb,
  p_depends_on jsonb[],
  p_run_on_parent_failure boolean,
  p_batch_id uuid
)
returns table (ord int, job_id uuid, created boolean)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_count int := cardinality(p_payloads);
  v_ids uuid[];
  v_seqs bigint[];
  v_ranks bigint[];
  v_child int[];      -- the edges, by child row then place in its list
  v_k int[];
  v_pos int[];
  v_parent uuid[];
  v_status smallint[];
  v_external uuid[];
  v_has_parents boolean[] := array_fill(false, array[v_count]);
  v_cancel boolean[] := array_fill(false, array[v_count]);
  v_named boolean[] := array_fill(false, array[v_count]);
  v_wait int[] := array_fill(0, array[v_count]);
  v_failure text[] := array_fill(null::text, array[v_count]);
  v_active boolean[];
  v_e int;
  v_c int;
  v_failed boolean;
begin
  select array_agg(n.seq order by n.seq), array_agg(n.job_id order by n.seq)
    into v_seqs, v_ids
    from pyjobq._new_job_ids(p_now, v_count) n;
  -- Every edge, checked, its parent resolved to a job id; a parent named twice by
  -- one row counts once.
  select array_agg(e.child order by e.child, e.k), array_agg(e.k order by e.child, e.k),
         array_agg(e.pos order by e.child, e.k), array_agg(e.parent order by e.child, e.k)
    into v_child, v_k, v_pos, v_parent
    from (select distinct on (u.i, coalesce(v_ids[r.pos], r.id))
                 u.i::int as child, r.k, r.pos, coalesce(v_ids[r.pos], r.id) as parent
            from unnest(p_depends_on) with ordinality u(spec, i)
           cross join lateral pyjobq._row_parents(u.spec, u.i::int) r
           order by u.i, coalesce(v_ids[r.pos], r.id), r.k) e;
  v_external := array(select distinct x.id from unnest(v_parent, v_pos) x(id, pos) where x.pos is null);
  if cardinality(v_external) > 0 then
    perform pyjobq._lock_parents(v_external);
  end if;
  select array_agg(j.status order by x.n)
    into v_status
    from unnest(v_parent) with ordinality x(id, n)
    left join pyjobq.job j on j.job_id = x.id;
  v_active := array_fill(false, array[coalesce(cardinality(v_child), 0)]);
  for v_e in 1 .. coalesce(cardinality(v_child), 0) loop
    v_c := v_child[v_e];
    v_has_parents[v_c] := true;
    if v_pos[v_e] is not null then
      v_named[v_pos[v_e]] := true;
      v_failed := v_cancel[v_pos[v_e]];
      v_active[v_e] := not v_failed;
      if v_failed then
        v_status[v_e] := 5;
      end if;
    else
      v_failed := v_status[v_e] in (4, 5);
      v_active[v_e] := v_status[v_e] in (1, 2, 6);
    end if;
    if v_failed and not p_run_on_parent_failure and not v_cancel[v_c] then
      v_cancel[v_c] := true;
      v_failure[v_c] := format('parent %s ended %s', v_parent[v_e], pyjobq._status_name(v_status[v_e]));
    end if;
    if v_active[v_e] then
      v_wait[v_c] := v_wait[v_c] + 1;
    end if;
  end loop;
  v_ranks := pyjobq._fair_ranks(p_job_type, p_priority, p_concurrency_keys, v_count, p_now);

  insert into pyjobq.job
    (job_id, seq, job_type, status, payload, priority, run_after, max_attempts, created_at, updated_at,
     concurrency_key, fair_rank, metadata, waiting_on, run_on_parent_failure, last_error, batch_id, has_dependants)
  select v_ids[i], v_seqs[i], p_job_type,
         case when v_cancel[i] then 5 when v_wait[i] > 0 then 6 else 1 end,
         p_payloads[i], p_priority, p_run_after, p_max_attempts, p_now, p_now,
         p_concurrency_keys[i], v_ranks[i], p_metadata,
         case when v_has_parents[i] then v_wait[i] end,
         case when v_has_parents[i] then p_run_on_parent_failure end,
         v_failure[i], p_batch_id, v_named[i]
    from generate_series(1, v_count) i
   order by i;
  insert into pyjobq.job_edge (parent_id, child_id, ord, resolved)
  select v_parent[e], v_ids[v_child[e]], v_k[e], not v_active[e]
    from generate_series(1, coalesce(cardinality(v_child), 0)) e;
  if cardinality(v_external) > 0 then
    update pyjobq.job p
       set has_dependants = true
     where p.job_id = any (v_external)
       and not p.has_dependants;
  end if;
  if p_batch_id is not null then
    perform pyjobq._batch_add(p_batch_id, v_count);
    if true = any (v_cancel) then
      perform pyjobq._batch_count(array(select v_ids[i] from generate_series(1, v_count) i where v_cancel[i]), p_now);
    end if;
  end if;
  if exists (select from generate_series(1, v_count) i where not v_cancel[i] and v_wait[i] = 0) then
    perform pyjobq._pending_from(p_run_after, p_now, true);
    perform pyjobq._announce(p_job_type, p_run_after, p_now);
  end if;
  return query select i, v_ids[i], true from generate_series(1, v_count) i order by i;
end;
$$;

comment on function pyjobq._enqueue_graph(int, jsonb[], int, timestamptz, int, timestamptz, text[], jsonb, jsonb[], boolean, uuid) is
  'job_enqueue_many''s rows with parents p_depends_on (and no dedupe keys), checked, written in one statement '
  'each for the jobs, their edges and their parents'' marks: WAITING, PENDING or CANCELLED at birth as '
  'job_enqueue makes each. Returns every row, created.';


-- A child's parents read through their index whatever the statistics say.
create or replace function pyjobq._parent_results(p_job_id uuid)
returns jsonb
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
-- The child's edges through job_edge_child_idx whatever the statistics say: a
-- plan made while job_edge was small would read all of it for every child.
set enable_seqscan = off
set enable_bitmapscan = off
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

-- The lock order of a cascade: every WAITING row it can reach, in id order,
-- in one statement, as a completion takes a generation (see sql/).
create function pyjobq._lock_reach(p_jobs uuid[], p_cancelling boolean)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  perform
    from pyjobq.job j
   where j.job_id in (
           with recursive reach (job_id, root, cancels) as (
             select r.job_id, true, p_cancelling or r.status in (4, 5)
               from pyjobq.job r
              where r.job_id = any (p_jobs)
             union
             select c.job_id, false, r.cancels and not c.run_on_parent_failure
               from reach r
               join pyjobq.job_edge e on e.parent_id = r.job_id and not e.resolved
               join pyjobq.job c on c.job_id = e.child_id
              where (r.root or r.cancels)
                and c.status = 6
           )
           select r.job_id from reach r)
     and j.status = 6
   order by j.job_id
     for no key update;
end;
$$;

comment on function pyjobq._lock_reach(uuid[], boolean) is
  'Locks, in id order, the WAITING jobs among p_jobs and every WAITING job their ends can reach: their '
  'children, and the children of each child a failed parent cancels, and so on down. p_jobs end CANCELLED '
  'when p_cancelling, else as their status says (DEAD and CANCELLED cascade, DONE does not).';

create or replace function pyjobq._ended(p_ended uuid[], p_now timestamptz)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_ended uuid[] := p_ended;
  v_members uuid[] := p_ended;
  v_cancelled uuid[];
  v_types smallint[];
  v_type smallint;
begin
  -- A completion takes one generation, in id order (below); a failure may
  -- take several, so it takes them all first (_lock_reach).
  if exists (select from pyjobq.job p where p.job_id = any (p_ended) and p.status <> 3) then
    perform pyjobq._lock_reach(p_ended, false);
  end if;
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
      -- Each child with what resolved for it, in one row: the update below
      -- finds each child by its key, never by walking two lists against each
      -- other (a parent of 10,000 children would make that quadratic).
      select c.job_id, n.resolved, n.failure
        from pyjobq.job c
        join per_child n on n.child_id = c.job_id
       where c.status = 6
       order by c.job_id
         for no key update of c
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
        from locked n
       where c.job_id = n.job_id
         and c.status = 6
      returning c.job_id, c.status, c.job_type, c.has_dependants, c.batch_id
    )
    select array_agg(ch.job_id) filter (where ch.status = 5 and ch.has_dependants),
           array_agg(ch.job_id) filter (where ch.status = 5 and ch.batch_id is not null),
           array_agg(distinct ch.job_type) filter (where ch.status = 1)
      into v_ended, v_cancelled, v_types
      from changed ch;
    v_members := v_members || v_cancelled;
    foreach v_type in array coalesce(v_types, '{}') loop
      perform pyjobq._announce(v_type, p_now, p_now);
    end loop;
  end loop;
  perform pyjobq._batch_count(v_members, p_now);
end;
$$;

comment on function pyjobq._ended(uuid[], timestamptz) is
  'Counts the jobs p_ended, which just ended (DONE, DEAD or CANCELLED), in their batches, and resolves their '
  'edges: each WAITING child '
  'counts them down and is PENDING at 0, or CANCELLED by a parent that ended DEAD or CANCELLED unless it runs '
  'on parent failure; children so cancelled resolve their own dependants. Announces the types of the jobs '
  'made PENDING.';

-- The active holder of a type's dedupe key, as the enqueues look it up.
create function pyjobq._active_holder(p_job_type int, p_dedupe_key text)
returns uuid
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  return (select a.job_id
            from pyjobq.job a
           where a.job_type = p_job_type and a.dedupe_key = p_dedupe_key and a.status in (1, 2, 6));
end;
$$;

comment on function pyjobq._active_holder(int, text) is
  'The id of the PENDING, RUNNING or WAITING job of type p_job_type holding dedupe key p_dedupe_key; null: none.';

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
  v_id uuid;
  v_ended uuid;
  v_status smallint := 1;
  v_waiting int;
  v_failure text;
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
    select l.waiting, l.failure into v_waiting, v_failure from pyjobq._lock_parents(p_parents) l;
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
    select n.seq, n.job_id into v_seq, v_new_id from pyjobq._new_job_ids(p_now, 1) n;
    insert into pyjobq.job as j
      (job_id, seq, job_type, status, payload, priority, run_after, dedupe_key, max_attempts, created_at, updated_at,
       concurrency_key, fair_rank, metadata, waiting_on, run_on_parent_failure, last_error, batch_id)
    values
      (v_new_id, v_seq, p_job_type, v_status, p_payload, p_priority, p_run_after, p_dedupe_key, p_max_attempts, p_now,
       p_now, p_concurrency_key,
       (pyjobq._fair_ranks(p_job_type, p_priority, array[p_concurrency_key], 1, p_now))[1],
       p_metadata, v_waiting, case when p_parents is not null then p_run_on_parent_failure end,
       case when v_status = 5 then v_failure end, p_batch_id)
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
      if p_batch_id is not null then
        perform pyjobq._batch_add(p_batch_id, 1);
        if v_status = 5 then
          perform pyjobq._batch_count(array[v_id], p_now);  -- born CANCELLED: it ended
        end if;
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
  -- Job rows before the batch row, as every call takes them (see _ended).
  if p_batch_id is not null then
    if p_depends_on is not null then
      perform pyjobq._lock_parents(p_depends_on);
    end if;
    perform pyjobq._batch_join(p_batch_id);
  end if;

  return query
    select e.job_id, e.created
      from pyjobq._enqueue_one(p_job_type, v_payload, v_priority, v_run_after, p_dedupe_key, v_max_attempts, v_now,
                               p_unique_for, p_concurrency_key, p_metadata,
                               pyjobq._check_array('p_depends_on', p_depends_on), v_run_on_parent_failure,
                               p_batch_id) e;
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
  'Notifies channel pyjobq_job on commit with the job type, and @run_after (seconds since 1970) when the job '
  'becomes due later.';

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
  v_ranks bigint[];
  v_run_on_parent_failure boolean := pyjobq._check_on_parent_failure(p_on_parent_failure);
  v_ids uuid[] := '{}';
  v_added int := 0;
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
  -- Job rows before the batch row, as every call takes them (see _ended): the
  -- parents named by id, then the batch.
  if p_batch_id is not null then
    if p_depends_on is not null then
      perform pyjobq._lock_parents(array(
        select distinct r.id
          from unnest(p_depends_on) with ordinality d(spec, i)
         cross join lateral pyjobq._row_parents(d.spec, d.i::int) r
         where r.id is not null));
    end if;
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
         fair_rank, metadata, batch_id)
      select i.new_id, i.seq, p_job_type, i.payload, v_priority, v_run_after, v_max_attempts, v_now, v_now,
             p_concurrency_keys[i.ord], v_ranks[i.ord], p_metadata, p_batch_id
        from input i
       order by i.ord
    )
    select i.ord, i.new_id, true
      from input i
     order by i.ord;
    perform pyjobq._batch_add(p_batch_id, v_count);
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
         concurrency_key, fair_rank, metadata, batch_id)
      select i.new_id, i.seq, p_job_type, i.payload, v_priority, v_run_after, i.dedupe_key, v_max_attempts, v_now, v_now,
             p_concurrency_keys[i.ord], v_ranks[i.ord], p_metadata, p_batch_id
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
    if created then
      v_added := v_added + 1;
    end if;
    if job_id is null then
      -- The active job holding this key finished while we inserted.
      select e.job_id, e.created into job_id, created
        from pyjobq._enqueue_one(p_job_type, p_payloads[ord], v_priority, v_run_after,
                                 v_row.dedupe_key, v_max_attempts, v_now, null, p_concurrency_keys[ord],
                                 p_metadata, null, null, p_batch_id) e;
    end if;
    return next;
  end loop;
  perform pyjobq._batch_add(p_batch_id, v_added);
  perform pyjobq._announce(p_job_type, v_run_after, v_now);
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
  v_followed boolean;
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
  returning j.job_type, j.has_dependants or j.batch_id is not null into v_job_type, v_followed;
  if not found then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt, p_lease_token);
  end if;
  perform pyjobq._stat_add(v_now, p_worker_id, array[v_job_type], array[3::smallint]);
  if v_followed then
    perform pyjobq._ended(array[p_job_id], v_now);
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
    returning j.job_id, j.attempts, j.job_type, j.has_dependants or j.batch_id is not null as followed
  ), counted as (
    -- One row (an aggregate), so the cross join below records the batch once,
    -- and follows up the ends of parents and batch members together (none: no call).
    select pyjobq._stat_add(v_now, p_worker_id, array_agg(d.job_type), array_agg(3::smallint)),
           case when bool_or(d.followed)
                then pyjobq._ended(array_agg(d.job_id) filter (where d.followed), v_now) end
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
  v_followed boolean;
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
  returning j.status::int, j.run_after, j.job_type, j.has_dependants or j.batch_id is not null
       into status, run_after, v_job_type, v_followed;
  if not found then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt, p_lease_token);
  end if;
  perform pyjobq._stat_add(v_now, p_worker_id, array[v_job_type::smallint], array[status::smallint]);
  if status = 4 and v_followed then
    perform pyjobq._ended(array[p_job_id], v_now);
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
      returning j.job_id, j.attempts as attempt, j.status, j.has_dependants or j.batch_id is not null as followed
    ), resolved as (
      -- A job released DEAD ends: its end is followed up (one row, one call).
      select case when bool_or(g.status = 4 and g.followed)
                  then pyjobq._ended(array_agg(g.job_id) filter (where g.status = 4 and g.followed), v_now) end
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
    returning j.job_id, j.job_type, j.status, j.run_after, j.has_dependants or j.batch_id is not null as followed
  ), counted as (
    select pyjobq._stat_add(v_now, null, array_agg(r.job_type), array_agg(r.status)),
           case when bool_or(r.status = 4 and r.followed)
                then pyjobq._ended(array_agg(r.job_id) filter (where r.status = 4 and r.followed), v_now) end
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

create function pyjobq.job_get(p_job_id uuid)
returns table (
  job_id uuid,
  job_type int,
  job_type_name text,
  status int,
  status_name text,
  priority int,
  attempts int,
  max_attempts int,
  payload jsonb,
  result jsonb,
  last_error text,
  dedupe_key text,
  run_after timestamptz,
  lease_until timestamptz,
  worker_id text,
  run_started_at timestamptz,
  finished_at timestamptz,
  created_at timestamptz,
  updated_at timestamptz,
  metadata jsonb,
  waiting_on int,
  batch_id uuid
)
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
  -- No job is an empty result, not an error: a pruned job is simply gone.
  return query
  select j.job_id, j.job_type::int, t.name::text, j.status::int,
         pyjobq._status_name(j.status),
         j.priority::int, j.attempts::int, j.max_attempts::int, j.payload, j.result, j.last_error,
         j.dedupe_key::text, j.run_after, j.lease_until, j.worker_id::text, j.run_started_at,
         case when j.status in (3, 4, 5) then j.updated_at end, j.created_at, j.updated_at, j.metadata,
         j.waiting_on, j.batch_id
    from pyjobq.job j
    join pyjobq.job_type t on t.job_type = j.job_type
   where j.job_id = p_job_id;
end;
$$;

comment on function pyjobq.job_get(uuid) is
  'One job as a person needs it to see what happened: type, status, priority, attempts, payload, result, '
  'last_error, dedupe key, run_after, its lease and worker while RUNNING, when its last attempt started '
  '(run_started_at) and when it ended (DONE, DEAD or CANCELLED), the metadata of its enqueue, how many parents it '
  'still waits for (waiting_on; null without parents: job_dependencies lists them) and its batch. No row when there is no such job (never enqueued, '
  'or pruned).';

create function pyjobq.job_list(
  p_job_type int default null,
  p_status int default null,
  p_dedupe_key text default null,
  p_created_after timestamptz default null,
  p_created_before timestamptz default null,
  p_oldest_first boolean default null,
  p_after uuid default null,
  p_limit int default null,
  p_error text default null,
  p_batch_id uuid default null
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
    select j.job_id, j.status, j.lease_until, j.batch_id
      from pyjobq.job j
     where (p_job_type is null or j.job_type = p_job_type)
       and (p_dedupe_key is null or j.dedupe_key = p_dedupe_key)
       and (p_error is null or strpos(lower(j.last_error), lower(p_error)) > 0)
       and (p_batch_id is null or j.batch_id = p_batch_id)
       and j.job_type <> all (v_denied)
  ), few as materialized (
    -- Every job of the status, through its partial index, before any limit or
    -- id range could tempt the planner into walking job_pkey instead (as it
    -- would on a table never analyzed, where rows look common); or every
    -- member of the batch, through job_batch_idx.
    select m.job_id from matching m where p_batch_id is null and p_status = 1 and m.status = 1
    union all
    select m.job_id from matching m where p_batch_id is null and p_status = 2 and m.lease_until is not null
    union all
    select m.job_id from matching m where p_batch_id is null and p_status = 6 and m.status = 6
    union all
    select m.job_id from matching m
     where p_batch_id is null and p_status in (4, 5) and m.status in (4, 5) and m.status = p_status
    union all
    select m.job_id from matching m
     where p_batch_id is not null and m.batch_id is not null and m.status = coalesce(p_status, m.status)
  ), ranged as not materialized (
    select m.job_id, m.status
      from matching m
     where p_batch_id is null
       and m.job_id >= v_from and m.job_id < v_to and m.job_id is distinct from p_after
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

comment on function pyjobq.job_list(int, int, text, timestamptz, timestamptz, boolean, uuid, int, text, uuid) is
  'Lists jobs newest first (or oldest, p_oldest_first), up to p_limit (1..1000, default 100), filtered by job '
  'type, status (1..6), dedupe key, creation time [p_created_after, p_created_before), batch (p_batch_id) and text in last_error '
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
  -- order, so two cancels of overlapping sets cannot deadlock; WAITING jobs
  -- last, as a completion takes them (after the parents it ends), so that a
  -- cancel holding a child never waits for a parent whose completer waits
  -- for that child; and the WAITING ones together with every WAITING job
  -- the cancel reaches below them, in one statement (see _lock_reach).
  perform
    from pyjobq.job k
   where k.job_id = any (p_job_ids)
     and k.status <> 6
   order by k.job_id
     for no key update;
  perform pyjobq._lock_reach(p_job_ids, true);
  return query
  with input as (
    select u.id, u.ord
      from unnest(p_job_ids) with ordinality as u(id, ord)
  ), locked as materialized (
    select k.job_id, k.status
      from pyjobq.job k
     where k.job_id in (select i.id from input i)
     order by k.status = 6, k.job_id
       for no key update
  ), cancelled as (
    update pyjobq.job j
       set status = 5,
           lease_until = null,
           last_error = coalesce(j.last_error, 'cancelled'),
           updated_at = v_now
      from locked l
     where j.job_id = l.job_id
       and l.status in (1, 2, 6)
    returning j.job_id, j.has_dependants or j.batch_id is not null as followed
  ), audited as (
    -- One row (an aggregate), so the cross join below writes one line, and
    -- the ends of the cancelled jobs are followed up once, together.
    select pyjobq._audit('cancel', count(*),
                         jsonb_build_object('job_ids', (array_agg(c.job_id order by c.job_id))[1:100])),
           pyjobq._ended(array_agg(c.job_id) filter (where c.followed), v_now)
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
  v_statuses smallint[];
  v_ids uuid[];
  v_moved uuid[];
  v_left smallint[];
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
  select coalesce(array_agg(d.job_id order by d.updated_at, d.job_id), '{}'),
         coalesce(array_agg(d.status order by d.updated_at, d.job_id), '{}')
    into v_picked, v_statuses
    from (select p.job_id, p.updated_at, p.status
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
  -- The moved ones come off their batches' counts, as the statuses they left.
  select array_agg(u.id), array_agg(u.status)
    into v_moved, v_left
    from unnest(v_picked, v_statuses) u(id, status)
   where u.id = any (v_ids);
  perform pyjobq._batch_count(v_moved, v_now, v_left);
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
  -- A finished batch goes once its members have.
  delete from pyjobq.job_batch b
   where b.finished_at < v_now - p_older_than
     and not exists (select from pyjobq.job j where j.batch_id = b.batch_id);
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
  '(0 to 100 years) ago (but not a parent with a dependant yet to end), with their dependency edges, and the '
  'batches finished as long ago whose jobs are all gone, '
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
    pyjobq.job_enqueue(int, jsonb, int, timestamptz, text, int, interval, text, jsonb, uuid[], text, uuid),
    pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int, interval, text[], jsonb, jsonb[], text, uuid),
    pyjobq.job_batch_open(jsonb),
    pyjobq.job_batch_close(uuid)
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
  grant execute on function pyjobq.job_batch_get(uuid) to pyjobq_producer, pyjobq_observer, pyjobq_admin;
  -- Producers cancel what they enqueued; admins anything.
  grant execute on function pyjobq.job_cancel(uuid[]) to pyjobq_producer, pyjobq_admin;
  grant execute on function pyjobq.job_watch(uuid[]) to pyjobq_producer, pyjobq_admin;
  grant execute on function
    pyjobq.job_list(int, int, text, timestamptz, timestamptz, boolean, uuid, int, text, uuid)
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
  'Creates the NOLOGIN group roles pyjobq_producer (enqueue, batches, get, dependencies, list, cancel, watch), pyjobq_worker (claim, '
  'next due, complete, fail, '
  'renew, release, reap, schedule tick), pyjobq_observer (counts, throughput, workers, dependencies, batch get) and pyjobq_admin (counts, '
  'throughput, workers, get, dependencies, batch get, list, cancel, watch, reap, redrive, prune, audit, '
  'register types, per-type grants, limits, settings, schedules) '
  'when missing and the caller may create roles, and grants each EXECUTE on its functions. Run by the '
  'installation; run it again as a role with CREATEROLE when the installing role could not create them.';


-- Replaced by _ended, which follows up batch members as well as parents.
drop function pyjobq._resolve_parents(uuid[], timestamptz);

-- The functions created again, like every function of the schema, are not
-- PUBLIC's; the group roles get what grant_roles grants.
revoke all on all functions in schema pyjobq from public;

do $$
begin
  perform pyjobq.grant_roles();
end;
$$;
