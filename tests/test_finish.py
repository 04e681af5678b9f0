"""The one way out of RUNNING in SQL: job_finish_many's mixed outcomes, job_fail_many, and
what every way out records the same way (history, finish counts, announcements)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from uuid import uuid4

import psycopg
import pytest

from tests.sqlhelp import (
    FROZEN,
    claim,
    enqueue,
    freeze,
    one,
    one_row,
    raises_sqlstate,
    table_snapshot,
)

Conn = psycopg.Connection[Any]

FINISH = (
    "select job_id, status, run_after from pyjobq.job_finish_many('w1', %s, %s, %s, %s, %s, %s)"
)


def held(conn: Conn, count: int) -> tuple[list[Any], list[int]]:
    """``count`` new jobs of type 1 (max_attempts 2), claimed by w1 in enqueue order."""
    ids = [enqueue(conn, 1, "{}", 100, None, None, 2) for _ in range(count)]
    claimed = dict(claim(conn, "w1", count))
    return ids, [claimed[i] for i in ids]


def ended(conn: Conn, job_id: Any) -> tuple[Any, ...]:
    """(status, result, last_error, worker_id) of a job, wherever it is."""
    return one_row(
        conn,
        "select status, result, last_error, worker_id from pyjobq.job_all where job_id = %s",
        (job_id,),
    )


def stat(conn: Conn) -> tuple[int, int, int]:
    """(completed, retried, dead) as job_stat counts them, over all types and workers."""
    completed, retried, dead = one_row(
        conn,
        "select coalesce(sum(completed), 0)::int, coalesce(sum(retried), 0)::int,"
        " coalesce(sum(dead), 0)::int from pyjobq.job_stat",
    )
    return completed, retried, dead


def test_one_call_ends_attempts_done_failed_and_dead_each_as_told(conn: Conn) -> None:
    freeze(conn, FROZEN)
    (done, failed, dead, other), attempts = held(conn, 4)
    rows = conn.execute(
        FINISH,
        (
            [done, failed, dead, other],
            attempts,
            ["done", "failed", "dead", "done"],
            [psycopg.types.json.Jsonb({"n": 1}), None, None, None],
            [None, "boom", "fatal", None],
            [None, 30, None, None],
        ),
    ).fetchall()
    assert rows == [
        (done, 3, FROZEN),
        (failed, 1, FROZEN + timedelta(seconds=30)),
        (dead, 4, FROZEN),
        (other, 3, FROZEN),
    ]
    assert ended(conn, done) == (3, {"n": 1}, None, "w1")
    assert ended(conn, failed) == (1, None, "boom", None)
    assert ended(conn, dead) == (4, None, "fatal", "w1")
    assert stat(conn) == (2, 1, 1)


def test_a_job_no_longer_held_is_reported_and_left_alone(conn: Conn) -> None:
    (job,), (attempt,) = held(conn, 1)
    before = table_snapshot(conn)
    rows = conn.execute(FINISH, ([job], [attempt + 1], ["done"], None, None, None)).fetchall()
    assert rows == [(job, None, None)]
    rows = conn.execute(
        "select status from pyjobq.job_finish_many('w2', %s, %s, %s)",
        ([job], [attempt], ["failed"]),
    ).fetchall()
    assert rows == [(None,)]
    assert table_snapshot(conn) == before
    assert stat(conn) == (0, 0, 0)


def test_a_retried_call_reports_what_its_first_call_did(conn: Conn) -> None:
    (done, dead, failed), attempts = held(conn, 3)
    args = ([done, dead, failed], attempts, ["done", "dead", "failed"], None, None, None)
    first = conn.execute(FINISH, args).fetchall()
    assert [r[1] for r in first] == [3, 4, 1]
    again = conn.execute(FINISH, args).fetchall()
    # DONE and DEAD are where that attempt left them; the retried job is another attempt's now.
    assert [r[1] for r in again] == [3, 4, None]
    assert stat(conn) == (1, 1, 1)


def test_an_attempt_named_twice_ends_once_as_its_first_mention_says(conn: Conn) -> None:
    (job,), (attempt,) = held(conn, 1)
    rows = conn.execute(
        FINISH, ([job, job], [attempt, attempt], ["done", "failed"], None, None, None)
    ).fetchall()
    assert [r[1] for r in rows] == [3, 3]
    assert ended(conn, job)[0] == 3
    assert stat(conn) == (1, 0, 0)


def test_fail_many_retries_or_buries_each_and_names_no_longer_held_ones(conn: Conn) -> None:
    freeze(conn, FROZEN)
    (retried, lettered, spent, gone), attempts = held(conn, 4)
    # The third has used its two tries once this one fails.
    conn.execute("update pyjobq.job set attempts = 2 where job_id = %s", (spent,))
    attempts[2] = 2
    rows = conn.execute(
        "select job_id, status, run_after from pyjobq.job_fail_many('w1', %s, %s, %s, %s, %s)",
        (
            [retried, lettered, spent, gone],
            [*attempts[:3], attempts[3] + 1],
            ["e1", "e2", "e3", "e4"],
            [5, None, None, None],
            [False, True, None, False],
        ),
    ).fetchall()
    assert rows == [
        (retried, 1, FROZEN + timedelta(seconds=5)),
        (lettered, 4, FROZEN),
        (spent, 4, FROZEN),
        (gone, None, None),
    ]
    assert [ended(conn, j)[:3] for j in (retried, lettered, spent)] == [
        (1, None, "e1"),
        (4, None, "e2"),
        (4, None, "e3"),
    ]
    assert ended(conn, gone)[0] == 2
    assert stat(conn) == (0, 1, 2)


@pytest.mark.parametrize(
    ("outcomes", "delays", "message"),
    [
        (["done", "later"], None, "p_outcomes[2] must be done, failed, dead or snoozed"),
        (["done", None], None, "p_outcomes[2] must be done, failed, dead or snoozed"),
        (["failed", "failed"], [1, -1], "p_retry_delays_seconds[2] must be between 0 and 31536000"),
        (["failed", "failed"], [float("nan"), 1.0], "p_retry_delays_seconds[1] must be between"),
        (["done"], None, "p_outcomes must have as many elements as p_job_ids"),
    ],
)
def test_bad_outcomes_and_delays_are_refused_naming_their_place(
    conn: Conn, outcomes: list[str | None], delays: list[float] | None, message: str
) -> None:
    ids, attempts = held(conn, 2)
    before = table_snapshot(conn)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=re.escape(message)):
        conn.execute(FINISH, (ids, attempts, outcomes, None, None, delays))
    assert table_snapshot(conn) == before


def test_a_release_that_spends_the_claim_counter_is_counted_dead(conn: Conn) -> None:
    (job,), _ = held(conn, 1)
    conn.execute(
        "update pyjobq.job set attempts = 32767, attempts_refunded = 32766 where job_id = %s",
        (job,),
    )
    rows = conn.execute(
        "select released from pyjobq.job_release_many('w1', %s, %s)", ([job], [32767])
    ).fetchall()
    assert rows == [(True,)]
    assert ended(conn, job)[:3] == (4, None, "released with its claim counter spent (32767 claims)")
    assert stat(conn) == (0, 0, 1)


def test_every_retry_is_announced_once_per_type_whoever_makes_it(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    """A failure, a release and the reaper put jobs back PENDING: idle workers hear of each."""
    freeze(conn, FROZEN)
    (failed, released, expired), attempts = held(conn, 3)
    listener = make_conn()
    listener.execute("listen pyjobq_job")
    listener.execute("select pyjobq.job_worker_idle()")  # a worker asleep: changes notify
    conn.execute(
        "select pyjobq.job_fail_many('w1', %s, %s, null, %s)",
        ([failed], [attempts[0]], [10]),
    )
    conn.execute("select pyjobq.job_release_many('w1', %s, %s)", ([released], [attempts[1]]))
    freeze(conn, FROZEN + timedelta(hours=1))
    assert one(conn, "select count(*) from pyjobq.job_reap()") == 1
    payloads = [n.payload for n in listener.notifies(timeout=0.5, stop_after=3)]
    due = int((FROZEN + timedelta(seconds=10)).timestamp())
    assert payloads[0] == f"1@{due}.000000"
    assert payloads[1] == "1"
    assert payloads[2].startswith("1@")  # the reaped one, after its backoff
    assert one(conn, "select status from pyjobq.job where job_id = %s", (expired,)) == 1


def test_only_a_worker_holding_the_job_may_end_it_as_a_login_role(
    conn: Conn, login_role: Callable[..., str]
) -> None:
    """A producer may not call the finishers at all (42501); a worker that does not hold the job,
    or whose role may not work its type, ends nothing."""
    (job,), (attempt,) = held(conn, 1)
    token = one(conn, "select lease_token from pyjobq.job where job_id = %s", (job,))
    before = table_snapshot(conn)
    producer = psycopg.connect(login_role("pyjobq_producer"), autocommit=True)
    worker = psycopg.connect(login_role("pyjobq_worker"), autocommit=True)
    with producer, worker:
        for call in (
            "select * from pyjobq.job_finish_many('w1', %s, %s, '{done}', null, null, null, %s)",
            "select * from pyjobq.job_fail_many('w1', %s, %s, null, null, null, %s)",
        ):
            with raises_sqlstate("42501"):
                producer.execute(call, ([job], [attempt], [token]))
        # Another worker id, or the holder's id with another attempt or token: not held.
        for worker_id, attempts, tokens in (
            ("w2", [attempt], [token]),
            ("w1", [attempt + 1], [token]),
            ("w1", [attempt], [uuid4()]),
        ):
            rows = worker.execute(
                "select status from pyjobq.job_finish_many(%s, %s, %s, '{done}', null, null, null,"
                " %s)",
                (worker_id, [job], attempts, tokens),
            ).fetchall()
            assert rows == [(None,)]
        # The holder without its lease token: refused, as the install requires tokens.
        with raises_sqlstate("22004"):
            worker.execute("select * from pyjobq.job_fail_many('w1', %s, %s)", ([job], [attempt]))
        # A type this role may not work is refused as a whole.
        conn.execute("select pyjobq.job_type_grant(1, 'pyjobq_admin', 'work')")
        rows = worker.execute(
            "select status from pyjobq.job_finish_many('w1', %s, %s, '{done}', null, null, null,"
            " %s)",
            ([job], [attempt], [token]),
        ).fetchall()
        assert rows == [(None,)]
    assert table_snapshot(conn) == before
