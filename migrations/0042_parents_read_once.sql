-- depends: 0041_one_plan_a_session

-- Schema 42: an enqueue with parents decides everything from its one read of
-- them. The privilege check read the parents' types again, and the error for a
-- missing parent read them a third time: a read that missed a row (a job that
-- ended into the history's default partition while job_history_maintain moved
-- it) left a type unchecked, or named no parent in the error.

create or replace function pyjobq._read_parents(
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
  v_types int[];
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
           array_agg(p.job_id), array_agg(p.status), array_agg(distinct p.job_type::int)
      into v_found, waiting, failure, v_live, ids, statuses, v_types
      from pyjobq.job_all p
     where p.job_id = any (p_parents);
    exit when v_found >= v_wanted;
  end loop;
  -- Everything below is decided from that read, none from another.
  if v_found < v_wanted then
    v_missing := (select u.id from unnest(p_parents) u(id) where u.id <> all (coalesce(ids, '{}')) limit 1);
    raise exception 'parent job % not found', v_missing
      using errcode = 'JQ002',
            hint = 'A job can depend only on jobs that exist: enqueue the parents first (pruned jobs are gone).';
  end if;
  -- The child will see its parents' results: the caller must be allowed to see them.
  perform pyjobq._check_privilege('observe', v_types);
  perform pyjobq._settle_later(v_live);
end;
$$;

comment on function pyjobq._read_parents(uuid[]) is
  'Reads the jobs p_parents for the enqueue of their child, taking no lock: JQ002 when one does not exist, '
  '42501 when the caller may not observe one''s type. Returns how many have not ended, a text naming one '
  'that ended DEAD or CANCELLED (null when none did), and each parent''s id and status as read; lists those '
  'not ended for the commit (_settle).';

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 42
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';


