"""The history: a job's end moves its row from job to job_history, partitioned by the day
it ended; redrive moves it back; job_get and job_list read both; retention drops whole days."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.sqlhelp import FROZEN, claim, enqueue, freeze, one, one_row, run_threads

Conn = psycopg.Connection[Any]


def where(conn: Conn, job_id: Any) -> list[tuple[str, int]]:
    """Every table the job's row is in, the partition for the history, with its status."""
    return conn.execute(
        "select tableoid::regclass::text, status from pyjobq.job where job_id = %(id)s"
        " union all"
        " select tableoid::regclass::text, status from pyjobq.job_history where job_id = %(id)s",
        {"id": job_id},
    ).fetchall()


def get(conn: Conn, job_id: Any) -> tuple[Any, ...]:
    return one_row(
        conn,
        "select status_name, attempts, result, last_error, finished_at is not null"
        " from pyjobq.job_get(%s)",
        (job_id,),
    )


def listed(conn: Conn, status: int | None = None) -> list[tuple[Any, str]]:
    return conn.execute(
        "select job_id, status_name from pyjobq.job_list(p_status => %s, p_oldest_first => true)",
        (status,),
    ).fetchall()


def test_a_job_moves_to_the_history_at_its_end_and_back_at_redrive(conn: Conn) -> None:
    freeze(conn, FROZEN)
    one(conn, "select pyjobq.job_history_maintain()")
    day = "pyjobq.job_history_20300101"
    failing, pending = enqueue(conn), enqueue(conn)
    [(job, attempt)] = claim(conn)
    assert job == failing
    assert where(conn, job) == [("pyjobq.job", 2)]

    conn.execute("select * from pyjobq.job_fail(%s, 'w1', %s, 'boom', null, true)", (job, attempt))
    assert where(conn, job) == [(day, 4)]
    assert get(conn, job) == ("DEAD", 1, None, "boom", True)
    assert listed(conn) == sorted([(failing, "DEAD"), (pending, "PENDING")])
    assert listed(conn, 4) == [(failing, "DEAD")]
    assert listed(conn, 1) == [(pending, "PENDING")]

    assert one(
        conn, "select array_agg(job_id) from pyjobq.job_redrive(array[%s::uuid])", (job,)
    ) == [job]
    assert where(conn, job) == [("pyjobq.job", 1)]
    assert get(conn, job) == ("PENDING", 1, None, "boom", False)
    assert listed(conn, 4) == []

    [(again, attempt)] = claim(conn)
    assert again == job
    conn.execute(
        "select pyjobq.job_complete(%s, 'w1', %s, %s)", (job, attempt, Jsonb({"ok": True}))
    )
    assert where(conn, job) == [(day, 3)]
    assert get(conn, job) == ("DONE", 2, {"ok": True}, "boom", True)
    assert listed(conn, 3) == [(failing, "DONE")]
    assert listed(conn) == sorted([(failing, "DONE"), (pending, "PENDING")])


def test_the_reaper_makes_the_days_ahead_and_moves_a_days_rows_out_of_the_default(
    conn: Conn,
) -> None:
    # Nothing made the partitions yet: the end lands in the default partition.
    freeze(conn, FROZEN)
    early = enqueue(conn)
    [(job, attempt)] = claim(conn)
    conn.execute("select pyjobq.job_complete(%s, 'w1', %s)", (job, attempt))
    assert where(conn, early) == [("pyjobq.job_history_default", 3)]

    conn.execute("select * from pyjobq.job_reap()")
    days = conn.execute(
        "select c.relname::text from pg_partition_tree('pyjobq.job_history') t"
        " join pg_class c on c.oid = t.relid where t.isleaf order by 1"
    ).fetchall()
    assert days == [("job_history_20300101",), ("job_history_20300102",), ("job_history_default",)]
    assert where(conn, early) == [("pyjobq.job_history_20300101", 3)]
    # Made once: the next reap finds tomorrow's partition and does nothing more.
    assert one(conn, "select pyjobq.job_history_maintain()") == 0
    # The maintainer analyzed the history, which autovacuum never does for a partitioned table.
    assert (
        one(
            conn,
            "select count(*) from pg_stats_ext where statistics_name = 'job_type_status_stats'",
        )
        == 1
    )


def finish(conn: Conn, jobs: int, at: Any) -> list[Any]:
    """``jobs`` new jobs, claimed and completed at ``at``."""
    freeze(conn, at)
    ids = [enqueue(conn) for _ in range(jobs)]
    for job, attempt in claim(conn, "w1", jobs):
        conn.execute("select pyjobq.job_complete(%s, 'w1', %s)", (job, attempt))
    return ids


def test_prune_drops_whole_days_and_deletes_the_rest_row_by_row(conn: Conn) -> None:
    freeze(conn, FROZEN)
    one(conn, "select pyjobq.job_history_maintain(3)")
    first = finish(conn, 3, FROZEN + timedelta(hours=1))
    second = finish(conn, 2, FROZEN + timedelta(days=1, hours=1))
    third = finish(conn, 2, FROZEN + timedelta(days=1, hours=20))
    # A parent that ended on the first day, with a dependant yet to end: its day stays.
    parent = finish(conn, 1, FROZEN + timedelta(days=1, hours=2))[0]
    child = one(conn, "select job_id from pyjobq.job_enqueue(1, p_depends_on => %s)", ([parent],))
    # Cut off at noon of the second day: the first day is dropped whole; the second stays for
    # the parent and for what ended after noon, and loses the rest row by row.
    freeze(conn, FROZEN + timedelta(days=3))
    with conn.transaction():
        # The drop's own 100 ms wait for its lock is not left to the caller's transaction.
        conn.execute("set local lock_timeout = '7s'")
        assert one(conn, "select pyjobq.job_prune('36 hours')") == len(first) + len(second)
        assert one(conn, "show lock_timeout") == "7s"
    kept = {r[0] for r in conn.execute("select job_id from pyjobq.job_all").fetchall()}
    assert kept == {parent, child, *third}
    days = {r[0] for r in conn.execute(
        "select c.relname::text from pg_partition_tree('pyjobq.job_history') t"
        " join pg_class c on c.oid = t.relid where t.isleaf"
    ).fetchall()}  # fmt: skip
    assert "job_history_20300101" not in days
    assert "job_history_20300102" in days
    audit = one(conn, "select detail from pyjobq.job_audit() where action = 'prune'")
    assert audit["days_dropped"] == 1


def test_ends_and_redrives_racing_leave_each_job_in_exactly_one_table(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    """Workers complete and fail for good, a canceller cancels and a redriver redrives the
    same jobs at once: every job is in job or in job_history, never both, never neither,
    and the counts of the two add up to what was enqueued."""
    jobs = 400
    one(
        conn,
        "select count(*) from pyjobq.job_enqueue_many(1, array_fill('{}'::jsonb, array[%s]))",
        (jobs,),
    )
    ids = [r[0] for r in conn.execute("select job_id from pyjobq.job").fetchall()]

    refused: list[str | None] = []

    def worker(name: str, fail: bool) -> Callable[[], None]:
        def run() -> None:
            c = make_conn()
            for _ in range(40):
                held = c.execute(
                    "select job_id, attempt, lease_token from pyjobq.job_claim(%s, 5)", (name,)
                ).fetchall()
                for job, attempt, token in held:
                    try:
                        if fail:
                            c.execute(
                                "select * from pyjobq.job_fail(%s, %s, %s, 'x', null, true, %s)",
                                (job, name, attempt, token),
                            )
                        else:
                            c.execute(
                                "select pyjobq.job_complete(%s, %s, %s, null, %s)",
                                (job, name, attempt, token),
                            )
                    except psycopg.Error as e:
                        refused.append(e.sqlstate)

        return run

    def canceller() -> None:
        c = make_conn()
        for n in range(0, jobs, 8):
            c.execute("select * from pyjobq.job_cancel(%s)", (ids[n : n + 8],))

    def redriver() -> None:
        c = make_conn()
        for _ in range(30):
            c.execute("select * from pyjobq.job_redrive(p_limit => 20)")

    run_threads([worker("w1", False), worker("w2", True), canceller, redriver])
    # Only jobs cancelled meanwhile (and maybe redriven and claimed again since) are refused.
    assert set(refused) <= {"JQ001", "JQ005"}, refused
    both = one(
        conn,
        "select count(*) from pyjobq.job l join pyjobq.job_history h using (job_id)",
    )
    live = one(conn, "select count(*) from pyjobq.job")
    ended = one(conn, "select count(*) from pyjobq.job_history")
    assert (both, live + ended) == (0, jobs)
    assert one(conn, "select count(distinct job_id) from pyjobq.job_all") == jobs


def partitions(conn: Conn) -> list[tuple[str]]:
    return conn.execute(
        "select c.relname::text from pg_partition_tree('pyjobq.job_history') t"
        " join pg_class c on c.oid = t.relid where t.isleaf order by 1"
    ).fetchall()


def test_only_an_admin_makes_the_days_and_no_caller_picks_them(
    conn: Conn, login_role: Callable[..., str]
) -> None:
    """job_history_maintain is an admin's; a worker's reap makes the days through it, for the
    day the database clock says, whatever the worker's session sets; nobody else calls it or
    the private _history_day, and a refused call makes no partition."""
    before = partitions(conn)
    for group in ("pyjobq_worker", "pyjobq_producer", "pyjobq_observer"):
        with psycopg.connect(login_role(group), autocommit=True) as caller:
            for call in (
                "select pyjobq.job_history_maintain(31)",
                "select pyjobq._history_day('2100-01-01')",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    caller.execute(call)
    assert partitions(conn) == before
    day = "select (statement_timestamp() at time zone 'UTC')::date"
    first = one(conn, day)
    with psycopg.connect(login_role("pyjobq_worker"), autocommit=True) as worker:
        # The test clock is the schema owner's: a worker that sets it is refused, not obeyed.
        worker.execute("set pyjobq.fake_now = '2100-01-01 00:00+00'")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            worker.execute("select * from pyjobq.job_reap()")
        worker.execute("reset pyjobq.fake_now")
        worker.execute("select * from pyjobq.job_reap()")
    made = {r[0] for r in partitions(conn)} - {r[0] for r in before}
    # Today's and tomorrow's, by the database clock (either side of a midnight the test spans).
    assert made in [
        {f"job_history_{d:%Y%m%d}", f"job_history_{d + timedelta(days=1):%Y%m%d}"}
        for d in {first, one(conn, day)}
    ]
    with psycopg.connect(login_role("pyjobq_admin"), autocommit=True) as admin:
        assert one(admin, "select pyjobq.job_history_maintain(3)") == 2


def test_the_prune_estimate_is_what_prune_then_deletes(conn: Conn) -> None:
    """Whole days from the statistics the daily maintenance keeps, the cutoff's own day counted:
    the figure job_prune then deletes. A day never analyzed is counted, and the figure exact."""

    def estimate(older_than: str) -> tuple[Any, ...]:
        return one_row(conn, "select jobs, exact from pyjobq.job_prune_estimate(%s)", (older_than,))

    for day, jobs in ((0, 5), (1, 7), (2, 4)):
        at = FROZEN + timedelta(days=day)
        freeze(conn, at)
        one(conn, "select pyjobq.job_history_maintain()")  # analyzes the days before
        finish(conn, jobs, at + timedelta(hours=12))
    freeze(conn, FROZEN + timedelta(days=3, hours=6))
    one(conn, "select pyjobq.job_history_maintain()")  # the next day's: the 3rd is analyzed
    # Two days whole (5 + 7, from statistics), then the third day's jobs counted up to the cutoff.
    assert estimate("30 hours") == (12, False)
    assert estimate("18 hours") == (12, False)
    assert estimate("17 hours") == (16, False)
    assert estimate("1 hour") == (16, False)
    assert one(conn, "select pyjobq.job_prune('30 hours')") == 12
    # No day left whole before the cutoff: every job counted.
    assert estimate("17 hours") == (4, True)
    # A day never analyzed (its partition made without the maintenance): every job counted.
    one(conn, "select pyjobq._history_day(%s)", ((FROZEN + timedelta(days=10)).date(),))
    finish(conn, 3, FROZEN + timedelta(days=10, hours=1))
    freeze(conn, FROZEN + timedelta(days=12))
    assert estimate("1 day") == (7, True)
    assert one(conn, "select pyjobq.job_prune('1 day')") == 7
    assert estimate("0 seconds") == (0, True)
