"""A job type that keeps none of its DONE jobs (job_type_set_history): they end with their delete.

What something reads after a job's end is kept all the same (its dependants, its batch, a unique
window over its key, a watcher), and DEAD and CANCELLED jobs always are."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pyjobq import InvalidArgument, JobQueue, JobType
from pyjobq.worker import Worker
from tests.sqlhelp import claim, enqueue, one, raises_sqlstate, table_snapshot
from tests.workerhelp import running, wait_for

Conn = psycopg.Connection[Any]


def history(conn: Conn) -> dict[Any, int]:
    """The ended jobs, by id: their status."""
    return dict(conn.execute("select job_id, status from pyjobq.job_history").fetchall())


def complete_all(conn: Conn, worker: str = "w1") -> None:
    """Claim every due job and complete each, as its holder."""
    for job_id, attempt in claim(conn, worker, 100):
        conn.execute("select pyjobq.job_complete(%s, %s, %s)", (job_id, worker, attempt))


def test_a_type_that_keeps_no_done_jobs_ends_them_with_their_delete(
    conn: Conn, login_role: Callable[..., str]
) -> None:
    with psycopg.connect(login_role("pyjobq_admin"), autocommit=True) as admin:
        admin.execute("select pyjobq.job_type_set_history(1, false)")
    q = JobQueue(conn)
    assert {p.job_type: p.keep_done for p in q.type_policies()} == {1: False, 2: True}
    plain = enqueue(conn)
    keyed = enqueue(conn, 1, "{}", None, None, "k1")
    watched = enqueue(conn)
    q.watch([watched])
    other_type = enqueue(conn, 2, "{}")
    dies = q.enqueue(1, {}, max_attempts=1).job_id
    for job_id, attempt in claim(conn, "w1", 100):
        if job_id == dies:
            conn.execute("select pyjobq.job_fail(%s, 'w1', %s, 'boom')", (job_id, attempt))
        else:
            conn.execute("select pyjobq.job_complete(%s, 'w1', %s)", (job_id, attempt))
    assert one(conn, "select count(*) from pyjobq.job") == 0
    assert history(conn) == {keyed: 3, watched: 3, other_type: 3, dies: 4}
    assert q.get(plain) is None
    # Throughput still counts it: it was completed, only not kept.
    assert one(conn, "select sum(completed) from pyjobq.job_throughput() where job_type = 1") == 3
    # Keeping again applies to the jobs that end from then on.
    q.type_set_history(JobType.SEARCH, keep_done=True)
    kept = enqueue(conn)
    complete_all(conn)
    assert history(conn)[kept] == 3


def test_done_jobs_that_something_reads_after_their_end_are_kept(conn: Conn) -> None:
    q = JobQueue(conn)
    q.type_set_history(1, keep_done=False)
    parent = q.enqueue(1, {}).job_id
    child = q.enqueue(2, {}, depends_on=[parent]).job_id
    with q.batch() as batch_id:
        member = q.enqueue(1, {}, batch_id=batch_id).job_id
    (claimed_parent,) = q.claim("w1", job_types=[1], limit=1)
    q.complete(parent, "w1", claimed_parent.attempt, {"made": 1}, claimed_parent.lease_token)
    # The child reads its parent's result when it is claimed.
    (claimed_child,) = q.claim("w1", job_types=[2], limit=1)
    assert claimed_child.job_id == child
    results = claimed_child.parent_results or []
    assert [(r["job_id"], r["status"], r["result"]) for r in results] == [
        (str(parent), "DONE", {"made": 1})
    ]
    complete_all(conn)
    ended = history(conn)
    assert (ended[parent], ended[member]) == (3, 3)
    info = q.get_batch(batch_id)
    assert info is not None
    assert info.finished


def test_a_worker_drains_a_type_that_keeps_nothing(dsn: str, conn: Conn) -> None:
    """The Worker's flushes (job_finish_many) take the same way out: every job done once,
    none left behind, none kept."""
    q = JobQueue(conn)
    q.type_set_history(JobType.SEARCH, keep_done=False)
    ids = [e.job_id for e in q.enqueue_many(JobType.SEARCH, [{"n": n} for n in range(200)])]
    done: list[Any] = []
    worker = Worker(dsn, {JobType.SEARCH: lambda job: done.append(job.job_id)}, concurrency=8)
    with running(worker) as r:
        wait_for(lambda: one(conn, "select count(*) from pyjobq.job") == 0, "the drain")
        metrics = r.stop()
    assert sorted(done) == sorted(ids)
    assert metrics.completed == 200
    assert history(conn) == {}


def test_a_bad_history_setting_is_refused_and_changes_nothing(
    conn: Conn, login_role: Callable[..., str]
) -> None:
    enqueue(conn)
    before = (JobQueue(conn).type_policies(), table_snapshot(conn))
    for call, state in [
        ("select pyjobq.job_type_set_history(1, null)", "22004"),
        ("select pyjobq.job_type_set_history(999, false)", "22023"),
        ("select pyjobq.job_type_set_history(null, false)", "22004"),
    ]:
        with raises_sqlstate(state):
            conn.execute(call)
    for role in ("pyjobq_producer", "pyjobq_worker"):
        with (
            psycopg.connect(login_role(role), autocommit=True) as other,
            raises_sqlstate("42501"),  # what a type keeps is an admin's choice
        ):
            other.execute("select pyjobq.job_type_set_history(1, false)")
    with pytest.raises(InvalidArgument):
        JobQueue(conn).type_set_history("NO_SUCH_TYPE", keep_done=False)
    assert (JobQueue(conn).type_policies(), table_snapshot(conn)) == before
