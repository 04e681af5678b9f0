-- depends: 0063_limited_claim_reads_no_sleepers

-- Schema 64: the plain claim in small steps. Its pick walks the priorities
-- in a loop of small statements, each planned once per session, where one
-- recursive statement with ordered aggregates cost more to set up at every
-- call than the steps cost to run; a claim that comes back short leaves no
-- front, so the next one reads from the head alone instead of after the
-- front and then from the head; the claim front is read without a query of
-- the epoch's sequence and without bounded regular expressions. The lease
-- keeps the callers' order through the update's own join, and its plan is
-- pinned to the primary key: one made by a session's first claim on an
-- almost empty queue scanned the whole table at every claim after it. The
-- same jobs in the same order. Three functions, their signatures unchanged.
-- No table changes.

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 64
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq._claim_front_read(p_job_types text, p_now_us bigint)
returns pyjobq.claim_front
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  c_lifetime_us constant bigint := 1000000;  -- one second from the head scan that started it
  v_text text := current_setting('pyjobq.claim_front', true);
  v_part text[];
  -- Null until the sequence is first called: epoch 0.
  v_epoch bigint := coalesce(pg_sequence_last_value('pyjobq.job_claim_epoch'), 0);
  v_run_after_us bigint;
begin
  if coalesce(v_text, '') = '' then
    return row(v_epoch, null, null, null, null, null, null)::pyjobq.claim_front;
  end if;
  v_part := string_to_array(v_text, '/');
  -- Each number's digits (ASCII: a cast takes no other) and length first, so
  -- that no cast can fail; a bounded repeat such as [0-9]{1,18} would cost the
  -- regex engine several times as much.
  if cardinality(v_part) = 7
     and v_part[1] = v_epoch::text
     and v_part[3] = p_job_types
     and v_part[2] ~ '^[0-9]+$' and length(v_part[2]) <= 18
     and v_part[4] ~ '^[0-9]+$' and length(v_part[4]) <= 18
     and v_part[7] ~ '^[0-9]+$' and length(v_part[7]) <= 18
     and v_part[5] ~ '^[0-9]+$' and length(v_part[5]) <= 5
     and v_part[6] ~ '^-?[0-9]+$' and length(ltrim(v_part[6], '-')) <= 18
     and p_now_us < v_part[2]::bigint + c_lifetime_us
     and p_now_us >= v_part[2]::bigint
     -- a clock set back (a frozen test clock reset, an NTP step) would let new
     -- jobs sort before the front
     and p_now_us >= v_part[4]::bigint
     and v_part[5]::int <= 32767
     and current_setting('pyjobq.claim_front_off', true) is distinct from 'on' then
    v_run_after_us := v_part[6]::bigint;
    return row(v_epoch, v_part[2]::bigint, p_job_types, v_part[4]::bigint, v_part[5]::smallint,
               'epoch'::timestamptz + make_interval(secs => v_run_after_us / 1000000)
                 + (v_run_after_us % 1000000) * interval '1 microsecond',
               v_part[7]::bigint)::pyjobq.claim_front;
  end if;
  perform set_config('pyjobq.claim_front', '', false);  -- void for good, even if nothing is claimed
  return row(v_epoch, null, null, null, null, null, null)::pyjobq.claim_front;
end;
$$;

comment on function pyjobq._claim_front_read(text, bigint) is
  'This session''s claim front if it still holds for the current epoch, job types p_job_types and the time '
  'p_now_us. Otherwise, or when the setting is not a front at all, the setting is cleared and the result '
  'has only the current epoch (seq null). Either way its epoch is the one a new front is written with.';

create or replace function pyjobq._lease(p_worker_id text, p_ids uuid[], p_lease int, p_at timestamptz)
returns setof pyjobq.claimed_job
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
-- One plan for the session, pinned: the ids on the outside, each job found by
-- its primary key, whatever the statistics say. A session's first claim often
-- meets a queue of a few jobs, whose plan (a scan of the whole table) would
-- otherwise serve every claim after it until the table is analyzed again. The
-- penalties of the disabled methods would tip the plan into JIT compilation.
set enable_seqscan = off
set enable_bitmapscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
set plan_cache_mode = force_generic_plan
as $$
begin
  return query
  with claimed as (
    update pyjobq.job j
       set status = 2,
           attempts = j.attempts + 1,
           worker_id = p_worker_id,
           lease_token = gen_random_uuid(),
           -- The lease, but never past the attempt's deadline.
           lease_until = p_at + make_interval(secs => least(p_lease, t.timeout_seconds)),
           run_started_at = p_at,
           updated_at = p_at
      from pyjobq.job_type t,
           unnest(p_ids) with ordinality u(job_id, ord)
     where j.job_id = u.job_id
       -- Not "status = 1", which job_claim_idx's predicate matches: on a table
       -- never analyzed, the planner would then read every PENDING job to
       -- find these few, where the primary key finds each.
       and j.status::int = 1
       and t.job_type = j.job_type
    returning j.job_id, j.job_type, j.priority, j.payload, j.attempts, j.max_attempts, j.dedupe_key,
              j.run_after, j.lease_until, j.created_at, j.lease_token, j.metadata, j.waiting_on, u.ord
  )
  select c.job_id, c.job_type::int, c.priority::int, c.payload, c.attempts::int, c.max_attempts::int,
         c.dedupe_key::text, c.run_after, c.lease_until, c.created_at, c.lease_token, c.metadata,
         case when c.waiting_on is not null then pyjobq._parent_results(c.job_id) end
    from claimed c
   order by c.ord;
end;
$$;

comment on function pyjobq._lease(text, uuid[], int, timestamptz) is
  'Leases the PENDING jobs p_ids, whose row locks the caller holds, to p_worker_id from p_at for p_lease '
  'seconds (never past the type''s timeout): RUNNING, attempts + 1, a new lease token. Returns them in the '
  'order of p_ids. Every claim path ends here.';

create or replace function pyjobq._claim_pick(p_types smallint[], p_limit int, p_now timestamptz)
returns uuid[]
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
set plan_cache_mode = force_generic_plan
set enable_sort = off  -- see above
set enable_seqscan = off
set enable_bitmapscan = off
set jit = off
as $$
declare
  v_now_us bigint := (extract(epoch from p_now) * 1000000)::bigint;
  v_front pyjobq.claim_front := pyjobq._claim_front_read(p_types::text, v_now_us);
  -- The pass under way resumes from the front (see "Claim fronts" above): the
  -- first, if the front still holds; the pass from the head comes after it,
  -- and alone without one.
  v_resume boolean := v_front.seq is not null;
  v_front_priority smallint := v_front.priority;
  v_priority int;  -- the priority the pass reads next (below every smallint: none yet)
  v_after_run_after timestamptz;  -- and where in it: after this position
  v_after_seq bigint;
  v_ids uuid[] := '{}';
  v_pass uuid[];
  v_last uuid;  -- the last job of the last pass that picked
  v_last_from_head boolean;
  v_passes int := 0;  -- passes that picked
begin
  loop
    v_pass := '{}';
    v_priority := -32769;
    loop
      -- The next priority that has PENDING jobs; resuming, none past the
      -- front's before the front's own.
      v_priority := case when v_resume and v_priority < v_front_priority
                         then coalesce((select c.priority from pyjobq.job c
                                         where c.status = 1 and c.priority > v_priority
                                           and c.priority < v_front_priority
                                         order by c.priority limit 1), v_front_priority)
                         else (select c.priority from pyjobq.job c
                                where c.status = 1 and c.priority > v_priority
                                order by c.priority limit 1) end;
      exit when v_priority is null;
      if v_resume and v_priority = v_front_priority then
        v_after_run_after := v_front.run_after;
        v_after_seq := v_front.seq;
      else
        v_after_run_after := '-infinity';
        v_after_seq := 0;
      end if;
      v_pass := v_pass || array(
        select c.job_id
          from pyjobq.job c
         where c.status = 1
           and c.priority = v_priority
           and (c.priority, c.run_after, c.seq) > (v_priority, v_after_run_after, v_after_seq)
           and c.run_after <= p_now
           and c.job_type = any (p_types)
           and c.job_id <> all (v_ids)
         order by c.priority, c.run_after, c.seq
         limit p_limit - cardinality(v_ids) - cardinality(v_pass)
           for update skip locked);
      exit when cardinality(v_ids) + cardinality(v_pass) = p_limit;
    end loop;
    if cardinality(v_pass) > 0 then
      v_ids := v_ids || v_pass;
      v_passes := v_passes + 1;
      v_last := v_pass[cardinality(v_pass)];
      v_last_from_head := not v_resume;
    end if;
    exit when cardinality(v_ids) = p_limit or not v_resume;
    -- Then from the head: due jobs may remain behind the front.
    v_resume := false;
  end loop;
  if v_passes > 1 then
    -- The head scan took jobs left behind the front: they come first.
    select array_agg(j.job_id order by j.priority, j.run_after, j.seq)
      into v_ids
      from pyjobq.job j
     where j.job_id = any (v_ids);
  end if;
  if cardinality(v_ids) < p_limit then
    -- Short: the claim took every due job it could lock. The next claim starts
    -- from the head, as this one's last pass did: resuming, a claim that comes
    -- back short reads from the head as well, after the front.
    if v_front.seq is not null then
      perform set_config('pyjobq.claim_front', '', false);
    end if;
    return v_ids;
  end if;
  -- The new front: where the last pass that picked ended. A head scan that
  -- picked starts a new second of life; resuming keeps the old front's.
  select j.priority, j.run_after, j.seq
    into v_front.priority, v_front.run_after, v_front.seq
    from pyjobq.job j
   where j.job_id = v_last;
  perform pyjobq._claim_front_write(row(
    v_front.epoch, case when v_last_from_head then v_now_us else v_front.started_us end, p_types::text,
    v_now_us, v_front.priority, v_front.run_after, v_front.seq)::pyjobq.claim_front);
  return v_ids;
end;
$$;

comment on function pyjobq._claim_pick(smallint[], int, timestamptz) is
  'The plain claim''s choice: up to p_limit due PENDING jobs of p_types at p_now, in claim order, resuming from '
  'this session''s claim front, their rows locked for _lease; writes the new front.';

