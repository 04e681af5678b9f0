-- depends: 0009_lease_tokens

-- Schema 10: every attempt has a deadline.
--
-- Without a timeout set for its type, a hung handler's lease was renewed for
-- as long as its worker lived, so the job was never retried anywhere. Each
-- type's timeout_seconds is now its attempts' deadline, 3600 s unless
-- job_type_set_policy says otherwise: job_claim and job_renew_lease(_many)
-- never extend a lease past the claim + the deadline, so the reaper takes the
-- job back once it has passed and retries it elsewhere. Types with no timeout
-- get the default. A job that has been running for more than an hour when
-- this runs is renewed no more: give its type a longer timeout first (up to
-- 604800 s) if its handlers need it.

update pyjobq.job_type set timeout_seconds = 3600 where timeout_seconds is null;

alter table pyjobq.job_type
  alter column timeout_seconds set default 3600,
  alter column timeout_seconds set not null;

comment on column pyjobq.job.lease_until is
  'Set only while RUNNING: after this time job_reap may take the job back from its worker. Never later than '
  'run_started_at + the timeout_seconds of the job''s type: the deadline.';
comment on column pyjobq.job.run_started_at is
  'When the current (or last) attempt was claimed: its deadline runs from here.';

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 10
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq._raise_not_held(p_job_id uuid, p_worker_id text, p_attempt int, p_lease_token uuid)
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_status smallint;
  v_worker text;
  v_attempts smallint;
  v_job_type smallint;
  v_token uuid;
  v_deadline timestamptz;
begin
  if p_job_id is null then
    raise exception 'p_job_id must not be null'
      using errcode = '22004',
            hint = 'Pass the job_id that job_claim returned.';
  end if;
  select j.status, j.worker_id, j.attempts, j.job_type, j.lease_token,
         j.run_started_at + make_interval(secs => t.timeout_seconds)
    into v_status, v_worker, v_attempts, v_job_type, v_token, v_deadline
    from pyjobq.job j
    join pyjobq.job_type t on t.job_type = j.job_type
   where j.job_id = p_job_id;
  if found then
    perform pyjobq._check_privilege('work', array[v_job_type]);
  else
    raise exception 'job % does not exist', p_job_id
      using errcode = 'JQ002',
            hint = 'It may have been pruned, or the id is wrong.';
  end if;
  if v_status = 5 then
    raise exception 'job % was cancelled', p_job_id
      using errcode = 'JQ005',
            hint = 'Stop working on it: nothing this attempt does is recorded.';
  end if;
  if v_status in (3, 4) and v_worker = p_worker_id and v_attempts = p_attempt
     and (p_lease_token is null or v_token = p_lease_token) then
    raise exception 'job % is already %', p_job_id, pyjobq._status_name(v_status)
      using errcode = 'JQ003',
            detail = format('Attempt %s of worker %s already finished it.', p_attempt, p_worker_id),
            hint = 'Finish each claimed attempt once.';
  end if;
  if v_status = 2 and v_worker = p_worker_id and v_attempts = p_attempt
     and (p_lease_token is null or v_token = p_lease_token) then
    -- Still the caller's, but a renewal past the attempt's deadline.
    raise exception 'attempt % of job % is past its deadline', p_attempt, p_job_id
      using errcode = 'JQ001',
            detail = format('Its deadline was %s: the claim plus the timeout_seconds of its type.', v_deadline),
            hint = 'Stop working on it: once its lease runs out the reaper retries it elsewhere.';
  end if;
  -- The detail names the status only: nothing of the holder's fencing token
  -- (its worker id, attempt or lease token) is told to another caller.
  raise exception 'worker % no longer holds attempt % of job %', p_worker_id, p_attempt, p_job_id
    using errcode = 'JQ001',
          detail = format('The job is %s now.', pyjobq._status_name(v_status)),
          hint = 'The lease expired and the job was reaped or claimed again: drop this result, the job runs (or ran) elsewhere.';
end;
$$;

comment on function pyjobq._raise_not_held(uuid, text, int, uuid) is
  'Raises 22004 (null p_job_id), JQ002, JQ003 or JQ001 to explain why (p_worker_id, p_attempt, p_lease_token) '
  'could not act on job p_job_id.';

create or replace function pyjobq._claim_pick(
  p_worker_id text,
  p_types smallint[],
  p_limit int,
  p_lease int,
  p_now timestamptz
)
returns table (
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
  lease_token uuid
)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
-- On a freshly bulk-loaded, never-analyzed table the planner guesses that few
-- rows are due and prefers a bitmap scan plus a sort of every due row. Taking
-- sorts off the table leaves the ordered scan of job_claim_idx, which stops
-- after p_limit rows, whatever the statistics say. The penalty that disabling
-- adds to a plan's cost would otherwise also trigger JIT compilation on
-- every call (hundreds of milliseconds), so JIT is off here too.
set enable_sort = off
set jit = off
as $$
declare
  v_now_us bigint := (extract(epoch from p_now) * 1000000)::bigint;
  v_front pyjobq.claim_front;
  v_bounded boolean;
  -- Without a front these match nothing yet keep every scan an index scan.
  v_priority smallint := -1;
  v_run_after timestamptz := '-infinity';
  v_seq bigint := 0;
  v_row record;
  v_head_last record;
  v_last record;
  v_claimed int := 0;
  v_from_head int := 0;
begin
  -- Resume after this session's claim front, if it still holds (see "Claim
  -- fronts" above); the scan from the head comes after, and alone without one.
  v_front := pyjobq._claim_front_read(p_types::text, v_now_us);
  v_bounded := v_front.seq is not null;
  if v_bounded then
    v_priority := v_front.priority;
    v_run_after := v_front.run_after;
    v_seq := v_front.seq;
  end if;

  -- One statement: each MATERIALIZED CTE locks at most its limit exactly once
  -- (a plain subquery may be re-run by a nested loop and lock more), and SKIP
  -- LOCKED lets concurrent claimers take the next rows instead of waiting.
  -- The urgent jobs ahead of the front come first, then the jobs after it,
  -- then the scan from the head. Without a front, "ahead" and "after" have
  -- limit 0 and read nothing.
  for v_row in
  with ahead as materialized (
    select c.job_id, 1 as part
      from pyjobq.job c
     where c.status = 1
       and c.priority < v_priority
       and c.run_after <= p_now
       and c.job_type = any (p_types)
     order by c.priority, c.run_after, c.seq
     limit case when v_bounded then p_limit else 0 end
       for update skip locked
  ),
  after as materialized (
    select c.job_id, 2 as part
      from pyjobq.job c
     where c.status = 1
       and (c.priority, c.run_after, c.seq) > (v_priority, v_run_after, v_seq)
       and c.run_after <= p_now
       and c.job_type = any (p_types)
     order by c.priority, c.run_after, c.seq
     limit case when v_bounded then p_limit else 0 end
       for update skip locked
  ),
  head as materialized (
    select c.job_id, 3 as part
      from pyjobq.job c
     where c.status = 1
       and c.run_after <= p_now
       and c.job_type = any (p_types)
       and c.job_id not in (select a.job_id from ahead a union all select f.job_id from after f)
     order by c.priority, c.run_after, c.seq
     limit p_limit
       for update skip locked
  ),
  -- CTEs run as far as they are read: once p_limit jobs are picked, the
  -- scans not yet reached never start and lock nothing.
  picked as (
    (select a.job_id, a.part from ahead a
     union all
     select f.job_id, f.part from after f
     union all
     select h.job_id, h.part from head h)
    limit p_limit
  ),
  claimed as (
    update pyjobq.job j
       set status = 2,
           attempts = j.attempts + 1,
           worker_id = p_worker_id,
           lease_token = gen_random_uuid(),
           -- The lease, but never past the attempt's deadline.
           lease_until = p_now + make_interval(secs => least(p_lease, t.timeout_seconds)),
           run_started_at = p_now,
           updated_at = p_now
      from picked p, pyjobq.job_type t
     where j.job_id = p.job_id
       and t.job_type = j.job_type
    returning j.job_id, j.job_type, j.priority, j.payload, j.attempts, j.max_attempts,
              j.dedupe_key, j.run_after, j.lease_until, j.created_at, j.lease_token, j.seq, p.part
  )
  select c.*
    from claimed c
   order by c.priority, c.run_after, c.seq
  loop
    job_id := v_row.job_id;
    job_type := v_row.job_type;
    priority := v_row.priority;
    payload := v_row.payload;
    attempt := v_row.attempts;
    max_attempts := v_row.max_attempts;
    dedupe_key := v_row.dedupe_key;
    run_after := v_row.run_after;
    lease_until := v_row.lease_until;
    created_at := v_row.created_at;
    lease_token := v_row.lease_token;
    return next;
    v_claimed := v_claimed + 1;
    v_last := v_row;
    if v_row.part = 3 then
      v_from_head := v_from_head + 1;
      v_head_last := v_row;
    end if;
  end loop;
  -- The new front: the last job taken, or, when the head scan took any, the
  -- last of those (due jobs may remain between it and the old front). A head
  -- scan starts a new second of life; resuming keeps the old front's.
  if v_from_head > 0 then
    v_last := v_head_last;
  end if;
  if v_claimed > 0 then
    perform pyjobq._claim_front_write(row(
      v_front.epoch, case when v_from_head > 0 then v_now_us else v_front.started_us end, p_types::text,
      v_now_us, v_last.priority, v_last.run_after, v_last.seq)::pyjobq.claim_front);
  end if;
end;
$$;

comment on function pyjobq._claim_pick(text, smallint[], int, int, timestamptz) is
  'job_claim once its arguments are checked: takes up to p_limit due PENDING jobs of p_types for p_worker_id, '
  'resuming from this session''s claim front, and writes the new front.';

create or replace function pyjobq.job_renew_lease_many(
  p_worker_id text,
  p_job_ids uuid[],
  p_attempts int[],
  p_lease_seconds int default null,
  p_lease_tokens uuid[] default null
)
returns table (job_id uuid, renewed boolean, lease_until timestamptz, cancelled boolean)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
-- Each job found by its primary key whatever the statistics say, as in
-- job_complete_many.
set enable_seqscan = off
set enable_bitmapscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_denied smallint[] := pyjobq._denied_types('work');
  v_lease int := coalesce(p_lease_seconds, 300);
  v_count int := coalesce(cardinality(p_job_ids), 0);
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  p_attempts := pyjobq._check_array('p_attempts', p_attempts);
  p_lease_tokens := pyjobq._check_array('p_lease_tokens', p_lease_tokens);
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  perform pyjobq._check_range('p_lease_seconds', v_lease, 1, 86400);
  perform pyjobq._check_same_length('p_attempts', coalesce(cardinality(p_attempts), 0), v_count);
  perform pyjobq._check_lease_tokens(p_lease_tokens, v_count);

  return query
  with input as (
    select u.id, u.attempt, u.token, u.ord
      from unnest(p_job_ids, p_attempts, p_lease_tokens) with ordinality as u(id, attempt, token, ord)
  ), renewed as (
    -- Up to the attempt's deadline, never past it; once it has passed, the lease
    -- runs out and the reaper retries the job elsewhere.
    update pyjobq.job j
       set lease_until = least(v_now + make_interval(secs => v_lease),
                               j.run_started_at + make_interval(secs => t.timeout_seconds)),
           updated_at = v_now
      from (select distinct i.id, i.attempt, i.token from input i) f, pyjobq.job_type t
     where j.job_id = f.id
       and t.job_type = j.job_type
       and j.run_started_at + make_interval(secs => t.timeout_seconds) > v_now
       and j.status = 2
       and j.worker_id = p_worker_id
       and j.job_type <> all (v_denied)
       and j.attempts = f.attempt
       and (j.lease_token = f.token or f.token is null)
    returning j.job_id, j.attempts, j.lease_until
  )
  select i.id, r.job_id is not null, r.lease_until,
         -- cancelled while this holder had it: stop the handler
         r.job_id is null and exists (select from pyjobq.job k
                                       where k.job_id = i.id
                                         and k.job_type <> all (v_denied)
                                         and k.status = 5
                                         and k.worker_id = p_worker_id
                                         and k.attempts = i.attempt
                                         and (k.lease_token = i.token or i.token is null))
    from input i
    left join renewed r on r.job_id = i.id and r.attempts = i.attempt
   order by i.ord;
end;
$$;

comment on function pyjobq.job_renew_lease_many(text, uuid[], int[], int, uuid[]) is
  'Heartbeat for up to 10000 jobs in one call: extends to now + p_lease_seconds (1..86400, default 300) the '
  'lease of each job whose attempt p_worker_id still holds with the lease token at its position in p_lease_tokens, '
  'but never past the attempt''s deadline (claimed + its type''s timeout_seconds; once passed, not renewed). Returns every input job id, in input order, with '
  'renewed and the new lease_until, or renewed = false and a null lease_until for a job no longer held (left '
  'unchanged), with cancelled = true when job_cancel took it from this holder. A holder whose lease expired but '
  'was not yet reaped still holds the job.';

create or replace function pyjobq.job_renew_lease(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_lease_seconds int default null,
  p_lease_token uuid default null
)
returns timestamptz
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_lease_until timestamptz;
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_attempt', p_attempt, 1, 32767);
  perform pyjobq._check_lease_token('p_lease_token', p_lease_token is null);
  select r.lease_until
    into v_lease_until
    from pyjobq.job_renew_lease_many(p_worker_id, array[p_job_id], array[p_attempt], p_lease_seconds,
                                     case when p_lease_token is not null then array[p_lease_token] end) r;
  -- Not renewed: why, including JQ005 when the job was cancelled.
  if v_lease_until is null then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt, p_lease_token);
  end if;
  return v_lease_until;
end;
$$;

comment on function pyjobq.job_renew_lease(uuid, text, int, int, uuid) is
  'Heartbeat: extends the lease of attempt p_attempt of job p_job_id to now + p_lease_seconds (1..86400, '
  'default 300), never past the attempt''s deadline, if p_worker_id still holds it with lease token p_lease_token, and returns the new lease_until; raises JQ001/JQ002/JQ003 otherwise. '
  'A holder whose lease expired but was not yet reaped still holds the job.';

create or replace function pyjobq.job_type_set_policy(
  p_job_type int,
  p_max_attempts int default null,
  p_backoff_base_seconds double precision default null,
  p_backoff_cap_seconds double precision default null,
  p_backoff_jitter double precision default null,
  p_timeout_seconds double precision default null
)
returns void
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
begin
  perform pyjobq._check_job_type(p_job_type);
  if p_max_attempts is not null then
    perform pyjobq._check_range('p_max_attempts', p_max_attempts, 1, 1000);
  end if;
  perform pyjobq._check_seconds('p_backoff_base_seconds', p_backoff_base_seconds, 0, 86400);
  perform pyjobq._check_seconds('p_backoff_cap_seconds', p_backoff_cap_seconds,
                                coalesce(p_backoff_base_seconds, 2), 31536000);
  if p_backoff_jitter is not null and not (p_backoff_jitter between 0 and 1) then
    raise exception 'p_backoff_jitter must be between 0 and 1'
      using errcode = '22023',
            detail = format('p_backoff_jitter was %s.', p_backoff_jitter),
            hint = 'The share of the delay taken off at random; leave it out for 0.25.';
  end if;
  perform pyjobq._check_seconds('p_timeout_seconds', p_timeout_seconds, 0, 604800);
  update pyjobq.job_type t
     set max_attempts = p_max_attempts,
         backoff_base_seconds = p_backoff_base_seconds,
         backoff_cap_seconds = p_backoff_cap_seconds,
         backoff_jitter = p_backoff_jitter,
         timeout_seconds = coalesce(p_timeout_seconds, 3600)  -- the column's default
   where t.job_type = p_job_type;
end;
$$;

comment on function pyjobq.job_type_set_policy(int, int, double precision, double precision, double precision, double precision) is
  'Sets job type p_job_type''s retry policy, each null meaning the default: max_attempts for enqueues that '
  'pass none (1..1000, default 3), backoff base (0..86400 s, default 2) doubling per try up to the cap '
  '(base..31536000 s, default 3600) minus up to p_backoff_jitter of it (0..1, default 0.25), and the '
  'deadline of an attempt from its claim (0..604800 s, default 3600): workers stop the handler there, and no '
  'lease reaches past it, so the reaper retries the job elsewhere. Jobs already enqueued keep their max_attempts.';

create or replace function pyjobq.job_type_policies()
returns table (
  job_type int,
  name text,
  max_attempts int,
  backoff_base_seconds double precision,
  backoff_cap_seconds double precision,
  backoff_jitter double precision,
  timeout_seconds double precision
)
language sql
stable
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select t.job_type::int, t.name::text, coalesce(t.max_attempts, 3)::int,
         coalesce(t.backoff_base_seconds, 2), coalesce(t.backoff_cap_seconds, 3600),
         coalesce(t.backoff_jitter, 0.25), t.timeout_seconds
    from pyjobq.job_type t
   order by t.job_type
$$;

comment on function pyjobq.job_type_policies() is
  'Each registered job type''s retry policy as it applies, defaults filled in: max_attempts, backoff base, '
  'cap and jitter, and the deadline of an attempt in seconds from its claim.';

