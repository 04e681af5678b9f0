"""A worker never dies of a job: poison results, poison errors, locked rows, refused calls.

Each test runs a real Worker beside well-behaved jobs and checks that every other job is
DONE exactly once, the poison job ends as documented, and the worker stops only when asked.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg
import pytest

from pyjobq import ClaimedJob, JobQueue, JobType
from pyjobq.metrics import WorkerHooks
from pyjobq.storable import MAX_RESULT_BYTES
from pyjobq.worker import Handler, Retry, Worker
from tests.sqlhelp import one_row
from tests.workerhelp import prepare, running, statuses, wait_for

Conn = psycopg.Connection[Any]

GOOD = 30


@pytest.fixture
def db(conn: Conn) -> Conn:
    prepare(conn)
    return conn


POISON_RESULTS: dict[str, tuple[Any, str]] = {
    "datetime": ({"when": datetime(2026, 1, 1)}, "not JSON"),
    "nan": ({"v": math.nan}, "not JSON"),
    "infinity": ({"v": -math.inf}, "not JSON"),
    "nul": ({"s": "a\x00b"}, "NUL"),
    "surrogate": ({"s": "\ud800"}, "not valid Unicode"),
    "too_big": ({"s": "x" * MAX_RESULT_BYTES}, "more than"),
    "object": (object(), "not JSON"),
}


def handler_returning(poison: Any) -> Any:
    def handler(job: ClaimedJob) -> Any:
        return poison if job.payload.get("poison") else {"n": job.payload["n"]}

    return handler


def enqueue_with_poison(db: Conn, poison_payload: dict[str, Any], max_attempts: int = 1) -> Any:
    q = JobQueue(db)
    q.enqueue_many(JobType.SEARCH, [{"n": i} for i in range(GOOD)])
    return q.enqueue(JobType.SEARCH, poison_payload, max_attempts=max_attempts).job_id


def assert_good_jobs_done_once(db: Conn, poison: Any) -> None:
    rows = db.execute(
        "select status, attempts, result->'n' = payload->'n'"
        " from pyjobq.job_all where job_id <> %s",
        (poison,),
    ).fetchall()
    assert rows == [(3, 1, True)] * GOOD


@pytest.mark.parametrize("case", sorted(POISON_RESULTS))
def test_a_result_that_cannot_be_stored_fails_its_own_job_only(
    dsn: str, db: Conn, case: str
) -> None:
    value, reason = POISON_RESULTS[case]
    # Five attempts left, yet the attempt is DEAD: the same handler would return the same.
    poison = enqueue_with_poison(db, {"n": -1, "poison": True}, max_attempts=5)
    worker = Worker(dsn, {JobType.SEARCH: handler_returning(value)}, concurrency=4)
    with running(worker) as r:
        wait_for(lambda: statuses(db) == {3: GOOD, 4: 1}, "the good jobs DONE, the poison DEAD")
        metrics = r.stop()  # it stopped because it was asked to, and returns its metrics
    assert_good_jobs_done_once(db, poison)
    status, attempts, last_error = one_row(
        db, "select status, attempts, last_error from pyjobq.job_all where job_id = %s", (poison,)
    )
    assert (status, attempts) == (4, 1)
    assert "UnstorableResult" in last_error
    assert reason in last_error
    assert (metrics.completed, metrics.dead) == (GOOD, 1)


def test_error_text_that_cannot_be_stored_is_made_storable(dsn: str, db: Conn) -> None:
    def handler(job: ClaimedJob) -> Any:
        if job.payload.get("poison"):
            raise ValueError("bad\x00byte \ud800 " + "y" * 50_000)
        return {"n": job.payload["n"]}

    poison = enqueue_with_poison(db, {"n": -1, "poison": True})
    with running(Worker(dsn, {JobType.SEARCH: handler}, concurrency=4)) as r:
        wait_for(lambda: statuses(db) == {3: GOOD, 4: 1}, "the good jobs DONE, the poison DEAD")
        r.stop()
    assert_good_jobs_done_once(db, poison)
    (last_error,) = one_row(
        db, "select last_error from pyjobq.job_all where job_id = %s", (poison,)
    )
    assert "bad\ufffdbyte ?" in last_error
    assert len(last_error) <= 10_000
    assert "characters cut" in last_error


def test_a_handler_calling_sys_exit_fails_its_job_only(dsn: str, db: Conn) -> None:
    def handler(job: ClaimedJob) -> Any:
        if job.payload.get("poison"):
            sys.exit(3)
        return {"n": job.payload["n"]}

    async def async_handler(job: ClaimedJob) -> Any:
        if job.payload.get("poison"):
            sys.exit(4)
        return {"n": job.payload["n"]}

    q = JobQueue(db)
    q.enqueue_many(JobType.OUTBOX, [{"n": i} for i in range(GOOD)])
    q.enqueue(JobType.OUTBOX, {"n": -1, "poison": True}, max_attempts=1)
    poison = enqueue_with_poison(db, {"n": -1, "poison": True})
    handlers: dict[int, Handler] = {JobType.SEARCH: handler, JobType.OUTBOX: async_handler}
    with running(Worker(dsn, handlers, concurrency=4)) as r:
        wait_for(lambda: statuses(db) == {3: 2 * GOOD, 4: 2}, "the good jobs DONE, both DEAD")
        r.stop()
    errors = [e for (e,) in db.execute("select last_error from pyjobq.job_all where status = 4")]
    assert sorted("SystemExit: 3" in e or "SystemExit: 4" in e for e in errors) == [True, True]
    assert db.execute(
        "select count(*) from pyjobq.job_all where job_type = 1 and status = 3 and job_id <> %s",
        (poison,),
    ).fetchone() == (GOOD,)


def test_a_handler_whose_allocation_fails_fails_its_job_only(dsn: str, db: Conn) -> None:
    def handler(job: ClaimedJob) -> Any:
        if job.payload.get("poison"):
            # A petabyte: malloc refuses it at once, so the test never strains the machine.
            return {"s": bytearray(2**50)}
        return {"n": job.payload["n"]}

    poison = enqueue_with_poison(db, {"n": -1, "poison": True})
    with running(Worker(dsn, {JobType.SEARCH: handler}, concurrency=4)) as r:
        wait_for(lambda: statuses(db) == {3: GOOD, 4: 1}, "the good jobs DONE, the poison DEAD")
        r.stop()
    assert_good_jobs_done_once(db, poison)
    (last_error,) = one_row(
        db, "select last_error from pyjobq.job_all where job_id = %s", (poison,)
    )
    assert "MemoryError" in last_error


class RaisingHooks(WorkerHooks):
    """Hooks that raise on every call, from a user's bug or a metrics backend that is down."""

    def on_job_start(self, job: ClaimedJob) -> None:
        raise RuntimeError(f"start hook broken for {job.payload['n']}")

    def on_job_end(self, job: ClaimedJob, outcome: str, error: BaseException | None) -> None:
        raise SystemExit("end hook called sys.exit")


def test_hooks_that_raise_change_no_outcome_and_stop_no_worker(
    dsn: str, db: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    def handler(job: ClaimedJob) -> Any:
        if job.payload.get("poison"):
            raise ValueError("the poison job fails as it would without hooks")
        return {"n": job.payload["n"]}

    poison = enqueue_with_poison(db, {"n": -1, "poison": True})
    caplog.set_level(logging.ERROR, logger="pyjobq.worker")
    worker = Worker(dsn, {JobType.SEARCH: handler}, concurrency=4, hooks=RaisingHooks())
    with running(worker) as r:
        wait_for(lambda: statuses(db) == {3: GOOD, 4: 1}, "the good jobs DONE, the poison DEAD")
        metrics = r.stop()
    assert_good_jobs_done_once(db, poison)
    assert (metrics.completed, metrics.dead) == (GOOD, 1)
    # Both hooks of every job were called and raised; each raise is one logged line.
    assert metrics.hook_errors == 2 * (GOOD + 1)
    hook_lines = [r for r in caplog.records if r.getMessage().startswith("hook ")]
    assert len(hook_lines) == 2 * (GOOD + 1)
    assert all(hasattr(r, "job_id") for r in hook_lines)


def test_a_retry_delay_out_of_range_keeps_the_default_backoff(dsn: str, db: Conn) -> None:
    def handler(job: ClaimedJob) -> Any:
        if job.payload.get("poison"):
            raise Retry(-5)
        return {"n": job.payload["n"]}

    poison = enqueue_with_poison(db, {"n": -1, "poison": True}, max_attempts=3)
    with running(Worker(dsn, {JobType.SEARCH: handler}, concurrency=4)) as r:
        wait_for(
            lambda: (
                statuses(db) == {3: GOOD, 1: 1}
                and db.execute(
                    "select attempts from pyjobq.job_all where job_id = %s", (poison,)
                ).fetchone()
                == (1,)
            ),
            "the good jobs DONE, the poison PENDING after its first attempt",
        )
        r.stop()
    assert_good_jobs_done_once(db, poison)
    (last_error, backoff) = one_row(
        db,
        "select last_error, run_after > updated_at from pyjobq.job_all where job_id = %s",
        (poison,),
    )
    assert "retry delay -5 refused" in last_error
    assert backoff


@pytest.mark.slow
def test_rows_locked_past_the_lock_timeout_delay_completions_but_lose_nothing(
    dsn: str, db: Conn, make_conn: Any
) -> None:
    release = threading.Event()

    def handler(job: ClaimedJob) -> Any:
        release.wait(60)
        return {"n": job.payload["n"]}

    JobQueue(db).enqueue_many(JobType.SEARCH, [{"n": i} for i in range(8)])
    worker = Worker(dsn, {JobType.SEARCH: handler}, concurrency=8, lease_seconds=60)
    locker = make_conn()
    with running(worker) as r:
        wait_for(lambda: statuses(db) == {2: 8}, "all eight jobs RUNNING")
        with locker.transaction():
            # An idle transaction holds the running jobs' rows: completing them must wait
            # past job_complete_many's lock_timeout (5 s) and get 55P03.
            locker.execute("select 1 from pyjobq.job where status = 2 for update")
            release.set()
            wait_for(lambda: worker.metrics.db_errors >= 1, "a completion to time out", 30)
        wait_for(lambda: statuses(db) == {3: 8}, "every job DONE once the lock is gone")
        metrics = r.stop()
    assert metrics.completed == 8
    assert metrics.lease_lost == 0
    assert db.execute("select count(*) from pyjobq.job_all where attempts = 1").fetchone() == (8,)


def test_a_refused_call_is_retried_and_fails_no_job(
    db: Conn, login_role: Callable[..., str]
) -> None:
    # Not a job's fault: the worker's role loses the right to complete. Nothing is failed for
    # it; the completions wait, the worker keeps running, and they go through once it is back.
    # The function the worker's flushes call: completions and failures alike.
    finish_many = (
        "pyjobq.job_finish_many(text, uuid[], int[], text[], jsonb[], text[], double precision[],"
        " uuid[])"
    )
    worker_dsn = login_role("pyjobq_worker")
    JobQueue(db).enqueue_many(JobType.SEARCH, [{"n": i} for i in range(GOOD)])
    refused: list[str] = []

    class Refusals(WorkerHooks):
        def on_statement(self, statement: str, seconds: float, error: Exception | None) -> None:
            if error is not None:
                refused.append(statement)

    worker = Worker(
        worker_dsn, {JobType.SEARCH: handler_returning(None)}, concurrency=4, hooks=Refusals()
    )
    db.execute(f"revoke execute on function {finish_many} from pyjobq_worker")
    with running(worker) as r:
        wait_for(lambda: "finish" in refused, "a flush refused")
        wait_for(lambda: statuses(db).get(2, 0) >= 4, "finished jobs held RUNNING")
        assert worker.metrics.completed == 0
        db.execute(f"grant execute on function {finish_many} to pyjobq_worker")
        wait_for(lambda: statuses(db) == {3: GOOD}, "every job DONE after the grant")
        metrics = r.stop()
    assert metrics.completed == GOOD
    assert metrics.failed == 0


def test_a_handler_that_hangs_fails_its_attempt_at_the_job_timeout(dsn: str, db: Conn) -> None:
    hung = threading.Event()
    release = threading.Event()

    def handler(job: ClaimedJob) -> Any:
        if job.payload.get("poison"):
            hung.set()
            release.wait(120)  # a sync handler cannot be interrupted: it hangs on
        return {"n": job.payload["n"]}

    poison = enqueue_with_poison(db, {"n": -1, "poison": True})
    worker = Worker(dsn, {JobType.SEARCH: handler}, concurrency=4, job_timeout=1.0)
    try:
        with running(worker) as r:
            wait_for(lambda: statuses(db) == {3: GOOD, 4: 1}, "the good jobs DONE, the hung DEAD")
            metrics = r.stop()
    finally:
        release.set()
    assert hung.is_set()
    assert_good_jobs_done_once(db, poison)
    (last_error,) = one_row(
        db, "select last_error from pyjobq.job_all where job_id = %s", (poison,)
    )
    assert "did not finish within 1.0s" in last_error
    assert metrics.timed_out == 1


def test_leases_that_cannot_be_renewed_log_one_line_a_round_not_one_per_job(
    db: Conn, login_role: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    # A refused renewal (here: the privilege revoked) hits every held job alike. Nothing reaps
    # (the worker's own reaper waits an hour), so the jobs stay held however long this takes.
    release = threading.Event()

    def handler(job: ClaimedJob) -> Any:
        release.wait(60)
        return {"n": job.payload["n"]}

    renew = "pyjobq.job_renew_lease_many(text, uuid[], int[], int, uuid[])"
    JobQueue(db).enqueue_many(JobType.SEARCH, [{"n": i} for i in range(8)])
    worker = Worker(
        login_role("pyjobq_worker"),
        {JobType.SEARCH: handler},
        concurrency=8,
        lease_seconds=1,
        reap_interval=3600,
    )

    def failed() -> list[str]:
        return [m for m in caplog.messages if "renew_lease failed" in m]

    try:
        with running(worker) as r:
            wait_for(lambda: statuses(db) == {2: 8}, "all eight jobs RUNNING")
            caplog.set_level(logging.WARNING, logger="pyjobq.worker")
            db.execute(f"revoke execute on function {renew} from pyjobq_worker")
            wait_for(lambda: len(failed()) >= 3, "three rounds of failed renewals")
            db.execute(f"grant execute on function {renew} to pyjobq_worker")
            release.set()
            wait_for(lambda: statuses(db) == {3: 8}, "every job DONE")
            r.stop()
    finally:
        release.set()
    rounds = failed()
    assert all("8 of 8 leases not renewed" in m for m in rounds[:3]), rounds
    per_job = [m for m in caplog.messages if "renew_lease failed:" in m]
    assert per_job == []


def test_hung_sync_handlers_past_their_timeout_do_not_eat_the_worker(dsn: str, db: Conn) -> None:
    """As many hung sync handlers as the worker has runners: each keeps its thread after its
    timeout (a thread cannot be interrupted), a new thread takes its place, and every normal job
    behind them runs."""
    concurrency = 4
    release = threading.Event()

    def handler(job: ClaimedJob) -> Any:
        if job.payload.get("hang"):
            release.wait(120)
        return {"n": job.payload["n"]}

    q = JobQueue(db)
    hang = [{"n": -1, "hang": True}] * concurrency
    hung = q.enqueue_many(JobType.SEARCH, hang, priority=0, max_attempts=1)
    q.enqueue_many(JobType.SEARCH, [{"n": i} for i in range(GOOD)], max_attempts=1)
    worker = Worker(dsn, {JobType.SEARCH: handler}, concurrency=concurrency, job_timeout=0.5)
    try:
        with running(worker) as r:
            wait_for(
                lambda: statuses(db) == {3: GOOD, 4: concurrency},
                "every normal job DONE, the hung ones DEAD",
            )
            metrics = r.stop()
    finally:
        release.set()
    rows = db.execute(
        "select status, attempts, result->'n' = payload->'n' from pyjobq.job_all"
        " where not job_id = any (%s)",
        ([e.job_id for e in hung],),
    ).fetchall()
    assert rows == [(3, 1, True)] * GOOD
    assert metrics.timed_out == concurrency
    assert metrics.lingering_threads == concurrency
