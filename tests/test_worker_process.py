"""Worker processes: a SIGKILLed one loses its jobs to the others, a SIGTERMed one drains."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pyjobq import JobQueue, JobType
from tests.workerhelp import prepare, spawn_worker, statuses, wait_for, wait_until_sessions_end

Conn = psycopg.Connection[Any]


@pytest.fixture
def db(conn: Conn) -> Conn:
    prepare(conn)
    return conn


def effects(db: Conn) -> int:
    row = db.execute("select count(*) from effects").fetchone()
    return 0 if row is None else int(row[0])


def test_sigkilled_worker_jobs_are_reaped_and_finished_once_by_another(
    dsn: str, db: Conn, tmp_path: Path
) -> None:
    JobQueue(db).enqueue_many(JobType.SEARCH, [{"sleep": 0.05} for _ in range(200)])
    victim = spawn_worker(dsn, tmp_path, "victim", "--concurrency", "4", "--lease", "3600")
    try:
        wait_for(lambda: effects(db) >= 20, "the victim to make progress")
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(30) == -signal.SIGKILL
    finally:
        victim.kill()
    wait_until_sessions_end(db, "victim")
    held = db.execute("select job_id from pyjobq.job_all where status = 2").fetchall()
    assert held, "the victim died holding jobs"
    # Its hour-long leases run out now, instead of in an hour.
    db.execute("update pyjobq.job set lease_until = now() - interval '1 second' where status = 2")
    survivor = spawn_worker(
        dsn, tmp_path, "survivor", "--concurrency", "8", "--reap-interval", "0.2"
    )
    try:
        wait_for(
            lambda: (
                db.execute(
                    "select count(*) from pyjobq.job_all where status = 1 and attempts = 1"
                ).fetchone()
                == (len(held),)
            ),
            "the survivor to reap every expired lease",
        )
        # Skip the retry backoff of the reaped jobs.
        db.execute("update pyjobq.job set run_after = now() where status = 1")
        wait_for(lambda: statuses(db) == {3: 200}, "every job DONE")
        survivor.send_signal(signal.SIGTERM)
        assert survivor.wait(30) == 0
    finally:
        survivor.kill()
    metrics = json.loads((tmp_path / "survivor.json").read_text())
    assert metrics["reaped"] == len(held)
    reran = db.execute(
        "select count(*) from pyjobq.job_all where attempts = 2 and job_id = any(%s)",
        ([h[0] for h in held],),
    ).fetchone()
    assert reran == (len(held),)
    # The effects key is (job_id, attempt): no attempt ran twice, and every DONE job's
    # final attempt ran exactly once.
    final = db.execute(
        "select count(*) from pyjobq.job_all j join effects e "
        "on e.job_id = j.job_id and e.attempt = j.attempts"
    ).fetchone()
    assert final == (200,)


def test_sigterm_drains_running_jobs_and_releases_prefetched_ones(
    dsn: str, db: Conn, tmp_path: Path
) -> None:
    JobQueue(db).enqueue_many(JobType.SEARCH, [{"sleep": 0.5} for _ in range(20)])
    worker = spawn_worker(dsn, tmp_path, "w", "--concurrency", "2", "--poll-interval", "3600")
    try:
        wait_for(lambda: effects(db) >= 2, "two jobs running")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    finally:
        worker.kill()
    metrics = json.loads((tmp_path / "w.json").read_text())
    counts = statuses(db)
    assert 2 not in counts  # nothing left RUNNING
    assert counts[3] == effects(db) == metrics["completed"]  # everything started finished
    assert metrics["released"] >= 1  # the prefetched ones were given back...
    unused = db.execute(
        "select count(*) from pyjobq.job_all where status = 1 and attempts = attempts_refunded"
    )
    assert unused.fetchone() == (counts[1],)  # ...with no try used up


def test_a_cancel_reaches_the_handler_in_a_worker_process(
    dsn: str, db: Conn, tmp_path: Path
) -> None:
    """job_cancel from another session; the worker process learns it at its next heartbeat, its
    sync handler sees is_cancelled() and returns, nothing it returns is recorded, and the worker
    carries on until asked to stop."""
    job = JobQueue(db).enqueue(JobType.OUTBOX).job_id
    worker = spawn_worker(dsn, tmp_path, "cancelled", "--lease", "3")
    try:
        wait_for(lambda: effects(db) == 1, "the handler to start")
        assert JobQueue(db).cancel([job])[0].outcome == "cancelled_running"
        wait_for(
            lambda: db.execute("select count(*) from effects where attempt < 0").fetchone() == (1,),
            "the handler to see the cancel",
        )
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 0
    finally:
        worker.kill()
    row = db.execute("select status, result from pyjobq.job_all where job_id = %s", (job,))
    assert row.fetchone() == (5, None)  # CANCELLED, and nothing the attempt returned
    metrics = json.loads((tmp_path / "cancelled.json").read_text())
    assert (metrics["cancelled"], metrics["completed"]) == (1, 0)
