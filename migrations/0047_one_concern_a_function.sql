-- depends: 0046_enqueue_reads_its_type_once

-- Schema 47: no function over 120 lines. job_enqueue_many's rows with parents
-- resolve their edges in _graph_edges, and job_list runs its checks in one
-- statement.

create or replace function pyjobq._graph_edges(
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

  -- The rows in the tables' column order; those born CANCELLED are history at once.
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

create or replace function pyjobq.job_list(
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
  -- The checks in one statement, in this order; a null p_status or p_job_type is every one.
  perform pyjobq._check_range('p_limit', v_limit, 1, 1000),
          pyjobq._check_range('p_status', coalesce(p_status, 1), 1, 6),
          case when p_job_type is not null then pyjobq._check_job_type(p_job_type) end,
          pyjobq._check_text('p_dedupe_key', p_dedupe_key, 200, true),
          pyjobq._check_text('p_error', p_error, 200, true);
  select r.from_id, r.to_id
    into v_from, v_to
    from pyjobq._list_range(p_created_after, p_created_before, v_oldest, p_after) r;

  -- One of three ways runs, chosen by the arguments (the others are cut off
  -- before they read a row): the statuses with few jobs (PENDING, RUNNING,
  -- WAITING, DEAD, CANCELLED: the queue's work, not its history) through their partial
  -- indexes, then sorted; DONE or any status along job_pkey in order, up to
  -- the limit. No way reads the whole history for one page.
  return query
  with matching as not materialized (
    select j.job_id, j.status, j.lease_until, j.batch_id
      from pyjobq.job_all j
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
    select m.job_id from matching m
     where p_batch_id is null and p_status = 2 and m.status = 2 and m.lease_until is not null
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
    join pyjobq.job_all j on j.job_id = p.job_id
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

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 47
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';


revoke all on all functions in schema pyjobq from public;
