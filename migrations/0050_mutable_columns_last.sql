-- depends: 0049_keep_no_done

-- Schema 50: the job table's columns in the order of how often they change,
-- what never changes first and what every claim sets last, so that an update
-- within the page (a claim, a renewal, a retry) no longer logs the payload and
-- the metadata between them. PostgreSQL cannot move a column: the table is
-- made again and the live jobs copied into it, holding it exclusively for as
-- long as that takes (claims, enqueues and completions wait; about a third of
-- a second per 100,000 live jobs). The history keeps its columns as they were.

lock table pyjobq.job in access exclusive mode;

create table pyjobq.job_rewritten (
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
  constraint job_status_active check (status in (1, 2, 6)),
  constraint job_waiting_counts check ((status <> 6 or waiting_on > 0) and (waiting_on is null) = (run_on_parent_failure is null)),
  constraint job_payload_is_object check (jsonb_typeof(payload) = 'object'),
  constraint job_metadata_is_object check (jsonb_typeof(metadata) = 'object'),
  constraint job_attempts_within_max
    check (attempts_refunded between 0 and attempts and attempts - attempts_refunded <= max_attempts),
  constraint job_running_has_lease check ((status = 2) = (lease_until is not null)),
  constraint job_running_has_worker check (status <> 2 or worker_id is not null)
);

insert into pyjobq.job_rewritten
  (job_id, job_type, priority, max_attempts, created_at, seq, fair_rank, payload, dedupe_key,
   concurrency_key, metadata, batch_id, run_on_parent_failure, result, notify_done, has_dependants,
   waiting_on, attempts_refunded, run_after, last_error, status, attempts, worker_id, lease_token,
   lease_until, run_started_at, updated_at)
select job_id, job_type, priority, max_attempts, created_at, seq, fair_rank, payload, dedupe_key,
       concurrency_key, metadata, batch_id, run_on_parent_failure, result, notify_done,
       has_dependants, waiting_on, attempts_refunded, run_after, last_error, status, attempts,
       worker_id, lease_token, lease_until, run_started_at, updated_at
  from pyjobq.job;

-- What depends on the old table's row type goes with it and comes back below.
drop view pyjobq.job_all;
drop function pyjobq._holds(pyjobq.job, text, int, uuid, smallint[]);
drop function pyjobq._end_status(pyjobq.job, text);
drop function pyjobq._to_history(pyjobq.job[], smallint[], timestamptz, jsonb[], text[], int[], boolean[]);
drop table pyjobq.job;
alter table pyjobq.job_rewritten rename to job;

-- From PostgreSQL 18 on a NOT NULL is a constraint with a name, made from the
-- table's: the names a new install gives them, to the new table's and to the
-- history's (which took the job table's own when schema 27 made it, its
-- partitions with it).
do $$
declare
  v_name text;
begin
  for v_name in
    select c.conname from pg_constraint c
     where c.conrelid = 'pyjobq.job'::regclass and c.contype = 'n' and c.conname like 'job\_rewritten\_%'
  loop
    execute format('alter table pyjobq.job rename constraint %I to %I',
                   v_name, 'job_' || substr(v_name, length('job_rewritten_') + 1));
  end loop;
  for v_name in
    select c.conname from pg_constraint c
     where c.conrelid = 'pyjobq.job_history'::regclass and c.contype = 'n'
       and c.conname not like 'job\_history\_%'
  loop
    execute format('alter table pyjobq.job_history rename constraint %I to %I',
                   v_name, 'job_history_' || substr(v_name, length('job_') + 1));
  end loop;
end;
$$;

alter table pyjobq.job add constraint job_pkey primary key (job_id);

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
-- 30 % free for the new versions of its own rows: an update that must move
-- its row to another page writes a row-lock record and the whole new row,
-- where one within the page writes neither the lock nor what the two
-- versions share (12 % less WAL per job drained, docs/performance.md).
alter table pyjobq.job set (
  autovacuum_vacuum_scale_factor = 0,
  autovacuum_vacuum_threshold = 5000,
  autovacuum_vacuum_insert_scale_factor = 0,
  autovacuum_vacuum_insert_threshold = 20000,
  autovacuum_analyze_scale_factor = 0,
  autovacuum_analyze_threshold = 20000,
  autovacuum_vacuum_cost_delay = 0,
  fillfactor = 70
);

-- job_list(p_batch_id): a batch's members. Only members enter it.
create index job_batch_idx on pyjobq.job (batch_id) where batch_id is not null;

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

create or replace function pyjobq.schema_version()
returns int
language sql
immutable
set search_path = pg_catalog, pyjobq, pg_temp
as $$
  select 50
$$;

comment on function pyjobq.schema_version() is
  'Version of the pyjobq schema installed in this database: 1 + the number of schema changes since the first release.';

create function pyjobq._holds(p_job pyjobq.job, p_worker_id text, p_attempt int, p_lease_token uuid,
                              p_denied smallint[])
returns boolean
language sql
immutable
begin atomic
  select p_job.status = 2
     and (p_job.worker_id = p_worker_id or p_worker_id is null)
     and p_job.attempts = p_attempt
     and (p_job.lease_token = p_lease_token or p_lease_token is null)
     and p_job.job_type <> all (p_denied);
end;

comment on function pyjobq._holds(pyjobq.job, text, int, uuid, smallint[]) is
  'True when job row p_job is RUNNING attempt p_attempt of p_worker_id (any worker when null) with lease token '
  'p_lease_token (any when null), of a type outside p_denied.';

create function pyjobq._end_status(p_job pyjobq.job, p_outcome text)
returns smallint
language sql
immutable
begin atomic
  select case p_outcome
           when 'done' then 3
           when 'dead' then 4
           when 'cancelled' then 5
           else case when pyjobq._tries_left(p_job.attempts,
                                             p_job.attempts_refunded + (p_outcome = 'released')::int,
                                             p_job.max_attempts) > 0
                     then 1 else 4 end
         end::smallint;
end;

comment on function pyjobq._end_status(pyjobq.job, text) is
  'The status outcome p_outcome gives the RUNNING job p_job: 3 for done, 4 for dead, 5 for cancelled; for '
  'failed, expired and released 1 (PENDING) with tries left, else 4.';

create function pyjobq._to_history(
  p_rows pyjobq.job[],
  p_statuses smallint[],
  p_now timestamptz,
  p_results jsonb[] default null,
  p_errors text[] default null,
  p_waiting int[] default null,
  p_clear_workers boolean[] default null
)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
begin
  insert into pyjobq.job_history
    (job_id, job_type, status, priority, payload, result, dedupe_key, attempts, max_attempts, run_after,
     lease_until, worker_id, run_started_at, last_error, created_at, updated_at, seq, attempts_refunded,
     notify_done, lease_token, concurrency_key, fair_rank, metadata, waiting_on, run_on_parent_failure,
     has_dependants, batch_id)
  select r.job_id, r.job_type, p_statuses[r.ordinality], r.priority, r.payload,
         case when p_results is null then r.result else p_results[r.ordinality] end,
         r.dedupe_key, r.attempts, r.max_attempts, r.run_after, null,
         case when p_clear_workers[r.ordinality] then null else r.worker_id end, r.run_started_at,
         case when p_errors is null then r.last_error else p_errors[r.ordinality] end,
         r.created_at, p_now, r.seq, r.attempts_refunded, r.notify_done, r.lease_token, r.concurrency_key,
         r.fair_rank, r.metadata,
         case when p_waiting is null then r.waiting_on else p_waiting[r.ordinality] end,
         r.run_on_parent_failure, r.has_dependants, r.batch_id
    from unnest(p_rows) with ordinality as r
   -- A DONE job of a type that keeps none (job_type_set_history) ends with its
   -- delete, unless something reads it after its end: its dependants or its
   -- batch, a unique window over its key, a watcher.
   where p_statuses[r.ordinality] <> 3
      or r.job_type <> all (array(select t.job_type from pyjobq.job_type t where not t.keep_done))
      or r.has_dependants or r.batch_id is not null or r.dedupe_key is not null or r.notify_done;
end;
$$;

comment on function pyjobq._to_history(pyjobq.job[], smallint[], timestamptz, jsonb[], text[], int[], boolean[]) is
  'Inserts the rows p_rows, just deleted from pyjobq.job, into job_history as ended at p_now, each with the '
  'status, and the result, error and waiting count (where those arrays are given) at its position, and '
  'without its worker where p_clear_workers says so; leaves out the DONE jobs of types that keep none, but '
  'for those with dependants, a batch, a dedupe key or a watcher.';

create or replace function pyjobq._enqueue_one(
  p_job_type int,
  p_payload jsonb,
  p_priority int,
  p_run_after timestamptz,
  p_dedupe_key text,
  p_max_attempts int,
  p_now timestamptz,
  p_unique_for interval default null,
  p_concurrency_key text default null,
  p_metadata jsonb default null,
  p_parents uuid[] default null,
  p_run_on_parent_failure boolean default null,
  p_batch_id uuid default null
)
returns table (job_id uuid, created boolean)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_seq bigint;
  v_new_id uuid;
  v_row pyjobq.job_history;
  v_id uuid;
  v_ended uuid;
  v_status smallint := 1;
  v_waiting int;
  v_failure text;
  v_read_ids uuid[];
  v_read_statuses smallint[];
begin
  if p_unique_for is not null then
    -- An active job with the key is the duplicate first: the one a window-less
    -- enqueue returns, and the one whose outcome is still to come.
    v_id := pyjobq._active_holder(p_job_type, p_dedupe_key);
    if v_id is null then
      v_id := pyjobq._ended_within(p_job_type, p_dedupe_key, p_unique_for, p_now);
    end if;
    if v_id is not null then
      return query select v_id, false;
      return;
    end if;
  end if;
  -- With parents: WAITING for those still to end, or CANCELLED at once by one
  -- that ended DEAD or CANCELLED (unless it runs on parent failure).
  if p_parents is not null then
    select l.waiting, l.failure, l.ids, l.statuses
      into v_waiting, v_failure, v_read_ids, v_read_statuses
      from pyjobq._read_parents(p_parents) l;
    v_status := case when v_failure is not null and not p_run_on_parent_failure then 5
                     when v_waiting > 0 then 6
                     else 1 end;
    -- Born CANCELLED, it would take no key: an active job with the key is
    -- still the answer, as for any enqueue.
    if v_status = 5 and p_dedupe_key is not null then
      v_id := pyjobq._active_holder(p_job_type, p_dedupe_key);
      if v_id is not null then
        return query select v_id, false;
        return;
      end if;
    end if;
  end if;
  loop
    -- One id: _new_job_ids's, without the set-returning call that a batch needs.
    v_seq := nextval('pyjobq.job_seq');
    v_new_id := (pyjobq._job_id_prefix(p_now) || to_hex(v_seq | (-9223372036854775808)::bigint))::uuid;
    -- The row in the history's column order; born CANCELLED, it is history at
    -- once. A fair rank only for a type with fair share: asked in the row's
    -- own statement, it costs the others no call.
    v_row := row(v_new_id, p_job_type, v_status, p_priority, p_payload, null, p_dedupe_key, 0, p_max_attempts,
                 p_run_after, null, null, null, case when v_status = 5 then v_failure end, p_now, p_now, v_seq, 0,
                 false, null, p_concurrency_key,
                 (select (pyjobq._fair_ranks(p_job_type, p_priority, array[p_concurrency_key], 1, p_now))[1]
                    from pyjobq.job_type t
                   where t.job_type = p_job_type and t.fair_share),
                 p_metadata, v_waiting, case when p_parents is not null then p_run_on_parent_failure end, false,
                 p_batch_id);
    if v_status = 5 then
      insert into pyjobq.job_history select (v_row).*;
      v_id := v_new_id;
    else
      insert into pyjobq.job as j
        (job_id, job_type, status, priority, payload, result, dedupe_key, attempts, max_attempts, run_after,
         lease_until, worker_id, run_started_at, last_error, created_at, updated_at, seq, attempts_refunded,
         notify_done, lease_token, concurrency_key, fair_rank, metadata, waiting_on, run_on_parent_failure,
         has_dependants, batch_id) select (v_row).*
      on conflict (job_type, dedupe_key) where status in (1, 2, 6) and dedupe_key is not null do nothing
      returning j.job_id into v_id;
    end if;
    if v_id is not null and p_unique_for is not null and v_status <> 5 then
      v_ended := pyjobq._ended_within(p_job_type, p_dedupe_key, p_unique_for, p_now);
      if v_ended is not null then
        delete from pyjobq.job d where d.job_id = v_id;
        return query select v_ended, false;
        return;
      end if;
    end if;
    if v_id is not null then
      if p_parents is not null then
        perform pyjobq._link_parents(v_id, p_parents, v_read_ids, v_read_statuses);
      end if;
      if p_batch_id is not null then
        perform pyjobq._batch_add(p_batch_id, 1, case when v_status = 5 then 1 else 0 end);
      end if;
      if v_status = 1 then
        perform pyjobq._pending_from(p_run_after, p_now, true);
        perform pyjobq._announce(p_job_type, p_run_after, p_now);
      end if;
      return query select v_id, true;
      return;
    end if;
    v_id := pyjobq._active_holder(p_job_type, p_dedupe_key);
    if v_id is not null then
      return query select v_id, false;
      return;
    end if;
  end loop;
end;
$$;

comment on function pyjobq._enqueue_one(int, jsonb, int, timestamptz, text, int, timestamptz, interval, text, jsonb, uuid[], boolean, uuid) is
  'Inserts one PENDING job from checked arguments (WAITING, or CANCELLED, with parents p_parents that have not '
  'all ended, or one ended DEAD or CANCELLED), or returns the active job of p_job_type holding '
  'p_dedupe_key, or else, with p_unique_for, the one that ended last within that window (created false); '
  'counts a new job in batch p_batch_id (locked by the caller); voids claim fronts and announces as every enqueue '
  'does.';

create or replace function pyjobq._enqueue_graph(
  p_job_type int,
  p_payloads jsonb[],
  p_priority int,
  p_run_after timestamptz,
  p_max_attempts int,
  p_now timestamptz,
  p_concurrency_keys text[],
  p_metadata jsonb,
  p_depends_on jsonb[],
  p_run_on_parent_failure boolean,
  p_batch_id uuid
)
returns table (ord int, job_id uuid, created boolean)
language plpgsql
volatile
set search_path = pg_catalog, pyjobq, pg_temp
as $$
declare
  v_count int := cardinality(p_payloads);
  v_ids uuid[];
  v_seqs bigint[];
  v_ranks bigint[];
  v_child int[];      -- the edges, by child row then place in its list
  v_k int[];
  v_pos int[];
  v_parent uuid[];
  v_status smallint[];
  v_external uuid[];
  v_has_parents boolean[] := array_fill(false, array[v_count]);
  v_cancel boolean[] := array_fill(false, array[v_count]);
  v_named boolean[] := array_fill(false, array[v_count]);
  v_wait int[] := array_fill(0, array[v_count]);
  v_failure text[] := array_fill(null::text, array[v_count]);
  v_active boolean[];
  v_e int;
  v_c int;
  v_failed boolean;
begin
  select array_agg(n.seq order by n.seq), array_agg(n.job_id order by n.seq)
    into v_seqs, v_ids
    from pyjobq._new_job_ids(p_now, v_count) n;
  select g.child, g.k, g.pos, g.parent, g.status, g.external
    into v_child, v_k, v_pos, v_parent, v_status, v_external
    from pyjobq._graph_edges(p_depends_on, v_ids) g;
  v_active := array_fill(false, array[coalesce(cardinality(v_child), 0)]);
  for v_e in 1 .. coalesce(cardinality(v_child), 0) loop
    v_c := v_child[v_e];
    v_has_parents[v_c] := true;
    if v_pos[v_e] is not null then
      v_named[v_pos[v_e]] := true;
      v_failed := v_cancel[v_pos[v_e]];
      v_active[v_e] := not v_failed;
      if v_failed then
        v_status[v_e] := 5;
      end if;
    else
      v_failed := v_status[v_e] in (4, 5);
      v_active[v_e] := v_status[v_e] in (1, 2, 6);
    end if;
    if v_failed and not p_run_on_parent_failure and not v_cancel[v_c] then
      v_cancel[v_c] := true;
      v_failure[v_c] := format('parent %s ended %s', v_parent[v_e], pyjobq._status_name(v_status[v_e]));
    end if;
    if v_active[v_e] then
      v_wait[v_c] := v_wait[v_c] + 1;
    end if;
  end loop;
  v_ranks := pyjobq._fair_ranks(p_job_type, p_priority, p_concurrency_keys, v_count, p_now);

  -- The rows in the history's column order; those born CANCELLED are history at once.
  with new_job as (
    select v_ids[i] as job_id, p_job_type::smallint as job_type,
           (case when v_cancel[i] then 5 when v_wait[i] > 0 then 6 else 1 end)::smallint as status,
           p_priority::smallint as priority, p_payloads[i] as payload, null::jsonb as result,
           null::varchar(200) as dedupe_key, 0::smallint as attempts, p_max_attempts::smallint as max_attempts,
           p_run_after as run_after, null::timestamptz as lease_until, null::varchar(80) as worker_id,
           null::timestamptz as run_started_at, v_failure[i] as last_error, p_now as created_at,
           p_now as updated_at, v_seqs[i] as seq, 0::smallint as attempts_refunded, false as notify_done,
           null::uuid as lease_token, p_concurrency_keys[i]::varchar(200) as concurrency_key,
           v_ranks[i] as fair_rank, p_metadata as metadata,
           case when v_has_parents[i] then v_wait[i] end as waiting_on,
           case when v_has_parents[i] then p_run_on_parent_failure end as run_on_parent_failure,
           v_named[i] as has_dependants, p_batch_id as batch_id
      from generate_series(1, v_count) i
  ), born_ended as (
    insert into pyjobq.job_history
    select n.* from new_job n where n.status = 5
  )
  insert into pyjobq.job
    (job_id, job_type, status, priority, payload, result, dedupe_key, attempts, max_attempts, run_after,
     lease_until, worker_id, run_started_at, last_error, created_at, updated_at, seq, attempts_refunded,
     notify_done, lease_token, concurrency_key, fair_rank, metadata, waiting_on, run_on_parent_failure,
     has_dependants, batch_id)
  select n.* from new_job n where n.status <> 5 order by n.seq;
  insert into pyjobq.job_edge (parent_id, child_id, ord, resolved)
  select v_parent[e], v_ids[v_child[e]], v_k[e], not v_active[e]
    from generate_series(1, coalesce(cardinality(v_child), 0)) e;
  if cardinality(v_external) > 0 then
    perform pyjobq._mark_parents(v_external);
  end if;
  if p_batch_id is not null then
    perform pyjobq._batch_add(p_batch_id, v_count, cardinality(array_positions(v_cancel, true)));
  end if;
  if exists (select from generate_series(1, v_count) i where not v_cancel[i] and v_wait[i] = 0) then
    perform pyjobq._pending_from(p_run_after, p_now, true);
    perform pyjobq._announce(p_job_type, p_run_after, p_now);
  end if;
  return query select i, v_ids[i], true from generate_series(1, v_count) i order by i;
end;
$$;

comment on function pyjobq._enqueue_graph(int, jsonb[], int, timestamptz, int, timestamptz, text[], jsonb, jsonb[], boolean, uuid) is
  'job_enqueue_many''s rows with parents p_depends_on (and no dedupe keys), checked, written in one statement '
  'each for the jobs, their edges and their parents'' marks: WAITING, PENDING or CANCELLED at birth as '
  'job_enqueue makes each. Returns every row, created.';


revoke all on all functions in schema pyjobq from public;
