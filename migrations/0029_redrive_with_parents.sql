-- depends: 0028_after_the_release

-- Schema 29: a dependant is redriven only with its parents.
--
-- job_redrive moved a dependant that its parent's DEAD or CANCELLED end had
-- cancelled back to PENDING, and it ran at once, without the parent it
-- depends on (its handler read that parent's failure as its result). Now a
-- job with a parent that stays DEAD or CANCELLED stays where it is, unless
-- it runs on parent failure; redriven with its parents (or after them), it
-- waits for those yet to end, WAITING, as a new dependant would.
create or replace function pyjobq._redrive_ids(p_ids uuid[], p_now timestamptz)
returns uuid[]
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_id uuid;
  v_ids uuid[] := '{}';
begin
  return pyjobq._redrive_rows(p_ids, p_now);
exception when unique_violation then
  foreach v_id in array p_ids loop
    begin
      v_ids := v_ids || pyjobq._redrive_rows(array[v_id], p_now);
    exception when unique_violation then
      null;
    end;
  end loop;
  return v_ids;
end;
$$;

comment on function pyjobq._redrive_ids(uuid[], timestamptz) is
  'Moves the jobs p_ids back to PENDING with _redrive_rows, one at a time when a concurrent enqueue took a key '
  'meanwhile; returns the ids moved.';

create or replace function pyjobq._redrive_ready(p_ids uuid[])
returns uuid[]
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_locked uuid[];
begin
  v_locked := array(select p.job_id
                      from pyjobq.job p
                     where p.job_id in (select e.parent_id
                                          from pyjobq.job_history c
                                          join pyjobq.job_edge e on e.child_id = c.job_id
                                         where c.job_id = any (p_ids)
                                           and c.waiting_on is not null)
                       for no key update skip locked);
  return array(select h.job_id
                 from pyjobq.job_history h
                where h.job_id = any (p_ids)
                  and (h.waiting_on is null
                       or ((h.run_on_parent_failure
                            or not exists (select from pyjobq.job_edge e
                                             join pyjobq.job_history p on p.job_id = e.parent_id
                                            where e.child_id = h.job_id
                                              and p.status in (4, 5)))
                           and not exists (select from pyjobq.job_edge e
                                             join pyjobq.job p on p.job_id = e.parent_id
                                            where e.child_id = h.job_id
                                              and p.job_id <> all (v_locked)))));
end;
$$;

comment on function pyjobq._redrive_ready(uuid[]) is
  'The jobs of p_ids (ended) that job_redrive may move now: those without parents, those that run on parent '
  'failure, and those none of whose parents is DEAD or CANCELLED; locks their live parents first (skipping '
  'those another session holds, whose dependants then do not move).';

create or replace function pyjobq._rearm(p_moved uuid[])
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  update pyjobq.job_edge e
     set resolved = false
    from pyjobq.job p
   where e.child_id = any (p_moved)
     and p.job_id = e.parent_id
     and e.resolved;
  update pyjobq.job c
     set waiting_on = w.live,
         status = case when w.live > 0 then 6 else 1 end
    from (select e.child_id, count(p.job_id)::int as live
            from pyjobq.job_edge e
            left join pyjobq.job p on p.job_id = e.parent_id
           where e.child_id = any (p_moved)
           group by e.child_id) w
   where c.job_id = w.child_id
     and c.waiting_on is not null;
end;
$$;

comment on function pyjobq._rearm(uuid[]) is
  'Makes the jobs p_moved, just redriven, wait again for their parents that are yet to end: their edges to '
  'live parents unresolved, waiting_on their count, WAITING when there is any.';

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
  v_picked uuid[];
  v_statuses smallint[];
  v_ids uuid[] := '{}';
  v_rest uuid[];
  v_ready uuid[];
  v_generation uuid[];
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
  -- The batch is locked once, then moved (_redrive_ids).
  -- Only jobs that can move count against the limit: a backlog of jobs whose
  -- key an active job holds must not stop every later call from reaching the
  -- rest, and of the jobs that share a key only the oldest can move (the next
  -- call may take the next), so only it is a candidate.
  select coalesce(array_agg(d.job_id order by d.updated_at, d.job_id), '{}'),
         coalesce(array_agg(d.status order by d.updated_at, d.job_id), '{}')
    into v_picked, v_statuses
    from (select p.job_id, p.updated_at, p.status
            from pyjobq.job_history p
           where p.job_id in (select c.job_id
                                from (select e.job_id,
                                             row_number() over (
                                               partition by e.job_type, coalesce(e.dedupe_key, e.job_id::text)
                                               order by e.updated_at, e.job_id) as n
                                        from pyjobq.job_history e
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
  -- A dependant moves only when none of its parents stays DEAD or CANCELLED
  -- (it would run without them), unless it runs on parent failure; it then
  -- waits again for the parents yet to end. Its parents redriven in the same
  -- call move first: a generation a round, one round when no job has parents.
  v_rest := v_picked;
  while cardinality(v_rest) > 0 loop
    v_ready := pyjobq._redrive_ready(v_rest);
    exit when cardinality(v_ready) = 0;
    v_generation := pyjobq._redrive_ids(v_ready, v_now);
    perform pyjobq._rearm(v_generation);
    v_ids := v_ids || v_generation;
    exit when cardinality(v_ready) = cardinality(v_rest);
    v_rest := array(select unnest(v_rest) except select unnest(v_ready));
  end loop;
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
  'dedupe key an active job holds stays where it is, and so does a job with a parent that stays DEAD or '
  'CANCELLED (unless it runs on parent failure): redrive it with its parents, or after them, and it waits '
  'for those yet to end (WAITING) before it runs. Returns the ids it moved; a call that moved jobs writes '
  'a line to the audit log (job_audit) with the first 100 of their ids.';


create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 29
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

revoke all on all functions in schema pyjobq from public;
