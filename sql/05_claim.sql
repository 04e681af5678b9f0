-- Claim -----------------------------------------------------------------------
--
-- Claim fronts.
--
-- Each claimed job leaves an index entry behind that a snapshot older than the
-- claim can still see (an idle transaction, a long report), and while such a
-- snapshot lives, no scan and no vacuum may drop it: every claim from the head
-- of job_claim_idx would walk past all jobs claimed since, and a drain would
-- turn quadratic. So a session remembers where its last claim ended, its
-- front: (priority, run_after, seq) of the last job taken, if the claim took
-- as many jobs as it asked for. (One that came back short took every due job
-- it could lock; the next claim starts from the head.) Every due job
-- before that point was claimed, or locked by a claimer, when it was taken.
-- New jobs sort after it (seq grows, run_after >= now), except jobs of a more
-- urgent priority, which job_claim looks for separately, and jobs that a
-- change puts back before it (release, a past run_after, redrive, a retry due
-- at once). Every change that makes a job PENDING takes the time it is due
-- from _pending_from (below), which voids every front of every session when
-- the job can sort before one: the one way into PENDING, so that no transition
-- can forget it. When the part after the front cannot fill the batch, the scan from
-- the head fills it, so an emptying queue is answered exactly as without one.
--
-- Correctness rests on the head scan and the lifetime, not on the epoch, which
-- is only an optimisation: a job can still be left behind a front (an enqueue
-- that commits after claims passed its position, a claim that rolled back, a
-- release committing after a claimer read the epoch). So a front lives one
-- second from the head scan that started it; claims that resume from it do
-- not extend its life. The next claim after that second scans from the head,
-- so no due, unlocked job is passed over for much more than a second by any
-- session that keeps claiming, whatever the backlog.
--
-- The front is a session setting (pyjobq.claim_front), so a session may write
-- anything there: what cannot be read as a front is no front. Behind a
-- transaction-mode pooler a session serves many clients in turn, and a front
-- then belongs to whichever claimed last through it: it is still only a
-- starting point bounded to a second. pyjobq.claim_front_off = on turns fronts
-- off for the session; every claim is then the plain scan from the head.

create type pyjobq.claim_front as (
  epoch bigint,          -- pyjobq.job_claim_epoch when written: a later value voids it
  started_us bigint,     -- when the head scan that started it ran (microseconds since 1970)
  job_types text,        -- the set of job types claimed: a front serves that set only
  written_us bigint,     -- when the claim that wrote it ran: a clock read earlier voids it
  priority smallint,     -- the position of the last job taken
  run_after timestamptz,
  seq bigint
);

comment on type pyjobq.claim_front is
  'Where a session''s last claim ended, and whether that still holds; see the section "Claim fronts".';

-- The one way into PENDING. Each change that makes a job PENDING, a new one
-- or one claimed before, passes the time it is due through _pending_from, or
-- through _retry_at, which adds the backoff first. A job with an old seq due by
-- now, or a new one due before now, can sort before a claim front, so this is
-- where fronts are voided. (A job of a more urgent priority sorts before a
-- front whenever it is due; job_claim looks for those separately.)
create function pyjobq._pending_from(p_run_after timestamptz, p_now timestamptz, p_new boolean)
returns timestamptz
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_run_after < p_now or (p_run_after = p_now and not p_new) then
    perform nextval('pyjobq.job_claim_epoch');  -- voids every front; never rolled back, no row lock
  end if;
  return p_run_after;
end;
$$;

comment on function pyjobq._pending_from(timestamptz, timestamptz, boolean) is
  'Returns p_run_after, the time a job becoming PENDING at p_now is due (p_new: a new job, with a new seq), '
  'after voiding every session''s claim front if the job can sort before one. Every change to PENDING calls it.';

create function pyjobq._retry_at(p_job_type int, p_tries_used int, p_delay interval, p_now timestamptz)
returns timestamptz
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  return pyjobq._pending_from(p_now + coalesce(p_delay, pyjobq._backoff(p_job_type, p_tries_used)),
                              p_now, false);
end;
$$;

comment on function pyjobq._retry_at(int, int, interval, timestamptz) is
  'When a failed or reaped job of type p_job_type is due again: p_now plus p_delay or, when null, the '
  'type''s backoff after p_tries_used tries; through _pending_from.';

create function pyjobq._claim_front_write(p_front pyjobq.claim_front)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  -- Numbers only (run_after as microseconds): the text reads back the same
  -- whatever DateStyle or TimeZone the session sets meanwhile.
  perform set_config('pyjobq.claim_front',
                     concat_ws('/', p_front.epoch, p_front.started_us, p_front.job_types, p_front.written_us,
                               p_front.priority, (extract(epoch from p_front.run_after) * 1000000)::bigint,
                               p_front.seq),
                     false);
end;
$$;

comment on function pyjobq._claim_front_write(pyjobq.claim_front) is
  'Keeps p_front as this session''s claim front.';

create function pyjobq._claim_front_read(p_job_types text, p_now_us bigint)
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

-- The one way into RUNNING. Every claim, however it chose its jobs, leases
-- them here: status, attempt, worker, lease token, lease and start time are
-- set in this one statement, and the claimed job comes back in one row type.
-- The caller holds the row locks of p_ids (it chose them FOR UPDATE SKIP
-- LOCKED), so each is still PENDING; the status test only keeps the
-- statement a compare-and-set. They come back in the order the caller chose.
create type pyjobq.claimed_job as (
  job_id uuid,
  job_type int,
  priority int,
  payload jsonb,
  attempt int,
  max_attempts int,
  dedupe_key text,
  run_after timestamptz,
  lease_until timestamptz,
  created_at timestamptz,
  lease_token uuid,
  metadata jsonb,
  parent_results jsonb
);

comment on type pyjobq.claimed_job is
  'A job as a claim returns it: what its handler needs, and the fencing token (attempt, lease_token).';

create function pyjobq._lease(p_worker_id text, p_ids uuid[], p_lease int, p_at timestamptz)
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

-- The plain claim's choice, once job_claim has checked its arguments and
-- privileges: resume from this session's claim front (or scan from the
-- head), pick with SKIP LOCKED, and write the new front; the caller leases
-- what it picked. The front is read and written here only.
--
-- job_claim_idx holds the PENDING jobs that are not due yet as well (a
-- snooze, a wait, a retry's backoff, a job enqueued for later), and in its
-- order (priority, run_after, seq) each priority's jobs not due come right
-- after its due ones. So the pick goes priority by priority: the range of
-- one priority's due jobs, which ends at its first job not due, then the
-- next priority that has PENDING jobs, found by one descent of the index.
-- However many jobs sleep, a claim reads none of them.
--
-- A pass takes the priorities in order, each once, and as far as it needs
-- them: once it has its jobs, no further priority is looked up and no further
-- row is locked. SKIP LOCKED lets concurrent claimers take the next rows
-- instead of waiting. A pass that resumes from the front takes the
-- priorities before the front's whole, then the front's priority after the
-- front's position, then the later priorities whole; below the front's
-- priority a descent stops at it, so that the jobs claimed from it since the
-- front started, whose index entries an old snapshot may keep, are never
-- walked past. The pass from the head takes every priority whole.
--
-- Each step is a statement of its own, small and planned once per session:
-- one statement that walked the priorities itself (a recursive query, ordered
-- aggregates for the new front) cost a claim more to set up at each call than
-- the steps cost to run.
--
-- On a freshly bulk-loaded, never-analyzed table the planner guesses that few
-- rows are due and prefers a bitmap scan plus a sort of every due row. Taking
-- sorts off the table leaves the ordered scan of job_claim_idx, which stops
-- after p_limit rows, whatever the statistics say. Every other step reads a
-- job by its primary key: no scan of the whole table either, which a plan
-- made on a nearly empty queue, the session's first claim, would keep. The
-- penalty that disabling adds to a plan's cost would otherwise also trigger
-- JIT compilation on every call (hundreds of milliseconds), so JIT is off
-- here too.
create function pyjobq._claim_pick(p_types smallint[], p_limit int, p_now timestamptz)
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

-- The job types a claim (or job_next_due) looks at: p_job_types checked, or
-- every registered type when null. Types whose work privilege names roles the
-- caller is not in are left out of "every type", refused when asked for by code.
-- A paused type (job_type_pause) is left out, asked for or not.
create function pyjobq._work_types(p_job_types int[])
returns smallint[]
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
-- Planned once per session: the plans do not depend on the arguments' values.
set plan_cache_mode = force_generic_plan
as $$
declare
  v_types smallint[];
  v_codes int[];
  v_bad boolean;
  v_denied smallint[] := pyjobq._denied_types('work');
begin
  p_job_types := pyjobq._check_array('p_job_types', p_job_types);
  if p_job_types is null then
    select array_agg(t.job_type order by t.job_type)
      into v_types
      from pyjobq.job_type t
     where t.job_type <> all (v_denied)
       and t.paused_at is null;
    return coalesce(v_types, '{}');
  end if;
  -- One statement checks the codes and leaves the paused types out.
  select bool_or(u.code is null or u.code not between 1 and 32767),
         coalesce(array_agg(u.code order by u.ord)
                    filter (where not exists (select from pyjobq.job_type t
                                               where t.job_type = u.code and t.paused_at is not null)),
                  '{}')
    into v_bad, v_codes
    from unnest(p_job_types) with ordinality as u(code, ord);
  if v_bad then
    raise exception 'p_job_types elements must be job type codes between 1 and 32767'
      using errcode = '22023',
            hint = 'Pass null for every registered type.';
  end if;
  if cardinality(v_denied) > 0 then
    perform pyjobq._check_privilege('work', p_job_types);
  end if;
  return v_codes::smallint[];
end;
$$;

comment on function pyjobq._work_types(int[]) is
  'The job types a worker''s call looks at: p_job_types checked (22023 for a code out of range, 42501 for a '
  'type the caller may not work), or every registered type the caller may work when null; paused types '
  'left out either way.';

create function pyjobq.job_claim(
  p_worker_id text,
  p_limit int default null,
  p_lease_seconds int default null,
  p_job_types int[] default null
)
returns setof pyjobq.claimed_job
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_limit int := coalesce(p_limit, 1);
  v_lease int := coalesce(p_lease_seconds, 300);
  v_types smallint[];
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_limit', v_limit, 1, 1000);
  perform pyjobq._check_range('p_lease_seconds', v_lease, 1, 86400);
  v_types := pyjobq._work_types(p_job_types);
  if current_setting('transaction_isolation') <> 'read committed' then
    -- The types as this transaction's first snapshot saw them: a pause
    -- committed since fails the claim (40001) instead of letting it past.
    perform from pyjobq.job_type t where t.job_type = any (v_types) for share;
  end if;
  if exists (select 1 from pyjobq.job_type t
              where t.job_type = any (v_types)
                and (t.max_running is not null or t.key_max_running is not null or t.rate_limit is not null
                     or t.key_rate_limit is not null or t.fair_share)) then
    return query select * from pyjobq._claim_limited(p_worker_id, v_types, v_limit, v_lease, v_now);
  else
    return query select * from pyjobq._lease(p_worker_id, pyjobq._claim_pick(v_types, v_limit, v_now), v_lease, v_now);
  end if;
end;
$$;

comment on function pyjobq.job_claim(text, int, int, int[]) is
  'Atomically takes up to p_limit (1..1000, default 1) due PENDING jobs, lowest priority value then earliest '
  'run_after first, of the given job types (default all), and leases them to p_worker_id (1..80 chars) for '
  'p_lease_seconds (1..86400, default 300): RUNNING, attempts + 1. Rows locked by other claimers are skipped, '
  'never waited for. A type with concurrency limits (job_type_set_limits) never has more RUNNING, or more '
  'claims in a period, than they allow, in all and per concurrency key; a fair-share type''s jobs are taken '
  'round robin across their concurrency keys; a paused type''s (job_type_pause) are not taken. Returns the claimed jobs with their metadata, and for a job with '
  'parents (job_enqueue''s p_depends_on) their results (parent_results: a JSON array of {job_id, job_type, '
  'status, result} in the order the enqueue named them); attempt and lease_token '
  '(random, shown by nothing else) are the fencing token to pass to complete/fail/renew/release. An empty result means nothing '
  'is due.';

-- When an idle worker should claim again. A job that becomes due later, by
-- its run_after or a retry's backoff, is announced by nothing at that time, so
-- a worker that knows the time sleeps until then instead of a poll interval.
-- Due jobs are left out: they are claimed, or locked by a claimer, already.
-- job_claim_idx leads with priority, so the earliest run_after is found per
-- priority (a skip scan over the few priorities in use), each an index probe.
create function pyjobq.job_next_due(p_job_types int[] default null)
returns timestamptz
language plpgsql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set enable_sort = off
set jit = off
set plan_cache_mode = force_generic_plan
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_types smallint[] := pyjobq._work_types(p_job_types);
  v_next timestamptz;
begin
  with recursive priorities as (
    (select c.priority
       from pyjobq.job c
      where c.status = 1
      order by c.priority
      limit 1)
    union all
    select (select c.priority
              from pyjobq.job c
             where c.status = 1
               and c.priority > p.priority
             order by c.priority
             limit 1)
      from priorities p
     where p.priority is not null
  )
  select min((select c.run_after
                from pyjobq.job c
               where c.status = 1
                 and c.priority = p.priority
                 and c.run_after > v_now
                 and c.job_type = any (v_types)
               order by c.run_after
               limit 1))
    into v_next
    from priorities p
   where p.priority is not null;
  -- A rate window may hold due jobs back: it has more room when its oldest
  -- claim leaves it. (Whether it is full is not enough: a claim that filled it
  -- may find it a claim short a moment later, jobs still due.) Windows empty
  -- out a period after the last claim, so an idle worker is not woken for long.
  return least(v_next, (
    select min(o.at + o.period)
      from pyjobq.job_type t
      join pyjobq.rate_window w on w.job_type = t.job_type
     cross join lateral (
       select case when w.concurrency_key = '' then t.rate_period else t.key_rate_period end as period) p
     cross join lateral (
       select min(e.at) as at, p.period from unnest(w.claimed_at) e(at) where e.at > v_now - p.period) o
     where t.job_type = any (v_types)
       and (t.rate_limit is not null or t.key_rate_limit is not null)));
end;
$$;

comment on function pyjobq.job_next_due(int[]) is
  'The earliest run_after still to come of the PENDING jobs of the given job types (default: every type the '
  'caller may work), or null when none is scheduled, or when a rate window (job_type_set_limits) next gains room if '
  'sooner: when an idle worker should claim again. Jobs due now are not counted.';
