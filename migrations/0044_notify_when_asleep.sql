-- depends: 0043_next_chores

-- Schema 44: enqueues notify only when a worker may be asleep. A NOTIFY takes
-- one lock for the whole database at commit, held until the commit record is
-- flushed, so producers that all notified committed one at a time. Idle
-- workers now mark their listening session (job_worker_idle, until
-- job_worker_busy) and fence out the producers that looked before the mark;
-- a producer that finds no mark holds the fence until its commit instead of
-- notifying.

create or replace function pyjobq._announce(p_job_type int, p_run_after timestamptz, p_now timestamptz)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if pg_try_advisory_xact_lock_shared(1887005297, -2) then
    if pg_try_advisory_lock(1887005297, -1) then
      perform pg_advisory_unlock(1887005297, -1);
      return;  -- no worker asleep, and none can fall asleep before this commits
    end if;
  end if;
  perform pg_notify('pyjobq_job',
                    case when p_job_type is null then ''
                         when p_run_after <= p_now then p_job_type::text
                         else format('%s@%s', p_job_type, extract(epoch from p_run_after)) end);
end;
$$;

comment on function pyjobq._announce(int, timestamptz, timestamptz) is
  'Notifies channel pyjobq_job on commit, when a worker may be asleep, that a job of type p_job_type is '
  'PENDING: payload the type when p_run_after <= p_now, else type@run_after in seconds since 1970, empty when '
  'p_job_type is null. Otherwise holds the fence (advisory lock 1887005297, -2) until the commit.';

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

create function pyjobq.job_worker_idle()
returns boolean
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if current_setting('pyjobq.idle_mark', true) is distinct from 'on' then
    -- Fails only for an instant (a producer looking) or while a session holds
    -- the key exclusively, when every producer notifies anyway.
    if not pg_try_advisory_lock_shared(1887005297, -1) then
      return false;
    end if;
    perform set_config('pyjobq.idle_mark', 'on', false);
  end if;
  -- The fence: free once every transaction that looked before the mark ended.
  if not pg_try_advisory_lock(1887005297, -2) then
    return false;
  end if;
  perform pg_advisory_unlock(1887005297, -2);
  return true;
end;
$$;

comment on function pyjobq.job_worker_idle() is
  'Marks this session as a worker asleep on LISTEN pyjobq_job, so that every change making a job PENDING '
  'notifies from now on. True once no transaction that looked for a mark before it is still open: claim once '
  'more, then sleep. False: such a transaction is open (or the mark could not be taken); call again shortly. Call '
  'it outside a transaction block, on the connection that LISTENs; job_worker_busy ends the mark.';

create function pyjobq.job_worker_busy()
returns void
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if current_setting('pyjobq.idle_mark', true) = 'on' then
    perform set_config('pyjobq.idle_mark', '', false);
    perform pg_advisory_unlock_shared(1887005297, -1);
  end if;
end;
$$;

comment on function pyjobq.job_worker_busy() is
  'Ends this session''s mark of job_worker_idle: producers stop notifying for it. A worker calls it when a claim '
  'comes back full.';

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 44
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';


insert into pyjobq.api_grant (function, roles) values
  ('pyjobq.job_worker_idle()', '{pyjobq_worker}'),
  ('pyjobq.job_worker_busy()', '{pyjobq_worker}');

do $$ begin perform pyjobq.grant_roles(); end; $$;

revoke all on all functions in schema pyjobq from public;
