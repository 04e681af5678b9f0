"""Batches: job_batch_open, p_batch_id, job_batch_close and job_batch_get, and the callbacks a
batch enqueues once each, read as any client reads them (and through the Python binding).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest

from pyjobq import BatchClosed, JobQueue, JobStatus
from tests.sqlhelp import one, one_row, raises_sqlstate, run_threads, table_snapshot

Conn = psycopg.Connection[Any]

CALLBACKS = (
    '{"success": {"job_type": 2, "payload": {"on": "success"}},'
    ' "finish": {"job_type": 2, "payload": {"on": "finish"}},'
    ' "dead": {"job_type": 2, "payload": {"on": "dead"}}}'
)
BATCH = "select state, total, active, done, dead, cancelled from pyjobq.job_batch_get(%s)"


def open_batch(conn: Conn, callbacks: str | None = CALLBACKS) -> Any:
    return one(conn, "select pyjobq.job_batch_open(%s)", (callbacks,))


def members(conn: Conn, batch_id: Any, count: int, max_attempts: int = 3) -> list[Any]:
    return [
        r[0]
        for r in conn.execute(
            "select job_id from pyjobq.job_enqueue_many(1, %s::jsonb[], p_batch_id => %s,"
            " p_max_attempts => %s) order by ord",
            (["{}"] * count, batch_id, max_attempts),
        ).fetchall()
    ]


def held(conn: Conn) -> dict[Any, tuple[Any, Any]]:
    rows = conn.execute(
        "select job_id, attempt, lease_token from pyjobq.job_claim('w1', 1000, null, '{1}')"
    ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def complete(conn: Conn, job_id: Any, holding: tuple[Any, Any]) -> None:
    conn.execute(
        "select pyjobq.job_complete(%s, 'w1', %s, null, %s)", (job_id, holding[0], holding[1])
    )


def callbacks(conn: Conn, batch_id: Any) -> list[tuple[str, dict[str, Any]]]:
    """The callback jobs enqueued for the batch, by name: (which, the batch counts they carry)."""
    rows = conn.execute(
        "select payload from pyjobq.job_all"
        " where job_type = 2 and payload -> 'batch' ->> 'batch_id' = %s order by seq",
        (str(batch_id),),
    ).fetchall()
    return sorted(((r[0]["on"], r[0]["batch"]) for r in rows), key=lambda c: str(c[0]))


def test_success_and_finish_fire_once_when_the_closed_batch_is_done(conn: Conn) -> None:
    batch = open_batch(conn)
    jobs = members(conn, batch, 3)
    assert conn.execute(BATCH, (batch,)).fetchall() == [("open", 3, 3, 0, 0, 0)]
    tokens = held(conn)
    conn.execute(
        "select * from pyjobq.job_complete_many('w1', %s, %s, null, %s)",
        (jobs, [tokens[j][0] for j in jobs], [tokens[j][1] for j in jobs]),
    )
    assert conn.execute(BATCH, (batch,)).fetchall() == [("open", 3, 0, 3, 0, 0)]
    assert callbacks(conn, batch) == [], "an open batch may still grow: nothing is due"
    conn.execute("select pyjobq.job_batch_close(%s)", (batch,))
    conn.execute("select pyjobq.job_batch_close(%s)", (batch,))  # again: nothing more
    assert conn.execute(BATCH, (batch,)).fetchall() == [("finished", 3, 0, 3, 0, 0)]
    counts = {"batch_id": str(batch), "total": 3, "done": 3, "dead": 0, "cancelled": 0}
    assert callbacks(conn, batch) == [("finish", counts), ("success", counts)]


def test_a_dead_member_fires_dead_at_once_and_the_finish_without_success(conn: Conn) -> None:
    batch = open_batch(conn)
    ok, doomed, cancelled = members(conn, batch, 3, max_attempts=1)
    tokens = held(conn)
    conn.execute(
        "select * from pyjobq.job_fail(%s, 'w1', %s, 'boom', null, null, %s)",
        (doomed, *tokens[doomed]),
    )
    assert [which for which, _ in callbacks(conn, batch)] == ["dead"]
    conn.execute("select pyjobq.job_complete(%s, 'w1', %s, null, %s)", (ok, *tokens[ok]))
    conn.execute("select pyjobq.job_batch_close(%s)", (batch,))
    conn.execute("select * from pyjobq.job_cancel(%s)", ([cancelled],))
    assert conn.execute(BATCH, (batch,)).fetchall() == [("finished", 3, 0, 1, 1, 1)]
    assert [which for which, _ in callbacks(conn, batch)] == ["dead", "finish"]


def test_a_redriven_member_reopens_the_batch_and_success_fires_once_it_is_done(
    conn: Conn,
) -> None:
    batch = open_batch(conn)
    (job,) = members(conn, batch, 1, max_attempts=1)
    conn.execute("select pyjobq.job_batch_close(%s)", (batch,))
    tokens = held(conn)
    conn.execute(
        "select * from pyjobq.job_fail(%s, 'w1', %s, 'boom', null, null, %s)", (job, *tokens[job])
    )
    assert one(conn, "select state from pyjobq.job_batch_get(%s)", (batch,)) == "finished"
    assert conn.execute("select * from pyjobq.job_redrive(%s)", ([job],)).fetchall() == [(job,)]
    assert conn.execute(BATCH, (batch,)).fetchall() == [("closed", 1, 1, 0, 0, 0)]
    tokens = held(conn)
    conn.execute("select pyjobq.job_complete(%s, 'w1', %s, null, %s)", (job, *tokens[job]))
    assert conn.execute(BATCH, (batch,)).fetchall() == [("finished", 1, 0, 1, 0, 0)]
    assert [which for which, _ in callbacks(conn, batch)] == ["dead", "finish", "success"]


def test_an_empty_batch_finishes_when_closed(conn: Conn) -> None:
    batch = open_batch(conn)
    conn.execute("select pyjobq.job_batch_close(%s)", (batch,))
    assert conn.execute(BATCH, (batch,)).fetchall() == [("finished", 0, 0, 0, 0, 0)]
    assert [which for which, _ in callbacks(conn, batch)] == ["finish", "success"]


def test_members_cancelled_through_a_parent_are_counted(conn: Conn) -> None:
    batch = open_batch(conn)
    parent = one(conn, "select job_id from pyjobq.job_enqueue(1, '{}')")
    child = one(
        conn,
        "select job_id from pyjobq.job_enqueue(1, '{}', p_depends_on => %s, p_batch_id => %s)",
        ([parent], batch),
    )
    conn.execute("select pyjobq.job_batch_close(%s)", (batch,))
    conn.execute("select * from pyjobq.job_cancel(%s)", ([parent],))
    assert one(conn, "select status from pyjobq.job_all where job_id = %s", (child,)) == 5
    assert conn.execute(BATCH, (batch,)).fetchall() == [("finished", 1, 0, 0, 0, 1)]


def test_list_get_and_prune_know_the_batch(conn: Conn) -> None:
    batch = open_batch(conn, None)
    jobs = members(conn, batch, 3)
    one(conn, "select job_id from pyjobq.job_enqueue(1, '{}')")
    listed = conn.execute("select job_id from pyjobq.job_list(p_batch_id => %s)", (batch,))
    assert sorted(r[0] for r in listed.fetchall()) == sorted(jobs)
    assert one(conn, "select batch_id from pyjobq.job_get(%s)", (jobs[0],)) == batch
    tokens = held(conn)
    for job in jobs:
        conn.execute("select pyjobq.job_complete(%s, 'w1', %s, null, %s)", (job, *tokens[job]))
    conn.execute("select pyjobq.job_batch_close(%s)", (batch,))
    while one(conn, "select pyjobq.job_prune('0 s')"):
        pass
    assert conn.execute(BATCH, (batch,)).fetchall() == [], "gone with its jobs"


@pytest.mark.parametrize(
    ("callbacks_json", "sqlstate"),
    [
        ('{"later": {"job_type": 2}}', "22023"),
        ('{"success": 2}', "22023"),
        ('{"success": {"job_type": 2, "payload": [1]}}', "22023"),
        ('{"success": {"job_type": 2, "queue": "x"}}', "22023"),
        ('{"success": {"job_type": 99}}', "22023"),
        ("[]", "22023"),
    ],
)
def test_bad_callbacks_are_refused_and_open_nothing(
    conn: Conn, callbacks_json: str, sqlstate: str
) -> None:
    with raises_sqlstate(sqlstate):
        open_batch(conn, callbacks_json)
    assert one(conn, "select count(*) from pyjobq.job_batch") == 0


def test_joining_a_closed_or_unknown_batch_is_refused_and_changes_nothing(conn: Conn) -> None:
    batch = open_batch(conn)
    members(conn, batch, 1)
    conn.execute("select pyjobq.job_batch_close(%s)", (batch,))
    before = table_snapshot(conn)
    with raises_sqlstate("JQ006"):
        members(conn, batch, 2)
    with raises_sqlstate("JQ006"):
        conn.execute("select * from pyjobq.job_enqueue(1, '{}', p_batch_id => %s)", (batch,))
    with raises_sqlstate("JQ002"):
        members(conn, uuid4(), 1)
    with raises_sqlstate("JQ002"):
        conn.execute("select pyjobq.job_batch_close(%s)", (uuid4(),))
    assert table_snapshot(conn) == before
    assert conn.execute(BATCH, (batch,)).fetchall() == [("closed", 1, 1, 0, 0, 0)]


def test_a_callback_needs_the_right_to_enqueue_its_type(conn: Conn, login_role: Any) -> None:
    conn.execute("select pyjobq.job_type_grant(2, 'pyjobq_admin', 'enqueue')")
    with psycopg.connect(login_role("pyjobq_producer"), autocommit=True) as producer:
        with raises_sqlstate("42501"):
            open_batch(producer)
        batch = open_batch(producer, '{"finish": {"job_type": 1}}')
        members(producer, batch, 2)
        producer.execute("select pyjobq.job_batch_close(%s)", (batch,))
        assert producer.execute(BATCH, (batch,)).fetchall() == [("closed", 2, 2, 0, 0, 0)]


def test_the_binding_opens_fills_closes_and_waits_for_a_batch(conn: Conn, dsn: str) -> None:
    q = JobQueue(conn)
    with q.batch(on_success=("OUTBOX", {"report": 7})) as batch:
        first = q.enqueue(1, {"n": 1}, batch_id=batch)
        q.enqueue_many(1, [{"n": 2}], batch_id=batch)
    with pytest.raises(BatchClosed):
        q.enqueue(1, batch_id=batch)
    info = q.get_batch(batch)
    assert info is not None
    assert (info.state, info.total, info.active) == ("closed", 2, 2)
    assert q.wait_batch(batch, 0.05) is None, "not finished yet"
    assert q.get(first.job_id).batch_id == batch  # type: ignore[union-attr]

    def drain() -> None:
        with psycopg.connect(dsn, autocommit=True) as other:
            w = JobQueue(other)
            for job in w.claim("w2", 10, job_types=[1]):
                w.complete(job.job_id, "w2", job.attempt, lease_token=job.lease_token)

    waiter_started = threading.Event()
    result: list[Any] = []

    def wait() -> None:
        with psycopg.connect(dsn, autocommit=True) as own:
            waiter_started.set()
            result.append(JobQueue(own).wait_batch(batch, 30))

    waiter = threading.Thread(target=wait)
    waiter.start()
    waiter_started.wait(10)
    drain()
    waiter.join(40)
    (finished,) = result
    assert finished is not None
    assert (finished.state, finished.done) == ("finished", 2)
    assert finished.success_job is not None
    callback = q.get(UUID(str(finished.success_job)))
    assert callback is not None
    assert callback.status == JobStatus.PENDING
    assert callback.payload["report"] == 7


@pytest.mark.parametrize("race", ["the last two members", "the close and the last member"])
def test_callbacks_fire_once_when_the_last_ends_race(
    conn: Conn, make_conn: Callable[[], Conn], race: str
) -> None:
    """Many rounds of the two ways a batch's end can race: its last two members completed at
    once by two workers, or its close racing the completion of its last member. Each round's
    batch fires success and finish exactly once, whichever commits first."""
    first, second = make_conn(), make_conn()
    for _ in range(40):
        batch = open_batch(conn)
        jobs = members(conn, batch, 2)
        holds = held(conn)
        if race == "the last two members":
            conn.execute("select pyjobq.job_batch_close(%s)", (batch,))
        else:
            complete(conn, jobs[0], holds[jobs[0]])
        barrier = threading.Barrier(2)

        def finish_first(
            barrier: Any = barrier, jobs: list[Any] = jobs, holds: Any = holds, batch: Any = batch
        ) -> None:
            barrier.wait()
            if race == "the last two members":
                complete(first, jobs[0], holds[jobs[0]])
            else:
                first.execute("select pyjobq.job_batch_close(%s)", (batch,))

        def finish_second(
            barrier: Any = barrier, jobs: list[Any] = jobs, holds: Any = holds
        ) -> None:
            barrier.wait()
            complete(second, jobs[1], holds[jobs[1]])

        run_threads([finish_first, finish_second])
        assert one_row(conn, BATCH, (batch,)) == ("finished", 2, 0, 2, 0, 0)
        assert [which for which, _ in callbacks(conn, batch)] == ["finish", "success"]
