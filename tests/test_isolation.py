"""What a caller in REPEATABLE READ or SERIALIZABLE gets from the functions that lock rows other
sessions change: READ COMMITTED (the default) never sees 40001 from them; a transaction whose
snapshot is older than another session's change to a row the call reaches does, and changes
nothing. Each case is arranged in order on two sessions, no sleeps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.sqlhelp import enqueue, one, one_row, raises_sqlstate

Conn = psycopg.Connection[Any]

SCHEDULE = (
    "select pyjobq.job_schedule_set('s', '* * * * *', 1, '{}', p_grace_seconds => 86400,"
    " p_start_at => now() - interval '5 minutes')"
)
CALLS = {
    "claim": ([], "select * from pyjobq.job_claim(%s, 1)"),
    "claim with a rate limit": (
        ["select pyjobq.job_type_set_limits(1, p_rate_limit => 10, p_rate_period => '1 hour')"],
        "select * from pyjobq.job_claim(%s, 1)",
    ),
    "schedule tick": ([SCHEDULE], "select * from pyjobq.job_schedule_tick() where %s::text <> ''"),
}


@pytest.mark.parametrize("isolation", ["repeatable read", "serializable"])
@pytest.mark.parametrize("call", list(CALLS))
def test_a_snapshot_older_than_another_sessions_change_gets_40001(
    conn: Conn, make_conn: Callable[[], Conn], isolation: str, call: str
) -> None:
    setup, statement = CALLS[call]
    for s in setup:
        conn.execute(s)
    if call != "schedule tick":
        enqueue(conn)
        enqueue(conn)
    old = make_conn()
    old.execute("begin isolation level " + isolation)
    old.execute("select count(*) from pyjobq.job_types()")  # the snapshot is taken here
    conn.execute(statement, ("other",)).fetchall()  # another session changes a row, commits
    before = one(conn, "select count(*) from pyjobq.job_all where status = 2")
    with raises_sqlstate("40001"):
        old.execute(statement, ("old",)).fetchall()
    old.execute("rollback")
    assert one(conn, "select count(*) from pyjobq.job_all where status = 2") == before
    # The same call in READ COMMITTED, at the same point, goes through.
    fresh = make_conn()
    fresh.execute(statement, ("fresh",)).fetchall()


@pytest.mark.parametrize("isolation", ["repeatable read", "serializable"])
@pytest.mark.parametrize("limit", ["p_max_running", "p_key_max_running"])
def test_a_claim_of_a_type_with_a_concurrency_limit_needs_read_committed(
    conn: Conn, make_conn: Callable[[], Conn], isolation: str, limit: str
) -> None:
    """The interleaving that would count RUNNING jobs with a snapshot older than another
    claim: refused with JQ007, which names the isolation level, and nothing changes."""
    conn.execute(f"select pyjobq.job_type_set_limits(1, {limit} => 1)")
    for _ in range(2):
        conn.execute("select pyjobq.job_enqueue(1, '{}', p_concurrency_key => 'k')")
    old = make_conn()
    old.execute("begin isolation level " + isolation)
    old.execute("select count(*) from pyjobq.job_types()")  # the snapshot is taken here
    assert len(conn.execute("select * from pyjobq.job_claim('other', 1)").fetchall()) == 1
    with pytest.raises(psycopg.Error, match=isolation.upper()) as refused:
        old.execute("select * from pyjobq.job_claim('old', 1)").fetchall()
    assert refused.value.sqlstate == "JQ007"
    old.execute("rollback")
    assert one(conn, "select count(*) from pyjobq.job_all where status = 2") == 1
    # A claim in READ COMMITTED counts the other claim: the limit is reached.
    assert make_conn().execute("select * from pyjobq.job_claim('fresh', 1)").fetchall() == []


@pytest.mark.parametrize("isolation", ["repeatable read", "serializable"])
@pytest.mark.parametrize("change", ["renewed", "completed"])
def test_the_commit_of_an_enqueue_naming_a_parent_changed_since_its_snapshot_gets_40001(
    conn: Conn, make_conn: Callable[[], Conn], isolation: str, change: str
) -> None:
    """A producer enqueues a child of RUNNING job P; another session changes P and commits;
    the producer's commit, whose deferred settle locks P, fails with 40001 and leaves nothing.
    Retried, the enqueue commits, and the child waits for P or runs after it as it should."""
    parent = enqueue(conn)
    ((_, attempt),) = conn.execute("select job_id, attempt from pyjobq.job_claim('w1', 1)")
    producer = make_conn()
    producer.execute("begin isolation level " + isolation)
    child_of_parent = "select job_id from pyjobq.job_enqueue(1, '{}', p_depends_on => array[%s])"
    one(producer, child_of_parent, (parent,))
    if change == "renewed":
        conn.execute("select pyjobq.job_renew_lease(%s, 'w1', %s, 60)", (parent, attempt))
    else:
        conn.execute("select pyjobq.job_complete(%s, 'w1', %s)", (parent, attempt))
    with raises_sqlstate("40001"):
        producer.execute("commit")
    assert one(conn, "select count(*) from pyjobq.job_all where job_id <> %s", (parent,)) == 0
    child = one(make_conn(), child_of_parent, (parent,))
    waits = "select status, waiting_on from pyjobq.job where job_id = %s"
    assert one_row(conn, waits, (child,)) == ((6, 1) if change == "renewed" else (1, 0))
