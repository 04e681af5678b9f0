-- depends: 0037_smaller_pieces

-- Schema 38: an enqueue writes its child's edges from the one read of its
-- parents that counted what the child waits for. The edges were written from
-- a later read, so a parent that ended in between was counted as awaited and
-- its edge written resolved: no end counted it down, and the child stayed
-- WAITING. And a parent that ends before the enqueue's commit is marked at
-- the commit (has_dependants), so that job_prune keeps it while the child has
-- yet to end.

drop function pyjobq._link_parents(uuid, uuid[]);
drop function pyjobq._read_parents(uuid[]);

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
           array_agg(p.job_id), array_agg(p.status)
      into v_found, waiting, failure, v_live, ids, statuses
      from pyjobq.job_all p
     where p.job_id = any (p_parents);
    exit when v_found >= v_wanted;
  end loop;
  if v_found < v_wanted then
    select u.id into v_missing
      from unnest(p_parents) u(id)
     where not exists (select from pyjobq.job_all p where p.job_id = u.id)
     limit 1;
    raise exception 'parent job % not found', v_missing
      using errcode = 'JQ002',
            hint = 'A job can depend only on jobs that exist: enqueue the parents first (pruned jobs are gone).';
  end if;
  -- The child will see its parents' results: the caller must be allowed to see them.
  perform pyjobq._check_privilege('observe', array(select distinct p.job_type::int
                                                      from pyjobq.job_all p
                                                     where p.job_id = any (p_parents)));
  perform pyjobq._settle_later('pyjobq.settle_parents', v_live);
end;
$$;

comment on function pyjobq._read_parents(uuid[]) is
  'Reads the jobs p_parents for the enqueue of their child, taking no lock: JQ002 when one does not exist, '
  '42501 when the caller may not observe one''s type. Returns how many have not ended, a text naming one '
  'that ended DEAD or CANCELLED (null when none did), and each parent''s id and status as read; lists those '
  'not ended for the commit (_settle).';

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
    select n.seq, n.job_id into v_seq, v_new_id from pyjobq._new_job_ids(p_now, 1) n;
    -- The row in the tables' column order; born CANCELLED, it is history at once.
    with new_job as (
      select v_new_id as job_id, p_job_type::smallint as job_type, v_status as status,
             p_priority::smallint as priority, p_payload as payload, null::jsonb as result,
             p_dedupe_key::varchar(200) as dedupe_key, 0::smallint as attempts,
             p_max_attempts::smallint as max_attempts, p_run_after as run_after, null::timestamptz as lease_until,
             null::varchar(80) as worker_id, null::timestamptz as run_started_at,
             case when v_status = 5 then v_failure end as last_error, p_now as created_at, p_now as updated_at,
             v_seq as seq, 0::smallint as attempts_refunded, false as notify_done, null::uuid as lease_token,
             p_concurrency_key::varchar(200) as concurrency_key,
             (pyjobq._fair_ranks(p_job_type, p_priority, array[p_concurrency_key], 1, p_now))[1] as fair_rank,
             p_metadata as metadata, v_waiting as waiting_on,
             case when p_parents is not null then p_run_on_parent_failure end as run_on_parent_failure,
             false as has_dependants, p_batch_id as batch_id
    ), born_ended as (
      insert into pyjobq.job_history
      select n.* from new_job n where n.status = 5
    )
    insert into pyjobq.job as j
    select n.* from new_job n where n.status <> 5
    on conflict (job_type, dedupe_key) where status in (1, 2, 6) and dedupe_key is not null do nothing
    returning j.job_id into v_id;
    if v_status = 5 then
      v_id := v_new_id;
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
  v_read_ids uuid[];
  v_read_statuses smallint[];
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
    select l.ids, l.statuses into v_read_ids, v_read_statuses from pyjobq._read_parents(v_external) l;
  end if;
  select array_agg(r.status order by x.n)
    into v_status
    from unnest(v_parent) with ordinality x(id, n)
    left join unnest(v_read_ids, v_read_statuses) r(id, status) on r.id = x.id;
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

create or replace function pyjobq._settle()
returns trigger
language plpgsql
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_parents uuid[] := pyjobq._settle_list('pyjobq.settle_parents');
  v_ended uuid[];
begin
  if v_parents = '{}' then
    return null;
  end if;
  perform set_config('pyjobq.settle_parents', '', true);
  -- In id order, as every call takes job rows; this waits only for a call
  -- ending one of them, never for a producer.
  perform from pyjobq.job p where p.job_id = any (v_parents) order by p.job_id for no key update;
  update pyjobq.job p
     set has_dependants = true
   where p.job_id = any (v_parents)
     and not p.has_dependants;
  -- Those that ended since the enqueue read them: their edges from this
  -- transaction are unresolved (no other edge of an ended job is).
  v_ended := array(select h.job_id
                     from pyjobq.job_history h
                    where h.job_id = any (v_parents)
                      and exists (select from pyjobq.job_edge e where e.parent_id = h.job_id and not e.resolved));
  if v_ended <> '{}' then
    perform pyjobq._mark_parents(v_ended);
    perform pyjobq._ended(v_ended, pyjobq.clock_now(), false);
  end if;
  return null;
end;
$$;

comment on function pyjobq._settle() is
  'The commit of an enqueue with parents (a deferred trigger): locks and marks the parents it found live; of '
  'those that ended since, marks them too and resolves their edges.';


create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 38
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';


revoke all on all functions in schema pyjobq from public;
