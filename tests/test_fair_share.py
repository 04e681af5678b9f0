"""Fair share: a fair-share type's jobs are claimed round robin across their concurrency keys,
so a key with a backlog holds one turn in each round, and a key that arrives takes the next."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import pytest

from tests.sqlhelp import one, run_threads

Conn = psycopg.Connection[Any]


def fair(conn: Conn, job_type: int = 1, **limits: Any) -> None:
    conn.execute(
        "select pyjobq.job_type_set_limits(%s, p_key_max_running => %s, p_fair_share => true)",
        (job_type, limits.get("key_max_running")),
    )


def enqueue(conn: Conn, keys: Sequence[str | None], job_type: int = 1, priority: int = 100) -> None:
    conn.execute(
        "select pyjobq.job_enqueue_many(%s, array_fill('{}'::jsonb, array[%s]),"
        " p_priority => %s, p_concurrency_keys => %s)",
        (job_type, len(keys), priority, keys),
    )


def claimed_keys(conn: Conn, limit: int) -> list[str]:
    """The keys ('-' for none) of the jobs a claim of ``limit`` takes, in the order taken."""
    rows = conn.execute(
        "select coalesce(j.concurrency_key, '-') from pyjobq.job_claim('w', %s)"
        " with ordinality c join pyjobq.job_all j using (job_id) order by c.ordinality",
        (limit,),
    ).fetchall()
    return [r[0] for r in rows]


def test_a_fair_type_takes_its_keys_in_turns(conn: Conn) -> None:
    fair(conn)
    enqueue(conn, ["big"] * 1000)
    enqueue(conn, ["small", "small", None])
    conn.execute("select pyjobq.job_enqueue(1, '{}', p_concurrency_key => 'one')")
    assert claimed_keys(conn, 9) == [
        *("big", "small", "-", "one"),
        *("big", "small"),
        *("big", "big", "big"),
    ]


def test_a_key_that_arrives_takes_the_next_turn_and_one_with_jobs_waiting_goes_on(
    conn: Conn,
) -> None:
    fair(conn)
    enqueue(conn, ["big"] * 1000)
    assert claimed_keys(conn, 500) == ["big"] * 500
    enqueue(conn, ["late"] * 3)
    assert claimed_keys(conn, 4) == ["big", "late", "big", "late"]
    # A key with jobs still waiting: its next one comes after its last.
    conn.execute("select pyjobq.job_enqueue(1, '{}', p_concurrency_key => 'late')")
    assert claimed_keys(conn, 6) == ["big", "late", "big", "late", "big", "big"]


def test_priority_comes_before_turns_and_plain_types_take_turns_with_fair_ones(
    conn: Conn,
) -> None:
    fair(conn)
    enqueue(conn, ["big"] * 10)
    enqueue(conn, ["small"] * 2, priority=5)
    enqueue(conn, [None] * 3, job_type=2)
    assert claimed_keys(conn, 8) == ["small", "small", "-", "big", "-", "big", "-", "big"]


def test_jobs_enqueued_before_fair_share_keep_their_order_and_none_is_lost(conn: Conn) -> None:
    enqueue(conn, ["big"] * 3)
    fair(conn)
    enqueue(conn, ["small"] * 2)
    assert claimed_keys(conn, 10) == ["small", "big", "small", "big", "big"]
    conn.execute("select pyjobq.job_type_set_limits(1)")
    enqueue(conn, ["big"] * 2)
    assert claimed_keys(conn, 10) == ["big", "big"]
    assert one(conn, "select count(*) from pyjobq.job_all where status = 1") == 0


def test_fair_share_keeps_a_key_limit(conn: Conn) -> None:
    fair(conn, key_max_running=1)
    enqueue(conn, ["a"] * 5 + ["b"] * 5)
    assert claimed_keys(conn, 10) == ["a", "b"]


@pytest.mark.slow
def test_a_small_key_is_not_held_behind_a_big_backlog(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    """Four sessions drain a key of 10,000 jobs in claims of 10; once a fifth of it is done,
    a key of 10 jobs arrives. Of the claims that began after it had arrived, those that began
    before the first claim to take one of its jobs took at most 30 jobs: a claim can pass the
    small key's jobs over only while claims that began after it hold them, one per session at
    most. All 10 are claimed while more than 7,000 of the backlog still wait. Times are the
    database's: when each claim statement began (run_started_at)."""
    fair(conn)
    enqueue(conn, ["big"] * 10000)
    arrived: list[Any] = []

    def producer() -> None:
        with make_conn() as c:
            while one(c, "select count(*) from pyjobq.job_all where status = 3") < 2000:
                pass
            enqueue(c, ["small"] * 10)
            # Committed: every claim that begins from here on sees them.
            arrived.append(one(c, "select clock_timestamp()"))

    def drainer(n: int) -> None:
        with make_conn() as c:
            while ids := [
                i for (i,) in c.execute("select job_id from pyjobq.job_claim(%s, 10)", (f"w{n}",))
            ]:
                c.execute(
                    "select pyjobq.job_complete_many(%s, %s, array_fill(1, array[%s]))",
                    (f"w{n}", ids, len(ids)),
                )

    run_threads([producer, *(functools.partial(drainer, n) for n in range(4))])
    first, last = conn.execute(
        "select min(run_started_at), max(run_started_at) from pyjobq.job_all"
        " where concurrency_key = 'small'"
    ).fetchone() or (None, None)
    passed_over = one(
        conn,
        "select count(*) from pyjobq.job_all where concurrency_key = 'big'"
        " and run_started_at > %s and run_started_at < %s",
        (arrived[0], first),
    )
    assert passed_over <= 30
    waiting = one(
        conn,
        "select count(*) from pyjobq.job_all where concurrency_key = 'big' and run_started_at > %s",
        (last,),
    )
    assert waiting > 7000
    assert one(conn, "select count(*) from pyjobq.job_all where status = 3") == 10010
