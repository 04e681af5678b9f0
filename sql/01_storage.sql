-- pyjobq: a job queue that lives inside PostgreSQL.
--
-- The functions in this file are the whole API. Any client that can run
-- `select * from pyjobq.job_claim('w1', 10);` gets exactly the semantics the
-- Python package gets: every state transition, lease check, backoff and dedupe
-- decision is made here, in one statement per transition, so no client can
-- disagree with another.
--
-- A job's life, in the order the functions are defined below. A job yet to
-- end is a row of pyjobq.job; its end (DONE, DEAD, CANCELLED) moves the row
-- to pyjobq.job_history, partitioned by the day it ended, and job_redrive
-- moves it back; the view pyjobq.job_all shows both.
--
--   job_enqueue / job_enqueue_many   -> PENDING (1), due at run_after
--   job_claim                        -> RUNNING (2), attempts + 1 (never wound back), leased to a worker
--   job_next_due                     -> when the next job still to come becomes due (an idle worker's alarm)
--   job_next_chores                  -> when a schedule next ticks and a lease next expires (its other alarms)
--   job_worker_idle / job_worker_busy -> a worker asleep on LISTEN, so that producers notify (only then)
--   job_renew_lease(_many)           -> RUNNING, lease pushed forward (heartbeat)
--   job_step_save / job_steps        -> a handler's finished steps, recorded and read back by later attempts
--   job_progress                     -> a RUNNING job's progress, as its handler reports it (job_get shows it)
--   job_event_wait / job_signal      -> a job asleep (PENDING) until an event is sent to it or its wait times out
--   job_complete / job_complete_many -> DONE (3)
--   job_fail / job_fail_many         -> PENDING again after a backoff, or DEAD (4)
--   job_finish_many                  -> each attempt DONE, failed, DEAD or snoozed (PENDING, its try given back), in one call
--   job_release(_many)               -> PENDING again, the try given back (shutdown)
--   job_reap                         -> expired leases: PENDING after a backoff, or DEAD
--   job_counts                       -> jobs per type and status, with health figures
--   job_get                          -> one job, with its payload, result and last error
--   job_attempts                     -> the story of a job's attempts: worker, times, outcome, error
--   job_list                         -> pages of jobs by type, status, key and time, newest first
--   job_cancel                       -> PENDING or RUNNING to CANCELLED (5); its holder is fenced out
--   job_watch                        -> a job's end announced on pyjobq_done
--   job_redrive                      -> DEAD back to PENDING with a fresh budget of attempts
--   job_enqueue(p_depends_on)        -> WAITING (6) until its parents end, then PENDING (or CANCELLED)
--   job_batch_open / _close / _get   -> a batch of jobs (job_enqueue's p_batch_id), its counts and callbacks
--   job_prune                        -> DONE, DEAD and CANCELLED jobs deleted after a while: whole days
--   job_history_maintain             -> the history's day partitions made ahead (job_reap calls it)
--   job_settings(_set)               -> the install's settings: whether calls without a lease token count
--
-- Ownership: a claim hands out (job_id, worker_id, attempt) and a lease
-- token, a random uuid that job_claim returns to the claimer and nothing else
-- ever shows. Every later transition is a compare-and-set on all four plus
-- status = RUNNING, so a holder whose lease was reaped, and the job claimed
-- again (even by a worker with the same id), can never complete, fail or renew
-- the newer attempt: it gets SQLSTATE JQ001 instead; and a co-worker that
-- learns a holder's worker id and attempt (job_get shows them) still cannot
-- act for it. Calls without the token are the signatures of before tokens:
-- the schema owner may make them, others only while job_settings says the
-- install still accepts them (an upgraded install, until its admin says
-- otherwise). Recovery is by lease only: a job stays RUNNING until its holder
-- finishes it or job_reap finds its lease expired.
--
-- Time: every timestamp comes from pyjobq.clock_now(), the database clock,
-- which a session of the schema's owner can freeze with
-- `set pyjobq.fake_now = '...'` (tests); any other role that sets it gets 42501.
--
-- Waiting: claim, reap and prune skip rows other sessions hold locked. The
-- functions that must wait for a row (an uncommitted duplicate's dedupe key, a
-- job a reaper or another transaction is changing) give up after
-- lock_timeout = 5 s with SQLSTATE 55P03 instead of hanging behind a
-- transaction left open; retrying later is always safe.
--
-- Errors: arguments out of range raise 22023 (invalid_parameter_value) or
-- 22004 (null_value_not_allowed) naming the argument and its allowed range;
-- queue states raise the JQ class:
--   JQ001 lease_lost            the caller no longer holds this attempt of the job
--   JQ002 job_not_found         no job with that id
--   JQ003 job_already_finished  the caller's own attempt is already DONE or DEAD
--   JQ004 job_type_conflict     the job type code is registered under another name
--   JQ005 job_cancelled         the job was cancelled: nothing the attempt does is recorded
--   JQ006 batch_closed          the batch takes no more jobs
-- Nothing is changed when an error is raised.

create schema pyjobq;

comment on schema pyjobq is 'pyjobq job queue: the tables are private, the functions are the API';

-- The clock ----------------------------------------------------------------

-- Whether the session's role has the privileges of the schema's owner, who
-- may do anything to the queue anyway: work every type, act without a lease
-- token, set the clock (clock_now, below, writes this test out). PL/pgSQL: its plan is kept for the session (a SQL
-- function with a SET clause is never inlined, and is planned at every call).
create function pyjobq._session_owns_schema()
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

create function pyjobq.clock_now()
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

create function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 68
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

-- Storage --------------------------------------------------------------------

create table pyjobq.job_type (
  job_type smallint primary key,
  name varchar(63) not null,
  created_at timestamptz not null default pyjobq.clock_now(),
  -- The type's retry policy (job_type_set_policy); null: the default.
  max_attempts smallint,
  backoff_base_seconds double precision,
  backoff_cap_seconds double precision,
  backoff_jitter double precision,
  -- Every job has a deadline: a lease never reaches past its claim + this.
  timeout_seconds double precision not null default 3600,
  -- Concurrency limits (job_type_set_limits); null: none. At most max_running
  -- jobs of the type RUNNING at once, and key_max_running per concurrency key.
  max_running int,
  key_max_running int,
  -- Rate limits (job_type_set_limits); null: none. At most rate_limit claims of
  -- the type in any rate_period, and key_rate_limit per concurrency key in any
  -- key_rate_period: job_claim counts them in pyjobq.rate_window.
  rate_limit int,
  rate_period interval,
  key_rate_limit int,
  key_rate_period interval,
  -- Fair share (job_type_set_limits): the type's jobs are claimed round robin
  -- across their concurrency keys, in the order of job.fair_rank.
  fair_share boolean not null default false,
  -- Whether the type's DONE jobs go to job_history (job_type_set_history):
  -- false ends them with the delete alone, as a queue that keeps nothing does.
  keep_done boolean not null default true,
  -- How many times a job of the type may snooze (job_type_set_snoozes).
  max_snoozes int not null default 1000,
  -- Since when the type is paused (job_type_pause): no claim takes its jobs.
  paused_at timestamptz,
  constraint job_type_name_key unique (name),
  constraint job_type_code_range check (job_type between 1 and 32767),
  constraint job_type_name_not_blank check (btrim(name, E' \t\n\r\f\v') <> ''),
  constraint job_type_policy_valid check (
    max_attempts between 1 and 1000
    and backoff_base_seconds > 0 and backoff_base_seconds <= 86400
    and backoff_cap_seconds between coalesce(backoff_base_seconds, 2) and 31536000
    and backoff_jitter between 0 and 1
    and timeout_seconds > 0 and timeout_seconds <= 604800),
  constraint job_type_limits_valid check (max_running between 1 and 100000 and key_max_running between 1 and 100000),
  constraint job_type_rates_valid check (
    (rate_limit is null) = (rate_period is null) and (key_rate_limit is null) = (key_rate_period is null)
    and rate_limit between 1 and 10000 and key_rate_limit between 1 and 10000
    and rate_period between interval '1 millisecond' and interval '1 day'
    and key_rate_period between interval '1 millisecond' and interval '1 day')
);

comment on table pyjobq.job_type is
  'Registered job type codes and their names, with each type''s retry policy; job_enqueue refuses codes '
  'that are not here.';

insert into pyjobq.job_type (job_type, name) values (1, 'SEARCH'), (2, 'OUTBOX');

-- Enqueue order: the claim's tiebreaker after priority and run_after, so
-- that every position in the claim order is unique and later jobs sort later.
create sequence pyjobq.job_seq;

-- Bumped (never rolled back, no row lock) by every change that can make a job
-- PENDING at a position before the claim order's current front; see job_claim.
create sequence pyjobq.job_claim_epoch;

-- The columns in the order of how often they change. A row's update within
-- its page logs only the bytes between the first and the last that changed,
-- so what never changes comes first (the payload among it), and what every
-- claim sets comes last: a claim, a renewal or a retry logs neither the
-- payload nor the metadata (schema 50; docs/performance.md, "WAL per job").
create table pyjobq.job (
  -- Set at the enqueue, never changed while the job is in this table.
  job_id uuid not null default gen_random_uuid(),
  job_type smallint not null,
  priority smallint not null default 100,
  max_attempts smallint not null default 3,
  created_at timestamptz not null,
  seq bigint not null default nextval('pyjobq.job_seq'),
  fair_rank bigint,
  payload jsonb not null default '{}',
  dedupe_key varchar(200),
  concurrency_key varchar(200),
  metadata jsonb,
  batch_id uuid,
  run_on_parent_failure boolean,
  -- Changed by some transitions (a watch, a dependant, a retry, a release).
  result jsonb,
  notify_done boolean not null default false,
  has_dependants boolean not null default false,
  waiting_on int,
  attempts_refunded smallint not null default 0,
  run_after timestamptz not null,
  last_error text,
  -- Changed by every claim.
  status smallint not null default 1,
  attempts smallint not null default 0,
  worker_id varchar(80),
  lease_token uuid,
  lease_until timestamptz,
  run_started_at timestamptz,
  updated_at timestamptz not null,
  -- Changed by a snooze and by the handler's progress (last: they came after
  -- the others, without a rewrite).
  snoozes smallint not null default 0,
  progress jsonb,
  constraint job_pkey primary key (job_id)  -- its CHECK, job_row_valid, is in 02_checks.sql
);

comment on table pyjobq.job is
  'One row per job yet to end: status 1 PENDING, 2 RUNNING or 6 WAITING (for parent jobs). Its end (3 DONE, '
  '4 DEAD, 5 CANCELLED) moves the row to job_history. Written only by the pyjobq functions.';
comment on column pyjobq.job.job_id is
  'Time-ordered for jobs added by job_enqueue and job_enqueue_many (pyjobq._new_job_ids); the default, '
  'gen_random_uuid(), only serves rows inserted directly.';
comment on column pyjobq.job.attempts is
  'Claims so far (+1 at each claim, never wound back): part of the fencing token a holder passes back to '
  'complete, fail, renew or release, so a token is never valid twice for a job.';
comment on column pyjobq.job.lease_token is
  'A random uuid drawn at each claim and returned by job_claim alone: the secret part of the fencing token, '
  'which no other function shows and no error discloses.';
comment on column pyjobq.job.concurrency_key is
  'The key (a customer, a tenant, an account) whose RUNNING jobs of the type job_claim keeps within the type''s '
  'key_max_running; null: the job counts against no key.';
comment on column pyjobq.job.fair_rank is
  'Set at enqueue for the jobs of a fair-share type: the job''s turn among its priority''s jobs, one more than '
  'its key''s last pending job, and never before the first due one; claims take them in this order. Null: '
  'claimed in due-time order.';
comment on column pyjobq.job.metadata is
  'What the producer said about the job besides its payload, given at enqueue and returned by job_claim and '
  'job_get: a JSON object or null. traceparent and tracestate carry the W3C trace context of the enqueue, '
  'which the Python worker continues in the handler''s span.';
comment on column pyjobq.job.waiting_on is
  'For a job enqueued with parents (p_depends_on): while it is WAITING, how many of them have not ended yet '
  '(its unresolved job_edge rows); 0 once they all have. Null: the job has no parents.';
comment on column pyjobq.job.run_on_parent_failure is
  'For a job with parents: true when it runs even after a parent ended DEAD or CANCELLED (p_on_parent_failure '
  '=> ''run''), false when it is then CANCELLED (''cancel'', the default). Null: no parents.';
comment on column pyjobq.job.has_dependants is
  'Set when a job is named as a parent: its end resolves its job_edge rows (job_complete and the other '
  'transitions to DONE, DEAD or CANCELLED look for dependants only when it is set).';
comment on column pyjobq.job.batch_id is
  'The batch the job belongs to (job_enqueue''s p_batch_id), whose counts its end updates; null: none.';
comment on column pyjobq.job.notify_done is
  'Set by job_watch: the job''s end (DONE, DEAD or CANCELLED) is announced on channel pyjobq_done.';
comment on column pyjobq.job.snoozes is
  'How many times a handler put the job back to sleep (job_finish_many''s snoozed): each gives its claim back, '
  'as attempts_refunded counts, and job_type_set_snoozes bounds them. Not kept in the history.';
comment on column pyjobq.job.progress is
  'What the handler last reported of its progress (job_progress), a JSON object; job_get shows it. Not kept '
  'in the history.';
comment on column pyjobq.job.attempts_refunded is
  'Claims that did not use up a try: given back by job_release, or forgiven by job_redrive. attempts - '
  'attempts_refunded is the tries used against max_attempts.';
comment on column pyjobq.job.seq is
  'Enqueue order, from sequence pyjobq.job_seq: breaks ties in the claim order (priority, run_after, seq).';
comment on column pyjobq.job.run_after is
  'The job is not claimed before this time (scheduling and retry backoff).';
comment on column pyjobq.job.lease_until is
  'Set only while RUNNING: after this time job_reap may take the job back from its worker. Never later than '
  'run_started_at + the timeout_seconds of the job''s type: the deadline.';
comment on column pyjobq.job.run_started_at is
  'When the current (or last) attempt was claimed: its deadline runs from here.';
comment on column pyjobq.job.dedupe_key is
  'At most one PENDING or RUNNING job per job type and key; enqueueing an active key of the type returns '
  'the existing job.';

-- The claim: due PENDING jobs in priority then due-time order. The ORDER BY
-- matches this index exactly, so an ordered index scan that stops at LIMIT is
-- the only sensible plan whatever the statistics say (or do not yet say).
create index job_claim_idx on pyjobq.job (priority, run_after, seq) where status = 1;

-- The reaper: expired leases (only RUNNING jobs have one). The predicate is
-- on lease_until, not status: the compare-and-set transitions look a job up
-- by id with status = 2, and when statistics undercount RUNNING jobs the
-- planner would otherwise read this whole index for each of them.
create index job_lease_idx on pyjobq.job (lease_until) where lease_until is not null;

-- The active-duplicate guard: a key is this key for this job type, so the
-- producers of one type can neither see nor take another type's keys (per-type
-- grants would mean nothing otherwise). DONE, DEAD and CANCELLED jobs free
-- their key; a WAITING job holds it.
create unique index job_dedupe_active_idx on pyjobq.job (job_type, dedupe_key)
  where status in (1, 2, 6) and dedupe_key is not null;

-- job_counts: the WAITING jobs of each type, exactly. Only jobs waiting for
-- parents enter it.
create index job_waiting_idx on pyjobq.job (job_type) where status = 6;

-- Concurrency limits per key: the RUNNING jobs of a type with a concurrency
-- key, counted by job_claim up to the limit. Only jobs with a key enter it.
create index job_running_key_idx on pyjobq.job (job_type, concurrency_key)
  where status = 2 and concurrency_key is not null;

-- Concurrency keys: the due jobs of each key, so that a claim behind a full
-- key's backlog visits keys, one probe each, not the backlog's jobs
-- (_claim_candidates). Only jobs with a key enter it.
create index job_key_claim_idx on pyjobq.job (job_type, concurrency_key, priority, run_after, seq)
  where status = 1 and concurrency_key is not null;

-- Fair share: the fair-share jobs in their claim order, and each key's last
-- turn, from which the next job of the key takes its own. Only jobs with a
-- turn enter them.
create index job_fair_idx on pyjobq.job (priority, fair_rank, seq)
  where status = 1 and fair_rank is not null;
create index job_fair_key_idx on pyjobq.job (job_type, priority, (coalesce(concurrency_key, '')), fair_rank)
  where status = 1 and fair_rank is not null;

-- Every transition rewrites the row (the partial indexes make it non-HOT),
-- and every end deletes it, so the table churns through dead tuples at the
-- queue's pace, not in proportion to its size: vacuum and analyze on absolute thresholds. And each page keeps
-- 60 % free, room for a second version of each of its rows: a claim of a
-- page's jobs writes their new versions while the old ones still live, and
-- an update that must move its row to another page writes a row-lock record
-- and the whole new row, where one within the page writes neither the lock
-- nor what the two versions share (docs/performance.md, "WAL per job").
alter table pyjobq.job set (
  autovacuum_vacuum_scale_factor = 0,
  autovacuum_vacuum_threshold = 5000,
  autovacuum_vacuum_insert_scale_factor = 0,
  autovacuum_vacuum_insert_threshold = 20000,
  autovacuum_analyze_scale_factor = 0,
  autovacuum_analyze_threshold = 20000,
  autovacuum_vacuum_cost_delay = 0,
  fillfactor = 40
);

-- Dependencies: one row per (parent, child) named at the child's enqueue,
-- ord its place in the child's p_depends_on. resolved turns true, once, when
-- the parent ends (or at the enqueue, when it had ended already): the child's
-- waiting_on counts its unresolved rows. Rows stay after they resolve, so a
-- child reads its parents' results and job_dependencies shows the graph; they
-- go with the child or the parent when job_prune deletes either.
create table pyjobq.job_edge (
  parent_id uuid not null,
  child_id uuid not null,
  ord int not null,
  resolved boolean not null,
  constraint job_edge_pkey primary key (parent_id, child_id)
);

create index job_edge_child_idx on pyjobq.job_edge (child_id, ord);

comment on table pyjobq.job_edge is
  'Dependencies: child_id waits for parent_id (its ord-th parent); resolved once the parent ended. Written by '
  'job_enqueue(_many) with p_depends_on and by the end of the parent.';

-- Batches: a counter row per batch, which each member's enqueue and end
-- update (once per call), and whose callbacks are enqueued by the call that
-- makes them due, exactly once: that call holds the row's lock and sets the
-- callback's job id, which is null until then.
create table pyjobq.job_batch (
  batch_id uuid not null default gen_random_uuid(),
  created_at timestamptz not null,
  closed_at timestamptz,
  finished_at timestamptz,
  total int not null default 0,
  done int not null default 0,
  dead int not null default 0,
  cancelled int not null default 0,
  callbacks jsonb not null default '{}',
  success_job uuid,
  finish_job uuid,
  dead_job uuid,
  constraint job_batch_pkey primary key (batch_id),
  constraint job_batch_counts check (done >= 0 and dead >= 0 and cancelled >= 0 and done + dead + cancelled <= total)
);

comment on table pyjobq.job_batch is
  'Batches of jobs: how many joined (total) and how many ended DONE, DEAD or CANCELLED; the callbacks to '
  'enqueue (on success, finish, a dead member) and the jobs enqueued for them. Written by the pyjobq functions.';

-- The jobs that joined a batch, counted by their enqueue without touching the
-- batch row (whose lock, held until the enqueue commits, would hold up every
-- completion of a member): a row per enqueue, folded into the batch's counts
-- by the next call that holds the batch row (_batch_fold).
create table pyjobq.job_batch_join (
  batch_id uuid not null,
  total int not null,
  cancelled int not null
);

create index job_batch_join_idx on pyjobq.job_batch_join (batch_id);

comment on table pyjobq.job_batch_join is
  'Jobs that joined a batch (total), those born CANCELLED among them, per enqueue, not yet in the batch''s '
  'counts. Written by the pyjobq functions.';

-- job_list(p_batch_id): a batch's members. Only members enter it.
create index job_batch_idx on pyjobq.job (batch_id) where batch_id is not null;

-- History: the jobs that ended (DONE, DEAD, CANCELLED), in partitions by the
-- day they ended, so that retention drops a day's partition (job_prune)
-- instead of deleting its rows one by one and leaving them for vacuum. A
-- job's end deletes its row from pyjobq.job and inserts it here in the same
-- transaction, so every snapshot sees the job in exactly one of the two;
-- job_redrive moves it back. The rows of a day without its partition (not
-- yet created by job_history_maintain) go to job_history_default.
--
-- Its columns keep the job table's order before schema 50, so that the
-- partitions of an install upgraded across it and those of a new one are
-- alike: the functions that move rows between the two tables name columns.
create table pyjobq.job_history (
  job_id uuid not null,
  job_type smallint not null,
  status smallint not null,
  priority smallint not null,
  payload jsonb not null,
  result jsonb,
  dedupe_key varchar(200),
  attempts smallint not null,
  max_attempts smallint not null,
  run_after timestamptz not null,
  lease_until timestamptz,
  worker_id varchar(80),
  run_started_at timestamptz,
  last_error text,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  seq bigint not null,
  attempts_refunded smallint not null,
  notify_done boolean not null,
  lease_token uuid,
  concurrency_key varchar(200),
  fair_rank bigint,
  metadata jsonb,
  waiting_on int,
  run_on_parent_failure boolean,
  has_dependants boolean not null,
  batch_id uuid
) partition by range (updated_at);

alter table pyjobq.job_history add constraint job_history_ended check (status between 3 and 5);

comment on table pyjobq.job_history is
  'The jobs that ended: status 3 DONE, 4 DEAD or 5 CANCELLED, updated_at when. Partitioned by the day they '
  'ended (job_history_maintain creates the partitions, job_prune drops them); written only by the pyjobq functions.';

create table pyjobq.job_history_default partition of pyjobq.job_history default;

comment on table pyjobq.job_history_default is
  'The jobs that ended on a day that had no partition of job_history yet; job_history_maintain moves them '
  'into the day''s partition when it makes it.';

-- job_get, job_list, the parents of a child: a job by its id (time-ordered,
-- so a day's inserts land at the right edge).
create index job_history_id_idx on pyjobq.job_history (job_id);

-- job_prune: what ended before a time, within the partitions it cannot drop
-- whole. Rows arrive in about that order, so a BRIN summary does it for
-- almost no write.
create index job_history_ended_idx on pyjobq.job_history using brin (updated_at);

-- job_counts: the DEAD and CANCELLED jobs, exactly, without reading the
-- DONE history. Jobs die so rarely, so the index costs the drain nothing.
create index job_dead_cancelled_idx on pyjobq.job_history (job_type, status) where status in (4, 5);

-- job_counts: the share of each (job_type, status) pair in the sample of the
-- last ANALYZE of the history, from which it estimates the DONE jobs without
-- reading them (autovacuum never analyzes a partitioned table: job_history_maintain does).
create statistics pyjobq.job_type_status_stats (mcv) on job_type, status from pyjobq.job_history;

-- Uniqueness over a window (job_enqueue's p_unique_for): the ended jobs with a
-- key, by when they ended. Only keyed jobs enter it.
create index job_dedupe_ended_idx on pyjobq.job_history (job_type, dedupe_key, updated_at)
  where dedupe_key is not null;

-- job_list(p_batch_id) and job_prune: a batch's members that ended.
create index job_history_batch_idx on pyjobq.job_history (batch_id) where batch_id is not null;

-- job_prune: the jobs of a day that are in a graph, whose edges go with them
-- and which stay while a dependant has yet to end. Only they enter it.
create index job_history_graph_idx on pyjobq.job_history (job_id)
  where has_dependants or waiting_on is not null;

-- Every job, live or ended: what the inspection functions read, and what a
-- person reads with psql.
create view pyjobq.job_all as
  select job_id, job_type, status, priority, payload, result, dedupe_key, attempts, max_attempts, run_after,
         lease_until, worker_id, run_started_at, last_error, created_at, updated_at, seq, attempts_refunded,
         notify_done, lease_token, concurrency_key, fair_rank, metadata, waiting_on, run_on_parent_failure,
         has_dependants, batch_id
    from pyjobq.job
  union all
  select * from pyjobq.job_history;

comment on view pyjobq.job_all is
  'Every job: pyjobq.job (PENDING, RUNNING, WAITING) and job_history (DONE, DEAD, CANCELLED); a job is in '
  'exactly one of them in any snapshot.';

-- Rate limits: the claims of the last period, per job type (concurrency_key
-- '') and per concurrency key, each row written only by a claim holding the
-- type's or the key's advisory lock (see _claim_limited). A claim of k jobs
-- adds one entry (its time, k); entries older than the period go at the next
-- write. Times only grow along a row, which is what makes dropping them safe.
create table pyjobq.rate_window (
  job_type smallint not null references pyjobq.job_type (job_type),
  concurrency_key varchar(200) not null,
  claimed_at timestamptz[] not null,
  claimed int[] not null,
  constraint rate_window_pkey primary key (job_type, concurrency_key),
  constraint rate_window_entries check (cardinality(claimed_at) = cardinality(claimed))
);

comment on table pyjobq.rate_window is
  'The claims each rate limit counts: per job type (concurrency_key '''') and per concurrency key, the times '
  'of the claims within the last period (ascending) and how many jobs each took. Written by job_claim only.';

-- Install-wide settings: one row, changed by job_settings_set only.
create table pyjobq.setting (
  singleton boolean primary key default true,
  require_lease_token boolean not null,
  -- How long job_prune keeps audit lines: a year covers a yearly audit.
  audit_retention interval not null default interval '1 year',
  constraint setting_one_row check (singleton),
  constraint setting_audit_retention_valid check (audit_retention between interval '1 day' and interval '100 years')
);

comment on table pyjobq.setting is
  'The install''s settings, one row; see job_settings. require_lease_token: a holder''s transition without '
  'the lease token is refused (22004) unless the caller owns the schema. audit_retention: job_prune deletes '
  'the audit lines older than this.';

insert into pyjobq.setting (require_lease_token) values (true);
