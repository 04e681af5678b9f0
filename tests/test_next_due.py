"""job_next_due, the announcements of jobs due later, and a worker that starts them on time."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from pyjobq import ClaimedJob, JobQueue, JobType
from pyjobq.worker import Retry, Worker
from tests.sqlhelp import FROZEN, freeze, one, raises_sqlstate
from tests.workerhelp import prepare, running, statuses, wait_for

Conn = psycopg.Connection[Any]

NEXT_DUE = "select pyjobq.job_next_due(%s::int[])"


def later(seconds: float) -> Any:
    return FROZEN + timedelta(seconds=seconds)


def test_next_due_is_the_earliest_job_still_to_come_of_the_types_asked(conn: Conn) -> None:
    freeze(conn, FROZEN)
    q = JobQueue(conn)
    assert one(conn, NEXT_DUE, (None,)) is None
    q.enqueue(JobType.SEARCH, {}, run_after=FROZEN)  # due now: not counted
    assert one(conn, NEXT_DUE, (None,)) is None
    # The earliest of each priority is one index probe; the answer is the earliest of those.
    q.enqueue(JobType.SEARCH, {}, priority=5, run_after=later(30))
    q.enqueue(JobType.SEARCH, {}, priority=500, run_after=later(10))
    q.enqueue(JobType.SEARCH, {}, priority=500, run_after=later(20))
    q.enqueue(JobType.OUTBOX, {}, priority=100, run_after=later(3))
    assert one(conn, NEXT_DUE, (None,)) == later(3)
    assert one(conn, NEXT_DUE, ([JobType.SEARCH],)) == later(10)
    assert q.next_due([JobType.OUTBOX]) == later(3)
    assert q.next_due(["SEARCH"]) == later(10)
    # Time passes: what was to come is due, and the next one is later.
    freeze(conn, later(15))
    assert one(conn, NEXT_DUE, (None,)) == later(20)
    # RUNNING, DONE and CANCELLED jobs are not to come.
    conn.execute(
        "select pyjobq.job_cancel(array(select job_id from pyjobq.job where run_after > %s))",
        (later(15),),
    )
    assert one(conn, NEXT_DUE, (None,)) is None


def test_next_due_checks_its_types_as_job_claim_does(
    conn: Conn, login_role: Callable[..., str]
) -> None:
    freeze(conn, FROZEN)
    q = JobQueue(conn)
    q.enqueue(JobType.SEARCH, {}, run_after=later(5))
    q.enqueue(JobType.OUTBOX, {}, run_after=later(9))
    with raises_sqlstate("22023"):
        conn.execute(NEXT_DUE, ([0],))
    conn.execute("select pyjobq.job_type_grant(1, 'pyjobq_admin', 'work')")
    # A worker not allowed type 1: left out of "every type", refused when named.
    with psycopg.connect(login_role("pyjobq_worker"), autocommit=True) as worker:
        due = one(worker, "select pyjobq.job_next_due()")
        with raises_sqlstate("42501"):
            worker.execute(NEXT_DUE, ([JobType.SEARCH],))
    # The clock is frozen for the owner only: compare with a worker's real clock's answer.
    assert due == later(9)


def test_claim_with_next_due_returns_the_jobs_and_the_wait_in_one_statement(conn: Conn) -> None:
    freeze(conn, FROZEN)
    q = JobQueue(conn)
    q.enqueue(JobType.SEARCH, {"n": 1})
    q.enqueue(JobType.SEARCH, {"n": 2}, run_after=later(2.5))
    first = q.claim_with_next_due("w1", 10)
    assert [job.payload for job in first.jobs] == [{"n": 1}]
    assert isinstance(first.jobs[0], ClaimedJob)
    assert first.next_due_in == 2.5
    empty = q.claim_with_next_due("w1", 10, job_types=["OUTBOX"])
    assert (empty.jobs, empty.next_due_in) == ([], None)
    freeze(conn, later(3))
    assert [job.payload for job in q.claim_with_next_due("w1", 10).jobs] == [{"n": 2}]


def test_the_claim_reads_next_due_once_however_many_jobs_it_takes(conn: Conn) -> None:
    # A subquery beside the claim is pulled up into the join, where its expression ran for
    # every claimed row: job_next_due 264 times in a worker's claim of 264, three times the
    # claim's own cost. pg_stat_xact_user_functions counts the calls of this transaction.
    q = JobQueue(conn)
    q.enqueue_many(JobType.SEARCH, [{} for _ in range(50)])
    with conn.transaction():
        conn.execute("set local track_functions = 'all'")
        claimed = q.claim_with_next_due("w1", 50)
        calls = one(
            conn,
            "select calls from pg_stat_xact_user_functions where funcname = 'job_next_due'",
        )
    assert len(claimed.jobs) == 50
    assert calls == 1


def test_jobs_due_later_and_retries_are_announced_with_their_time(conn: Conn) -> None:
    freeze(conn, FROZEN)
    q = JobQueue(conn)
    with psycopg.connect(conn.info.dsn, autocommit=True) as listener:
        listener.execute("listen pyjobq_job")
        listener.execute("select pyjobq.job_worker_idle()")  # a worker asleep: producers notify
        q.enqueue(JobType.SEARCH, {})
        q.enqueue(JobType.OUTBOX, {}, run_after=later(1.5))
        q.enqueue_many(JobType.OUTBOX, [{}, {}], run_after=later(7))
        job = q.claim("w1")[0]
        q.fail(job.job_id, "w1", job.attempt, "boom", retry_delay_seconds=60)
        payloads = [n.payload for n in listener.notifies(timeout=1.0, stop_after=4)]
    epoch = FROZEN.timestamp()
    assert payloads == ["1", f"2@{epoch + 1.5:.6f}", f"2@{epoch + 7:.6f}", f"1@{epoch + 60:.6f}"]


@pytest.fixture
def db(conn: Conn) -> Conn:
    prepare(conn)
    return conn


def test_an_idle_worker_starts_delayed_and_retried_jobs_without_waiting_for_its_poll(
    dsn: str, db: Conn
) -> None:
    """With an hour between polls, only job_next_due and the announcements can start these."""
    started: list[tuple[int, int]] = []

    def handler(job: ClaimedJob) -> None:
        started.append((job.payload["n"], job.attempt))
        if job.payload["n"] == 2 and job.attempt == 1:
            raise Retry(delay_seconds=0.5)

    q = JobQueue(db)
    # Scheduled before the worker starts: its first claim learns when.
    q.enqueue(JobType.SEARCH, {"n": 1}, run_after=_db_now(db) + timedelta(seconds=0.5))
    worker = Worker(dsn, {JobType.SEARCH: handler}, poll_interval=3600)
    with running(worker) as r:
        wait_for(lambda: statuses(db) == {3: 1}, "the job scheduled before the start DONE")
        # Scheduled while the worker sleeps: announced with its time. Retried: announced too.
        q.enqueue(JobType.SEARCH, {"n": 2}, run_after=_db_now(db) + timedelta(seconds=0.5))
        wait_for(lambda: statuses(db) == {3: 2}, "the job scheduled meanwhile DONE, retried once")
        r.stop()
    assert started == [(1, 1), (2, 1), (2, 2)]


def test_without_listen_jobs_scheduled_before_a_claim_still_start_on_time(
    dsn: str, db: Conn
) -> None:
    q = JobQueue(db)
    q.enqueue(JobType.SEARCH, {"n": 1}, run_after=_db_now(db) + timedelta(seconds=0.5))
    worker = Worker(dsn, {JobType.SEARCH: lambda job: None}, poll_interval=3600, listen=False)
    with running(worker) as r:
        wait_for(lambda: statuses(db) == {3: 1}, "the scheduled job DONE without a poll")
        r.stop()


def _db_now(conn: Conn) -> Any:
    return one(conn, "select now()")
