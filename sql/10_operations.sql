-- Operations ------------------------------------------------------------------

-- DEAD and CANCELLED jobs among p_ids back to PENDING, due at p_now, with a fresh budget
-- of max_attempts tries (attempts, the fencing token, goes on); returns the
-- ids moved. A job that has used up its claim counter stays DEAD. A job whose dedupe key an active job holds, or an older one of
-- p_ids takes, stays DEAD (keys are unique among active jobs only). A key an
-- uncommitted enqueue takes meanwhile still raises unique_violation.
create function pyjobq._redrive_rows(p_ids uuid[], p_now timestamptz)
returns uuid[]
language sql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  with free as (
    select distinct on (d.job_type, coalesce(d.dedupe_key, d.job_id::text)) d.job_id
      from pyjobq.job_history d
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
    delete from pyjobq.job_history h
     using free f
     where h.job_id = f.job_id
       and h.status in (4, 5)
    returning h.*
  ),
  back as (
    -- PENDING again, due at p_now with its old seq, with a fresh budget (the
    -- fencing token, attempts, goes on); its worker and result cleared.
    insert into pyjobq.job
      (job_id, job_type, status, priority, payload, result, dedupe_key, attempts, max_attempts, run_after,
       lease_until, worker_id, run_started_at, last_error, created_at, updated_at, seq, attempts_refunded,
       notify_done, lease_token, concurrency_key, fair_rank, metadata, waiting_on, run_on_parent_failure,
       has_dependants, batch_id)
    select m.job_id, m.job_type, 1, m.priority, m.payload, null, m.dedupe_key, m.attempts, m.max_attempts,
           pyjobq._pending_from(p_now, p_now, false), null, null, m.run_started_at, m.last_error, m.created_at,
           p_now, m.seq, m.attempts, m.notify_done, m.lease_token, m.concurrency_key, m.fair_rank, m.metadata,
           m.waiting_on, m.run_on_parent_failure, m.has_dependants, m.batch_id
      from moved m
    returning job_id
  )
  select coalesce(array_agg(b.job_id), '{}') from back b
$$;

comment on function pyjobq._redrive_rows(uuid[], timestamptz) is
  'job_redrive''s move: the DEAD and CANCELLED jobs of p_ids whose dedupe key is free from job_history back '
  'to pyjobq.job, PENDING; returns their ids.';

-- _redrive_rows on p_ids in one statement; only when a concurrent enqueue
-- takes a key between the caller's snapshot and the move (a unique
-- violation) a row at a time, each in a subtransaction of its own (one per
-- row on every call would overflow the subtransaction cache past 64 rows).
create function pyjobq._redrive_ids(p_ids uuid[], p_now timestamptz)
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

-- Which of the ended jobs p_ids may move now: a job none of whose parents
-- is DEAD or CANCELLED, or one that runs on parent failure. Its live parents
-- are locked first (FOR NO KEY UPDATE, as an enqueue locks them), so that
-- none of them ends unseen before the caller re-arms the edges (_rearm): a
-- parent that ended meanwhile is found ended here. A parent another session
-- holds is skipped, never waited for, and its dependants do not move in this
-- call.
create function pyjobq._redrive_ready(p_ids uuid[])
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

-- The jobs p_moved, just redriven, wait again for their parents that are yet
-- to end (live, locked by _redrive_ready): those edges are unresolved again,
-- and a job with any is WAITING instead of PENDING. A job without parents is
-- left as it is.
create function pyjobq._rearm(p_moved uuid[])
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

create function pyjobq.job_redrive(
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
    perform pyjobq._announce(null, v_now, v_now);
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

-- Settings --------------------------------------------------------------------

create function pyjobq.job_settings()
returns table (require_lease_token boolean, audit_retention interval)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  return query select s.require_lease_token, s.audit_retention from pyjobq.setting s;
end;
$$;

comment on function pyjobq.job_settings() is
  'The install''s settings. require_lease_token: a holder''s transition (complete, fail, renew, release) '
  'without the lease token job_claim returned is refused with 22004, unless the caller owns the schema; '
  'true on a new install, false on one upgraded from before lease tokens until an admin sets it. '
  'audit_retention: job_prune deletes the audit lines older than this (1 year unless set).';

create function pyjobq.job_settings_set(
  p_require_lease_token boolean default null,
  p_audit_retention interval default null
)
returns table (require_lease_token boolean, audit_retention interval)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_audit_retention < interval '1 day' or p_audit_retention > interval '100 years' then
    raise exception 'p_audit_retention must be an interval between 1 day and 100 years'
      using errcode = '22023',
            detail = format('p_audit_retention was %s.', p_audit_retention),
            hint = 'e.g. ''1 year''; null leaves it as it is.';
  end if;
  update pyjobq.setting s
     set require_lease_token = coalesce(p_require_lease_token, s.require_lease_token),
         audit_retention = coalesce(p_audit_retention, s.audit_retention);
  return query select s.require_lease_token, s.audit_retention from pyjobq.setting s;
end;
$$;

comment on function pyjobq.job_settings_set(boolean, interval) is
  'Changes the install''s settings (a null argument leaves its setting as it is) and returns them all; see '
  'job_settings. Turn p_require_lease_token on once every client passes the lease token; calls without one '
  'are accepted from an upgraded install for one release only. p_audit_retention: 1 day to 100 years '
  '(22023 otherwise).';
