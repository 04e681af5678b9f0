"""job_throughput, job_workers and job_audit: what happened, read as any client reads it.

Finishes are counted per minute, type and backend by the calls that finish jobs; operator
actions write an audit line in the transaction that changes the jobs. Both are tested as real
LOGIN roles where a grant decides what a caller sees.
"""

from __future__ import annotations

import multiprocessing
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from pyjobq import InvalidArgument, JobQueue
from tests.sqlhelp import FROZEN, enqueue, freeze, one, raises_sqlstate, table_snapshot

Conn = psycopg.Connection[Any]

THROUGHPUT = (
    "select minute, job_type, completed, retried, dead from pyjobq.job_throughput(%s)"
    " order by minute, job_type"
)


def claimed(conn: Conn, worker: str, limit: int = 1) -> list[tuple[Any, ...]]:
    """``job_claim`` as (job_id, attempt, lease_token) rows."""
    return conn.execute(
        "select job_id, attempt, lease_token from pyjobq.job_claim(%s, %s)", (worker, limit)
    ).fetchall()


def test_each_way_out_of_running_is_counted_in_its_minute(conn: Conn) -> None:
    freeze(conn, FROZEN + timedelta(seconds=10))
    for job_type in (1, 1, 1, 2):
        enqueue(conn, job_type, "{}", None, None, None, 1)  # one try: a failure is DEAD
    enqueue(conn, 1, "{}", None, None, None, 2)  # two tries: its failure retries
    jobs = claimed(conn, "w1", 5)
    by_type = {
        r[0]: one(conn, "select job_type from pyjobq.job_all where job_id = %s", (r[0],))
        for r in jobs
    }
    ones = [r for r in jobs if by_type[r[0]] == 1]
    two = next(r for r in jobs if by_type[r[0]] == 2)
    conn.execute(
        "select * from pyjobq.job_complete_many('w1', %s, %s, null, %s)",
        ([r[0] for r in ones[:2]], [r[1] for r in ones[:2]], [r[2] for r in ones[:2]]),
    )
    conn.execute("select pyjobq.job_complete(%s, 'w1', %s, null, %s)", two)
    failing = ones[2:]
    for job_id, attempt, token in failing:
        conn.execute(
            "select * from pyjobq.job_fail(%s, 'w1', %s, 'boom', 0, null, %s)",
            (job_id, attempt, token),
        )
    retried = one(conn, "select count(*) from pyjobq.job_all where status = 1")
    assert retried == 1
    # The retried job, claimed again a minute later, is reaped after its lease.
    freeze(conn, FROZEN + timedelta(minutes=1, seconds=5))
    (again,) = claimed(conn, "w2")
    freeze(conn, FROZEN + timedelta(hours=2))
    conn.execute("select pyjobq.job_reap()")

    minute = FROZEN
    assert conn.execute(THROUGHPUT, (180,)).fetchall() == [
        (minute, 1, 2, 1, 1),
        (minute, 2, 1, 0, 0),
        (FROZEN + timedelta(hours=2), 1, 0, 0, 1),  # its second and last try: DEAD
    ]
    assert again[0] == failing[-1][0]  # the one with a try left
    # The window ends now: two hours on, the first minute is out of the last hour's.
    assert [r[0] for r in conn.execute(THROUGHPUT, (60,))] == [FROZEN + timedelta(hours=2)]


def test_a_retried_reply_and_a_lost_holder_count_nothing_more(conn: Conn) -> None:
    freeze(conn, FROZEN)
    enqueue(conn)
    ((job_id, attempt, token),) = claimed(conn, "w1")
    complete = "select * from pyjobq.job_complete_many('w1', %s, %s, null, %s)"
    for _ in range(2):  # the second call repeats the first, as after a lost reply
        conn.execute(complete, ([job_id], [attempt], [token]))
    with raises_sqlstate("JQ003"):
        conn.execute("select pyjobq.job_complete(%s, 'w1', %s, null, %s)", (job_id, attempt, token))
    assert conn.execute(THROUGHPUT, (1,)).fetchall() == [(FROZEN, 1, 1, 0, 0)]


def test_throughput_and_workers_check_their_arguments(conn: Conn) -> None:
    for minutes in (0, 1441):
        with raises_sqlstate("22023"):
            conn.execute("select * from pyjobq.job_throughput(%s)", (minutes,))
    for within in ("0 seconds", "2 days"):
        with raises_sqlstate("22023"):
            conn.execute("select * from pyjobq.job_workers(%s::interval)", (within,))


def _complete_in_own_session(dsn: str, worker: str, jobs: int) -> int:
    """Claim and complete up to ``jobs`` jobs, one call each, from a session of its own."""
    done = 0
    with psycopg.connect(dsn, autocommit=True) as session:
        while done < jobs:
            rows = claimed(session, worker, 5)
            if not rows:
                break
            session.execute(
                "select * from pyjobq.job_complete_many(%s, %s, %s, null, %s)",
                (worker, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]),
            )
            done += len(rows)
    return done


def test_parallel_completions_are_all_counted(conn: Conn, dsn: str) -> None:
    conn.execute("select * from pyjobq.job_enqueue_many(1, array_fill('{}'::jsonb, array[2000]))")
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        done = pool.starmap(_complete_in_own_session, [(dsn, f"w{i}", 2000) for i in range(4)])
    assert sum(done) == 2000
    assert one(conn, "select count(*) from pyjobq.job_all where status = 3") == 2000
    assert one(conn, "select sum(completed) from pyjobq.job_throughput(60)") == 2000
    seen = conn.execute(
        "select worker_id, completed from pyjobq.job_workers() order by worker_id"
    ).fetchall()
    assert seen == [(f"w{i}", n) for i, n in enumerate(done) if n]


def test_a_transaction_held_open_does_not_hold_up_other_sessions_counts(
    conn: Conn, make_conn: Any
) -> None:
    enqueue(conn)
    enqueue(conn)
    first, second = claimed(conn, "w1", 2)
    holder = make_conn()
    other = make_conn()
    holder.execute("begin")
    holder.execute("select pyjobq.job_complete(%s, 'w1', %s, null, %s)", first)
    # Same minute, same type: only the backend differs. Were the row shared, this would wait
    # for the holder's commit and give up after the lock timeout.
    other.execute("set lock_timeout = '30s'")
    other.execute("begin")
    other.execute("select pyjobq.job_complete(%s, 'w1', %s, null, %s)", second)
    waiting = one(
        conn,
        "select count(*) from pg_locks where not granted and pid = %s",
        (other.info.backend_pid,),
    )
    assert waiting == 0
    other.execute("commit")
    holder.execute("commit")
    assert one(conn, "select sum(completed) from pyjobq.job_throughput(1)") == 2


def test_workers_are_those_that_finished_lately_or_hold_jobs(conn: Conn) -> None:
    freeze(conn, FROZEN)
    for _ in range(3):
        enqueue(conn)
    done, _held_by_w1 = claimed(conn, "w1", 2)
    conn.execute("select pyjobq.job_complete(%s, 'w1', %s, null, %s)", done)
    freeze(conn, FROZEN + timedelta(minutes=3))
    claimed(conn, "w2")
    workers = "select worker_id, seen_at, running, completed from pyjobq.job_workers(%s::interval)"
    assert conn.execute(workers, ("5 minutes",)).fetchall() == [
        ("w1", FROZEN, 1, 1),
        ("w2", FROZEN + timedelta(minutes=3), 1, 0),
    ]
    # A minute later w1's completion is out of the window; the job it holds still shows it.
    freeze(conn, FROZEN + timedelta(minutes=4))
    assert conn.execute(workers, ("2 minutes",)).fetchall() == [
        ("w1", FROZEN, 1, 0),
        ("w2", FROZEN + timedelta(minutes=3), 1, 0),
    ]


def test_reap_drops_counts_older_than_a_day(conn: Conn) -> None:
    freeze(conn, FROZEN)
    enqueue(conn)
    conn.execute("select pyjobq.job_complete(%s, 'w1', %s, null, %s)", claimed(conn, "w1")[0])
    freeze(conn, FROZEN + timedelta(hours=25))
    conn.execute("select pyjobq.job_reap()")
    assert one(conn, "select count(*) from pyjobq.job_stat") == 1
    freeze(conn, FROZEN + timedelta(hours=25, minutes=1))
    conn.execute("select pyjobq.job_reap()")
    assert one(conn, "select count(*) from pyjobq.job_stat") == 0


def test_an_observer_sees_the_activity_of_the_types_it_may_observe(
    conn: Conn, login_role: Any
) -> None:
    # Type 2 becomes one team's to observe: granted to a role the observer is not.
    team = conninfo_to_dict(login_role())["user"]
    conn.execute("select pyjobq.job_type_grant(2, %s, 'observe')", (team,))
    enqueue(conn, 1, "{}")
    enqueue(conn, 2, "{}")
    for row in claimed(conn, "w-open", 2):
        conn.execute("select pyjobq.job_complete(%s, 'w-open', %s, null, %s)", row)
    enqueue(conn, 2, "{}")
    claimed(conn, "w-secret")
    with psycopg.connect(login_role("pyjobq_observer"), autocommit=True) as observer:
        assert [r[1:3] for r in observer.execute(THROUGHPUT, (60,))] == [(1, 1)]
        assert observer.execute(
            "select worker_id, running, completed from pyjobq.job_workers()"
        ).fetchall() == [("w-open", 0, 1)]
        with raises_sqlstate("42501"):
            observer.execute("select * from pyjobq.job_audit()")
        with raises_sqlstate("42501"):
            observer.execute("select * from pyjobq.job_stat")


def test_operator_actions_write_who_what_and_how_many(conn: Conn, login_role: Any) -> None:
    ids = [enqueue(conn) for _ in range(3)]
    admin_dsn = login_role("pyjobq_admin")
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        role = one(admin, "select session_user")
        with admin.transaction():
            admin.execute("select set_config('pyjobq.actor', 'alice@ops', true)")
            admin.execute("select * from pyjobq.job_cancel(%s)", (ids[:2],))
        admin.execute("select * from pyjobq.job_cancel(%s)", (ids[:2],))  # nothing left to do
        admin.execute("select * from pyjobq.job_redrive(%s)", (ids[:1],))
        with admin.transaction(force_rollback=True):  # undone: no line either
            admin.execute("select * from pyjobq.job_cancel(%s)", (ids[2:],))
        conn.execute("update pyjobq.job_history set updated_at = updated_at - interval '1 day'")
        admin.execute("select pyjobq.job_prune('1 hour')")
        lines = admin.execute(
            "select role, actor, action, jobs, detail from pyjobq.job_audit()"
        ).fetchall()
    assert lines == [
        (role, None, "prune", 1, {"older_than": "01:00:00", "limit": 10000, "days_dropped": 0}),
        (
            role,
            None,
            "redrive",
            1,
            {"job_ids": [str(ids[0])], "job_type": None, "limit": 1000, "given": 1},
        ),
        (role, "alice@ops", "cancel", 2, {"job_ids": sorted(str(i) for i in ids[:2])}),
    ]


def test_the_audit_log_pages_back_and_checks_its_limit(conn: Conn) -> None:
    for _ in range(5):
        conn.execute("select * from pyjobq.job_cancel(array[%s]::uuid[])", (enqueue(conn),))
    first = conn.execute("select audit_id from pyjobq.job_audit(null, 3)").fetchall()
    rest = conn.execute("select audit_id from pyjobq.job_audit(%s, 3)", (first[-1][0],)).fetchall()
    ids = [r[0] for r in first + rest]
    assert len(ids) == 5
    assert ids == sorted(ids, reverse=True)
    for limit in (0, 1001):
        with raises_sqlstate("22023"):
            conn.execute("select * from pyjobq.job_audit(null, %s)", (limit,))


def test_nobody_but_the_functions_writes_the_audit_log(conn: Conn, login_role: Any) -> None:
    with psycopg.connect(login_role("pyjobq_admin"), autocommit=True) as admin:
        with raises_sqlstate("42501"):
            admin.execute(
                "insert into pyjobq.audit_log (at, role, action, jobs, detail)"
                " values (now(), 'x', 'cancel', 1, '{}')"
            )
        with raises_sqlstate("42501"):
            admin.execute("select pyjobq._audit('cancel', 1, '{}')")


@pytest.mark.parametrize(
    ("error", "expected"), [("TIMEOUT", 2), ("gateway", 1), ("nothing like it", 0)]
)
def test_list_filters_by_error_text_in_any_case(conn: Conn, error: str, expected: int) -> None:
    for message in ("Timeout talking to gateway", "timeout again", None):
        enqueue(conn, 1, "{}", None, None, None, 1)
        (row,) = claimed(conn, "w1")
        if message:
            conn.execute(
                "select * from pyjobq.job_fail(%s, 'w1', %s, %s, null, null, %s)",
                (row[0], row[1], message, row[2]),
            )
    found = conn.execute("select job_id from pyjobq.job_list(p_error => %s)", (error,)).fetchall()
    assert len(found) == expected


@pytest.mark.parametrize("error", ["", "   ", "x" * 201])
def test_list_refuses_a_blank_or_long_error_text(conn: Conn, error: str) -> None:
    enqueue(conn)
    before = table_snapshot(conn)
    with raises_sqlstate("22023"):
        conn.execute("select * from pyjobq.job_list(p_error => %s)", (error,))
    assert table_snapshot(conn) == before


def test_workers_sharing_a_connection_are_told_apart(conn: Conn) -> None:
    for worker in ("w1", "w2", "w2"):
        enqueue(conn)
        job_id, attempt, token = claimed(conn, worker)[0]
        conn.execute(
            "select pyjobq.job_complete(%s, %s, %s, null, %s)", (job_id, worker, attempt, token)
        )
    assert conn.execute(
        "select worker_id, completed from pyjobq.job_workers() order by 1"
    ).fetchall() == [("w1", 1), ("w2", 2)]


def test_prune_deletes_the_audit_lines_past_the_retention_and_says_how_many(
    conn: Conn, login_role: Any
) -> None:
    """The audit log keeps a year unless an admin sets otherwise; job_prune deletes what is
    older and its own line counts them, even when no job went with them."""
    for _ in range(3):
        conn.execute("select * from pyjobq.job_cancel(array[%s]::uuid[])", (enqueue(conn),))
    conn.execute("update pyjobq.audit_log set at = at - interval '400 days'")
    conn.execute("select * from pyjobq.job_cancel(array[%s]::uuid[])", (enqueue(conn),))
    with psycopg.connect(login_role("pyjobq_admin"), autocommit=True) as admin:
        q = JobQueue(admin)
        assert q.settings().audit_retention == timedelta(days=365)
        for bad in (timedelta(hours=23), timedelta(days=365 * 101)):
            with pytest.raises(InvalidArgument):
                q.settings_set(audit_retention=bad)
        assert q.settings().audit_retention == timedelta(days=365)
        assert one(admin, "select pyjobq.job_prune('100 years')") == 0
        lines = admin.execute("select action, jobs, detail from pyjobq.job_audit()").fetchall()
        assert [(a, j, d.get("audit_lines")) for a, j, d in lines] == [
            ("prune", 0, 3),
            ("cancel", 1, None),
        ]
        # A shorter retention takes the cancel's line at the next prune.
        assert q.settings_set(audit_retention=timedelta(days=1)).audit_retention == timedelta(
            days=1
        )
        conn.execute("update pyjobq.audit_log set at = at - interval '2 days'")
        admin.execute("select pyjobq.job_prune('100 years')")
        lines = admin.execute("select action, jobs, detail from pyjobq.job_audit()").fetchall()
        assert [(a, j, d.get("audit_lines")) for a, j, d in lines] == [("prune", 0, 2)]
