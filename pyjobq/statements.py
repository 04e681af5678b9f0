"""The SQL each binding method runs: one statement per method, with explicit casts.

The casts make every call resolve to the one signature of each function, and a
``None`` parameter is SQL null, which the functions read as "the default". Result
columns are named, never ``*``: a column a later schema adds to a function's result
must not break a deployed binding (tests/test_binding.py checks each list against the
fields of its row class).

The arrays of the batch calls that a Worker sends at every flush (``%b``) go in binary:
in text, psycopg quotes each element with a regular expression. The Worker's CPU per job
in a drain fell from 48 to 40 microseconds (bench/worker_cpu.py).
"""

from __future__ import annotations

from typing import LiteralString

# A run_after given as a delay is counted from the database's clock, here: the due time is
# "case when DELAY is not null then clock_now() + DELAY else RUN_AFTER end" (params.due).
DUE: LiteralString = (
    "case when %s::interval is not null then pyjobq.clock_now() + %s::interval"
    " else %s::timestamptz end"
)
ENQUEUE: LiteralString = (
    "select job_id, created, replaced from pyjobq.job_enqueue(%s::int, %s::jsonb, %s::int, "
    + DUE
    + ", %s::text, %s::int, %s::interval, %s::text, %s::jsonb, %s::uuid[], %s::text, %s::uuid,"
    " %s::text)"
)
# The payloads travel as one JSON array document, split into the jsonb[] argument
# on the server: one encode and one parse, instead of a jsonb value per element
# escaped into an array literal (2.3x the jobs/s for 20000 jobs).
ENQUEUE_MANY: LiteralString = (
    "select job_id, created, replaced from pyjobq.job_enqueue_many(%s::int,"
    " array(select p from jsonb_array_elements(%s::jsonb) with ordinality as a(p, i) order by i),"
    " %s::text[], %s::int, " + DUE + ", %s::int, %s::interval, %s::text[], %s::jsonb,"
    " (select array_agg(d order by i)"
    " from jsonb_array_elements(%s::jsonb) with ordinality as a(d, i)),"
    " %s::text, %s::uuid, %s::text)"
    " order by ord"
)
UPDATE: LiteralString = "select pyjobq.job_update(%s::uuid, %s::jsonb, %s::int, " + DUE + ")"
CLAIM: LiteralString = (
    "select job_id, job_type, priority, payload, attempt, max_attempts, dedupe_key,"
    " run_after, lease_until, created_at, lease_token, metadata, parent_results"
    " from pyjobq.job_claim(%s::text, %s::int, %s::int, %s::int[])"
)
# job_next_due and job_next_chores are read first, once, in the same statement: they count jobs
# still to come, schedules and leases, which a claim never changes. OFFSET 0 keeps the planner
# from pulling the subquery up into the join, where its expressions would run once per claimed
# row. The claim's columns are those of CLAIM; an empty claim is one row of nulls beside the
# times.
CLAIM_WITH_NEXT_DUE: LiteralString = (
    "select job_id, job_type, priority, payload, attempt, max_attempts, dedupe_key,"
    " run_after, lease_until, created_at, lease_token, metadata, parent_results,"
    " next_due_in, next_tick_in, next_expiry_in"
    " from (select"
    " extract(epoch from pyjobq.job_next_due(%s::int[]) - now_)::float8 as next_due_in,"
    " extract(epoch from c.next_tick - now_)::float8 as next_tick_in,"
    " extract(epoch from c.next_expiry - now_)::float8 as next_expiry_in"
    " from pyjobq.job_next_chores() c, pyjobq.clock_now() now_ offset 0) n"
    " left join lateral pyjobq.job_claim(%s::text, %s::int, %s::int, %s::int[]) on true"
)
NEXT_DUE: LiteralString = "select pyjobq.job_next_due(%s::int[])"
NEXT_DUE_IN: LiteralString = (
    "select extract(epoch from pyjobq.job_next_due(%s::int[]) - pyjobq.clock_now())::float8"
)
WORKER_IDLE: LiteralString = "select pyjobq.job_worker_idle()"
WORKER_BUSY: LiteralString = "select pyjobq.job_worker_busy()"
COMPLETE: LiteralString = (
    "select pyjobq.job_complete(%s::uuid, %s::text, %s::int, %s::jsonb, %s::uuid)"
)
COMPLETE_MANY: LiteralString = (
    "select job_id, completed from pyjobq.job_complete_many("
    "%s::text, %b::uuid[], %b::int[], %b::jsonb[], %b::uuid[])"
)
FAIL: LiteralString = (
    "select status, run_after from pyjobq.job_fail("
    "%s::uuid, %s::text, %s::int, %s::text, %s::float8, %s::boolean, %s::uuid)"
)
FAIL_MANY: LiteralString = (
    "select job_id, status, run_after from pyjobq.job_fail_many("
    "%s::text, %b::uuid[], %b::int[], %b::text[], %b::float8[], %b::boolean[], %b::uuid[])"
)
FINISH_MANY: LiteralString = (
    "select job_id, status, run_after from pyjobq.job_finish_many(%s::text, %b::uuid[],"
    " %b::int[], %b::text[], %b::jsonb[], %b::text[], %b::float8[], %b::uuid[])"
)
RENEW_LEASE: LiteralString = (
    "select pyjobq.job_renew_lease(%s::uuid, %s::text, %s::int, %s::int, %s::uuid)"
)
RENEW_LEASE_MANY: LiteralString = (
    "select job_id, renewed, lease_until, cancelled from pyjobq.job_renew_lease_many("
    "%s::text, %b::uuid[], %b::int[], %s::int, %b::uuid[])"
)
STEP_SAVE: LiteralString = (
    "select saved, result, attempt, saved_at from pyjobq.job_step_save("
    "%s::uuid, %s::text, %s::int, %s::text, %s::jsonb, %s::uuid)"
)
STEPS: LiteralString = (
    "select name, result, attempt, saved_at from pyjobq.job_steps("
    "%s::uuid, %s::text, %s::int, %s::uuid)"
)
PROGRESS: LiteralString = (
    "select pyjobq.job_progress(%s::uuid, %s::text, %s::int, %s::jsonb, %s::uuid)"
)
EVENT_WAIT: LiteralString = (
    "select outcome, payload, wait_until from pyjobq.job_event_wait("
    "%s::uuid, %s::text, %s::int, %s::text, %s::float8, %s::uuid)"
)
SIGNAL: LiteralString = "select pyjobq.job_signal(%s::uuid, %s::text, %s::jsonb)"
RELEASE: LiteralString = "select pyjobq.job_release(%s::uuid, %s::text, %s::int, %s::uuid)"
RELEASE_MANY: LiteralString = (
    "select job_id, released from pyjobq.job_release_many("
    "%s::text, %b::uuid[], %b::int[], %b::uuid[])"
)
REAP: LiteralString = (
    "select job_id, job_type, status, worker_id, attempt, run_after from pyjobq.job_reap(%s::int)"
)
COUNTS: LiteralString = (
    "select job_type, job_type_name, status, status_name, jobs, oldest_due_seconds,"
    " expired_leases, exact from pyjobq.job_counts()"
)
GET: LiteralString = (
    "select job_id, job_type, job_type_name, status, status_name, priority, attempts,"
    " max_attempts, payload, result, last_error, dedupe_key, run_after, lease_until, worker_id,"
    " run_started_at, finished_at, created_at, updated_at, metadata, waiting_on, batch_id,"
    " snoozes, progress, tries from pyjobq.job_get(%s::uuid)"
)
ATTEMPTS: LiteralString = (
    "select attempt, worker_id, started_at, ended_at, outcome, error_summary, error"
    " from pyjobq.job_attempts(%s::uuid)"
)
STEP_LIST: LiteralString = (
    "select name, attempt, worker_id, saved_at, result from pyjobq.job_step_list(%s::uuid)"
)
EVENT_LIST: LiteralString = (
    "select name, state, wait_until, signalled_at, payload from pyjobq.job_event_list(%s::uuid)"
)
LIST: LiteralString = (
    "select job_id, job_type, job_type_name, status, status_name, priority, attempts,"
    " max_attempts, dedupe_key, run_after, worker_id, last_error, created_at, updated_at,"
    " tries, error_summary from pyjobq.job_list(%s::int, %s::int, %s::text, %s::timestamptz,"
    " %s::timestamptz, %s::boolean, %s::uuid, %s::int, %s::text, %s::uuid)"
)
DEPENDENCIES: LiteralString = (
    "select relation, job_id, job_type, status, status_name, resolved"
    " from pyjobq.job_dependencies(%s::uuid)"
)
BATCH_OPEN: LiteralString = "select pyjobq.job_batch_open(%s::jsonb)"
BATCH_CLOSE: LiteralString = "select pyjobq.job_batch_close(%s::uuid)"
BATCH_GET: LiteralString = (
    "select batch_id, state, total, active, done, dead, cancelled, created_at, closed_at,"
    " finished_at, success_job, finish_job, dead_job from pyjobq.job_batch_get(%s::uuid)"
)
WATCH: LiteralString = "select job_id, status, status_name from pyjobq.job_watch(%s::uuid[])"
CANCEL: LiteralString = "select job_id, outcome from pyjobq.job_cancel(%s::uuid[])"
REDRIVE: LiteralString = "select job_id from pyjobq.job_redrive(%s::uuid[], %s::int, %s::int)"
PRUNE: LiteralString = "select pyjobq.job_prune(%s::interval, %s::int)"
PRUNE_ESTIMATE: LiteralString = "select jobs, exact from pyjobq.job_prune_estimate(%s::interval)"
THROUGHPUT: LiteralString = (
    "select minute, job_type, job_type_name, completed, retried, dead"
    " from pyjobq.job_throughput(%s::int)"
)
WORKERS: LiteralString = (
    "select worker_id, seen_at, running, completed, retried, dead"
    " from pyjobq.job_workers(%s::interval)"
)
AUDIT: LiteralString = (
    "select audit_id, at, role, actor, action, jobs, detail"
    " from pyjobq.job_audit(%s::bigint, %s::int)"
)
TYPE_REGISTER: LiteralString = (
    "select job_type, name, created from pyjobq.job_type_register(%s::int, %s::text)"
)
TYPE_ALLOCATE: LiteralString = (
    "select job_type, name, created from pyjobq.job_type_allocate(%s::text)"
)
TYPES: LiteralString = "select job_type, name from pyjobq.job_types()"
TYPE_CODE: LiteralString = "select pyjobq.job_type_code(%s::text)"
TYPE_SET_POLICY: LiteralString = (
    "select pyjobq.job_type_set_policy(%s::int, %s::int, %s::float8, %s::float8, %s::float8,"
    " %s::float8)"
)
TYPE_POLICIES: LiteralString = (
    "select job_type, name, max_attempts, backoff_base_seconds, backoff_cap_seconds,"
    " backoff_jitter, timeout_seconds, keep_done, max_snoozes, paused_at"
    " from pyjobq.job_type_policies()"
)
TYPE_SET_HISTORY: LiteralString = "select pyjobq.job_type_set_history(%s::int, %s::boolean)"
TYPE_SET_SNOOZES: LiteralString = "select pyjobq.job_type_set_snoozes(%s::int, %s::int)"
TYPE_PAUSE: LiteralString = "select pyjobq.job_type_pause(%s::int)"
TYPE_RESUME: LiteralString = "select pyjobq.job_type_resume(%s::int)"
TYPE_SET_LIMITS: LiteralString = (
    "select pyjobq.job_type_set_limits(%s::int, %s::int, %s::int, %s::int, %s::interval, %s::int,"
    " %s::interval, %s::boolean)"
)
TYPE_LIMITS: LiteralString = (
    "select job_type, name, max_running, key_max_running, rate_limit, rate_period, key_rate_limit,"
    " key_rate_period, fair_share, next_claim_at from pyjobq.job_type_limits()"
)
TYPE_GRANT: LiteralString = "select pyjobq.job_type_grant(%s::int, %s::text, %s::text)"
TYPE_REVOKE: LiteralString = "select pyjobq.job_type_revoke(%s::int, %s::text, %s::text)"
TYPE_GRANTS: LiteralString = (
    "select job_type, job_type_name, privilege, role_name from pyjobq.job_type_grants()"
)
SETTINGS: LiteralString = "select require_lease_token, audit_retention from pyjobq.job_settings()"
SETTINGS_SET: LiteralString = (
    "select require_lease_token, audit_retention"
    " from pyjobq.job_settings_set(%s::boolean, %s::interval)"
)
SCHEDULE_SET: LiteralString = (
    "select next_fire_at from pyjobq.job_schedule_set(%s::text, %s::text, %s::int, %s::jsonb,"
    " %s::text, %s::int, %s::int, %s::text, %s::text, %s::int, %s::timestamptz)"
)
SCHEDULE_DELETE: LiteralString = "select pyjobq.job_schedule_delete(%s::text)"
SCHEDULE_PAUSE: LiteralString = "select pyjobq.job_schedule_pause(%s::text)"
SCHEDULE_RESUME: LiteralString = "select pyjobq.job_schedule_resume(%s::text)"
SCHEDULES: LiteralString = (
    "select name, cron, time_zone, job_type, job_type_name, payload, priority, max_attempts,"
    " dedupe_key, on_miss, grace_seconds, paused, next_fire_at, last_fire_at, last_job_id, fired,"
    " misses from pyjobq.job_schedules()"
)
SCHEDULE_TICK: LiteralString = (
    "select name, tick, job_id, created, catch_up from pyjobq.job_schedule_tick()"
)
SCHEMA_VERSION: LiteralString = "select pyjobq.schema_version()"
