-- depends: 0050_mutable_columns_last

-- Schema 51: checkpointed steps. A handler records each named step as it
-- finishes (job_step_save) and a later attempt of the same job reads them
-- back (job_steps) instead of doing the work again; job_prune deletes the
-- steps with their jobs.

create table pyjobq.job_step (
  job_id uuid not null,
  name varchar(200) not null,
  attempt smallint not null,
  worker_id varchar(80) not null,
  saved_at timestamptz not null,
  result jsonb,
  constraint job_step_pkey primary key (job_id, name)
);

comment on table pyjobq.job_step is
  'The steps of jobs that their handlers finished: the attempt and worker that recorded each, when, and its '
  'result. Written by job_step_save, deleted by job_prune with their jobs.';

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 51
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq._check_holds(p_job_id uuid, p_worker_id text, p_attempt int, p_lease_token uuid)
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_denied smallint[] := pyjobq._denied_types('work');
begin
  perform pyjobq._check_holder(p_worker_id, p_attempt, p_lease_token);
  if not exists (select
                   from pyjobq.job j
                  where j.job_id = p_job_id
                    and pyjobq._holds(j, p_worker_id, p_attempt, p_lease_token, v_denied)) then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt, p_lease_token);
  end if;
end;
$$;

comment on function pyjobq._check_holds(uuid, text, int, uuid) is
  'Raises as _check_holder and _raise_not_held do unless p_worker_id holds attempt p_attempt of job p_job_id '
  'with lease token p_lease_token (any when null), of a type the caller may work.';

create or replace function pyjobq.job_step_save(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_name text,
  p_result jsonb default null,
  p_lease_token uuid default null
)
returns table (saved boolean, result jsonb, attempt int, saved_at timestamptz)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
begin
  perform pyjobq._check_text('p_name', p_name, 200, false);
  if pg_column_size(p_result) > 1048576 then
    raise exception 'p_result must be at most 1 MiB'
      using errcode = '22023',
            detail = format('p_result took %s bytes.', pg_column_size(p_result)),
            hint = 'Store a large result elsewhere and keep its key in the step.';
  end if;
  perform pyjobq._check_holds(p_job_id, p_worker_id, p_attempt, p_lease_token);
  -- The primary key is the fence between two attempts that both ran the step
  -- (the first one's lease was lost meanwhile): the second insert waits for
  -- the first one's transaction and, once it committed, stores nothing.
  return query
  insert into pyjobq.job_step as s (job_id, name, attempt, worker_id, saved_at, result)
  values (p_job_id, p_name, p_attempt, p_worker_id, v_now, p_result)
  on conflict on constraint job_step_pkey do nothing
  returning true, s.result, s.attempt::int, s.saved_at;
  if not found then
    return query
    select false, s.result, s.attempt::int, s.saved_at
      from pyjobq.job_step s
     where s.job_id = p_job_id
       and s.name = p_name;
  end if;
end;
$$;

comment on function pyjobq.job_step_save(uuid, text, int, text, jsonb, uuid) is
  'Records that step p_name (1 to 200 characters) of job p_job_id finished with p_result (any JSON up to '
  '1 MiB, or null), if p_worker_id holds attempt p_attempt of it with lease token p_lease_token; raises JQ001, '
  'JQ002, JQ003 or JQ005 as job_complete does when it does not. Returns saved = true and what it stored, or, '
  'when the step was recorded before (by this attempt or an earlier one), saved = false and the stored result, '
  'attempt and time, which stay. Called in the transaction that makes the step''s own writes, it makes them '
  'happen once: an attempt that gets saved = false must roll that transaction back and take the stored result.';

create or replace function pyjobq.job_steps(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_lease_token uuid default null
)
returns table (name text, result jsonb, attempt int, saved_at timestamptz)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  perform pyjobq._check_holds(p_job_id, p_worker_id, p_attempt, p_lease_token);
  return query
  select s.name::text, s.result, s.attempt::int, s.saved_at
    from pyjobq.job_step s
   where s.job_id = p_job_id
   order by s.saved_at, s.name;
end;
$$;

comment on function pyjobq.job_steps(uuid, text, int, uuid) is
  'The steps recorded for job p_job_id (job_step_save), in the order they were saved, if p_worker_id holds '
  'attempt p_attempt of it with lease token p_lease_token; raises as job_step_save does when it does not.';

create or replace function pyjobq.job_prune(p_older_than interval, p_limit int default null)
returns bigint
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set timezone = 'UTC'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_limit int := coalesce(p_limit, 10000);
  v_cutoff timestamptz;
  v_day record;
  v_rows bigint;
  v_kept boolean;
  v_deleted bigint := 0;
  v_dropped int := 0;
  v_lock_timeout text := current_setting('lock_timeout');
  v_lines bigint;
begin
  perform pyjobq._check_range('p_limit', v_limit, 1, 100000);
  perform pyjobq._check_older_than(p_older_than);
  v_cutoff := v_now - p_older_than;
  -- Whole days first: the partition of each day that ended by the cutoff is
  -- dropped, unless it holds a parent with a dependant yet to end (the
  -- dependant's handler reads its result; its day goes row by row, below).
  -- The drop waits at most 100 ms for its lock on job_history, which every
  -- completion's insert waits behind meanwhile; a day it cannot have now is
  -- left to the next call.
  for v_day in select d.part from pyjobq._history_days_by(v_cutoff) d loop
    execute format('select exists (select from %s h'
                   '                 join pyjobq.job_edge e on e.parent_id = h.job_id'
                   '                 join pyjobq.job c on c.job_id = e.child_id'
                   '                where h.has_dependants)',
                   v_day.part)
      into v_kept;
    continue when v_kept;
    begin
      perform set_config('lock_timeout', '100ms', true);
      execute format('lock table %s in access exclusive mode', v_day.part);
      execute format('select count(*) from %s', v_day.part) into v_rows;
      -- The edges go with the jobs (the index of graph jobs finds them).
      execute format('delete from pyjobq.job_edge e using %s h'
                     ' where (h.has_dependants or h.waiting_on is not null)'
                     '   and (e.parent_id = h.job_id or e.child_id = h.job_id)', v_day.part);
      execute format('drop table %s', v_day.part);
      v_deleted := v_deleted + v_rows;
      v_dropped := v_dropped + 1;
      -- The caller's own, for the rest of this call and of its transaction
      -- (a failed block undoes the 100 ms itself).
      perform set_config('lock_timeout', v_lock_timeout, true);
    exception when lock_not_available then
      null;
    end;
  end loop;
  -- Then row by row, up to p_limit: what is older than the cutoff in the
  -- partitions that stay (the day the cutoff falls in, the default one).
  -- A parent stays while a dependant of it has yet to end: the dependant's
  -- handler reads its result. The edges go with the jobs.
  with doomed as (
    select d.job_id
      from pyjobq.job_history d
     where d.updated_at < v_cutoff
       and not (d.has_dependants
                and exists (select from pyjobq.job_edge e
                              join pyjobq.job c on c.job_id = e.child_id
                             where e.parent_id = d.job_id))
     limit v_limit
       for update skip locked
  ), deleted as (
    delete from pyjobq.job_history j
     using doomed d
     where j.job_id = d.job_id
    returning j.job_id, j.has_dependants, j.waiting_on is not null as has_parents
  ), edges_out as (
    delete from pyjobq.job_edge e using deleted x where x.has_dependants and e.parent_id = x.job_id
  ), edges_in as (
    delete from pyjobq.job_edge e using deleted x where x.has_parents and e.child_id = x.job_id
  )
  select v_deleted + count(*) into v_deleted from deleted;
  -- The steps of the jobs gone, up to p_limit: those of a job enqueued before
  -- the cutoff (its id says when) that is neither active nor in the history.
  delete from pyjobq.job_step s
   using (select distinct d.job_id
            from pyjobq.job_step d
           where d.job_id < pyjobq._job_id_floor(v_cutoff)
             and not exists (select from pyjobq.job_all j where j.job_id = d.job_id)
           limit v_limit) g
   where s.job_id = g.job_id;
  -- A finished batch goes once its members have.
  delete from pyjobq.job_batch b
   where b.finished_at < v_cutoff
     and not exists (select from pyjobq.job_all j where j.batch_id = b.batch_id);
  -- The audit lines past the install's retention (job_settings) go too; the
  -- line this call writes says how many, when any did.
  delete from pyjobq.audit_log a
   where a.at < v_now - (select s.audit_retention from pyjobq.setting s);
  get diagnostics v_lines = row_count;
  perform pyjobq._audit('prune', v_deleted,
                        jsonb_build_object('older_than', p_older_than, 'limit', v_limit, 'days_dropped', v_dropped)
                        || case when v_lines > 0 then jsonb_build_object('audit_lines', v_lines) else '{}' end,
                        v_deleted > 0 or v_lines > 0);
  -- A rate window with no claim for longer than any period (a day at most)
  -- counts nothing; an hour more leaves a claim that started before it alone.
  delete from pyjobq.rate_window w
   where w.claimed_at[cardinality(w.claimed_at)] < v_now - interval '25 hours';
  return v_deleted;
end;
$$;

comment on function pyjobq.job_prune(interval, int) is
  'Deletes the DONE, DEAD and CANCELLED jobs that ended more than p_older_than (0 to 100 years) ago (but not '
  'a parent with a dependant yet to end), with their dependency edges and steps: first every day of history that ended '
  'by then, whole, by dropping its partition of job_history (waiting at most 100 ms for its lock, else left to '
  'the next call), then up to p_limit (1..100000, default 10000) of the rest, row by row; and the batches '
  'finished as long ago whose jobs are all gone. Returns how many jobs it deleted; call it again until it '
  'returns less than p_limit. Also deletes the audit lines older than the install''s audit_retention '
  '(job_settings) and drops the rate windows with no claim in the last 25 hours, which count nothing. A call '
  'that deleted jobs or audit lines writes a line to the audit log (job_audit), with the days it dropped and '
  'the audit lines it deleted.';

insert into pyjobq.api_grant (function, roles) values
  ('pyjobq.job_step_save(uuid, text, int, text, jsonb, uuid)', '{pyjobq_worker}'),
  ('pyjobq.job_steps(uuid, text, int, uuid)', '{pyjobq_worker}');

do $$ begin perform pyjobq.grant_roles(); end; $$;

revoke all on all functions in schema pyjobq from public;
