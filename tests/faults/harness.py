"""What every fault scenario uses: a recording handler, a worker thread, a producer, checks."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pyjobq import ClaimedJob, JobQueue
from pyjobq.worker import Worker

# Each run of a handler records (job_id, attempt). The primary key turns a second run of the
# same attempt into a row in fault_duplicates instead of an error, so it is counted, not hidden.
EFFECTS = """
create table if not exists fault_effects (
  job_id uuid not null,
  attempt int not null,
  at timestamptz not null default clock_timestamp(),
  primary key (job_id, attempt)
);
create table if not exists fault_duplicates (job_id uuid not null, attempt int not null);
"""

# Faults make the database unreachable for a while: give every job room to be retried.
MAX_ATTEMPTS = 25

log = logging.getLogger("tests.faults")


def retrying(dsn: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one read on a fresh connection, retrying while the server is away."""
    for tries in range(400):
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
                return conn.execute(query, params).fetchall()
        except psycopg.OperationalError:
            time.sleep(min(0.5, 0.02 * (tries + 1)))
    raise AssertionError("the server did not come back")


class Recorder:
    """A sync handler that records each run in fault_effects through its own small pool
    (``connect``: more arguments for psycopg.connect on each of its connections)."""

    def __init__(self, dsn: str, size: int, sleep: float = 0.0, **connect: Any) -> None:
        self.sleep = sleep
        self.pool = ConnectionPool(
            dsn,
            min_size=size,
            max_size=size,
            kwargs={"autocommit": True, **connect},
            timeout=5.0,
            # reconnect_timeout stays psycopg_pool's default: with 0 the pool gives up at the
            # first refused reconnection, and a handler already waiting for a connection then
            # waits its whole timeout with nothing left trying to connect.
            check=ConnectionPool.check_connection,
            open=False,
        )

    def open(self) -> Recorder:
        self.pool.open(wait=True, timeout=30.0)
        return self

    def close(self) -> None:
        self.pool.close(timeout=1.0)

    def __call__(self, job: ClaimedJob) -> dict[str, Any]:
        with self.pool.connection() as conn:
            row = conn.execute(
                "insert into fault_effects (job_id, attempt) values (%s, %s)"
                " on conflict do nothing returning 1",
                (job.job_id, job.attempt),
            ).fetchone()
            if row is None:
                conn.execute(
                    "insert into fault_duplicates values (%s, %s)", (job.job_id, job.attempt)
                )
        if self.sleep:
            time.sleep(self.sleep)
        return {"attempt": job.attempt}


def make_worker(
    source: str | AsyncConnectionPool, handler: Recorder, concurrency: int, **options: Any
) -> Worker:
    settings: dict[str, Any] = {
        "lease_seconds": 3,
        "reap_interval": 0.5,
        "poll_interval": 0.2,
        "shutdown_timeout": 5.0,
    }
    settings.update(options)
    return Worker(source, {1: handler}, concurrency=concurrency, **settings)


@dataclass
class Producer:
    """Enqueues ``batch`` jobs every ``interval`` seconds until stopped, keeping every id whose
    enqueue was acknowledged (the call returned, so the autocommit transaction committed)."""

    dsn: str
    batch: int
    interval: float
    limit: int | None = None
    acknowledged: list[UUID] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Producer:
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)

    def done(self) -> bool:
        return self.limit is not None and len(self.acknowledged) >= self.limit

    def _main(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        next_at = time.monotonic()
        while not self._stop.is_set() and not self.done():
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=2)
                n = self.batch
                if self.limit is not None:
                    n = min(n, self.limit - len(self.acknowledged))
                rows = JobQueue(conn).enqueue_many(1, [{}] * n, max_attempts=MAX_ATTEMPTS)
                self.acknowledged.extend(r.job_id for r in rows)
            except psycopg.Error as e:
                self.errors.append(type(e).__name__)
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.05)
                continue
            next_at += self.interval
            time.sleep(max(0.0, next_at - time.monotonic()))
        if conn is not None:
            conn.close()


def finished(dsn: str) -> int:
    count: int = retrying(dsn, "select count(*) from pyjobq.job_all where status in (3, 4)")[0][0]
    return count


def drained(dsn: str, acknowledged: list[UUID]) -> bool:
    """Every acknowledged job finished, and nothing else is left: a batch whose commit
    went through but whose acknowledgement was lost in a fault is in the table too."""
    done, total = retrying(
        dsn, "select count(*) filter (where status in (3, 4)), count(*) from pyjobq.job_all"
    )[0]
    return bool(done >= len(acknowledged) and done == total)


def verify(dsn: str, acknowledged: list[UUID]) -> dict[str, Any]:
    """Check the end state and return the figures: every acknowledged job is in the table and
    DONE or DEAD, every DONE job's final attempt ran, and no attempt ran twice."""
    rows = retrying(dsn, "select job_id, status, attempts from pyjobq.job_all")
    status = {r[0]: (r[1], r[2]) for r in rows}
    effects = retrying(dsn, "select job_id, attempt from fault_effects")
    ran = {(r[0], r[1]) for r in effects}
    runs_per_job: dict[UUID, int] = {}
    for job_id, _ in effects:
        runs_per_job[job_id] = runs_per_job.get(job_id, 0) + 1
    duplicates = retrying(dsn, "select count(*) from fault_duplicates")[0][0]
    return {
        "jobs": len(status),
        "acknowledged": len(acknowledged),
        "jobs_lost": sum(1 for j in acknowledged if j not in status),
        "unfinished": sum(1 for s, _ in status.values() if s not in (3, 4)),
        "done": sum(1 for s, _ in status.values() if s == 3),
        "dead": sum(1 for s, _ in status.values() if s == 4),
        "double_completions": duplicates,
        "done_without_run": sum(1 for j, (s, a) in status.items() if s == 3 and (j, a) not in ran),
        "re_executions": sum(n - 1 for n in runs_per_job.values()),
    }


def assert_sound(figures: dict[str, Any]) -> None:
    assert figures["jobs_lost"] == 0, figures
    assert figures["unfinished"] == 0, figures
    assert figures["double_completions"] == 0, figures
    assert figures["done_without_run"] == 0, figures
    assert figures["done"] + figures["dead"] == figures["jobs"], figures
