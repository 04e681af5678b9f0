"""Waiting for a job's outcome without polling: job_watch, NOTIFY pyjobq_done, JobQueue.wait."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any
from uuid import uuid4

import psycopg
import pytest

from pyjobq import JobInfo, JobQueue, JobStatus, JobType
from pyjobq.aio import AsyncJobQueue
from tests.sqlhelp import claim, one
from tests.workerhelp import wait_for

Conn = psycopg.Connection[Any]


def finish_once_watched(make_conn: Callable[[], Conn], job_id: Any) -> None:
    """From another session, claim and complete the job once a waiter watches it (so that the
    end reaches the waiter as a notification, not as the status job_watch returned)."""
    worker = make_conn()
    wait_for(
        lambda: one(worker, "select notify_done from pyjobq.job_all where job_id = %s", (job_id,)),
        "the waiter to watch the job",
    )
    (job, attempt), *_ = claim(worker)
    assert job == job_id
    worker.execute("select pyjobq.job_complete(%s, 'w1', %s, '{\"ok\": true}')", (job, attempt))


def test_wait_returns_the_job_once_another_session_completes_it(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    q = JobQueue(conn)
    job_id = q.enqueue(JobType.SEARCH, {"q": 1}).job_id
    finisher = threading.Thread(target=finish_once_watched, args=(make_conn, job_id))
    finisher.start()
    ended = q.wait(job_id, 30)
    finisher.join(30)
    assert ended is not None
    assert (ended.status, ended.result) == (JobStatus.DONE, {"ok": True})


def test_wait_answers_at_once_for_an_ended_or_unknown_job_and_none_at_its_deadline(
    conn: Conn,
) -> None:
    q = JobQueue(conn)
    pending = q.enqueue(JobType.SEARCH).job_id
    cancelled = q.enqueue(JobType.SEARCH).job_id
    q.cancel([cancelled])
    got = q.wait(cancelled, 30)
    assert isinstance(got, JobInfo)
    assert got.status is JobStatus.CANCELLED
    assert q.wait(pending, 0.2) is None  # still PENDING when the deadline passes
    assert q.wait(uuid4(), 30) is None


def test_wait_refuses_a_connection_inside_a_transaction(conn: Conn) -> None:
    q = JobQueue(conn)
    job_id = q.enqueue(JobType.SEARCH).job_id
    with conn.transaction(), pytest.raises(ValueError, match="outside a transaction"):
        q.wait(job_id, 1)


def test_only_watched_jobs_are_announced(conn: Conn, make_conn: Callable[[], Conn]) -> None:
    listener = make_conn()
    listener.execute("listen pyjobq_done")
    q = JobQueue(conn)
    watched = q.enqueue(JobType.SEARCH).job_id
    q.enqueue(JobType.SEARCH)  # not watched: its end is not announced
    q.watch([watched])
    for job, attempt in claim(conn, "w1", 2):
        conn.execute("select pyjobq.job_complete(%s, 'w1', %s)", (job, attempt))
    heard = [n.payload for n in listener.notifies(timeout=1, stop_after=2)]
    assert heard == [str(watched)]


def test_the_asyncio_binding_waits_too(dsn: str, conn: Conn, make_conn: Callable[[], Conn]) -> None:
    job_id = JobQueue(conn).enqueue(JobType.OUTBOX).job_id
    finisher = threading.Thread(target=finish_once_watched, args=(make_conn, job_id))
    finisher.start()

    async def scenario() -> JobInfo | None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            return await AsyncJobQueue(aconn).wait(job_id, 30)

    ended = asyncio.run(scenario())
    finisher.join(30)
    assert ended is not None
    assert ended.status is JobStatus.DONE
