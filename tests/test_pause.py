"""Pausing a job type (job_type_pause, job_type_resume): its jobs stay PENDING and no claim that
starts after the pause takes one, whatever types it asks for; the running ones finish; resuming
gives them back to the claims. Admins only, audited."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from pyjobq import JobQueue
from pyjobq.cli import main
from tests.sqlhelp import one, raises_sqlstate, run_threads

Conn = psycopg.Connection[Any]


def claimed_types(q: JobQueue, limit: int = 10, types: list[int] | None = None) -> list[int]:
    return sorted(j.job_type for j in q.claim("w", limit=limit, job_types=types))


def test_a_paused_type_s_jobs_wait_until_it_is_resumed(conn: Conn) -> None:
    q = JobQueue(conn)
    q.enqueue_many(1, [{}] * 3)
    q.enqueue_many(2, [{}] * 2)
    running = q.claim("w", limit=1, job_types=[1])
    assert q.type_pause(1)
    assert not q.type_pause(1)  # paused already
    assert q.enqueue(1, {}).created  # enqueues go on
    assert claimed_types(q) == [2, 2]
    assert claimed_types(q, types=[1]) == []
    assert one(conn, "select pyjobq.job_next_due(null)") is None  # nothing due for a worker
    (job,) = running  # a job running when its type was paused finishes
    q.complete(job.job_id, "w", job.attempt, None, job.lease_token)
    (policy,) = [p for p in q.type_policies() if p.job_type == 1]
    assert policy.paused_at is not None
    assert q.type_resume(1)
    assert not q.type_resume(1)
    assert claimed_types(q) == [1, 1, 1]
    assert [p.paused_at for p in q.type_policies() if p.job_type == 1] == [None]
    audit = conn.execute("select action, detail from pyjobq.audit_log order by audit_id").fetchall()
    assert audit == [("pause", {"job_type": 1}), ("resume", {"job_type": 1})]


def test_a_claim_under_repeatable_read_that_predates_the_pause_fails_rather_than_claims(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    q = JobQueue(conn)
    q.enqueue_many(1, [{}] * 2)
    worker = make_conn()
    worker.autocommit = False
    worker.execute("set transaction isolation level repeatable read")
    worker.execute("select 1")  # its snapshot: before the pause
    assert q.type_pause(1)
    with raises_sqlstate("40001"):
        worker.execute("select * from pyjobq.job_claim('w', 10)")
    worker.rollback()
    assert JobQueue(worker).claim("w", limit=10) == []
    worker.rollback()


def test_only_admins_pause_and_bad_types_are_refused(
    conn: Conn, login_role: Callable[..., str]
) -> None:
    for role in ("pyjobq_producer", "pyjobq_worker", "pyjobq_observer"):
        with (
            psycopg.connect(login_role(role), autocommit=True) as other,
            raises_sqlstate("42501"),
        ):
            other.execute("select pyjobq.job_type_pause(1)")
    with psycopg.connect(login_role("pyjobq_admin"), autocommit=True) as admin:
        assert one(admin, "select pyjobq.job_type_pause(1)") is True
        assert one(admin, "select pyjobq.job_type_resume(1)") is True
    with raises_sqlstate("22004"):
        conn.execute("select pyjobq.job_type_pause(null)")
    with raises_sqlstate("22023"):
        conn.execute("select pyjobq.job_type_resume(0)")
    assert one(conn, "select count(*) from pyjobq.job_type where paused_at is not null") == 0


JOBS = 600


@pytest.mark.slow
def test_claimers_running_take_nothing_of_a_type_from_its_pause_until_its_resume(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    """Four claimers take jobs of two types, enqueued interleaved, as fast as they can; once
    fifty claims have been made, type 1 is paused, and once forty more have been sent, resumed.
    No claim sent after the pause returned and done before the resume was sent takes a job of
    type 1; every job is claimed exactly once in the end."""
    q = JobQueue(conn)
    for _ in range(JOBS // 50):
        q.enqueue_many(1, [{}] * 50)
        q.enqueue_many(2, [{}] * 50)
    lock = threading.Lock()
    claims: list[tuple[float, float, list[int]]] = []  # (sent, returned, types claimed)
    window: dict[str, float] = {}
    deadline = time.monotonic() + 60

    def claimer() -> None:
        c = JobQueue(make_conn())
        while time.monotonic() < deadline:
            sent = time.monotonic()
            jobs = c.claim("w", limit=3)
            with lock:
                claims.append((sent, time.monotonic(), [j.job_type for j in jobs]))
            if not jobs and sent > window.get("resumed", deadline):
                return  # sent after the resume, and nothing left

    def claims_sent_after(at: float, count: int) -> None:
        while sum(1 for sent, _, _ in list(claims) if sent > at) < count:
            assert time.monotonic() < deadline, "the claimers stopped claiming"
            time.sleep(0.001)

    def operator() -> None:
        claims_sent_after(0, 50)
        assert q.type_pause(1)
        window["paused"] = time.monotonic()
        claims_sent_after(window["paused"], 40)
        window["resuming"] = time.monotonic()
        assert q.type_resume(1)
        window["resumed"] = time.monotonic()

    run_threads([claimer] * 4 + [operator])
    while_paused = [
        types
        for sent, done, types in claims
        if window["paused"] < sent and done < window["resuming"]
    ]
    assert len(while_paused) > 10, "the claimers did not run while the type was paused"
    assert all(1 not in types for types in while_paused)
    assert any(2 in types for types in while_paused)
    taken = Counter(t for _, _, types in claims for t in types)
    assert taken == {1: JOBS, 2: JOBS}
    assert one(conn, "select count(distinct job_id) from pyjobq.job where status = 2") == 2 * JOBS


def test_the_command_line_pauses_shows_and_resumes_a_type(dsn: str, conn: Conn) -> None:
    runner = CliRunner()
    paused = runner.invoke(main, ["types", "pause", "SEARCH", "--dsn", dsn])
    assert paused.exit_code == 0, paused.output
    assert paused.output == "SEARCH\tpaused\n"
    listed = runner.invoke(main, ["types", "--dsn", dsn])
    assert listed.output.splitlines()[0].startswith("1\tSEARCH\tpaused since ")
    assert listed.output.splitlines()[1] == "2\tOUTBOX"
    again = runner.invoke(main, ["types", "pause", "1", "--dsn", dsn])
    assert again.output == "1\talready paused\n"
    resumed = runner.invoke(main, ["types", "resume", "SEARCH", "--dsn", dsn])
    assert resumed.output == "SEARCH\tresumed\n"
    assert one(conn, "select count(*) from pyjobq.job_type where paused_at is not null") == 0
