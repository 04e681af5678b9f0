"""Progress (job_progress): only the holder reports, job_get shows the latest while the job is
yet to end, and the worker sends a chatty handler's reports at most once a second, the latest
winning."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pyjobq import (
    ClaimedJob,
    InvalidArgument,
    JobAlreadyFinished,
    JobQueue,
    LeaseLost,
)
from pyjobq.aio import AsyncJobQueue
from pyjobq.params import Payload
from pyjobq.worker import Worker, job_context, sync_job_context
from pyjobq.worker import context as context_module
from pyjobq.worker.context import RunningJob
from pyjobq.worker.state import Held
from tests.sqlhelp import one, raises_sqlstate, table_snapshot
from tests.workerhelp import running, wait_for

Conn = psycopg.Connection[Any]

PROGRESS = "select pyjobq.job_progress(%s, %s, %s, %s, %s)"


def test_the_holder_reports_progress_and_job_get_shows_the_latest(conn: Conn) -> None:
    q = JobQueue(conn)
    job_id = q.enqueue(1, {}).job_id
    (job,) = q.claim("w1", limit=1)
    info = q.get(job_id)
    assert info is not None
    assert (info.progress, info.snoozes) == (None, 0)
    q.progress(job_id, "w1", job.attempt, {"done": 1, "of": 3}, job.lease_token)
    q.progress(job_id, "w1", job.attempt, {"done": 2, "of": 3}, job.lease_token)
    info = q.get(job_id)
    assert info is not None
    assert info.progress == {"done": 2, "of": 3}
    with pytest.raises(LeaseLost):
        q.progress(job_id, "w2", job.attempt, {"done": 3}, job.lease_token)
    q.complete(job_id, "w1", job.attempt, None, job.lease_token)
    with pytest.raises(JobAlreadyFinished):
        q.progress(job_id, "w1", job.attempt, {"done": 3}, job.lease_token)
    info = q.get(job_id)
    assert info is not None
    assert (info.progress, info.snoozes) == (None, None)  # what only a job yet to end keeps


def test_bad_progress_is_refused_and_changes_nothing(
    conn: Conn, login_role: Callable[..., str]
) -> None:
    q = JobQueue(conn)
    q.enqueue(1, {})
    (job,) = q.claim("w1", limit=1)
    held = (job.job_id, "w1", job.attempt)
    q.progress(*held, {"done": 1}, job.lease_token)
    before = table_snapshot(conn)
    for progress, sqlstate in [
        ("[1, 2]", "22023"),
        ('"text"', "22023"),
        ('{"text": "' + "x" * 9000 + '"}', "22023"),
    ]:
        with raises_sqlstate(sqlstate):
            conn.execute(PROGRESS, (*held, progress, job.lease_token))
    with pytest.raises(InvalidArgument):
        q.progress(job.job_id, "", job.attempt, {}, job.lease_token)
    for role in ("pyjobq_producer", "pyjobq_observer"):
        with (
            psycopg.connect(login_role(role), autocommit=True) as other,
            raises_sqlstate("42501"),  # reporting progress is a holder's call
        ):
            other.execute(PROGRESS, (*held, '{"done": 9}', job.lease_token))
    assert table_snapshot(conn) == before
    q.progress(*held, None, job.lease_token)  # null clears it
    info = q.get(job.job_id)
    assert info is not None
    assert info.progress is None


class CountingQueue(AsyncJobQueue):
    """The worker's queue, counting the progress reports that reach the database."""

    sent: list[Payload | None]

    async def progress(self, *args: Any, **kwargs: Any) -> None:
        report = args[3]  # encoded as the worker sends it: JSON text
        self.sent.append(None if report is None else json.loads(report.obj))
        await super().progress(*args, **kwargs)


async def chatty(dsn: str, job: ClaimedJob) -> list[Payload | None]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
        queue = CountingQueue(aconn)
        queue.sent = []
        run = RunningJob(Held(job, 0.0, 0.0), "w1", queue, asyncio.get_running_loop())
        for n in range(100):
            run.report({"done": n})
        await asyncio.sleep(0)  # the reports reach the loop (call_soon_threadsafe)
        while run.sending is not None or run.unsent is not None:
            await asyncio.sleep(0.01)
        return queue.sent


def test_a_chatty_handler_s_reports_reach_the_database_at_most_once_an_interval(
    dsn: str, conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(context_module, "PROGRESS_INTERVAL", 0.2)
    q = JobQueue(conn)
    job_id = q.enqueue(1, {}).job_id
    (job,) = q.claim("w1", limit=1)
    sent = asyncio.run(chatty(dsn, job))
    # A hundred reports in a row: the first send carries the latest so far, and any after it
    # the latest again; the last report wins.
    assert 1 <= len(sent) <= 2
    assert sent[-1] == {"done": 99}
    info = q.get(job_id)
    assert info is not None
    assert info.progress == {"done": 99}


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_a_worker_s_handler_reports_progress_while_it_runs(dsn: str, conn: Conn, kind: str) -> None:
    seen = threading.Event()

    async def async_handler(job: ClaimedJob) -> Payload:
        for n in range(4):
            job_context().progress({"done": n, "of": 3})
        await asyncio.to_thread(seen.wait, 60)
        return {}

    def sync_handler(job: ClaimedJob) -> Payload:
        for n in range(4):
            sync_job_context().progress({"done": n, "of": 3})
        seen.wait(60)
        return {}

    handler = async_handler if kind == "async" else sync_handler
    job_id = JobQueue(conn).enqueue(1, {}).job_id

    def progress() -> Any:
        info = JobQueue(conn).get(job_id)
        return None if info is None else info.progress

    with running(Worker(dsn, {1: handler}, concurrency=1)):
        wait_for(lambda: progress() == {"done": 3, "of": 3}, "the latest report")
        seen.set()
        wait_for(
            lambda: (
                one(conn, "select status from pyjobq.job_all where job_id = %s", (job_id,)) == 3
            ),
            "the job to end",
        )
