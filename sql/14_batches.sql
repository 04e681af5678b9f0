-- Batches -----------------------------------------------------------------------
--
-- A batch groups jobs: job_batch_open returns its id, job_enqueue's
-- p_batch_id adds jobs to it while it is open, and job_batch_close says no
-- more will come. Its callbacks are jobs enqueued when they become due: on
-- success once it is closed and every member is DONE, on finish once it is
-- closed and every member has ended, and on dead at the first member that
-- ends DEAD. Each is enqueued exactly once, by the call that makes it due,
-- whatever calls race: every change to a batch's counts or state takes the
-- batch row's lock, and a callback is enqueued only while its job id on the
-- row is null, in the transaction that sets it.
--
-- A producer holds no lock a worker waits for, however long its transaction
-- stays open: joining a batch takes its row FOR KEY SHARE, which the
-- counting of ends does not conflict with and job_batch_close (FOR UPDATE)
-- does, so a batch is closed only once the enqueues into it have ended. The
-- new members are written apart (job_batch_join), and folded into the
-- batch's counts by the next call that holds its row once they are
-- committed: a completion of a member, or the close. A member's end is counted
-- by the call that ended it (once per call and batch); a redriven member is
-- taken off its count, to be counted again at its next end. A callback's
-- payload is the one given at open, with "batch": {batch_id, total, done,
-- dead, cancelled} added; the finished batch is announced on pyjobq_batch.

-- The callbacks of job_batch_open: null, or an object whose keys are among
-- success, finish and dead, each {"job_type": a registered type the caller
-- may enqueue, "payload": an object (optional)}.
create function pyjobq._check_callbacks(p_callbacks jsonb)
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

create function pyjobq.job_batch_open(p_callbacks jsonb default null)
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

-- The batch a new job joins, held open (FOR KEY SHARE) until the enqueue
-- commits: JQ002 when there is none, JQ006 when it is closed.
create function pyjobq._batch_join(p_batch_id uuid)
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

-- Jobs that joined batch p_batch_id (held by _batch_join), p_cancelled of
-- them born CANCELLED.
create function pyjobq._batch_add(p_batch_id uuid, p_jobs int, p_cancelled int default 0)
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

-- The committed joins of batches p_batches, whose rows the caller holds,
-- folded into their counts.
create function pyjobq._batch_fold(p_batches uuid[])
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

-- A batch's callback, enqueued now.
create function pyjobq._batch_callback(p_batch pyjobq.job_batch, p_which text, p_now timestamptz)
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

-- The callbacks the batches p_batches (locked by the caller) are due, each
-- enqueued once, and the batches that finished marked and announced.
create function pyjobq._batch_fire(p_batches uuid[], p_now timestamptz)
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

-- Batch members p_ids that just ended, counted in their batches (once per
-- call and batch), which enqueues the callbacks that makes due; or, with
-- p_left, members redriven back to PENDING from those statuses (DEAD or
-- CANCELLED, paired with p_ids), taken off the counts to be counted again
-- when they end: a finished batch is finished no more, and its callbacks
-- stay enqueued, once.
create function pyjobq._batch_count(p_ids uuid[], p_now timestamptz, p_left smallint[] default null)
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

create function pyjobq.job_batch_close(p_batch_id uuid)
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

create function pyjobq.job_batch_get(p_batch_id uuid)
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

-- The commit of an enqueue with parents --------------------------------------
--
-- What an enqueue with parents leaves to its commit, so that its transaction
-- holds no lock on them while it stays open (see "Dependencies"). The enqueue
-- lists the parents it found live in a transaction-local setting; a deferred
-- trigger on the new edges runs _settle once at the commit (its first event
-- does the work, the others find nothing listed). The setting is the
-- caller's to write, so nothing listed is taken on trust: a live parent is
-- locked and marked, which costs it nothing, and an ended parent has its
-- unresolved edges resolved, which only the edges of enqueues not yet
-- committed can be.

create function pyjobq._settle_later(p_ids uuid[])
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_list text := coalesce(current_setting('pyjobq.settle_parents', true), '');
  v_add text := array_to_string(p_ids, ',');
begin
  -- A loop of enqueues naming the same parents lists them once.
  if coalesce(v_add, '') <> '' and right(v_list, length(v_add)) is distinct from v_add then
    perform set_config('pyjobq.settle_parents', concat_ws(',', nullif(v_list, ''), v_add), true);
  end if;
end;
$$;

comment on function pyjobq._settle_later(uuid[]) is
  'Adds the parents p_ids to the list in setting pyjobq.settle_parents that this transaction''s commit settles '
  '(_settle).';

create function pyjobq._settle_list()
returns uuid[]
language sql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select coalesce(array_agg(distinct u.id::uuid order by u.id::uuid), '{}')
    from unnest(string_to_array(current_setting('pyjobq.settle_parents', true), ',')) u(id)
   where u.id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
$$;

comment on function pyjobq._settle_list() is
  'The ids listed in setting pyjobq.settle_parents (anything else there ignored), distinct, in order.';

create function pyjobq._settle()
returns trigger
language plpgsql
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_parents uuid[] := pyjobq._settle_list();
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

create constraint trigger job_edge_settle
  after insert on pyjobq.job_edge
  deferrable initially deferred
  for each row
  execute function pyjobq._settle();
