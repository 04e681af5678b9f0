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

-- Settings --------------------------------------------------------------------

create function pyjobq.job_settings()
returns table (require_lease_token boolean)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  return query select s.require_lease_token from pyjobq.setting s;
end;
$$;

comment on function pyjobq.job_settings() is
  'The install''s settings. require_lease_token: a holder''s transition (complete, fail, renew, release) '
  'without the lease token job_claim returned is refused with 22004, unless the caller owns the schema; '
  'true on a new install, false on one upgraded from before lease tokens until an admin sets it.';

create function pyjobq.job_settings_set(p_require_lease_token boolean default null)
returns table (require_lease_token boolean)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  update pyjobq.setting s
     set require_lease_token = coalesce(p_require_lease_token, s.require_lease_token);
  return query select s.require_lease_token from pyjobq.setting s;
end;
$$;

comment on function pyjobq.job_settings_set(boolean) is
  'Changes the install''s settings (a null argument leaves its setting as it is) and returns them all; see '
  'job_settings. Turn p_require_lease_token on once every client passes the lease token; calls without one '
  'are accepted from an upgraded install for one release only.';
