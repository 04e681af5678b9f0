"""Jobs that wait for jobs: job_enqueue's p_depends_on, WAITING, and what each way a parent
ends does to its dependants, read as any client reads it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.sqlhelp import enqueue, one, raises_sqlstate, table_snapshot

Conn = psycopg.Connection[Any]

WAITING, PENDING, RUNNING, DONE, DEAD, CANCELLED = 6, 1, 2, 3, 4, 5


def child(conn: Conn, parents: list[Any], on_failure: str | None = None, **extra: Any) -> Any:
    """A job of type 1 depending on ``parents``; its id."""
    return one(
        conn,
        "select job_id from pyjobq.job_enqueue(1, %s, p_depends_on => %s,"
        " p_on_parent_failure => %s, p_dedupe_key => %s)",
        (extra.get("payload", "{}"), parents, on_failure, extra.get("dedupe_key")),
    )


def claim_all(conn: Conn, worker: str = "w1") -> dict[Any, tuple[Any, ...]]:
    """Every due job, claimed: job_id -> (attempt, lease_token, parent_results)."""
    rows = conn.execute(
        "select job_id, attempt, lease_token, parent_results from pyjobq.job_claim(%s, 1000)",
        (worker,),
    ).fetchall()
    return {r[0]: r[1:] for r in rows}


def complete(conn: Conn, job_id: Any, held: tuple[Any, ...], result: str = "{}") -> None:
    conn.execute(
        "select pyjobq.job_complete(%s, 'w1', %s, %s, %s)", (job_id, held[0], result, held[1])
    )


def fail_dead(conn: Conn, job_id: Any, held: tuple[Any, ...]) -> None:
    conn.execute(
        "select * from pyjobq.job_fail(%s, 'w1', %s, 'boom', null, true, %s)",
        (job_id, held[0], held[1]),
    )


def status(conn: Conn, job_id: Any) -> int:
    return int(one(conn, "select status from pyjobq.job_all where job_id = %s", (job_id,)))


def test_a_child_waits_for_its_last_parent_and_reads_their_results_in_order(conn: Conn) -> None:
    a, b = enqueue(conn), enqueue(conn)
    c = child(conn, [b, a])
    assert status(conn, c) == WAITING
    held = claim_all(conn)
    assert set(held) == {a, b}, "the child is not claimable while it waits"
    complete(conn, a, held[a], '{"from": "a"}')
    assert status(conn, c) == WAITING
    assert claim_all(conn) == {}
    conn.execute(
        "select * from pyjobq.job_complete_many('w1', %s, %s, %s, %s)",
        ([b], [held[b][0]], ['{"from": "b"}'], [held[b][1]]),
    )
    assert status(conn, c) == PENDING
    (results,) = [r[2] for r in claim_all(conn).values()]
    assert [(r["job_id"], r["status"], r["result"]) for r in results] == [
        (str(b), "DONE", {"from": "b"}),
        (str(a), "DONE", {"from": "a"}),
    ]


def test_a_job_without_parents_has_no_parent_results(conn: Conn) -> None:
    enqueue(conn)
    assert [r[2] for r in claim_all(conn).values()] == [None]


def test_a_failed_parent_cancels_the_graph_below_it_unless_a_child_runs_anyway(conn: Conn) -> None:
    parent = enqueue(conn)
    cancelled = child(conn, [parent])
    grandchild = child(conn, [cancelled])
    runs = child(conn, [parent], "run")
    runs_after_grandchild = child(conn, [grandchild], "run")
    held = claim_all(conn)
    fail_dead(conn, parent, held[parent])
    assert {j: status(conn, j) for j in (cancelled, grandchild, runs, runs_after_grandchild)} == {
        cancelled: CANCELLED,
        grandchild: CANCELLED,
        runs: PENDING,
        runs_after_grandchild: PENDING,
    }
    assert one(conn, "select last_error from pyjobq.job_all where job_id = %s", (cancelled,)) == (
        f"parent {parent} ended DEAD"
    )
    results = {j: r[2] for j, r in claim_all(conn).items()}
    assert results[runs] == [
        {"job_id": str(parent), "job_type": 1, "status": "DEAD", "result": None}
    ]
    assert results[runs_after_grandchild][0]["status"] == "CANCELLED"


@pytest.mark.parametrize("end", ["cancel", "reap", "release"])
def test_every_way_a_parent_ends_resolves_its_dependants(conn: Conn, end: str) -> None:
    parent = enqueue(conn, 1, "{}", None, None, None, 1)
    cancel_child, run_child = child(conn, [parent]), child(conn, [parent], "run")
    if end == "cancel":
        conn.execute("select * from pyjobq.job_cancel(%s)", ([parent],))
    else:
        (held,) = claim_all(conn).values()
        if end == "reap":
            conn.execute(
                "update pyjobq.job set lease_until = now() - interval '1 s' where status = 2"
            )
            assert one(conn, "select count(*) from pyjobq.job_reap()") == 1
        else:  # released with its claim counter spent: DEAD
            conn.execute(
                "update pyjobq.job set attempts = 32767, attempts_refunded = 32766"
                " where job_id = %s",
                (parent,),
            )
            conn.execute(
                "select * from pyjobq.job_release_many('w1', %s, %s, %s)",
                ([parent], [32767], [held[1]]),
            )
    assert status(conn, parent) in (DEAD, CANCELLED)
    assert (status(conn, cancel_child), status(conn, run_child)) == (CANCELLED, PENDING)


def test_cancelling_a_waiting_job_cancels_it_and_its_own_dependants(conn: Conn) -> None:
    parent = enqueue(conn)
    waiting = child(conn, [parent])
    below = child(conn, [waiting])
    assert conn.execute("select * from pyjobq.job_cancel(%s)", ([waiting],)).fetchall() == [
        (waiting, "cancelled")
    ]
    assert (status(conn, waiting), status(conn, below)) == (CANCELLED, CANCELLED)
    held = claim_all(conn)
    complete(conn, parent, held[parent])
    assert status(conn, waiting) == CANCELLED, "a parent's end does not revive it"


def test_parents_that_ended_before_the_enqueue_count_as_they_ended(conn: Conn) -> None:
    done, dead = enqueue(conn), enqueue(conn)
    held = claim_all(conn)
    complete(conn, done, held[done])
    fail_dead(conn, dead, held[dead])
    assert status(conn, child(conn, [done])) == PENDING
    born_cancelled = child(conn, [done, dead])
    assert status(conn, born_cancelled) == CANCELLED
    assert status(conn, child(conn, [dead], "run")) == PENDING


def test_one_call_enqueues_a_graph_by_positions(conn: Conn) -> None:
    outside = enqueue(conn)
    rows = conn.execute(
        "select ord, job_id, created from pyjobq.job_enqueue_many(1, %s::jsonb[],"
        " p_depends_on => %s::jsonb[]) order by ord",
        (["{}"] * 4, [None, "[1]", f'[1, 2, "{outside}"]', "null"]),
    ).fetchall()
    ids = [r[1] for r in rows]
    assert [status(conn, j) for j in ids] == [PENDING, WAITING, WAITING, PENDING]
    assert one(conn, "select waiting_on from pyjobq.job_all where job_id = %s", (ids[2],)) == 3
    graph = conn.execute(
        "select relation, job_id, status_name, resolved from pyjobq.job_dependencies(%s)", (ids[2],)
    ).fetchall()
    assert graph == [
        ("parent", ids[0], "PENDING", False),
        ("parent", ids[1], "WAITING", False),
        ("parent", outside, "PENDING", False),
    ]
    assert conn.execute(
        "select relation, job_id from pyjobq.job_dependencies(%s)", (ids[0],)
    ).fetchall() == [("dependant", ids[1]), ("dependant", ids[2])]


@pytest.mark.parametrize(
    ("spec", "sqlstate"),
    [
        (["[2]", None], "22023"),  # a later row
        (["[0]", None], "22023"),
        ([None, "[1.5]"], "22023"),
        ([None, '{"a": 1}'], "22023"),
        ([None, '["not-a-uuid"]'], "22023"),
        ([None, '["00000000-0000-0000-0000-000000000001"]'], "JQ002"),
        (["[]"], "22023"),  # one spec for two payloads
    ],
)
def test_bad_parent_specs_are_refused_and_change_nothing(
    conn: Conn, spec: list[str | None], sqlstate: str
) -> None:
    enqueue(conn)
    before = table_snapshot(conn)
    with raises_sqlstate(sqlstate):
        conn.execute(
            "select * from pyjobq.job_enqueue_many(1, %s::jsonb[], p_depends_on => %s::jsonb[])",
            (["{}", "{}"], spec),
        )
    assert table_snapshot(conn) == before
    assert one(conn, "select count(*) from pyjobq.job_edge") == 0


@pytest.mark.parametrize(
    ("parents", "on_failure", "sqlstate"),
    [
        ("missing", None, "JQ002"),
        ("null", None, "22004"),
        ("ok", "sometimes", "22023"),
    ],
)
def test_bad_dependencies_of_one_job_are_refused_and_change_nothing(
    conn: Conn, parents: str, on_failure: str | None, sqlstate: str
) -> None:
    parent = enqueue(conn)
    ids = {"missing": ["00000000-0000-0000-0000-000000000001"], "null": [parent, None]}
    before = table_snapshot(conn)
    with raises_sqlstate(sqlstate):
        child(conn, ids.get(parents, [parent]), on_failure)
    assert table_snapshot(conn) == before


def test_a_waiting_job_holds_its_dedupe_key_and_is_counted(conn: Conn) -> None:
    parent = enqueue(conn)
    waiting = child(conn, [parent], dedupe_key="k")
    assert child(conn, [parent], dedupe_key="k") == waiting
    assert enqueue(conn, 1, "{}", None, None, "k") == waiting
    counts = dict(
        conn.execute(
            "select status_name, jobs from pyjobq.job_counts() where job_type = 1"
        ).fetchall()
    )
    assert (counts["WAITING"], counts["PENDING"]) == (1, 1)
    listed = conn.execute("select job_id from pyjobq.job_list(p_status => 6)").fetchall()
    assert listed == [(waiting,)]


def test_prune_keeps_a_parent_until_its_dependants_end_and_takes_the_edges_along(
    conn: Conn,
) -> None:
    a, b = enqueue(conn), enqueue(conn)
    c = child(conn, [a, b])
    held = claim_all(conn)
    complete(conn, a, held[a])
    assert one(conn, "select pyjobq.job_prune('0 s')") == 0, "c still waits: a stays"
    complete(conn, b, held[b])
    (c_held,) = claim_all(conn).values()
    complete(conn, c, c_held)
    assert one(conn, "select pyjobq.job_prune('0 s')") == 3
    assert one(conn, "select count(*) from pyjobq.job_edge") == 0


def test_depending_on_a_job_needs_the_right_to_observe_its_type(
    conn: Conn, login_role: Any
) -> None:
    conn.execute("select pyjobq.job_type_register(3, 'PRIVATE')")
    conn.execute("select pyjobq.job_type_grant(3, 'pyjobq_admin', 'observe')")
    hidden = enqueue(conn, 3, "{}")
    seen = enqueue(conn)
    producer = psycopg.connect(login_role("pyjobq_producer"), autocommit=True)
    with producer:
        with raises_sqlstate("42501"):
            child(producer, [hidden])
        assert status(conn, child(producer, [seen])) == WAITING
        assert one(producer, "select count(*) from pyjobq.job_dependencies(%s)", (seen,)) == 1


@pytest.mark.parametrize("policy", ["cancel", "run"])
def test_a_row_born_cancelled_passes_its_end_on_to_later_rows_of_the_call(
    conn: Conn, policy: str
) -> None:
    dead = enqueue(conn)
    fail_dead(conn, dead, claim_all(conn)[dead])
    rows = conn.execute(
        "select job_id from pyjobq.job_enqueue_many(1, %s::jsonb[], p_depends_on => %s::jsonb[],"
        " p_on_parent_failure => %s) order by ord",
        (["{}"] * 3, [f'["{dead}"]', "[1]", "[2]"], policy),
    ).fetchall()
    statuses = [status(conn, r[0]) for r in rows]
    if policy == "cancel":
        assert statuses == [CANCELLED, CANCELLED, CANCELLED]
        assert one(
            conn, "select last_error from pyjobq.job_all where job_id = %s", (rows[1][0],)
        ) == (f"parent {rows[0][0]} ended CANCELLED")
    else:
        assert statuses == [PENDING, WAITING, WAITING]
    assert one(conn, "select count(*) from pyjobq.job_edge where not resolved") == (
        0 if policy == "cancel" else 2
    )


def test_rows_with_keys_and_parents_are_added_one_by_one_in_order(conn: Conn) -> None:
    held_key = enqueue(conn, 1, "{}", None, None, "taken")
    rows = conn.execute(
        "select job_id, created from pyjobq.job_enqueue_many(1, %s::jsonb[], %s::text[],"
        " p_depends_on => %s::jsonb[]) order by ord",
        (["{}"] * 3, [None, "taken", "new"], [None, "[1]", "[1, 2]"]),
    ).fetchall()
    first, (second, second_created), third = rows[0][0], rows[1], rows[2][0]
    assert (second, second_created) == (held_key, False), "the key's holder, its parents its own"
    assert status(conn, third) == WAITING
    parents = conn.execute(
        "select job_id from pyjobq.job_dependencies(%s) where relation = 'parent'", (third,)
    ).fetchall()
    assert parents == [(first,), (held_key,)]


def redrive(conn: Conn, *jobs: Any) -> set[Any]:
    return {r[0] for r in conn.execute("select job_id from pyjobq.job_redrive(%s)", (list(jobs),))}


def test_a_dependant_is_redriven_only_with_its_failed_parents_and_waits_for_them_again(
    conn: Conn,
) -> None:
    parent, done = enqueue(conn), enqueue(conn)
    dependant = child(conn, [parent, done])
    grandchild = child(conn, [dependant])
    held = claim_all(conn)
    complete(conn, done, held[done], '{"from": "done"}')
    fail_dead(conn, parent, held[parent])
    assert (status(conn, dependant), status(conn, grandchild)) == (CANCELLED, CANCELLED)
    # Alone, the dependant would run without its parent: it stays, as do its own dependants.
    assert redrive(conn, dependant, grandchild) == set()
    assert (status(conn, dependant), status(conn, grandchild)) == (CANCELLED, CANCELLED)
    # With its parent, it waits for it again; its own dependant waits for it.
    assert redrive(conn, grandchild, dependant, parent) == {parent, dependant, grandchild}
    assert (status(conn, parent), status(conn, dependant), status(conn, grandchild)) == (
        PENDING,
        WAITING,
        WAITING,
    )
    held = claim_all(conn)
    assert set(held) == {parent}
    complete(conn, parent, held[parent], '{"from": "parent"}')
    assert status(conn, dependant) == PENDING
    (results,) = [r[2] for r in claim_all(conn).values()]
    assert [(r["status"], r["result"]) for r in results] == [
        ("DONE", {"from": "parent"}),
        ("DONE", {"from": "done"}),
    ]


def test_a_dependant_redriven_after_its_parent_waits_for_it_or_runs_once_it_is_done(
    conn: Conn,
) -> None:
    parent = enqueue(conn)
    dependant = child(conn, [parent])
    runs_anyway = child(conn, [parent], "run")
    held = claim_all(conn)
    fail_dead(conn, parent, held[parent])
    held = claim_all(conn)
    assert set(held) == {runs_anyway}
    complete(conn, runs_anyway, held[runs_anyway])
    assert redrive(conn, parent) == {parent}
    assert redrive(conn, dependant) == {dependant}
    assert status(conn, dependant) == WAITING
    held = claim_all(conn)
    complete(conn, parent, held[parent])
    assert status(conn, dependant) == PENDING


def test_a_redrive_racing_a_parents_end_never_strands_the_dependant(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    """A dependant redriven with its failed parent while its other parent completes: whichever
    goes first, it either stays CANCELLED (the completer held the parent) or waits for exactly
    the parents yet to end, and runs once they are DONE."""
    redriver, completer = make_conn(), make_conn()
    for _ in range(40):
        failed, running = enqueue(conn), enqueue(conn)
        dependant = child(conn, [failed, running])
        held = claim_all(conn)
        fail_dead(conn, failed, held[failed])
        barrier = threading.Barrier(2)

        def redrive_both(
            failed: Any = failed, dependant: Any = dependant, barrier: Any = barrier
        ) -> None:
            barrier.wait()
            redriver.execute("select * from pyjobq.job_redrive(%s)", ([failed, dependant],))

        def complete_running(
            running: Any = running, held: Any = held[running], barrier: Any = barrier
        ) -> None:
            barrier.wait()
            complete(completer, running, held)

        threads = [threading.Thread(target=t) for t in (redrive_both, complete_running)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert status(conn, running) == DONE
        assert status(conn, failed) == PENDING
        if status(conn, dependant) == CANCELLED:
            # The completer held its parent: it did not move, and moves now, after its parents.
            assert redrive(conn, dependant) == {dependant}
        assert status(conn, dependant) == WAITING
        waits = one(conn, "select waiting_on from pyjobq.job where job_id = %s", (dependant,))
        assert waits == 1, "it waits for the redriven parent alone"
        held = claim_all(conn)
        assert set(held) == {failed}
        complete(conn, failed, held[failed])
        held = claim_all(conn)
        assert set(held) == {dependant}
        complete(conn, dependant, held[dependant])
