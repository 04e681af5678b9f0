"""The story of a job's attempts (job_attempts): each that ended otherwise than done is kept with
its worker, times, outcome and error, a job's last 25 only, and a done one costs nothing."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from pyjobq import ClaimedJob, InvalidArgument, JobQueue
from tests.sqlhelp import freeze, one, raises_sqlstate

Conn = psycopg.Connection[Any]

NOW = datetime(2030, 1, 1, 9, tzinfo=UTC)
TRACEBACK = 'Traceback (most recent call last):\n  File "h.py", line 3, in run\nValueError: {}\n\n'


def claim(q: JobQueue, worker: str = "w1") -> ClaimedJob:
    (job,) = q.claim(worker, limit=1)
    return job


def story(q: JobQueue, job_id: Any) -> list[tuple[Any, ...]]:
    return [(a.attempt, a.worker_id, a.outcome, a.error_summary) for a in q.attempts(job_id)]


def test_each_attempt_keeps_its_worker_times_outcome_and_error(conn: Conn) -> None:
    freeze(conn, NOW)
    q = JobQueue(conn)
    job_id = q.enqueue(1, {}).job_id
    for n, worker in enumerate(["w1", "w2"], 1):
        job = claim(q, worker)
        q.fail(job_id, worker, job.attempt, TRACEBACK.format(f"bad row {n}"), 0, False)
    job = claim(q, "w3")
    assert story(q, job_id) == [
        (1, "w1", "failed", "ValueError: bad row 1"),
        (2, "w2", "failed", "ValueError: bad row 2"),
        (3, "w3", "running", None),
    ]
    q.complete(job_id, "w3", job.attempt, {"ok": True})
    first = q.attempts(job_id)[0]
    assert first.error == TRACEBACK.format("bad row 1")  # whole, the summary its last line
    assert (first.started_at, first.ended_at) == (NOW, NOW)
    assert story(q, job_id)[-1] == (3, "w3", "done", None)


def test_every_way_an_attempt_ends_without_completing_is_told(conn: Conn) -> None:
    freeze(conn, NOW)
    q = JobQueue(conn)
    job_id = q.enqueue(1, {}, max_attempts=10).job_id
    job = claim(q, "w1")
    q.release(job_id, "w1", job.attempt)  # given back unstarted: no story
    job = claim(q, "w1")
    q.finish_many("w1", [job_id], [job.attempt], ["snoozed"], None, None, [0])
    job = claim(q, "w2")
    q.event_wait(job_id, "w2", job.attempt, "go", 1)
    freeze(conn, NOW + timedelta(seconds=1))
    job = claim(q, "w3")
    # The lease runs out; the reaper tells whose attempt it was.
    freeze(conn, NOW + timedelta(hours=1))
    q.reap()
    conn.execute("update pyjobq.job set run_after = %s where job_id = %s", (NOW, job_id))
    job = claim(q, "w4")
    q.cancel([job_id])
    assert [row[:3] for row in story(q, job_id)] == [
        (2, "w1", "snoozed"),
        (3, "w2", "waiting"),
        (4, "w3", "expired"),
        (5, "w4", "cancelled"),
    ]
    assert story(q, job_id)[2][3] == "lease expired: worker w3 did not finish attempt 4"
    # A job cancelled before any attempt, or drained without a failure, has nothing to tell.
    pending = q.enqueue(2, {}).job_id
    q.cancel([pending])
    assert story(q, pending) == []
    done = [q.enqueue(2, {}).job_id for _ in range(5)]
    for job in q.claim("w5", limit=5):
        q.complete(job.job_id, "w5", job.attempt, None)
    assert one(conn, "select count(*) from pyjobq.job_attempt where job_id = any(%s)", (done,)) == 0
    assert [row[2] for row in story(q, done[0])] == ["done"]


def test_a_job_keeps_the_story_of_its_last_25_attempts(conn: Conn) -> None:
    q = JobQueue(conn)
    job_id = q.enqueue(1, {}, max_attempts=40).job_id
    for n in range(30):
        job = claim(q)
        q.fail(job_id, "w1", job.attempt, f"failure {n + 1}", 0, False)
    kept = q.attempts(job_id)
    assert [a.attempt for a in kept] == list(range(6, 31))
    assert kept[-1].error_summary == "failure 30"


def test_the_story_goes_with_its_job_and_only_to_those_who_may_see_it(
    conn: Conn, login_role: Callable[..., str]
) -> None:
    q = JobQueue(conn)
    job_id = q.enqueue(1, {}).job_id
    job = claim(q)
    q.fail(job_id, "w1", job.attempt, "boom", None, True)
    with raises_sqlstate("22004"):
        conn.execute("select * from pyjobq.job_attempts(null)")
    with pytest.raises(InvalidArgument):
        q.attempts(None)  # type: ignore[arg-type]
    for role in ("pyjobq_worker", "pyjobq_observer"):
        with (
            psycopg.connect(login_role(role), autocommit=True) as other,
            raises_sqlstate("42501"),
        ):
            other.execute("select * from pyjobq.job_attempts(%s)", (job_id,))
    with psycopg.connect(login_role("pyjobq_producer"), autocommit=True) as producer:
        assert [a.outcome for a in JobQueue(producer).attempts(job_id)] == ["dead"]
    freeze(conn, datetime.now(UTC) + timedelta(hours=1))
    assert q.prune(timedelta(minutes=1)) == 1
    assert one(conn, "select count(*) from pyjobq.job_attempt") == 0
