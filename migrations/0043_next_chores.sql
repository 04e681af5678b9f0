-- depends: 0042_parents_read_once

-- Schema 43: job_next_chores, when a worker should next tick the schedules
-- and reap. The Python worker reads it in its claim's statement and ticks and
-- reaps only when these times come: an idle worker with no schedule and no
-- job RUNNING sent 13 ticks and 2 reaps a minute beside its 12 claims.

create function pyjobq.job_next_chores(out next_tick timestamptz, out next_expiry timestamptz)
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  next_tick := (select min(s.next_fire_at) from pyjobq.schedule s where not s.paused);
  next_expiry := (select min(j.lease_until) from pyjobq.job j where j.lease_until is not null);
end;
$$;

comment on function pyjobq.job_next_chores() is
  'When a worker should next tick the schedules and reap: the next tick of a schedule not paused (next_tick) '
  'and the earliest lease of a RUNNING job to expire (next_expiry), each null when there is none. A worker '
  'reads it with its claim, and calls job_schedule_tick and job_reap when these times come.';

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 43
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';


insert into pyjobq.api_grant (function, roles) values
  ('pyjobq.job_next_chores()', '{pyjobq_worker,pyjobq_admin}');

do $$ begin perform pyjobq.grant_roles(); end; $$;

revoke all on all functions in schema pyjobq from public;
