"""job_list: filtered keyset pages, newest or oldest first, that never read the whole history."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from pyjobq import JobQueue, JobStatus, JobType
from pyjobq.cli import main
from tests.sqlhelp import FROZEN, freeze, one, raises_sqlstate
from tests.test_counts import HISTORY, HISTORY_LEAVES, active_jobs, finish_history, table_reads

Conn = psycopg.Connection[Any]

LIST = "select job_id, job_type, status, dedupe_key from pyjobq.job_list("


def page(conn: Conn, **args: Any) -> list[tuple[Any, ...]]:
    named = ", ".join(f"p_{name} => %({name})s" for name in args)
    return conn.execute(LIST + named + ")", args).fetchall()


def test_pages_follow_each_other_newest_or_oldest_first(conn: Conn) -> None:
    ids = [
        r[0]
        for r in conn.execute(
            "select job_id from pyjobq.job_enqueue_many(1, array_fill('{}'::jsonb, array[25]))"
            " order by ord"
        )
    ]
    for oldest_first, expected in ((False, ids[::-1]), (True, ids)):
        seen: list[Any] = []
        after = None
        while rows := page(conn, oldest_first=oldest_first, after=after, limit=10):
            seen += [r[0] for r in rows]
            after = rows[-1][0]
        assert seen == expected


def test_filters_by_type_status_key_and_creation_time(conn: Conn) -> None:
    freeze(conn, FROZEN)
    early = one(conn, "select job_id from pyjobq.job_enqueue(1, '{}')")
    freeze(conn, FROZEN + timedelta(hours=1))
    keyed = one(conn, "select job_id from pyjobq.job_enqueue(2, '{}', p_dedupe_key => 'k')")
    freeze(conn, FROZEN + timedelta(hours=2))
    late = one(conn, "select job_id from pyjobq.job_enqueue(1, '{}')")
    conn.execute("select pyjobq.job_claim('w1', 1, null, '{2}')")
    assert [r[0] for r in page(conn, job_type=1)] == [late, early]
    assert page(conn, status=2) == [(keyed, 2, 2, "k")]
    assert [r[0] for r in page(conn, dedupe_key="k")] == [keyed]
    after_early = FROZEN + timedelta(minutes=30)
    assert [r[0] for r in page(conn, created_after=after_early)] == [late, keyed]
    assert [r[0] for r in page(conn, created_before=after_early)] == [early]
    assert page(conn, status=5) == []


def test_bad_arguments_are_refused(conn: Conn) -> None:
    bad: list[tuple[dict[str, Any], str]] = [
        ({"limit": 0}, "22023"),
        ({"limit": 1001}, "22023"),
        ({"status": 7}, "22023"),
        ({"job_type": 99}, "22023"),
        ({"dedupe_key": ""}, "22023"),
    ]
    for args, state in bad:
        with raises_sqlstate(state):
            page(conn, **args)


@pytest.mark.parametrize("analyzed", [False, True])
@pytest.mark.parametrize("status", [1, 2, 4, 5, 3, None])
def test_a_page_reads_no_history_whatever_the_statistics(
    conn: Conn, analyzed: bool, status: int | None
) -> None:
    # Ended jobs take fewer pages than live ones (written once, packed): twice the history.
    finish_history(conn, 2 * HISTORY)
    active_jobs(conn)
    conn.execute(
        "select pyjobq.job_cancel(array(select job_id from pyjobq.job where status = 1 limit 1))"
    )
    if analyzed:
        conn.execute("analyze pyjobq.job, pyjobq.job_history")
    pages = one(
        conn,
        "select sum(pg_relation_size(relid))::int / current_setting('block_size')::int"
        f" from ({HISTORY_LEAVES}) h",
    )
    scans, blocks = table_reads(conn)
    rows = page(conn, status=status, limit=20)
    scans_after, blocks_after = table_reads(conn)
    assert rows
    assert all(r[2] == status for r in rows) or status is None
    assert scans_after == scans
    # A listed job costs a few pages (its index entries' row versions, then the row itself);
    # the history is ten times the pages of a whole page of jobs.
    assert blocks_after - blocks <= 6 * 20 < pages / 10


def test_the_binding_pages_through_typed_rows(conn: Conn) -> None:
    q = JobQueue(conn)
    ids = [e.job_id for e in q.enqueue_many(JobType.OUTBOX, [{"n": n} for n in range(5)])]
    first = q.list_jobs(job_type=JobType.OUTBOX, limit=3)
    rest = q.list_jobs(job_type=JobType.OUTBOX, limit=3, after=first[-1].job_id)
    assert [j.job_id for j in first + rest] == ids[::-1]
    assert {(j.status, j.job_type_name) for j in first} == {(JobStatus.PENDING, "OUTBOX")}


def test_the_command_line_lists_a_page_and_the_next(dsn: str, conn: Conn) -> None:
    q = JobQueue(conn)
    ids = [e.job_id for e in q.enqueue_many(JobType.SEARCH, [{"n": n} for n in range(3)])]
    runner = CliRunner()
    first = runner.invoke(main, ["jobs", "--dsn", dsn, "--status", "pending", "--limit", "2"])
    assert first.exit_code == 0, first.output
    shown = [line.split()[0] for line in first.output.splitlines()]
    assert shown == [str(i) for i in ids[:0:-1]]
    rest = runner.invoke(main, ["jobs", "--dsn", dsn, "--after", shown[-1], "--json"])
    assert [json.loads(line)["job_id"] for line in rest.output.splitlines()] == [str(ids[0])]


def test_the_command_line_shows_the_exception_line_of_a_traceback(dsn: str, conn: Conn) -> None:
    q = JobQueue(conn)
    (job,) = q.enqueue_many(JobType.SEARCH, [{}], max_attempts=1)
    (claimed,) = q.claim("w1", 1)
    traceback = 'Traceback (most recent call last):\n  File "h.py", line 3\nRuntimeError: boom\n'
    q.fail(job.job_id, "w1", claimed.attempt, traceback)
    shown = CliRunner().invoke(main, ["jobs", "--dsn", dsn, "--status", "dead"])
    assert shown.exit_code == 0, shown.output
    assert shown.output.rstrip().endswith("RuntimeError: boom")


def test_a_redriven_job_tells_the_tries_of_its_budget_apart_from_its_claims(
    dsn: str, conn: Conn
) -> None:
    """After a redrive, attempts (the claim counter, the fencing token) goes on and the budget
    starts again: job_list and job_get say the tries spent of max_attempts (1/2, not 3/2), and
    job_list the error's last line; `pyjobq jobs` shows both."""
    q = JobQueue(conn)
    job_id = q.enqueue(JobType.SEARCH, {}, max_attempts=2).job_id
    traceback = 'Traceback (most recent call last):\n  File "h.py", line 3\nRuntimeError: {}\n'
    for n in range(2):
        (claimed,) = q.claim("w1", 1)
        q.fail(job_id, "w1", claimed.attempt, traceback.format(n), 0)
    assert q.redrive([job_id]) == [job_id]
    (claimed,) = q.claim("w1", 1)
    q.fail(job_id, "w1", claimed.attempt, traceback.format("after the redrive"), 60)
    (listed,) = q.list_jobs(job_type=JobType.SEARCH)
    got = q.get(job_id)
    assert got is not None
    assert (listed.attempts, listed.tries, listed.max_attempts) == (3, 1, 2)
    assert (got.attempts, got.tries) == (3, 1)
    assert listed.error_summary == "RuntimeError: after the redrive"
    shown = CliRunner().invoke(main, ["jobs", "--dsn", dsn])
    assert shown.exit_code == 0, shown.output
    assert " 1/2 " in shown.output
    assert shown.output.rstrip().endswith("RuntimeError: after the redrive")
