-- Dependencies ----------------------------------------------------------------
--
-- A job enqueued with parents (p_depends_on) is WAITING (6) until each of them
-- has ended, then PENDING; it is never claimed before. Parents must exist at
-- its enqueue, so the graph has no cycles. Each (parent, child) pair is a row
-- of job_edge; the child's waiting_on counts the rows not yet resolved.
--
-- The cost is paid by the jobs in a graph only. A parent is marked
-- (has_dependants) when a child names it, and the transitions to DONE, DEAD
-- and CANCELLED look for dependants only among the jobs they ended that carry
-- the mark: a job without dependants costs its completion nothing but the
-- test of a boolean it already read.
--
-- Resolving a parent's end sets its unresolved edges resolved, once each (the
-- edge's row lock makes the second of two racing resolvers find none), and
-- then, in one statement per call and with the children locked in id order
-- (so two completers of parents of the same children cannot deadlock),
-- counts the children down: at 0 a child is PENDING, due now. A parent that
-- ended DEAD or CANCELLED makes the child CANCELLED, unless the child was
-- enqueued with p_on_parent_failure => 'run', which counts it as resolved like
-- DONE. A child cancelled so resolves its own dependants in turn.
--
-- An enqueue naming a parent takes no lock on it: a producer may keep its
-- transaction open for as long as it likes (a web request), and the parent's
-- holder must not wait for it. The enqueue reads its parents as its
-- statement's snapshot has them, and leaves the rest to its commit (_settle,
-- a deferred trigger): there each parent still live is locked for the
-- moment of the commit and marked (has_dependants), so that its end, whether
-- it waits for that commit or comes after, finds the new edge; and a parent
-- that ended meanwhile, whose end could not see the edge, is resolved for it
-- there and then, as its end would have done.

create function pyjobq._check_on_parent_failure(p_on_parent_failure text)
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

-- The parents of a job about to be enqueued: checked, read in one snapshot,
-- and summed up as the state the new job starts in. Those not ended are
-- listed for the commit to settle (_settle). The edges are written from this
-- read and no other: a parent that ends after it is the commit's to resolve,
-- and an edge written resolved from a later read would leave the child
-- counting a parent whose end no one counts down.
create function pyjobq._read_parents(
  p_parents uuid[],
  out waiting int,
  out failure text,
  out ids uuid[],
  out statuses smallint[]
)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_found int;
  v_wanted int := (select count(distinct u.id) from unnest(p_parents) u(id));
  v_live uuid[];
  v_types int[];
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
  -- Read again when one is missing: a job that ended into the history's
  -- default partition is in neither table for a read planned before
  -- job_history_maintain moved it to its day's partition and attached that.
  for v_try in 1 .. 3 loop
    select count(*), count(*) filter (where p.status in (1, 2, 6)),
           min(format('parent %s ended %s', p.job_id, pyjobq._status_name(p.status)))
             filter (where p.status in (4, 5)),
           array_agg(p.job_id) filter (where p.status in (1, 2, 6)),
           array_agg(p.job_id), array_agg(p.status), array_agg(distinct p.job_type::int)
      into v_found, waiting, failure, v_live, ids, statuses, v_types
      from pyjobq.job_all p
     where p.job_id = any (p_parents);
    exit when v_found >= v_wanted;
  end loop;
  -- Everything below is decided from that read, none from another.
  if v_found < v_wanted then
    v_missing := (select u.id from unnest(p_parents) u(id) where u.id <> all (coalesce(ids, '{}')) limit 1);
    raise exception 'parent job % not found', v_missing
      using errcode = 'JQ002',
            hint = 'A job can depend only on jobs that exist: enqueue the parents first (pruned jobs are gone).';
  end if;
  -- The child will see its parents' results: the caller must be allowed to see them.
  perform pyjobq._check_privilege('observe', v_types);
  perform pyjobq._settle_later(v_live);
end;
$$;

comment on function pyjobq._read_parents(uuid[]) is
  'Reads the jobs p_parents for the enqueue of their child, taking no lock: JQ002 when one does not exist, '
  '42501 when the caller may not observe one''s type. Returns how many have not ended, a text naming one '
  'that ended DEAD or CANCELLED (null when none did), and each parent''s id and status as read; lists those '
  'not ended for the commit (_settle).';

-- The parents of row p_row of job_enqueue_many: p_spec is null or a JSON
-- array of job ids (strings) and 1-based positions of earlier rows.
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

-- The edges of job_enqueue_many's rows with parents p_depends_on, whose new
-- jobs get the ids p_ids: each checked, its parent resolved to a job id (a
-- parent named twice by one row counts once), by child row then place in its
-- list. pos is the parent's row in this call, or null for a job that exists;
-- status that job's status as _read_parents read it (null for a row of this
-- call); external the existing parents, each once.
create function pyjobq._graph_edges(
  p_depends_on jsonb[],
  p_ids uuid[],
  out child int[],
  out k int[],
  out pos int[],
  out parent uuid[],
  out status smallint[],
  out external uuid[]
)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_read_ids uuid[];
  v_read_statuses smallint[];
begin
  select array_agg(e.child order by e.child, e.k), array_agg(e.k order by e.child, e.k),
         array_agg(e.pos order by e.child, e.k), array_agg(e.parent order by e.child, e.k)
    into child, k, pos, parent
    from (select distinct on (u.i, coalesce(p_ids[r.pos], r.id))
                 u.i::int as child, r.k, r.pos, coalesce(p_ids[r.pos], r.id) as parent
            from unnest(p_depends_on) with ordinality u(spec, i)
           cross join lateral pyjobq._row_parents(u.spec, u.i::int) r
           order by u.i, coalesce(p_ids[r.pos], r.id), r.k) e;
  external := array(select distinct x.id from unnest(parent, pos) x(id, pos) where x.pos is null);
  if cardinality(external) > 0 then
    select l.ids, l.statuses into v_read_ids, v_read_statuses from pyjobq._read_parents(external) l;
  end if;
  select array_agg(r.status order by x.n)
    into status
    from unnest(parent) with ordinality x(id, n)
    left join unnest(v_read_ids, v_read_statuses) r(id, status) on r.id = x.id;
end;
$$;

comment on function pyjobq._graph_edges(jsonb[], uuid[]) is
  'The edges of rows with parents p_depends_on whose new jobs get the ids p_ids, checked, by child row and '
  'place: the parent''s row in the call (pos) or existing job, its status as _read_parents read it, and the '
  'existing parents (external), each once.';

-- job_enqueue_many with parents and without keys, set-based: every row's
-- parents parsed and checked, the parents named by id locked, and each row's
-- state worked out in input order (a row naming an earlier row that is born
-- CANCELLED is cancelled in turn, or counts it as ended); then the jobs, their
-- edges and the marks of their parents are written one statement each.
create function pyjobq._enqueue_graph(
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
  select g.child, g.k, g.pos, g.parent, g.status, g.external
    into v_child, v_k, v_pos, v_parent, v_status, v_external
    from pyjobq._graph_edges(p_depends_on, v_ids) g;
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

  -- The rows in the history's column order; those born CANCELLED are history at once.
  with new_job as (
    select v_ids[i] as job_id, p_job_type::smallint as job_type,
           (case when v_cancel[i] then 5 when v_wait[i] > 0 then 6 else 1 end)::smallint as status,
           p_priority::smallint as priority, p_payloads[i] as payload, null::jsonb as result,
           null::varchar(200) as dedupe_key, 0::smallint as attempts, p_max_attempts::smallint as max_attempts,
           p_run_after as run_after, null::timestamptz as lease_until, null::varchar(80) as worker_id,
           null::timestamptz as run_started_at, v_failure[i] as last_error, p_now as created_at,
           p_now as updated_at, v_seqs[i] as seq, 0::smallint as attempts_refunded, false as notify_done,
           null::uuid as lease_token, p_concurrency_keys[i]::varchar(200) as concurrency_key,
           v_ranks[i] as fair_rank, p_metadata as metadata,
           case when v_has_parents[i] then v_wait[i] end as waiting_on,
           case when v_has_parents[i] then p_run_on_parent_failure end as run_on_parent_failure,
           v_named[i] as has_dependants, p_batch_id as batch_id
      from generate_series(1, v_count) i
  ), born_ended as (
    insert into pyjobq.job_history
    select n.* from new_job n where n.status = 5
  )
  insert into pyjobq.job
    (job_id, job_type, status, priority, payload, result, dedupe_key, attempts, max_attempts, run_after,
     lease_until, worker_id, run_started_at, last_error, created_at, updated_at, seq, attempts_refunded,
     notify_done, lease_token, concurrency_key, fair_rank, metadata, waiting_on, run_on_parent_failure,
     has_dependants, batch_id)
  select n.* from new_job n where n.status <> 5 order by n.seq;
  insert into pyjobq.job_edge (parent_id, child_id, ord, resolved)
  select v_parent[e], v_ids[v_child[e]], v_k[e], not v_active[e]
    from generate_series(1, coalesce(cardinality(v_child), 0)) e;
  if cardinality(v_external) > 0 then
    perform pyjobq._mark_parents(v_external);
  end if;
  if p_batch_id is not null then
    perform pyjobq._batch_add(p_batch_id, v_count, cardinality(array_positions(v_cancel, true)));
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

-- The mark of ended parents named by a new child (has_dependants): job_prune
-- keeps an ended one while the child has yet to end, and deletes the edges
-- with it. (A live parent is marked at the commit, by _settle.)
create function pyjobq._mark_parents(p_parents uuid[])
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  update pyjobq.job_history p
     set has_dependants = true
   where p.job_id = any (p_parents)
     and not p.has_dependants;
end;
$$;

comment on function pyjobq._mark_parents(uuid[]) is
  'Marks the ended jobs among p_parents as having dependants (has_dependants).';

-- The rows of job_edge for a new child of parents read by _read_parents,
-- resolved for those that had ended at that read.
create function pyjobq._link_parents(
  p_child uuid,
  p_parents uuid[],
  p_read_ids uuid[],
  p_read_statuses smallint[]
)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  insert into pyjobq.job_edge (parent_id, child_id, ord, resolved)
  select r.id, p_child, u.ord, r.status in (3, 4, 5)
    from (select d.id, min(d.ord)::int as ord
            from unnest(p_parents) with ordinality d(id, ord)
           group by d.id) u
    join unnest(p_read_ids, p_read_statuses) r(id, status) on r.id = u.id;
  perform pyjobq._mark_parents(p_parents);
end;
$$;

comment on function pyjobq._link_parents(uuid, uuid[], uuid[], smallint[]) is
  'Writes the job_edge rows of new job p_child for its parents p_parents, resolved for those whose status in '
  'p_read_statuses (by p_read_ids, as _read_parents read them) had ended, and marks the ended ones as having '
  'dependants.';

-- The lock order of a cascade. A completion takes the WAITING children of the
-- jobs it completes in id order, in one statement. A parent that ends DEAD
-- or CANCELLED cancels its children, whose own children then resolve, and so
-- on down: taken generation by generation, a cascade would hold a child while
-- it waits for a grandchild of smaller id (ids follow the clock, not the
-- graph) that a completion holds while it waits for that child. So a cascade
-- first takes every WAITING row it can reach, in id order, in one statement,
-- as a completion does, and then holds no row below one it waits for. (A
-- dependant enqueued between this statement and the cascade's next is taken
-- when reached; its parent's row lock keeps that window to one statement.)
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
               from pyjobq.job_all r
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

-- What follows the end of jobs that have dependants or a batch: each call
-- that ends jobs passes those it ended, once per statement. Batch rows are
-- locked after every job row the cascade locks, never before: a call
-- counting batch members and another ending their parents take their locks
-- in the same order.
create function pyjobq._ended(p_ended uuid[], p_now timestamptz, p_members boolean default true)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_ended uuid[] := p_ended;
  v_members uuid[] := case when p_members then p_ended else '{}' end;
  v_ends pyjobq.job_end[];
  v_types smallint[];
  v_type smallint;
begin
  -- A completion takes one generation, in id order (below); a failure may
  -- take several, so it takes them all first (_lock_reach).
  if exists (select from pyjobq.job_history p where p.job_id = any (p_ended) and p.status <> 3) then
    perform pyjobq._lock_reach(p_ended, false);
  end if;
  while cardinality(v_ended) > 0 loop
    with resolved as (
      update pyjobq.job_edge e
         set resolved = true
        from pyjobq.job_history p
       where e.parent_id = any (v_ended)
         and not e.resolved
         and p.job_id = e.parent_id
      returning e.child_id, e.parent_id, p.status
    ), per_child as (
      select r.child_id, count(*)::int as resolved,
             min(format('parent %s ended %s', r.parent_id, pyjobq._status_name(r.status)))
               filter (where r.status <> 3) as failure
        from resolved r
       group by r.child_id
    ), locked as materialized (
      -- Each child with what resolved for it, in one row: the statements below
      -- find each child by its key, never by walking two lists against each
      -- other (a parent of 10,000 children would make that quadratic).
      select c.job_id, n.resolved, n.failure, c.waiting_on - n.resolved as waiting,
             n.failure is not null and not c.run_on_parent_failure as cancels
        from pyjobq.job c
        join per_child n on n.child_id = c.job_id
       where c.status = 6
       order by c.job_id
         for no key update of c
    ), changed as (
      update pyjobq.job c
         set waiting_on = c.waiting_on - n.resolved,
             status = case when c.waiting_on = n.resolved then 1 else 6 end,
             run_after = case when c.waiting_on = n.resolved
                              then pyjobq._pending_from(greatest(c.run_after, p_now), p_now, false)
                              else c.run_after end,
             updated_at = p_now
        from locked n
       where c.job_id = n.job_id
         and c.status = 6
         and not n.cancels
      returning c.job_id, c.status, c.job_type
    )
    select (select array_agg(distinct ch.job_type) filter (where ch.status = 1) from changed ch),
           array(select row(n.job_id, null, null, 'cancelled', null, n.failure, null, n.waiting)::pyjobq.job_end
                   from locked n
                  where n.cancels)
      into v_types, v_ends;
    -- A parent that ended DEAD or CANCELLED ends the child CANCELLED, through
    -- the one way out; what follows its end (its dependants, its batch) is
    -- the next round's.
    select coalesce(array_agg(f.job_id) filter (where f.followed), '{}')
      into v_ended
      from pyjobq._finish(null, v_ends, p_now, '{}', false) f;
    v_members := v_members || v_ended;
    foreach v_type in array coalesce(v_types, '{}') loop
      perform pyjobq._announce(v_type, p_now, p_now);
    end loop;
  end loop;
  perform pyjobq._batch_count(v_members, p_now);
end;
$$;

comment on function pyjobq._ended(uuid[], timestamptz, boolean) is
  'Counts the jobs p_ended, which just ended (DONE, DEAD or CANCELLED), in their batches (unless p_members is '
  'false: the commit of a dependant''s enqueue resolving parents that ended before it), and resolves their '
  'edges: each WAITING child '
  'counts them down and is PENDING at 0, or CANCELLED by a parent that ended DEAD or CANCELLED unless it runs '
  'on parent failure; children so cancelled resolve their own dependants. Announces the types of the jobs '
  'made PENDING.';

-- What a child's handler reads of its parents: in job_claim's row, so that it
-- costs no second round trip, and only for jobs that have parents.
create function pyjobq._parent_results(p_job_id uuid)
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
            left join pyjobq.job_all p on p.job_id = e.parent_id
           where e.child_id = p_job_id);
end;
$$;

comment on function pyjobq._parent_results(uuid) is
  'The parents of job p_job_id in the order its enqueue named them, as a JSON array of {job_id, job_type, '
  'status, result} (status and result null for a parent since pruned); null when it has none.';

create function pyjobq.job_dependencies(p_job_id uuid)
returns table (relation text, job_id uuid, job_type int, status int, status_name text, resolved boolean)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  perform pyjobq._check_observe(p_job_id);
  return query
  select 'parent', e.parent_id, p.job_type::int, p.status::int, pyjobq._status_name(p.status), e.resolved
    from pyjobq.job_edge e
    left join pyjobq.job_all p on p.job_id = e.parent_id
   where e.child_id = p_job_id
   order by e.ord;
  return query
  select 'dependant', e.child_id, c.job_type::int, c.status::int, pyjobq._status_name(c.status), e.resolved
    from pyjobq.job_edge e
    left join pyjobq.job_all c on c.job_id = e.child_id
   where e.parent_id = p_job_id
   order by c.seq, e.child_id;
end;
$$;

comment on function pyjobq.job_dependencies(uuid) is
  'The graph around job p_job_id: its parents (relation parent, in the order its enqueue named them) and its '
  'dependants (relation dependant, in enqueue order), each with its type and status now (null once pruned) and whether '
  'the edge is resolved (the parent ended). No rows for a job without either.';
