"""JobQueue: one SQL call per method, typed rows and errors, the caller's transaction respected."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import pyjobq
from pyjobq import (
    ClaimedJob,
    Completion,
    CountRow,
    Enqueued,
    FailOutcome,
    InvalidArgument,
    JobAlreadyFinished,
    JobNotFound,
    JobQueue,
    JobStatus,
    JobType,
    JobTypeConflict,
    LeaseLost,
    PyjobqError,
    statements,
)
from pyjobq.errors import translate
from pyjobq.migrate import shipped_migrations
from pyjobq.rows import (
    Cancellation,
    ClaimBatch,
    JobInfo,
    JobSummary,
    JobTypeInfo,
    ReapedJob,
    RegisteredType,
    Release,
    Renewal,
    TypeGrant,
    Watched,
)
from tests.sqlhelp import FROZEN, freeze

Conn = psycopg.Connection[Any]


def test_full_lifecycle_through_the_binding(conn: Conn) -> None:
    q = JobQueue(conn)
    freeze(conn, FROZEN)
    first = q.enqueue(JobType.SEARCH, {"query": "pg"}, dedupe_key="pg")
    assert first.created
    assert q.enqueue(JobType.SEARCH, {"query": "pg"}, dedupe_key="pg").job_id == first.job_id
    (job,) = q.claim("w1", 10, lease_seconds=30)
    assert isinstance(job, ClaimedJob)
    assert (job.job_id, job.payload, job.attempt, job.lease_until) == (
        first.job_id,
        {"query": "pg"},
        1,
        FROZEN + timedelta(seconds=30),
    )
    assert q.renew_lease(job.job_id, "w1", job.attempt, 60) == FROZEN + timedelta(seconds=60)
    outcome = q.fail(job.job_id, "w1", job.attempt, "boom", retry_delay_seconds=5)
    assert (outcome.status, outcome.run_after) == (JobStatus.PENDING, FROZEN + timedelta(seconds=5))
    freeze(conn, FROZEN + timedelta(seconds=5))
    (job,) = q.claim("w1")
    q.complete(job.job_id, "w1", job.attempt, {"hits": 3})
    counts = {(c.job_type, c.status): c.jobs for c in q.counts()}
    assert counts[(JobType.SEARCH, JobStatus.DONE)] == 1
    assert q.schema_version() == pyjobq.SCHEMA_VERSION == len(shipped_migrations())


def test_sqlstates_become_typed_exceptions_with_cause_and_hint(conn: Conn) -> None:
    q = JobQueue(conn)
    with pytest.raises(InvalidArgument) as bad:
        q.claim("w1", 0)
    assert bad.value.sqlstate == "22023"
    assert isinstance(bad.value.__cause__, psycopg.Error)
    with pytest.raises(InvalidArgument) as unknown:
        q.enqueue(77)
    assert unknown.value.hint
    with pytest.raises(JobNotFound):
        q.complete(uuid4(), "w1", 1)
    job_id = q.enqueue(JobType.OUTBOX).job_id
    q.claim("w1")
    with pytest.raises(LeaseLost) as lost:
        q.complete(job_id, "w2", 1)
    assert lost.value.sqlstate == "JQ001"
    q.complete(job_id, "w1", 1)
    with pytest.raises(JobAlreadyFinished):
        q.complete(job_id, "w1", 1)
    with pytest.raises(JobTypeConflict):
        q.type_register(1, "NOT_SEARCH")


def test_enqueue_many_and_complete_many_round_trip_in_order(conn: Conn) -> None:
    q = JobQueue(conn)
    enqueued = q.enqueue_many(JobType.OUTBOX, [{"i": i} for i in range(50)], priority=7)
    position = {e.job_id: i for i, e in enumerate(enqueued)}
    assert len(position) == 50
    jobs = q.claim("w1", 50)
    # The k-th returned id is the job of the k-th payload.
    assert sorted(j.payload["i"] for j in jobs) == list(range(50))
    assert all(position[j.job_id] == j.payload["i"] for j in jobs)
    assert {j.priority for j in jobs} == {7}
    done = q.complete_many("w1", [j.job_id for j in jobs], [j.attempt for j in jobs])
    assert all(c.completed for c in done)
    # The same holder again (a retry after a lost reply): still completed, result unchanged.
    again = q.complete_many("w1", [jobs[0].job_id], [jobs[0].attempt], [{"late": True}])
    assert [c.completed for c in again] == [True]
    stale = q.complete_many("w2", [jobs[0].job_id], [jobs[0].attempt])
    assert [c.completed for c in stale] == [False]
    result = conn.execute("select result from pyjobq.job_all where job_id = %s", [jobs[0].job_id])
    assert result.fetchone() == (None,)


def test_finish_many_and_fail_many_return_typed_outcomes_in_input_order(conn: Conn) -> None:
    q = JobQueue(conn)
    q.enqueue_many(JobType.OUTBOX, [{"i": i} for i in range(4)], max_attempts=2)
    a, b, c, d = sorted(q.claim("w1", 4), key=lambda j: j.payload["i"])
    rows = q.finish_many(
        "w1",
        [a.job_id, b.job_id, c.job_id],
        [a.attempt, b.attempt, c.attempt],
        ["done", "failed", "dead"],
        [{"ok": 1}, None, None],
        [None, "try later", "never"],
        [None, 30.0, None],
        [a.lease_token, b.lease_token, c.lease_token],
    )
    assert [(r.job_id, r.status) for r in rows] == [
        (a.job_id, JobStatus.DONE),
        (b.job_id, JobStatus.PENDING),
        (c.job_id, JobStatus.DEAD),
    ]
    retry_at, done_at = rows[1].run_after, rows[0].run_after
    assert retry_at is not None
    assert done_at is not None
    assert retry_at - done_at >= timedelta(seconds=29)
    failed = q.fail_many(
        "w1", [d.job_id, a.job_id], [d.attempt, a.attempt], ["boom", "late"], None, [True, False]
    )
    assert [(r.job_id, r.status) for r in failed] == [
        (d.job_id, JobStatus.DEAD),
        (a.job_id, JobStatus.DONE),  # already ended by this attempt: as it ended
    ]
    with pytest.raises(
        InvalidArgument, match=r"p_outcomes\[1\] must be done, failed, dead or snoozed"
    ):
        q.finish_many("w1", [a.job_id], [a.attempt], ["later"])  # type: ignore[list-item]


def test_enqueue_many_names_the_first_payload_that_is_not_an_object(conn: Conn) -> None:
    q = JobQueue(conn)
    payloads: list[Any] = [{"i": 1}, {"i": 2}, [3], None]
    with pytest.raises(InvalidArgument, match=r"p_payloads\[3\] must be a JSON object"):
        q.enqueue_many(JobType.OUTBOX, payloads)
    conn.rollback()
    assert conn.execute("select count(*) from pyjobq.job_all").fetchone() == (0,)


def test_reap_redrive_prune_and_types(conn: Conn) -> None:
    q = JobQueue(conn)
    freeze(conn, FROZEN)
    job_id = q.enqueue(JobType.SEARCH, max_attempts=1).job_id
    q.claim("w1", lease_seconds=1)
    freeze(conn, FROZEN + timedelta(seconds=2))
    (reaped,) = q.reap()
    assert (reaped.job_id, reaped.status, reaped.worker_id, reaped.attempt) == (
        job_id,
        JobStatus.DEAD,
        "w1",
        1,
    )
    assert q.redrive(job_type=JobType.SEARCH) == [job_id]
    (job,) = q.claim("w2")
    q.complete(job.job_id, "w2", job.attempt)
    freeze(conn, FROZEN + timedelta(days=30))
    assert q.prune(timedelta(days=7)) == 1
    registered = q.type_register(10, "THUMBNAIL")
    assert registered.created
    assert [t.name for t in q.types()] == ["SEARCH", "OUTBOX", "THUMBNAIL"]


def test_enqueue_joins_the_callers_transaction_outbox_style(dsn: str, conn: Conn) -> None:
    conn.execute("create table orders (id int primary key)")
    with psycopg.connect(dsn) as tx_conn:  # not autocommit: the caller owns the transaction
        q = JobQueue(tx_conn)
        tx_conn.execute("insert into orders values (1)")
        q.enqueue(JobType.OUTBOX, {"order": 1})
        tx_conn.rollback()
        assert conn.execute("select count(*) from pyjobq.job_all").fetchone() == (0,)
        tx_conn.execute("insert into orders values (2)")
        q.enqueue(JobType.OUTBOX, {"order": 2})
        assert conn.execute("select count(*) from pyjobq.job_all").fetchone() == (
            0,
        )  # not yet committed
        tx_conn.commit()
    assert conn.execute("select payload from pyjobq.job_all").fetchall() == [({"order": 2},)]
    assert conn.execute("select id from orders").fetchall() == [(2,)]


def test_a_pool_commits_each_call(dsn: str, conn: Conn) -> None:
    with ConnectionPool(dsn, min_size=1, max_size=2, open=True) as pool:
        q = JobQueue(pool)
        job_id = q.enqueue(JobType.SEARCH).job_id
        assert conn.execute("select status from pyjobq.job_all").fetchone() == (JobStatus.PENDING,)
        (job,) = q.claim("w1")
        q.complete(job.job_id, "w1", job.attempt)
    assert conn.execute(
        "select status from pyjobq.job_all where job_id = %s", (job_id,)
    ).fetchone() == (JobStatus.DONE,)


def test_errors_that_are_not_pyjobqs_come_out_unchanged(conn: Conn) -> None:
    q = JobQueue(conn)
    conn.execute("set role pyjobq_observer")  # may read counts, may not enqueue
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
        q.enqueue(JobType.OUTBOX)
    # Raised as psycopg raised it: not wrapped, and not made its own cause.
    assert refused.value.__cause__ is None
    assert translate(refused.value) is None


@pytest.mark.parametrize(
    "cls",
    [
        LeaseLost,
        JobNotFound,
        JobAlreadyFinished,
        JobTypeConflict,
        pyjobq.JobCancelled,
        pyjobq.LockTimeout,
    ],
)
def test_each_error_class_is_what_its_declared_sqlstate_becomes(
    conn: Conn, cls: type[PyjobqError]
) -> None:
    assert cls.sqlstate is not None
    with pytest.raises(psycopg.Error) as raised:
        conn.execute(
            "do $$ begin raise exception 'x' using errcode = '" + cls.sqlstate + "'; end $$"
        )
    translated = translate(raised.value)
    assert type(translated) is cls
    assert translated.sqlstate == cls.sqlstate


def test_the_sync_binding_is_generated_from_the_async_one() -> None:
    script = Path(__file__).resolve().parent.parent / "scripts" / "async_to_sync.py"
    checked = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stderr


ROW_STATEMENTS = [
    ("ENQUEUE", Enqueued),
    ("ENQUEUE_MANY", Enqueued),
    ("CLAIM", ClaimedJob),
    ("COMPLETE_MANY", Completion),
    ("RENEW_LEASE_MANY", Renewal),
    ("RELEASE_MANY", Release),
    ("CANCEL", Cancellation),
    ("LIST", JobSummary),
    ("WATCH", Watched),
    ("FAIL", FailOutcome),
    ("REAP", ReapedJob),
    ("COUNTS", CountRow),
    ("TYPE_REGISTER", RegisteredType),
    ("TYPES", JobTypeInfo),
    ("TYPE_GRANTS", TypeGrant),
    ("GET", JobInfo),
]


@pytest.mark.parametrize(("name", "row"), ROW_STATEMENTS)
def test_each_statement_names_exactly_the_fields_of_its_row(name: str, row: type) -> None:
    statement = getattr(statements, name)
    columns = re.match(r"select (.*?) from pyjobq\.", statement, re.DOTALL)
    assert columns is not None, statement
    assert [c.strip() for c in columns.group(1).split(",")] == [
        f.name for f in dataclasses.fields(row)
    ]
    assert "*" not in statement


def test_claim_with_next_due_reads_the_columns_of_a_claim_then_the_waits() -> None:
    columns = re.match(r"select (.*?) from \(", statements.CLAIM_WITH_NEXT_DUE)
    assert columns is not None
    assert [c.strip() for c in columns.group(1).split(",")] == [
        *(f.name for f in dataclasses.fields(ClaimedJob)),
        *(f.name for f in dataclasses.fields(ClaimBatch) if f.name != "jobs"),
    ]


def test_get_shows_a_job_at_each_step_of_its_life(conn: Conn) -> None:
    q = JobQueue(conn)
    freeze(conn, FROZEN)
    job_id = q.enqueue(JobType.OUTBOX, {"order": 9}, dedupe_key="order-9").job_id
    pending = q.get(job_id)
    assert pending is not None
    assert (pending.status, pending.status_name, pending.job_type_name) == (
        JobStatus.PENDING,
        "PENDING",
        "OUTBOX",
    )
    assert (pending.attempts, pending.dedupe_key, pending.payload) == (0, "order-9", {"order": 9})
    assert pending.lease_until is pending.finished_at is pending.run_started_at is None
    (job,) = q.claim("w1", 1, lease_seconds=30)
    running = q.get(job_id)
    assert running is not None
    assert (running.status, running.worker_id, running.attempts) == (JobStatus.RUNNING, "w1", 1)
    assert running.run_started_at is not None
    assert running.lease_until == running.run_started_at + timedelta(seconds=30)
    q.fail(job_id, "w1", job.attempt, "smtp: 550", dead_letter=True)
    dead = q.get(job_id)
    assert dead is not None
    assert (dead.status, dead.last_error, dead.finished_at) == (JobStatus.DEAD, "smtp: 550", FROZEN)
    assert q.get(uuid4()) is None


def test_run_after_as_a_delay_counts_from_the_database_clock(conn: Conn) -> None:
    """``run_after=timedelta(...)`` is a delay from now on the database's clock (its frozen
    test clock here, a year off this machine's); a time is taken as it is."""
    freeze(conn, FROZEN)
    q = JobQueue(conn)
    later = q.enqueue(1, {}, run_after=timedelta(minutes=5)).job_id
    (many,) = q.enqueue_many(1, [{}], run_after=timedelta(hours=2))
    at = q.enqueue(1, {}, run_after=FROZEN + timedelta(days=1)).job_id
    now = q.enqueue(1, {}).job_id
    due = dict(conn.execute("select job_id, run_after from pyjobq.job").fetchall())
    assert due == {
        later: FROZEN + timedelta(minutes=5),
        many.job_id: FROZEN + timedelta(hours=2),
        at: FROZEN + timedelta(days=1),
        now: FROZEN,
    }
