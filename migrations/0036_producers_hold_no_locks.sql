-- depends: 0035_one_way_in

-- Schema 36: a producer holds no lock a worker waits for. An enqueue naming
-- a parent no longer locks it: what that lock held until the commit is done
-- at the commit, by a deferred trigger on the new edges (_settle): the
-- parents still live are locked for that moment and marked, and those that
-- ended meanwhile are resolved for the new child. An enqueue into a batch
-- takes the batch row FOR KEY SHARE, which the counting of members' ends
-- does not conflict with (and job_batch_close, FOR UPDATE, does), and counts
-- its jobs in a row of their own (job_batch_join), folded into the batch's
-- counts by the next call that holds the batch row.

create table pyjobq.job_batch_join (
  batch_id uuid not null,
  total int not null,
  cancelled int not null
);

create index job_batch_join_idx on pyjobq.job_batch_join (batch_id);

comment on table pyjobq.job_batch_join is
  'Jobs that joined a batch (total), those born CANCELLED among them, per enqueue, not yet in the batch''s '
  'counts. Written by the pyjobq functions.';

drop function pyjobq._lock_parents(uuid[]);
drop function pyjobq._batch_add(uuid, int);
drop function pyjobq._ended(uuid[], timestamptz);

create or replace function pyjobq._settle_later(p_setting text, p_ids uuid[])
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_list text := coalesce(current_setting(p_setting, true), '');
  v_add text := array_to_string(p_ids, ',');
begin
  -- A loop of enqueues naming the same parents lists them once.
  if coalesce(v_add, '') <> '' and right(v_list, length(v_add)) is distinct from v_add then
    perform set_config(p_setting, concat_ws(',', nullif(v_list, ''), v_add), true);
  end if;
end;
$$;

comment on function pyjobq._settle_later(text, uuid[]) is
  'Adds the ids p_ids to the list in setting p_setting that this transaction''s commit settles (_settle).';

create or replace function pyjobq._settle_list(p_setting text)
returns uuid[]
language sql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select coalesce(array_agg(distinct u.id::uuid order by u.id::uuid), '{}')
    from unnest(string_to_array(current_setting(p_setting, true), ',')) u(id)
   where u.id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
$$;

comment on function pyjobq._settle_list(text) is
  'The ids listed in setting p_setting (anything else there ignored), distinct, in order.';

create or replace function pyjobq._read_parents(p_parents uuid[], out waiting int, out failure text)
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
           array_agg(p.job_id) filter (where p.status in (1, 2, 6))
      into v_found, waiting, failure, v_live
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
  '42501 when the caller may not observe one''s type. Returns how many have not ended, and a text naming one '
  'that ended DEAD or CANCELLED (null when none did); lists those not ended for the commit (_settle).';

create or replace function pyjobq._mark_parents(p_parents uuid[])
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
    join pyjobq.job_all p on p.job_id = u.id;
  perform pyjobq._mark_parents(p_parents);
end;
$$;

comment on function pyjobq._link_parents(uuid, uuid[]) is
  'Writes the job_edge rows of new job p_child for its parents p_parents (resolved for those that ended) and '
  'marks the ended ones as having dependants.';

create or replace function pyjobq._ended(p_ended uuid[], p_now timestamptz, p_members boolean default true)
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
     for key share;
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
  'Holds batch p_batch_id open (FOR KEY SHARE) for an enqueue of its members: JQ002 when it does not exist, JQ006 '
  'when it is closed.';

create or replace function pyjobq._batch_add(p_batch_id uuid, p_jobs int, p_cancelled int default 0)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_batch_id is not null and p_jobs > 0 then
    insert into pyjobq.job_batch_join (batch_id, total, cancelled) values (p_batch_id, p_jobs, p_cancelled);
  end if;
end;
$$;

comment on function pyjobq._batch_add(uuid, int, int) is
  'Counts p_jobs new members of batch p_batch_id (none when it is null), p_cancelled of them born CANCELLED, '
  'apart from the batch row (job_batch_join).';

create or replace function pyjobq._batch_fold(p_batches uuid[])
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  with joined as (
    delete from pyjobq.job_batch_join j
     where j.batch_id = any (p_batches)
    returning j.batch_id, j.total, j.cancelled
  )
  update pyjobq.job_batch b
     set total = b.total + j.total,
         cancelled = b.cancelled + j.cancelled
    from (select j.batch_id, sum(j.total)::int as total, sum(j.cancelled)::int as cancelled
            from joined j
           group by j.batch_id) j
   where b.batch_id = j.batch_id;
end;
$$;

comment on function pyjobq._batch_fold(uuid[]) is
  'Moves the committed rows of job_batch_join of the batches p_batches (locked by the caller) into their counts.';

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
  -- In id order: two calls counting members of the same batches cannot deadlock.
  v_batches := array(select b.batch_id
                       from pyjobq.job_batch b
                      where b.batch_id in (select j.batch_id
                                             from pyjobq.job_all j
                                            where j.job_id = any (p_ids)
                                              and j.batch_id is not null)
                      order by b.batch_id
                        for no key update);
  if v_batches = '{}' then
    return;
  end if;
  perform pyjobq._batch_fold(v_batches);
  with members as (
    select j.batch_id, coalesce(u.left_as, j.status) as status
      from unnest(p_ids, p_left) u(id, left_as)
      join pyjobq.job_all j on j.job_id = u.id
     where j.batch_id is not null
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
             group by m.batch_id) m
     where b.batch_id = m.batch_id
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
    select l.waiting, l.failure into v_waiting, v_failure from pyjobq._read_parents(p_parents) l;
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
        perform pyjobq._link_parents(v_id, p_parents);
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
    perform pyjobq._read_parents(v_external);
  end if;
  select array_agg(j.status order by x.n)
    into v_status
    from unnest(v_parent) with ordinality x(id, n)
    left join pyjobq.job_all j on j.job_id = x.id;
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
  if p_batch_id is not null then
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
  -- FOR UPDATE waits for the enqueues into it (FOR KEY SHARE) to end; the
  -- next statement sees the members they added.
  perform from pyjobq.job_batch b where b.batch_id = p_batch_id for update;
  if not found then
    raise exception 'batch % not found', p_batch_id
      using errcode = 'JQ002';
  end if;
  perform pyjobq._batch_fold(array[p_batch_id]);
  update pyjobq.job_batch b
     set closed_at = coalesce(b.closed_at, v_now)
   where b.batch_id = p_batch_id;
  perform pyjobq._batch_fire(array[p_batch_id], v_now);
end;
$$;

comment on function pyjobq.job_batch_close(uuid) is
  'Closes batch p_batch_id, once the enqueues into it under way have ended: no job joins it any more (JQ006), and once its members have all ended it is '
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
         b.total + j.total, b.total + j.total - b.done - b.dead - b.cancelled - j.cancelled, b.done, b.dead,
         b.cancelled + j.cancelled,
         b.created_at, b.closed_at, b.finished_at, b.success_job, b.finish_job, b.dead_job
    from pyjobq.job_batch b
   cross join lateral (
     -- Joins not yet folded into the counts.
     select coalesce(sum(n.total), 0)::int as total, coalesce(sum(n.cancelled), 0)::int as cancelled
       from pyjobq.job_batch_join n
      where n.batch_id = b.batch_id) j
   where b.batch_id = p_batch_id;
end;
$$;

comment on function pyjobq.job_batch_get(uuid) is
  'Batch p_batch_id: its state (open, closed, finished: closed with every member ended), how many jobs joined '
  '(total), how many have yet to end (active) and how many ended DONE, DEAD and CANCELLED, and the callback '
  'jobs enqueued so far. No row when there is no such batch.';

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
  v_ended := array(select h.job_id from pyjobq.job_history h where h.job_id = any (v_parents));
  if v_ended <> '{}' then
    perform pyjobq._ended(v_ended, pyjobq.clock_now(), false);
  end if;
  return null;
end;
$$;

comment on function pyjobq._settle() is
  'The commit of an enqueue with parents (a deferred trigger): locks and marks the parents it found live, and '
  'resolves the edges of those that ended since.';

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 36
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';


create constraint trigger job_edge_settle
  after insert on pyjobq.job_edge
  deferrable initially deferred
  for each row
  execute function pyjobq._settle();

revoke all on all functions in schema pyjobq from public;
