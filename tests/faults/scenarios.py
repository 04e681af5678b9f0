"""The fault scenarios. Each takes the DSN of a migrated database (and, for a crash, a way to
crash its server), runs a workload through real Workers while the fault happens, waits for the
queue to drain by itself and returns figures; harness.assert_sound() is the verdict.

``scale`` multiplies the workload (1 keeps the test suite fast)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from pyjobq import JobQueue
from tests.faults.harness import (
    EFFECTS,
    MAX_ATTEMPTS,
    Producer,
    Recorder,
    drained,
    finished,
    make_worker,
    retrying,
    verify,
)
from tests.workerhelp import Running, wait_for

Figures = dict[str, Any]


def prepare(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(EFFECTS)
        # The history's day partitions, before any job ends: the workers' first reap would
        # otherwise make them and move the jobs ended so far out of the default partition, and
        # a reader planned before that attach (the scenarios count DONE jobs) misses them.
        conn.execute("select pyjobq.job_history_maintain()")


def start_workers(stack: ExitStack, dsn: str, count: int, concurrency: int, **options: Any) -> None:
    """``count`` running Workers whose handler records each attempt (``sleep`` seconds each);
    the other ``options`` go to the Worker. Stopped when ``stack`` closes."""
    sleep = options.pop("sleep", 0.0)
    for _ in range(count):
        recorder = Recorder(dsn, concurrency, sleep).open()
        stack.callback(recorder.close)
        worker = Running(make_worker(dsn, recorder, concurrency, **options)).start()
        stack.callback(worker.stop)


def wait_drained(dsn: str, acknowledged: list[UUID], patience: float = 90.0) -> float:
    started = time.monotonic()
    wait_for(lambda: drained(dsn, acknowledged), "the queue to drain", patience)
    return time.monotonic() - started


# Jobs enqueued in one batch that commits just after the fault: however fast the machine drained
# the rest, these are left to do, so recovery is always measured.
PROBE = 100
# Backend kills, spread over the drain by progress: kill k of KILLS comes when k/(KILLS + 2) of
# the jobs have finished, and the last one with the probe batch.
KILLS = 8


def server_crash(dsn: str, crash: Callable[[], None], scale: float = 1.0) -> Figures:
    """PostgreSQL killed (immediate shutdown, crash recovery on start) mid-run."""
    prepare(dsn)
    total = int(1500 * scale)
    with ExitStack() as stack:
        start_workers(stack, dsn, 2, 4)
        producer = Producer(dsn, batch=50, interval=0.02, limit=total).start()
        stack.callback(producer.stop)
        wait_for(lambda: finished(dsn) >= total // 3, "a third of the jobs to finish")
        done_before = set(_done_ids(dsn))
        crashed = time.monotonic()
        crash()
        restarted = time.monotonic()
        with connect_retrying(dsn) as conn:
            probe = Probe.enqueue(conn)
        wait_for(producer.done, "the producer to enqueue every job", 120)
        drain = wait_drained(dsn, producer.acknowledged + probe.job_ids)
    figures = verify(dsn, producer.acknowledged + probe.job_ids)
    figures.update(
        scenario="server crash (pg_ctl restart -m immediate)",
        done_before_crash=len(done_before),
        done_before_crash_kept=len(done_before & set(_done_ids(dsn))),
        producer_errors=len(producer.errors),
        outage_seconds=round(restarted - crashed, 2),
        recovery_seconds=probe.recovery_seconds(dsn),
        drain_seconds=round(drain, 2),
    )
    return figures


def _done_ids(dsn: str) -> list[Any]:
    return [r[0] for r in retrying(dsn, "select job_id from pyjobq.job_all where status = 3")]


def connect_retrying(dsn: str) -> psycopg.Connection[Any]:
    """A connection as soon as the server accepts one again."""
    deadline = time.monotonic() + 120
    while True:
        try:
            return psycopg.connect(dsn, autocommit=True, connect_timeout=2)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@dataclass
class Probe:
    """PROBE jobs committed right after a fault, and when (on the database clock)."""

    job_ids: list[UUID]
    committed_at: datetime
    fault_result: int = 0

    @classmethod
    def enqueue(
        cls,
        conn: psycopg.Connection[Any],
        fault: Callable[[psycopg.Connection[Any]], int] | None = None,
    ) -> Probe:
        """Enqueue the batch in one transaction on ``conn`` (autocommit), run ``fault`` in that
        transaction too, and commit: no worker can see the batch before the fault."""
        with conn.transaction():
            rows = JobQueue(conn).enqueue_many(1, [{}] * PROBE, max_attempts=MAX_ATTEMPTS)
            result = fault(conn) if fault is not None else 0
            clock = conn.execute("select clock_timestamp()").fetchone()
        assert clock is not None
        return cls([r.job_id for r in rows], clock[0], result)

    def recovery_seconds(self, dsn: str) -> float:
        """Seconds from the commit until a worker ran the first job of the batch."""
        first: datetime | None = retrying(
            dsn, "select min(at) from fault_effects where job_id = any(%s)", (self.job_ids,)
        )[0][0]
        assert first is not None, "no job of the batch enqueued after the fault ever ran"
        return round((first - self.committed_at).total_seconds(), 2)


def backend_kills(dsn: str, scale: float = 1.0) -> Figures:
    """pg_terminate_backend on every other session of the database, again and again."""
    prepare(dsn)
    total = int(1500 * scale)
    kills = 0
    with ExitStack() as stack:
        start_workers(stack, dsn, 2, 4)
        producer = Producer(dsn, batch=50, interval=0.02, limit=total).start()
        stack.callback(producer.stop)
        killer = stack.enter_context(psycopg.connect(dsn, autocommit=True))
        for k in range(1, KILLS):

            def enough_finished(k: int = k) -> bool:
                return finished(dsn) >= k * total // (KILLS + 2)

            wait_for(enough_finished, f"{k}/{KILLS + 2} of the jobs to finish", 120)
            kills += terminate_other_sessions(killer)
        probe = Probe.enqueue(killer, terminate_other_sessions)
        kills += probe.fault_result
        wait_for(producer.done, "the producer to enqueue every job", 120)
        drain = wait_drained(dsn, producer.acknowledged + probe.job_ids)
    figures = verify(dsn, producer.acknowledged + probe.job_ids)
    figures.update(
        scenario=f"backends terminated {KILLS} times (pg_terminate_backend) across the drain",
        backends_killed=kills,
        producer_errors=len(producer.errors),
        recovery_seconds=probe.recovery_seconds(dsn),
        drain_seconds=round(drain, 2),
    )
    return figures


def terminate_other_sessions(conn: psycopg.Connection[Any]) -> int:
    rows = conn.execute(
        "select pg_terminate_backend(pid) from pg_stat_activity"
        " where datname = current_database() and pid <> pg_backend_pid()"
        " and backend_type = 'client backend'"
    ).fetchall()
    return sum(1 for (ok,) in rows if ok)


def connection_exhaustion(dsn: str, scale: float = 1.0) -> Figures:
    """Every free connection slot held by idle sessions while a worker drains."""
    prepare(dsn)
    first = int(500 * scale)
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = [
            r.job_id
            for r in JobQueue(conn).enqueue_many(1, [{}] * first, max_attempts=MAX_ATTEMPTS)
        ]
    hogs: list[psycopg.Connection[Any]] = []
    refused: str | None = None
    pool_error: str | None = None
    with ExitStack() as stack:
        start_workers(stack, dsn, 1, 4)
        # A producer pool that must fail clearly (PoolTimeout), not hang, while slots are gone.
        pool = ConnectionPool(
            dsn, min_size=0, max_size=2, timeout=1.0, kwargs={"autocommit": True}, open=True
        )
        stack.callback(pool.close)
        try:
            while len(hogs) < 1000:
                hogs.append(psycopg.connect(dsn, autocommit=True, connect_timeout=5))
        except psycopg.OperationalError as e:
            refused = type(e).__name__
        held = len(hogs)
        try:
            # The worker keeps draining on the connections it already has.
            wait_for(lambda: finished_on(hogs[0]) >= first, "the first jobs to drain", 90)
            try:
                JobQueue(pool).enqueue(1, {})
            except PoolTimeout as e:
                pool_error = type(e).__name__
        finally:
            for hog in hogs:
                hog.close()
        released = time.monotonic()
        # Closed sessions free their slots once their backends exit: retry with backoff.
        retries = 0
        while True:
            try:
                more = JobQueue(pool).enqueue_many(1, [{}] * first, max_attempts=MAX_ATTEMPTS)
                break
            except PoolTimeout:
                retries += 1
                assert retries < 20, "the producer pool did not recover"
                time.sleep(0.1 * retries)
        producer_back = time.monotonic() - released
        ids += [r.job_id for r in more]
        wait_for(lambda: finished(dsn) >= len(ids), "the second batch to drain", 90)
        drain = time.monotonic() - released
    figures = verify(dsn, ids)
    figures.update(
        scenario="connection slots exhausted by idle sessions",
        idle_connections_held=held,
        new_connection_error=refused,
        producer_pool_error=pool_error,
        producer_back_after_seconds=round(producer_back, 2),
        drain_after_release_seconds=round(drain, 2),
    )
    return figures


def finished_on(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("select count(*) from pyjobq.job_all where status in (3, 4)").fetchone()
    return row[0] if row else 0


def pinned_horizon(dsn: str, scale: float = 1.0) -> Figures:
    """An idle-in-transaction session pins xmin and REPEATABLE READ readers run during a drain."""
    prepare(dsn)
    n = int(2000 * scale)

    def drain_batch() -> float:
        with psycopg.connect(dsn, autocommit=True) as conn:
            JobQueue(conn).enqueue_many(1, [{}] * n, max_attempts=MAX_ATTEMPTS)
            before = finished_on(conn)
            started = time.monotonic()
            wait_for(lambda: finished_on(conn) >= before + n, "the batch to drain", 120)
            return n / (time.monotonic() - started)

    # The figures a REPEATABLE READ snapshot fixes: the DONE estimate of a large table follows
    # ANALYZE and the table's size, which no snapshot holds still.
    tally = "select sum(jobs) from pyjobq.job_counts() where status <> 3"
    reader_errors: list[str] = []
    inconsistent: list[tuple[Any, Any]] = []
    stop = threading.Event()

    def reader() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                try:
                    with conn.transaction():
                        conn.execute("set transaction isolation level repeatable read")
                        a = conn.execute(tally).fetchone()
                        time.sleep(0.02)
                        b = conn.execute(tally).fetchone()
                        if a != b:
                            inconsistent.append((a, b))
                except psycopg.Error as e:
                    reader_errors.append(type(e).__name__)

    with ExitStack() as stack:
        start_workers(stack, dsn, 1, 8)
        baseline = drain_batch()
        pin = psycopg.connect(dsn)
        stack.callback(pin.close)
        pin.execute("select txid_current()")  # idle in transaction from here on, xmin pinned
        snap = psycopg.connect(dsn)
        stack.callback(snap.close)
        snap.execute("set transaction isolation level repeatable read")
        seen = snap.execute("select count(*), sum(attempts) from pyjobq.job_all").fetchone()
        readers = [threading.Thread(target=reader, daemon=True) for _ in range(2)]
        for t in readers:
            t.start()
        pinned = drain_batch()
        stop.set()
        for t in readers:
            t.join(10)
        still = snap.execute("select count(*), sum(attempts) from pyjobq.job_all").fetchone()
        with psycopg.connect(dsn, autocommit=True) as conn:
            dead_tuples = conn.execute(
                "select n_dead_tup from pg_stat_user_tables where relid = 'pyjobq.job'::regclass"
            ).fetchone()
        snap.rollback()
        pin.rollback()
    ids = [r[0] for r in _all_ids(dsn)]
    figures = verify(dsn, ids)
    figures.update(
        scenario="xmin pinned by an idle transaction, REPEATABLE READ readers during the drain",
        jobs_per_second_baseline=round(baseline),
        jobs_per_second_pinned=round(pinned),
        dead_tuples_after=dead_tuples[0] if dead_tuples else None,
        snapshot_unchanged=seen == still,
        reader_inconsistencies=len(inconsistent),
        reader_errors=sorted(set(reader_errors)),
    )
    return figures


def _all_ids(dsn: str) -> list[tuple[Any, ...]]:
    return retrying(dsn, "select job_id from pyjobq.job_all")


def overload(dsn: str, scale: float = 1.0) -> Figures:
    """Producers 1.5x faster than the workers can go, then the producers stop."""
    prepare(dsn)
    seconds = 3.0 * scale
    # 4 handler threads x 10 ms = at most 400 jobs/s; the producer offers 600/s.
    with ExitStack() as stack:
        start_workers(stack, dsn, 1, 4, sleep=0.01)
        producer = Producer(dsn, batch=30, interval=0.05).start()
        stack.callback(producer.stop)
        time.sleep(seconds)
        producer.stop()
        stopped = time.monotonic()
        offered = len(producer.acknowledged) / seconds
        backlog, oldest = _backlog(dsn)
        wait_for(lambda: drained(dsn, producer.acknowledged), "the backlog to drain", 120)
        recovery = time.monotonic() - stopped
        after_backlog, after_oldest = _backlog(dsn)
    figures = verify(dsn, producer.acknowledged)
    figures.update(
        scenario="sustained overload (producer 1.5x the worker capacity), then recovery",
        offered_jobs_per_second=round(offered),
        worker_capacity_jobs_per_second=400,
        backlog_at_peak=backlog,
        oldest_due_seconds_at_peak=round(oldest, 2),
        seconds_to_drain_backlog=round(recovery, 2),
        backlog_after=after_backlog,
        oldest_due_seconds_after=after_oldest,
    )
    return figures


def _backlog(dsn: str) -> tuple[int, float]:
    row = retrying(
        dsn,
        "select sum(jobs), max(oldest_due_seconds) from pyjobq.job_counts() where status = 1",
    )[0]
    return int(row[0] or 0), float(row[1] or 0.0)
