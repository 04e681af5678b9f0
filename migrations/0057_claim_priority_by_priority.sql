-- depends: 0056_attempts

-- Schema 57: the plain claim reads no job that is not due. It picks priority
-- by priority, each the range of its due jobs, and finds the next priority
-- with one descent of job_claim_idx, where it walked every sleeping job (a
-- snooze, a wait, a backoff, a job enqueued for later) of a priority before
-- it reached the next, or found nothing due.

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 57
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq._claim_pick(p_types smallint[], p_limit int, p_now timestamptz)
returns uuid[]
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
set plan_cache_mode = force_generic_plan
set enable_sort = off  -- see above
set jit = off
as $$
declare
  v_now_us bigint := (extract(epoch from p_now) * 1000000)::bigint;
  v_front pyjobq.claim_front;
  v_priority smallint := -1;  -- where a pass starts (see above)
  v_run_after timestamptz := '-infinity';
  v_seq bigint := 0;
  v_ids uuid[] := '{}';
  v_picked uuid[];
  v_last pyjobq.claim_front;  -- where the pass that picked last ended
  v_from_head boolean := false;
  v_passes int := 0;  -- passes that picked
begin
  -- Resume after this session's claim front, if it still holds (see "Claim
  -- fronts" above); the scan from the head comes after, and alone without one.
  v_front := pyjobq._claim_front_read(p_types::text, v_now_us);
  if v_front.seq is not null then
    v_priority := v_front.priority;
    v_run_after := v_front.run_after;
    v_seq := v_front.seq;
  end if;
  loop
    with recursive present(priority) as (
      select case when v_priority < 0
                  then (select c.priority from pyjobq.job c
                         where c.status = 1
                         order by c.priority limit 1)
                  else coalesce((select c.priority from pyjobq.job c
                                  where c.status = 1 and c.priority < v_priority
                                  order by c.priority limit 1), v_priority)
             end
      union all
      select case when q.priority < v_priority
                  then coalesce((select c.priority from pyjobq.job c
                                  where c.status = 1 and c.priority > q.priority and c.priority < v_priority
                                  order by c.priority limit 1), v_priority)
                  else (select c.priority from pyjobq.job c
                         where c.status = 1 and c.priority > q.priority
                         order by c.priority limit 1)
             end
        from present q
       where q.priority is not null
    ),
    picked as (
      select d.*
        from present q
        cross join lateral (
          select c.job_id, c.priority, c.run_after, c.seq
            from pyjobq.job c
           where c.status = 1
             and c.priority = q.priority
             and (c.priority, c.run_after, c.seq)
                 > (q.priority,
                    case when q.priority = v_priority then v_run_after else '-infinity' end,
                    case when q.priority = v_priority then v_seq else 0 end)
             and c.run_after <= p_now
             and c.job_type = any (p_types)
             and c.job_id <> all (v_ids)
           order by c.priority, c.run_after, c.seq
           limit p_limit - cardinality(v_ids)
             for update skip locked
        ) d
       limit p_limit - cardinality(v_ids)
    )
    select array_agg(p.job_id order by p.priority, p.run_after, p.seq),
           (array_agg(p.priority order by p.priority desc, p.run_after desc, p.seq desc))[1],
           (array_agg(p.run_after order by p.priority desc, p.run_after desc, p.seq desc))[1],
           (array_agg(p.seq order by p.priority desc, p.run_after desc, p.seq desc))[1]
      into v_picked, v_last.priority, v_last.run_after, v_last.seq
      from picked p;
    if v_picked is not null then
      v_ids := v_ids || v_picked;
      v_passes := v_passes + 1;
      v_front.priority := v_last.priority;
      v_front.run_after := v_last.run_after;
      v_front.seq := v_last.seq;
      v_from_head := v_priority = -1;
    end if;
    exit when cardinality(v_ids) = p_limit or v_priority = -1;
    -- Then from the head: due jobs may remain behind the front.
    v_priority := -1;
    v_run_after := '-infinity';
    v_seq := 0;
  end loop;
  if cardinality(v_ids) = 0 then
    return '{}';
  end if;
  if v_passes > 1 then
    -- The head scan took jobs left behind the front: they come first.
    select array_agg(j.job_id order by j.priority, j.run_after, j.seq)
      into v_ids
      from pyjobq.job j
     where j.job_id = any (v_ids);
  end if;
  -- The new front: where the last pass that picked ended. A head scan that
  -- picked starts a new second of life; resuming keeps the old front's.
  perform pyjobq._claim_front_write(row(
    v_front.epoch, case when v_from_head then v_now_us else v_front.started_us end, p_types::text,
    v_now_us, v_front.priority, v_front.run_after, v_front.seq)::pyjobq.claim_front);
  return v_ids;
end;
$$;

comment on function pyjobq._claim_pick(smallint[], int, timestamptz) is
  'The plain claim''s choice: up to p_limit due PENDING jobs of p_types at p_now, in claim order, resuming from '
  'this session''s claim front, their rows locked for _lease; writes the new front.';

