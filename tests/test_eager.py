"""pyjobq.testing.run_pending, the eager mode of tests, and the discovery of a package's tasks."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pyjobq import JobQueue
from pyjobq.cli.work import load_handlers
from pyjobq.rows import ClaimedJob
from pyjobq.tasks import discover
from pyjobq.testing import run_pending
from pyjobq.worker import DeadLetter, Retry, Snooze
from tests.sqlhelp import one

Conn = psycopg.Connection[Any]
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "python"


def handler(job: ClaimedJob) -> dict[str, Any] | None:
    kind = job.payload["kind"]
    if kind == "retry-now":
        raise Retry(delay_seconds=0)
    if kind == "dead":
        raise DeadLetter("no use")
    if kind == "snooze":
        raise Snooze(60)
    if kind == "bug":
        raise KeyError("bug")
    if kind == "exit":
        sys.exit(3)  # fails its job, as in a worker: not the test run
    return {"ok": kind}


async def async_handler(job: ClaimedJob) -> dict[str, Any]:
    return {"async": job.payload["n"]}


def test_due_jobs_run_here_and_end_as_a_worker_ends_them(conn: Conn) -> None:
    q = JobQueue(conn)
    ids = {
        kind: q.enqueue(1, {"kind": kind}, max_attempts=2).job_id
        for kind in ("ok", "retry-now", "dead", "snooze", "bug", "exit")
    }
    ids["async"] = q.enqueue(2, {"n": 3}).job_id
    ran = run_pending(conn, {1: handler, "OUTBOX": async_handler})
    statuses = {r.job_id: r.status for r in ran}
    # retry-now ran twice: due again at once, then DEAD with its tries spent
    assert [r.job_id for r in ran].count(ids["retry-now"]) == 2
    assert statuses == {
        ids["ok"]: "DONE", ids["retry-now"]: "DEAD", ids["dead"]: "DEAD",
        ids["snooze"]: "PENDING", ids["bug"]: "PENDING", ids["exit"]: "PENDING",
        ids["async"]: "DONE",
    }  # fmt: skip
    assert one(conn, "select result from pyjobq.job_all where job_id = %s", (ids["ok"],)) == {
        "ok": "ok"
    }
    assert one(conn, "select result from pyjobq.job_all where job_type = 2") == {"async": 3}
    bug = next(r for r in ran if r.job_id == ids["bug"])
    assert bug.error is not None
    assert bug.error.splitlines()[-1] == "KeyError: 'bug'"
    exited = next(r for r in ran if r.job_id == ids["exit"])
    assert exited.error is not None
    assert exited.error.splitlines()[-1] == "SystemExit: 3"
    assert run_pending(conn, {1: handler, 2: async_handler}) == []  # nothing due now


def test_a_test_that_rolls_back_leaves_nothing(conn: Conn) -> None:
    with conn.transaction():
        JobQueue(conn).enqueue(1, {"kind": "ok"})
        assert [r.status for r in run_pending(conn, {1: handler})] == ["DONE"]
        assert one(conn, "select count(*) from pyjobq.job_all where status = 3") == 1
        raise psycopg.Rollback  # the test's rollback
    assert one(conn, "select count(*) from pyjobq.job_all") == 0


def test_only_the_types_asked_for_run(conn: Conn) -> None:
    q = JobQueue(conn)
    q.enqueue(1, {"kind": "ok"})
    q.enqueue(2, {"n": 1})
    assert [
        r.job_type for r in run_pending(conn, {1: handler, 2: async_handler}, job_types=[2])
    ] == [2]
    with pytest.raises(ValueError, match=r"job_types without a handler: \[2\]"):
        run_pending(conn, {1: handler}, job_types=[2])


def test_a_package_s_tasks_are_found_and_the_worker_loads_them(
    conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    for name in [m for m in sys.modules if m.split(".")[0] == "shop_tasks"]:
        monkeypatch.delitem(sys.modules, name)
    found = discover("shop_tasks")
    assert sorted(found.handlers()) == ["SHOP_INVOICE", "SHOP_RECEIPT"]
    assert sorted(load_handlers("shop_tasks")) == ["SHOP_INVOICE", "SHOP_RECEIPT"]
    assert sorted(load_handlers("shop_tasks:tasks")) == ["SHOP_INVOICE", "SHOP_RECEIPT"]
    found.install(conn)
    receipt = sys.modules["shop_tasks.emails"].receipt
    receipt.enqueue(conn, 7, "ada@example.com")
    (ran,) = run_pending(conn, found.handlers())
    assert ran.status == "DONE"
    assert one(conn, "select result from pyjobq.job_all") == {"receipt": 7, "to": "ada@example.com"}
