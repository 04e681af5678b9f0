"""Uniqueness over a window: with ``p_unique_for``, a job with the key that ended within the
window is a duplicate too, per job type, under any interleaving with enqueuers and finishers."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from pyjobq import InvalidArgument, JobQueue
from tests.sqlhelp import (
    FROZEN,
    claim,
    freeze,
    one,
    one_row,
    raises_sqlstate,
    run_threads,
    table_snapshot,
    wait_for_lock_wait,
)

Conn = psycopg.Connection[Any]

ENQUEUE = (
    "select job_id, created"
    " from pyjobq.job_enqueue(%s, '{}', p_dedupe_key => %s, p_unique_for => %s)"
)
HOUR = timedelta(hours=1)


def enqueue(conn: Conn, key: str, window: timedelta | None, job_type: int = 1) -> tuple[Any, bool]:
    job_id, created = one_row(conn, ENQUEUE, (job_type, key, window))
    return job_id, created


def finish(conn: Conn, job_id: Any) -> None:
    (claimed, attempt) = claim(conn, "w1", 1)[0]
    assert claimed == job_id
    conn.execute("select pyjobq.job_complete(%s, 'w1', %s)", (job_id, attempt))


def test_a_job_that_ended_within_the_window_is_a_duplicate(conn: Conn) -> None:
    freeze(conn, FROZEN)
    first, created = enqueue(conn, "report", HOUR)
    assert created
    finish(conn, first)
    freeze(conn, FROZEN + timedelta(minutes=59))
    assert enqueue(conn, "report", HOUR) == (first, False)
    # Active-only, the default, takes a new one at once; so does the window once it passed.
    second, created = enqueue(conn, "report", None)
    assert created
    finish(conn, second)
    freeze(conn, FROZEN + timedelta(minutes=59) + HOUR + timedelta(seconds=1))
    third, created = enqueue(conn, "report", HOUR)
    assert created
    assert third not in (first, second)


def test_dead_and_cancelled_jobs_count_and_other_types_do_not(conn: Conn) -> None:
    freeze(conn, FROZEN)
    cancelled, _ = enqueue(conn, "k", None)
    conn.execute("select pyjobq.job_cancel(array[%s::uuid])", (cancelled,))
    assert enqueue(conn, "k", HOUR) == (cancelled, False)
    other, created = enqueue(conn, "k", HOUR, job_type=2)
    assert created
    assert other != cancelled


def test_an_active_job_with_the_key_comes_before_one_that_ended(conn: Conn) -> None:
    """A job of the key ended within the window and another is active: the active one is the
    duplicate a window-less enqueue would return, and the one whose outcome is still to come."""
    freeze(conn, FROZEN)
    ended, _ = enqueue(conn, "k", None)
    conn.execute("select pyjobq.job_cancel(array[%s::uuid])", (ended,))
    active, created = enqueue(conn, "k", None)
    assert created
    assert enqueue(conn, "k", HOUR) == (active, False)
    got = conn.execute(
        "select job_id, created from pyjobq.job_enqueue_many(1, array['{}'::jsonb],"
        " array['k'], p_unique_for => %s)",
        (HOUR,),
    ).fetchall()
    assert got == [(active, False)]


def test_enqueue_many_applies_the_window_to_rows_with_a_key(conn: Conn) -> None:
    freeze(conn, FROZEN)
    ended, _ = enqueue(conn, "a", None)
    finish(conn, ended)
    rows = conn.execute(
        "select ord, job_id, created from pyjobq.job_enqueue_many(1,"
        " array['{}', '{}', '{}', '{}']::jsonb[], array['a', null, 'b', 'b'],"
        " p_unique_for => '1 hour')"
    ).fetchall()
    assert [(o, created) for o, _, created in rows] == [
        (1, False),
        (2, True),
        (3, True),
        (4, False),
    ]
    assert rows[0][1] == ended
    assert rows[3][1] == rows[2][1]


@pytest.mark.parametrize(
    ("window", "key"),
    [("0", "k"), ("-1 hour", "k"), ("366 days", "k"), ("100 years", "k"), ("1 hour", None)],
)
def test_a_window_out_of_range_or_without_a_key_is_refused(
    conn: Conn, window: str, key: str | None
) -> None:
    before = table_snapshot(conn)
    with raises_sqlstate("22023"):
        conn.execute(ENQUEUE, (1, key, window))
    with raises_sqlstate("22023"):
        conn.execute(
            "select pyjobq.job_enqueue_many(1, array['{}']::jsonb[], %s, p_unique_for => %s)",
            (None if key is None else [key], window),
        )
    assert table_snapshot(conn) == before


def test_a_holder_ending_while_the_enqueue_waits_for_it_still_counts(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    """Another session's transaction enqueues the key, runs the job and completes it, and has
    not committed: the enqueue sees no job with the key, active or ended, and its insert waits
    on the key. When that transaction commits the key is free, the insert goes through, and
    the enqueue must then find the job that just ended and undo its insert."""
    finisher, enqueuer = make_conn(), make_conn()
    freeze(enqueuer, FROZEN)
    freeze(finisher, FROZEN)
    finisher.execute("begin")
    holder, _ = enqueue(finisher, "k", None)
    ((job_id, attempt),) = claim(finisher, "w1", 1)
    finisher.execute("select pyjobq.job_complete(%s, 'w1', %s)", (job_id, attempt))
    got: list[tuple[Any, bool]] = []
    waiting = threading.Thread(target=lambda: got.append(enqueue(enqueuer, "k", HOUR)))
    waiting.start()
    wait_for_lock_wait(conn, enqueuer, "the enqueue waiting on the other transaction's key")
    finisher.execute("commit")
    waiting.join(10)
    assert got == [(holder, False)]
    assert one(conn, "select count(*) from pyjobq.job_all") == 1


def test_racing_enqueuers_and_a_finisher_make_one_job_per_window(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    """Eight sessions enqueue one key with a window of an hour while another claims and
    completes what is there, on a clock that stands still: once the first job ended, every
    enqueue is a duplicate of it, so the key's jobs must number exactly one."""
    stop = threading.Event()
    made: list[int] = []

    def enqueuer() -> None:
        c = make_conn()
        freeze(c, FROZEN)
        created = sum(enqueue(c, "k", HOUR)[1] for _ in range(150))
        made.append(created)

    def finisher() -> None:
        c = make_conn()
        freeze(c, FROZEN)
        while not stop.is_set():
            for job_id, attempt in claim(c, "w1", 10):
                c.execute("select pyjobq.job_complete(%s, 'w1', %s)", (job_id, attempt))

    done = threading.Thread(target=finisher)
    done.start()
    try:
        run_threads([enqueuer] * 8)
    finally:
        stop.set()
        done.join()
    assert sum(made) == 1
    assert one(conn, "select count(*) from pyjobq.job_all where dedupe_key = 'k'") == 1


def test_the_binding_passes_the_window(conn: Conn) -> None:
    freeze(conn, FROZEN)
    q = JobQueue(conn)
    first = q.enqueue(1, {}, dedupe_key="k", unique_for=HOUR)
    finish(conn, first.job_id)
    again = q.enqueue(1, {}, dedupe_key="k", unique_for=HOUR)
    assert (again.job_id, again.created) == (first.job_id, False)
    (batch,) = q.enqueue_many(1, [{}], ["k"], unique_for=HOUR)
    assert (batch.job_id, batch.created) == (first.job_id, False)
    with pytest.raises(InvalidArgument, match="p_unique_for needs a dedupe key"):
        q.enqueue(1, {}, unique_for=HOUR)
