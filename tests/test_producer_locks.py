"""A producer's open transaction holds up no completion.

A web request enqueues a job into batch B and names a RUNNING job P as its parent, then keeps its
transaction open. Meanwhile a worker completes P, B's other members and an unrelated job: each
completion returns at once (a statement timeout is the deadline, no lock wait is allowed). Once
the producer commits, or rolls back, the batch's counts, its callbacks and the new dependant are
exactly what they would have been had the two not overlapped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.sqlhelp import one, one_row, run_threads, wait_for_lock_wait

Conn = psycopg.Connection[Any]

CALLBACKS = (
    '{"success": {"job_type": 2, "payload": {"on": "success"}},'
    ' "finish": {"job_type": 2, "payload": {"on": "finish"}}}'
)
BATCH = "select state, total, active, done, dead, cancelled from pyjobq.job_batch_get(%s)"


def fired(conn: Conn, batch_id: Any) -> list[str]:
    rows = conn.execute(
        "select payload ->> 'on' from pyjobq.job_all"
        " where job_type = 2 and payload -> 'batch' ->> 'batch_id' = %s order by 1",
        (str(batch_id),),
    ).fetchall()
    return [r[0] for r in rows]


@pytest.mark.parametrize("producer_ends", ["commit", "rollback"])
def test_completions_never_wait_for_a_producer_that_named_their_batch_and_a_parent(
    conn: Conn, make_conn: Callable[[], Conn], producer_ends: str
) -> None:
    batch = one(conn, "select pyjobq.job_batch_open(%s)", (CALLBACKS,))
    members = [
        r[0]
        for r in conn.execute(
            "select job_id from pyjobq.job_enqueue_many(1, array_fill('{}'::jsonb, array[2]),"
            " p_batch_id => %s) order by ord",
            (batch,),
        ).fetchall()
    ]
    parent = one(conn, "select job_id from pyjobq.job_enqueue(1, '{}')")
    unrelated = one(conn, "select job_id from pyjobq.job_enqueue(1, '{}')")
    held = {
        r[0]: r[1]
        for r in conn.execute("select job_id, attempt from pyjobq.job_claim('w1', 10)").fetchall()
    }
    assert set(held) == {*members, parent, unrelated}

    producer = make_conn()
    producer.execute("begin")
    child = one(
        producer,
        "select job_id from pyjobq.job_enqueue(1, '{}', p_depends_on => array[%s]::uuid[],"
        " p_batch_id => %s)",
        (parent, batch),
    )

    worker = make_conn()
    # The deadline: a completion that waited for the producer's locks would hit it.
    worker.execute("set statement_timeout = '5s'")
    for job in (*members, parent, unrelated):
        done = one(
            worker,
            "select completed from pyjobq.job_complete_many('w1', array[%s]::uuid[], array[%s])",
            (job, held[job]),
        )
        assert done is True

    producer.execute(producer_ends)
    state = one_row(conn, BATCH, (batch,))
    if producer_ends == "commit":
        # The child joined the batch and waits for nothing: its parent is DONE.
        assert one(conn, "select status from pyjobq.job_all where job_id = %s", (child,)) == 1
        assert one(conn, "select waiting_on from pyjobq.job where job_id = %s", (child,)) == 0
        # It ended before the commit, and is marked at it: it outlives the child in job_prune.
        assert one(conn, "select has_dependants from pyjobq.job_all where job_id = %s", (parent,))
        assert state == ("open", 3, 1, 2, 0, 0)
    else:
        assert one(conn, "select count(*) from pyjobq.job_all where job_id = %s", (child,)) == 0
        assert state == ("open", 2, 0, 2, 0, 0)
    assert fired(conn, batch) == []

    conn.execute("select pyjobq.job_batch_close(%s)", (batch,))
    if producer_ends == "commit":
        assert fired(conn, batch) == []
        got = conn.execute(
            "select job_id, attempt from pyjobq.job_claim('w1', 10, null, '{1}')"
        ).fetchall()
        assert [r[0] for r in got] == [child]
        conn.execute("select pyjobq.job_complete(%s, 'w1', %s)", (child, got[0][1]))
    assert fired(conn, batch) == ["finish", "success"]
    assert one_row(conn, BATCH, (batch,))[0] == "finished"


def test_what_a_producer_lists_for_its_commit_is_taken_on_trust_by_nothing(
    conn: Conn, login_role: Callable[..., str]
) -> None:
    """As a real producer role: its enqueue settles at its commit, and what it writes into the
    settings that list the commit's work changes no batch's counts and resolves no edge."""
    batch = one(conn, "select pyjobq.job_batch_open(%s)", (CALLBACKS,))
    other = one(conn, "select pyjobq.job_batch_open(%s)", (CALLBACKS,))
    conn.execute("select pyjobq.job_enqueue(1, '{}', p_batch_id => %s)", (other,))
    parent = one(conn, "select job_id from pyjobq.job_enqueue(1, '{}')")
    ended = one(conn, "select job_id from pyjobq.job_enqueue(1, '{}')")
    claimed = dict(
        conn.execute("select job_id, attempt from pyjobq.job_claim('w1', 10)").fetchall()
    )
    conn.execute("select pyjobq.job_complete(%s, 'w1', %s)", (ended, claimed[ended]))
    with psycopg.connect(login_role("pyjobq_producer")) as producer:
        child = one(
            producer,
            "select job_id from pyjobq.job_enqueue(1, '{}', p_depends_on => array[%s]::uuid[],"
            " p_batch_id => %s)",
            (parent, batch),
        )
        for setting, value in (
            ("pyjobq.settle_batches", f"{other},{other},not-an-id"),
            ("pyjobq.settle_parents", f"{ended},{parent},"),
        ):
            producer.execute(
                "select set_config(%s, coalesce(current_setting(%s, true), '') || ',' || %s, true)",
                (setting, setting, value),
            )
        producer.commit()
    marked = "select has_dependants from pyjobq.job_all where job_id = %s"
    assert one(conn, marked, (parent,)) is True
    assert one(conn, marked, (ended,)) is False
    waits = "select status, waiting_on from pyjobq.job where job_id = %s"
    assert one_row(conn, waits, (child,)) == (6, 1)
    assert one_row(conn, BATCH, (batch,)) == ("open", 1, 1, 0, 0, 0)
    assert one_row(conn, BATCH, (other,)) == ("open", 1, 1, 0, 0, 0)
    conn.execute("select pyjobq.job_complete(%s, 'w1', %s)", (parent, claimed[parent]))
    assert one(conn, "select status from pyjobq.job where job_id = %s", (child,)) == 1


@pytest.mark.parametrize("call", ["job_enqueue", "job_enqueue_many"])
def test_a_parent_ending_while_its_child_is_enqueued_leaves_the_child_waiting_for_nothing(
    conn: Conn, make_conn: Callable[[], Conn], call: str
) -> None:
    """The parent ends, and commits, between the enqueue's read of it and the child's insert
    (arranged by an advisory lock the insert waits for): the child waits for nothing."""
    parent = one(conn, "select job_id from pyjobq.job_enqueue(1, '{}')")
    ((_, attempt),) = conn.execute("select job_id, attempt from pyjobq.job_claim('w1', 1)")
    conn.execute(
        "create function pause_insert() returns trigger language plpgsql as"
        " $$ begin perform pg_advisory_xact_lock(4242); return new; end $$"
    )
    conn.execute(
        "create trigger pause_insert before insert on pyjobq.job"
        " for each row execute function pause_insert()"
    )
    blocker = make_conn()
    blocker.execute("select pg_advisory_lock(4242)")
    producer = make_conn()
    enqueue = {
        "job_enqueue": "select job_id from pyjobq.job_enqueue(1, '{}',"
        " p_depends_on => array[%s]::uuid[])",
        "job_enqueue_many": "select job_id from pyjobq.job_enqueue_many(1, array['{}'::jsonb],"
        " p_depends_on => array[jsonb_build_array(%s::text)])",
    }[call]
    children: list[Any] = []

    def end_the_parent_meanwhile() -> None:
        wait_for_lock_wait(conn, producer, "the enqueue waits at its insert")
        conn.execute("select pyjobq.job_complete(%s, 'w1', %s)", (parent, attempt))
        blocker.execute("select pg_advisory_unlock(4242)")

    run_threads(
        [lambda: children.append(one(producer, enqueue, (parent,))), end_the_parent_meanwhile]
    )
    waits = "select status, waiting_on from pyjobq.job where job_id = %s"
    assert one_row(conn, waits, (children[0],)) == (1, 0)
    # Marked, the parent outlives the child in job_prune.
    assert one(conn, "select has_dependants from pyjobq.job_all where job_id = %s", (parent,))
