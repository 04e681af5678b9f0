-- depends: 0008_next_due

-- Schema 9: lease tokens.
--
-- A holder proved itself with (worker_id, attempt), which job_get shows and a
-- worker id can be guessed from: a co-worker could complete, fail, renew or
-- release a job it did not hold. Each claim now draws a random lease token
-- that job_claim returns and nothing else shows, and every transition of a
-- holder takes it as a new last parameter (p_lease_token, p_lease_tokens).
--
-- The old signatures keep working for one release: the functions are dropped
-- and created again with the token as a trailing parameter with a default, so
-- a call written for schema 8 resolves to them unchanged. Whether a call
-- without the token is accepted is the install's setting
-- (job_settings_set(p_require_lease_token => ...)): this migration accepts
-- them on an install that has ever enqueued a job, whose clients may predate
-- tokens, and refuses them on one that never has, as a new install does. The
-- schema owner is never refused. Jobs RUNNING at the upgrade have no token:
-- their holders finish them without one while the install accepts that, or
-- they are reaped and retried once it does not.

alter table pyjobq.job add column lease_token uuid;

comment on column pyjobq.job.attempts is
  'Claims so far (+1 at each claim, never wound back): part of the fencing token a holder passes back to '
  'complete, fail, renew or release, so a token is never valid twice for a job.';
comment on column pyjobq.job.lease_token is
  'A random uuid drawn at each claim and returned by job_claim alone: the secret part of the fencing token, '
  'which no other function shows and no error discloses.';

create table pyjobq.setting (
  singleton boolean primary key default true,
  require_lease_token boolean not null,
  constraint setting_one_row check (singleton)
);

comment on table pyjobq.setting is
  'The install''s settings, one row; see job_settings. require_lease_token: a holder''s transition without '
  'the lease token is refused (22004) unless the caller owns the schema.';

insert into pyjobq.setting (require_lease_token)
select not s.is_called from pyjobq.job_seq s;

drop function pyjobq.job_complete(uuid, text, int, jsonb);
drop function pyjobq.job_complete_many(text, uuid[], int[], jsonb[]);
drop function pyjobq.job_fail(uuid, text, int, text, double precision, boolean);
drop function pyjobq.job_renew_lease(uuid, text, int, int);
drop function pyjobq.job_renew_lease_many(text, uuid[], int[], int);
drop function pyjobq.job_release(uuid, text, int);
drop function pyjobq.job_release_many(text, uuid[], int[]);
drop function pyjobq._raise_not_held(uuid, text, int);
drop function pyjobq.job_claim(text, int, int, int[]);
drop function pyjobq._claim_pick(text, smallint[], int, int, timestamptz);

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 9
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create or replace function pyjobq._session_owns_schema()
returns boolean
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  return pg_has_role(session_user,
                     (select n.nspowner from pg_catalog.pg_namespace n where n.nspname = 'pyjobq'),
                     'USAGE');
end;
$$;

comment on function pyjobq._session_owns_schema() is
  'True when session_user has the privileges of the pyjobq schema''s owner.';

create or replace function pyjobq.clock_now()
returns timestamptz
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_fake text := nullif(current_setting('pyjobq.fake_now', true), '');
  v_now timestamptz;
begin
  if v_fake is null then
    return statement_timestamp();
  end if;
  -- The clock belongs to the owner of the schema. Any other role that could move
  -- it would take live leases from their workers (reap in 2100), claim jobs due
  -- next week, or make a lease that never ends ('infinity'). The test is
  -- _session_owns_schema's, written out: this function runs with the rights of
  -- its caller, who may not execute the schema's private functions.
  if not pg_has_role(session_user,
                     (select n.nspowner from pg_catalog.pg_namespace n where n.nspname = 'pyjobq'),
                     'USAGE') then
    raise exception 'only the owner of schema pyjobq may set pyjobq.fake_now'
      using errcode = '42501',
            detail = format('Role %s set pyjobq.fake_now to %s.', session_user, v_fake),
            hint = 'RESET pyjobq.fake_now: the test clock is for the schema owner''s test sessions.';
  end if;
  v_now := v_fake::timestamptz;
  if not isfinite(v_now) then
    raise exception 'pyjobq.fake_now must be a finite time'
      using errcode = '22023',
            detail = format('pyjobq.fake_now was %s.', v_fake),
            hint = 'Set a time such as ''2030-01-01 00:00:00+00'', or RESET pyjobq.fake_now.';
  end if;
  return v_now;
end;
$$;

comment on function pyjobq.clock_now() is
  'The one clock of pyjobq: statement_timestamp(), unless the session sets pyjobq.fake_now to freeze time '
  '(tests); only roles with the privileges of the pyjobq schema''s owner may, any other gets 42501, and a '
  'time that is not finite is 22023.';


create or replace function pyjobq._denied_types(p_privilege text)
returns smallint[]
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  -- PL/pgSQL, not SQL: its plans are kept for the session, where a SQL
  -- function's body is planned again at every call (tens of microseconds on
  -- every claim and completion). No grant of the privilege: nothing denied.
  if not exists (select 1 from pyjobq.job_type_grant g where g.privilege = p_privilege)
     or pyjobq._session_owns_schema() then
    return '{}';
  end if;
  return (select coalesce(array_agg(distinct g.job_type order by g.job_type), '{}')
            from pyjobq.job_type_grant g
           where g.privilege = p_privilege
             and not exists (select 1
                               from pyjobq.job_type_grant m
                               join pg_catalog.pg_roles r on r.oid = m.role_oid
                              where m.job_type = g.job_type
                                and m.privilege = p_privilege
                                and pg_has_role(session_user, m.role_oid, 'MEMBER')));
end;
$$;

comment on function pyjobq._denied_types(text) is
  'The job types whose p_privilege is granted to named roles, none of which the session''s role is a member of.';

create or replace function pyjobq._check_lease_token(p_name text, p_missing boolean)
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_missing
     and (select s.require_lease_token from pyjobq.setting s)
     and not pyjobq._session_owns_schema() then
    raise exception '% must not be null', p_name
      using errcode = '22004',
            detail = 'This install requires the lease_token that job_claim returned with the job.',
            hint = 'Pass the claim''s lease_token. Until every client does, an admin may accept calls '
                   'without it: select pyjobq.job_settings_set(p_require_lease_token => false).';
  end if;
end;
$$;

comment on function pyjobq._check_lease_token(text, boolean) is
  'Raises 22004 naming p_name when p_missing (a transition without its lease token), the install requires '
  'tokens and the session does not own the schema.';

create or replace function pyjobq._check_lease_tokens(p_lease_tokens uuid[], p_count int)
returns void
language plpgsql
stable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  if p_lease_tokens is not null then
    perform pyjobq._check_same_length('p_lease_tokens', cardinality(p_lease_tokens), p_count);
  end if;
  perform pyjobq._check_lease_token('p_lease_tokens',
                                    p_lease_tokens is null or array_position(p_lease_tokens, null) is not null);
end;
$$;

comment on function pyjobq._check_lease_tokens(uuid[], int) is
  'Raises 22023 unless p_lease_tokens is null or has p_count elements, and 22004 as _check_lease_token does '
  'when it is null or holds a null.';

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
begin
  if p_job_id is null then
    raise exception 'p_job_id must not be null'
      using errcode = '22004',
            hint = 'Pass the job_id that job_claim returned.';
  end if;
  select j.status, j.worker_id, j.attempts, j.job_type, j.lease_token
    into v_status, v_worker, v_attempts, v_job_type, v_token
    from pyjobq.job j
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
           lease_until = p_now + make_interval(secs => p_lease),
           run_started_at = p_now,
           updated_at = p_now
      from picked p
     where j.job_id = p.job_id
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

create or replace function pyjobq.job_claim(
  p_worker_id text,
  p_limit int default null,
  p_lease_seconds int default null,
  p_job_types int[] default null
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
security definer
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_limit int := coalesce(p_limit, 1);
  v_lease int := coalesce(p_lease_seconds, 300);
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_limit', v_limit, 1, 1000);
  perform pyjobq._check_range('p_lease_seconds', v_lease, 1, 86400);
  return query
  select * from pyjobq._claim_pick(p_worker_id, pyjobq._work_types(p_job_types), v_limit, v_lease, v_now);
end;
$$;

comment on function pyjobq.job_claim(text, int, int, int[]) is
  'Atomically takes up to p_limit (1..1000, default 1) due PENDING jobs, lowest priority value then earliest '
  'run_after first, of the given job types (default all), and leases them to p_worker_id (1..80 chars) for '
  'p_lease_seconds (1..86400, default 300): RUNNING, attempts + 1. Rows locked by other claimers are skipped, '
  'never waited for. Returns the claimed jobs; attempt and lease_token (random, shown by nothing else) are the '
  'fencing token to pass to complete/fail/renew/release. An empty result means nothing is due.';

create or replace function pyjobq.job_complete(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_result jsonb default null,
  p_lease_token uuid default null
)
returns void
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_denied smallint[] := pyjobq._denied_types('work');
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_attempt', p_attempt, 1, 32767);
  perform pyjobq._check_lease_token('p_lease_token', p_lease_token is null);
  update pyjobq.job j
     set status = 3,
         result = p_result,
         lease_until = null,
         updated_at = v_now
   where j.job_id = p_job_id
     and j.status = 2
     and j.worker_id = p_worker_id
     and j.job_type <> all (v_denied)
     and j.attempts = p_attempt
     and (j.lease_token = p_lease_token or p_lease_token is null);
  if not found then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt, p_lease_token);
  end if;
end;
$$;

comment on function pyjobq.job_complete(uuid, text, int, jsonb, uuid) is
  'Marks job p_job_id DONE with p_result, if p_worker_id still holds attempt p_attempt of it (RUNNING) with '
  'lease token p_lease_token; otherwise raises JQ001 lease_lost, JQ002 job_not_found or JQ003 '
  'job_already_finished and changes nothing. Without p_lease_token: 22004, unless the caller owns the schema '
  'or job_settings accepts such calls.';

create or replace function pyjobq.job_complete_many(
  p_worker_id text,
  p_job_ids uuid[],
  p_attempts int[],
  p_results jsonb[] default null,
  p_lease_tokens uuid[] default null
)
returns table (job_id uuid, completed boolean)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
-- One statement for the batch, its plan pinned: input rows on the outside, each
-- job found by its primary key (the only index the update's predicate allows),
-- whatever the statistics say. The penalties of the disabled methods would
-- otherwise tip the plan into JIT compilation.
set enable_seqscan = off
set enable_bitmapscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_denied smallint[] := pyjobq._denied_types('work');
  v_count int := coalesce(cardinality(p_job_ids), 0);
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  p_attempts := pyjobq._check_array('p_attempts', p_attempts);
  p_results := pyjobq._check_array('p_results', p_results);
  p_lease_tokens := pyjobq._check_array('p_lease_tokens', p_lease_tokens);
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  perform pyjobq._check_same_length('p_attempts', coalesce(cardinality(p_attempts), 0), v_count);
  if p_results is not null then  -- null: no results; else one, possibly null, per job
    perform pyjobq._check_same_length('p_results', cardinality(p_results), v_count);
  end if;
  perform pyjobq._check_lease_tokens(p_lease_tokens, v_count);

  return query
  with input as (
    select u.id, u.attempt, u.result, u.token, u.ord
      from unnest(p_job_ids, p_attempts, p_results, p_lease_tokens)
           with ordinality as u(id, attempt, result, token, ord)
  ), first_mention as (
    -- A job listed twice is completed once, with the result of its first mention.
    select distinct on (i.id, i.attempt) i.id, i.attempt, i.result, i.token
      from input i
     order by i.id, i.attempt, i.ord
  ), done as (
    update pyjobq.job j
       set status = 3,
           result = f.result,
           lease_until = null,
           updated_at = v_now
      from first_mention f
     where j.job_id = f.id
       and j.status = 2
       and j.worker_id = p_worker_id
       and j.job_type <> all (v_denied)
       and j.attempts = f.attempt
       and (j.lease_token = f.token or f.token is null)
    returning j.job_id, j.attempts
  )
  -- A job this very attempt completed before (a retried call whose first reply
  -- was lost) counts as completed: the result stored then stays.
  select i.id,
         case when (i.id, i.attempt) in (select d.job_id, d.attempts from done d) then true
              else exists (select from pyjobq.job k
                            where k.job_id = i.id
                              and k.job_type <> all (v_denied)
                              and k.status = 3
                              and k.worker_id = p_worker_id
                              and k.attempts = i.attempt
                              and (k.lease_token = i.token or i.token is null))
         end
    from input i
   order by i.ord;
end;
$$;

comment on function pyjobq.job_complete_many(text, uuid[], int[], jsonb[], uuid[]) is
  'job_complete for up to 10000 jobs in one call: each job whose attempt p_worker_id still holds, with the lease '
  'token at its position in p_lease_tokens, becomes DONE. '
  'Returns every input job id with completed = true when that attempt is DONE (now, or by an earlier call of '
  'the same holder: retrying after a lost reply is safe) and false for those no longer held (left unchanged).';

create or replace function pyjobq.job_fail(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_error text default null,
  p_retry_delay_seconds double precision default null,
  p_dead_letter boolean default null,
  p_lease_token uuid default null
)
returns table (status int, run_after timestamptz)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_denied smallint[] := pyjobq._denied_types('work');
  v_dead_letter boolean := coalesce(p_dead_letter, false);
  v_delay interval;
  v_job_type int;
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_attempt', p_attempt, 1, 32767);
  perform pyjobq._check_lease_token('p_lease_token', p_lease_token is null);
  if p_retry_delay_seconds is not null then
    if not (p_retry_delay_seconds between 0 and 31536000) then
      raise exception 'p_retry_delay_seconds must be between 0 and 31536000'
        using errcode = '22023',
              detail = format('p_retry_delay_seconds was %s.', p_retry_delay_seconds),
              hint = 'Leave it out for the default exponential backoff.';
    end if;
    v_delay := make_interval(secs => p_retry_delay_seconds);
  end if;

  update pyjobq.job j
     set status = case when v_dead_letter or pyjobq._tries_left(j.attempts, j.attempts_refunded, j.max_attempts) <= 0 then 4 else 1 end,
         run_after = case when v_dead_letter or pyjobq._tries_left(j.attempts, j.attempts_refunded, j.max_attempts) <= 0 then j.run_after
                          else pyjobq._retry_at(j.job_type, j.attempts - j.attempts_refunded, v_delay, v_now) end,
         worker_id = case when v_dead_letter or pyjobq._tries_left(j.attempts, j.attempts_refunded, j.max_attempts) <= 0 then j.worker_id end,
         lease_until = null,
         last_error = left(p_error, 10000),
         updated_at = v_now
   where j.job_id = p_job_id
     and j.status = 2
     and j.worker_id = p_worker_id
     and j.job_type <> all (v_denied)
     and j.attempts = p_attempt
     and (j.lease_token = p_lease_token or p_lease_token is null)
  returning j.status::int, j.run_after, j.job_type into status, run_after, v_job_type;
  if not found then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt, p_lease_token);
  end if;
  -- The retry is announced like a new job: idle workers learn when it is due.
  if status = 1 then
    perform pyjobq._announce(v_job_type, run_after, v_now);
  end if;
  return next;
end;
$$;

comment on function pyjobq.job_fail(uuid, text, int, text, double precision, boolean, uuid) is
  'Records a failed attempt p_attempt of job p_job_id held by p_worker_id with lease token p_lease_token, keeping p_error (truncated to 10000 '
  'characters) as last_error. With attempts left the job is PENDING again after p_retry_delay_seconds '
  '(0..31536000) or, by default, pyjobq.retry_backoff(attempt); with none left, or p_dead_letter, it is DEAD. '
  'Returns the new status and run_after; raises JQ001/JQ002/JQ003 like job_complete. A retry notifies '
  'pyjobq_job as job_enqueue does.';

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
    update pyjobq.job j
       set lease_until = v_now + make_interval(secs => v_lease),
           updated_at = v_now
      from (select distinct i.id, i.attempt, i.token from input i) f
     where j.job_id = f.id
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
  'lease of each job whose attempt p_worker_id still holds with the lease token at its position in p_lease_tokens. Returns every input job id, in input order, with '
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
  'default 300) if p_worker_id still holds it with lease token p_lease_token, and returns the new lease_until; raises JQ001/JQ002/JQ003 otherwise. '
  'A holder whose lease expired but was not yet reaped still holds the job.';

create or replace function pyjobq.job_release_many(
  p_worker_id text,
  p_job_ids uuid[],
  p_attempts int[],
  p_lease_tokens uuid[] default null
)
returns table (job_id uuid, released boolean)
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
set enable_seqscan = off
set enable_bitmapscan = off
set enable_hashjoin = off
set enable_mergejoin = off
set jit = off
as $$
declare
  v_now timestamptz := pyjobq.clock_now();
  v_denied smallint[] := pyjobq._denied_types('work');
  v_count int := coalesce(cardinality(p_job_ids), 0);
begin
  p_job_ids := pyjobq._check_array('p_job_ids', p_job_ids);
  p_attempts := pyjobq._check_array('p_attempts', p_attempts);
  p_lease_tokens := pyjobq._check_array('p_lease_tokens', p_lease_tokens);
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('cardinality(p_job_ids)', v_count, 1, 10000);
  perform pyjobq._check_same_length('p_attempts', coalesce(cardinality(p_attempts), 0), v_count);
  perform pyjobq._check_lease_tokens(p_lease_tokens, v_count);

  return query
    with input as (
      select u.id, u.attempt, u.token, u.ord
        from unnest(p_job_ids, p_attempts, p_lease_tokens) with ordinality as u(id, attempt, token, ord)
    ), given_back as (
      update pyjobq.job j
         -- The try is given back; the claim counter, the fencing token, is not.
         -- A job whose counter is spent can never be claimed again: DEAD.
         set status = case when pyjobq._tries_left(j.attempts, j.attempts_refunded + 1, j.max_attempts) <= 0
                           then 4 else 1 end,
             -- Back at its old place in the queue, before claim fronts.
             run_after = case when pyjobq._tries_left(j.attempts, j.attempts_refunded + 1, j.max_attempts) <= 0
                              then j.run_after else pyjobq._pending_from(j.run_after, v_now, false) end,
             attempts_refunded = j.attempts_refunded + 1,
             worker_id = case when pyjobq._tries_left(j.attempts, j.attempts_refunded + 1, j.max_attempts) <= 0
                              then j.worker_id end,
             last_error = case when pyjobq._tries_left(j.attempts, j.attempts_refunded + 1, j.max_attempts) <= 0
                               then 'released with its claim counter spent (32767 claims)' else j.last_error end,
             lease_until = null,
             updated_at = v_now
        from (select distinct i.id, i.attempt, i.token from input i) f
       where j.job_id = f.id
         and j.status = 2
         and j.worker_id = p_worker_id
         and j.job_type <> all (v_denied)
         and j.attempts = f.attempt
         and (j.lease_token = f.token or f.token is null)
      returning j.job_id, j.attempts as attempt
    )
    select i.id, (i.id, i.attempt) in (select g.job_id, g.attempt from given_back g)
      from input i
     order by i.ord;
end;
$$;

comment on function pyjobq.job_release_many(text, uuid[], int[], uuid[]) is
  'job_release for up to 10000 jobs in one call: each job whose attempt p_worker_id still holds, with the lease '
  'token at its position in p_lease_tokens, is PENDING '
  'again at its old place in the queue, the try given back (attempts_refunded + 1; attempts, the fencing token, '
  'stays). Returns every input job id, in input order, with released = false for a job no longer held (left '
  'unchanged).';

create or replace function pyjobq.job_release(
  p_job_id uuid,
  p_worker_id text,
  p_attempt int,
  p_lease_token uuid default null
)
returns void
language plpgsql
volatile
security definer
set search_path = pg_catalog, pyjobq, pg_temp
set lock_timeout = '5s'
as $$
begin
  perform pyjobq._check_text('p_worker_id', p_worker_id, 80, false);
  perform pyjobq._check_range('p_attempt', p_attempt, 1, 32767);
  perform pyjobq._check_lease_token('p_lease_token', p_lease_token is null);
  if not (select r.released
            from pyjobq.job_release_many(p_worker_id, array[p_job_id], array[p_attempt],
                                         case when p_lease_token is not null then array[p_lease_token] end) r) then
    perform pyjobq._raise_not_held(p_job_id, p_worker_id, p_attempt, p_lease_token);
  end if;
end;
$$;

comment on function pyjobq.job_release(uuid, text, int, uuid) is
  'Gives attempt p_attempt of job p_job_id, held with lease token p_lease_token, back unused (e.g. a worker shutting down before starting it): '
  'PENDING again at its old place in the queue, the try given back (the next claim is attempt p_attempt + 1 '
  'and does not count against max_attempts). Raises JQ001/JQ002/JQ003 like job_complete.';

create or replace function pyjobq.job_settings()
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

create or replace function pyjobq.job_settings_set(p_require_lease_token boolean default null)
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

create or replace function pyjobq.grant_roles()
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_missing text[];
begin
  select array_agg(r.name order by r.name)
    into v_missing
    from unnest(array['pyjobq_producer', 'pyjobq_worker', 'pyjobq_observer', 'pyjobq_admin']) as r(name)
   where not exists (select 1 from pg_roles g where g.rolname = r.name);
  if v_missing is not null then
    if not exists (select 1 from pg_roles g
                    where g.rolname = current_user and (g.rolsuper or g.rolcreaterole)) then
      raise notice 'pyjobq: group roles % not created: role % may not create roles', v_missing, current_user
        using hint = 'Have a role with CREATEROLE run: select pyjobq.grant_roles();';
      return;
    end if;
    if 'pyjobq_producer' = any (v_missing) then create role pyjobq_producer nologin; end if;
    if 'pyjobq_worker' = any (v_missing) then create role pyjobq_worker nologin; end if;
    if 'pyjobq_observer' = any (v_missing) then create role pyjobq_observer nologin; end if;
    if 'pyjobq_admin' = any (v_missing) then create role pyjobq_admin nologin; end if;
  end if;

  grant usage on schema pyjobq to pyjobq_producer, pyjobq_worker, pyjobq_observer, pyjobq_admin;
  grant execute on function
    pyjobq.job_types(), pyjobq.job_type_code(text), pyjobq.job_type_policies(), pyjobq.schema_version(),
    pyjobq.clock_now()
    to pyjobq_producer, pyjobq_worker, pyjobq_observer, pyjobq_admin;
  grant execute on function
    pyjobq.job_enqueue(int, jsonb, int, timestamptz, text, int),
    pyjobq.job_enqueue_many(int, jsonb[], text[], int, timestamptz, int)
    to pyjobq_producer;
  grant execute on function
    pyjobq.job_claim(text, int, int, int[]),
    pyjobq.job_next_due(int[]),
    pyjobq.job_complete(uuid, text, int, jsonb, uuid),
    pyjobq.job_complete_many(text, uuid[], int[], jsonb[], uuid[]),
    pyjobq.job_fail(uuid, text, int, text, double precision, boolean, uuid),
    pyjobq.job_renew_lease(uuid, text, int, int, uuid),
    pyjobq.job_renew_lease_many(text, uuid[], int[], int, uuid[]),
    pyjobq.job_release(uuid, text, int, uuid),
    pyjobq.job_release_many(text, uuid[], int[], uuid[]),
    pyjobq.job_reap(int)
    to pyjobq_worker;
  grant execute on function pyjobq.job_counts() to pyjobq_observer, pyjobq_admin;
  -- Payloads and results are the application's data: producers read back what they
  -- enqueued, admins what they operate on; observers see figures only.
  grant execute on function pyjobq.job_get(uuid) to pyjobq_producer, pyjobq_admin;
  -- Producers cancel what they enqueued; admins anything.
  grant execute on function pyjobq.job_cancel(uuid[]) to pyjobq_producer, pyjobq_admin;
  grant execute on function pyjobq.job_watch(uuid[]) to pyjobq_producer, pyjobq_admin;
  grant execute on function
    pyjobq.job_list(int, int, text, timestamptz, timestamptz, boolean, uuid, int)
    to pyjobq_producer, pyjobq_admin;
  grant execute on function
    pyjobq.job_redrive(uuid[], int, int),
    pyjobq.job_prune(interval, int),
    pyjobq.job_type_register(int, text),
    pyjobq.job_type_grant(int, text, text),
    pyjobq.job_type_revoke(int, text, text),
    pyjobq.job_type_grants(),
    pyjobq.job_type_set_policy(int, int, double precision, double precision, double precision, double precision),
    pyjobq.job_settings(),
    pyjobq.job_settings_set(boolean),
    pyjobq.job_reap(int)
    to pyjobq_admin;
end;
$$;

comment on function pyjobq.grant_roles() is
  'Creates the NOLOGIN group roles pyjobq_producer (enqueue, get, list, cancel, watch), pyjobq_worker (claim, '
  'next due, complete, fail, '
  'renew, release, reap), pyjobq_observer (counts) and pyjobq_admin (counts, get, list, cancel, watch, reap, '
  'redrive, prune, '
  'register types, per-type grants, settings) '
  'when missing and the caller may create roles, and grants each EXECUTE on its functions. Run by the '
  'installation; run it again as a role with CREATEROLE when the installing role could not create them.';


-- New functions, like every function of the schema, are not PUBLIC's; the
-- group roles get what grant_roles now grants.
revoke all on all functions in schema pyjobq from public;

do $$
begin
  perform pyjobq.grant_roles();
end;
$$;
