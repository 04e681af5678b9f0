-- depends: 0030_grants_from_a_table

-- Schema 31: the audit log has a retention.
--
-- Nothing ever deleted an audit line. job_prune, which an operator already
-- runs for the jobs, now also deletes the audit lines older than the
-- install's audit_retention (a year unless an admin sets it with
-- job_settings_set), and its own audit line says how many went. The
-- settings' functions return the new setting, so their result type changes:
-- dropped, then created (a client reading columns by name is unaffected).

alter table pyjobq.setting
  add column audit_retention interval not null default interval '1 year',
  add constraint setting_audit_retention_valid check (audit_retention between interval '1 day' and interval '100 years');

comment on table pyjobq.setting is
  'The install''s settings, one row; see job_settings. require_lease_token: a holder''s transition without '
  'the lease token is refused (22004) unless the caller owns the schema. audit_retention: job_prune deletes '
  'the audit lines older than this.';

drop function pyjobq.job_settings();
drop function pyjobq.job_settings_set(boolean);

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

-- _audit takes whether the call changed anything, which job_prune now says
-- itself (it can delete audit lines and no job).
drop function pyjobq._audit(text, bigint, jsonb);
create function pyjobq._audit(p_action text, p_jobs bigint, p_detail jsonb, p_changed boolean default null)
returns void
language sql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  insert into pyjobq.audit_log (at, role, actor, action, jobs, detail)
  select pyjobq.clock_now(), session_user, left(nullif(current_setting('pyjobq.actor', true), ''), 200),
         p_action, p_jobs, p_detail
   where coalesce(p_changed, p_jobs > 0)
$$;

comment on function pyjobq._audit(text, bigint, jsonb, boolean) is
  'Writes an audit_log line for action p_action on p_jobs jobs when the call changed something: p_changed, '
  'or when it is null, p_jobs above 0.';


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
  if p_older_than is null or p_older_than < interval '0' or p_older_than > interval '100 years' then
    raise exception 'p_older_than must be an interval between 0 and 100 years'
      using errcode = case when p_older_than is null then '22004' else '22023' end,
            detail = format('p_older_than was %s.', coalesce(p_older_than::text, 'null')),
            hint = 'e.g. ''7 days''.';
  end if;
  v_cutoff := v_now - p_older_than;
  -- Whole days first: the partition of each day that ended by the cutoff is
  -- dropped, unless it holds a parent with a dependant yet to end (the
  -- dependant's handler reads its result; its day goes row by row, below).
  -- The drop waits at most 100 ms for its lock on job_history, which every
  -- completion's insert waits behind meanwhile; a day it cannot have now is
  -- left to the next call.
  for v_day in
    select c.oid::regclass as part
      from pg_partition_tree('pyjobq.job_history') t
      join pg_class c on c.oid = t.relid
     where t.isleaf
       and c.relname ~ '^job_history_[0-9]{8}$'
       and (to_date(substr(c.relname, 13), 'YYYYMMDD') + 1)::timestamp <= v_cutoff
     order by c.relname
  loop
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
  'a parent with a dependant yet to end), with their dependency edges: first every day of history that ended '
  'by then, whole, by dropping its partition of job_history (waiting at most 100 ms for its lock, else left to '
  'the next call), then up to p_limit (1..100000, default 10000) of the rest, row by row; and the batches '
  'finished as long ago whose jobs are all gone. Returns how many jobs it deleted; call it again until it '
  'returns less than p_limit. Also deletes the audit lines older than the install''s audit_retention '
  '(job_settings) and drops the rate windows with no claim in the last 25 hours, which count nothing. A call '
  'that deleted jobs or audit lines writes a line to the audit log (job_audit), with the days it dropped and '
  'the audit lines it deleted.';


update pyjobq.api_grant
   set function = 'pyjobq.job_settings_set(boolean, interval)'
 where function = 'pyjobq.job_settings_set(boolean)';

revoke all on all functions in schema pyjobq from public;

do $$
begin
  perform pyjobq.grant_roles();
end;
$$;

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 31
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';
