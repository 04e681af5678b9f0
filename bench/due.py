"""How late a job that becomes due later starts: from its ``run_after`` to its handler.

A job enqueued with a ``run_after`` in the future, or retried after a failure, is not
announced when it becomes due (no NOTIFY can fire at a time), so an idle worker has to know
when to claim again. On one throwaway server, one worker with its default settings
(``poll_interval`` 5 s, LISTEN on) handles two kinds of jobs, enqueued at once before it
starts:

- **delayed**: ``run_after`` spread at random over the next ``--spread`` seconds;
- **retried**: due now, its handler raises ``Retry`` on the first attempt with a delay spread
  the same way, so the second attempt becomes due later.

For each handler start it records the wall clock minus the ``run_after`` the claim returned
(the time the attempt became due; server and worker share the machine's clock), and prints
p50, p99 and the maximum per kind, then the calls per minute of each pyjobq function while the
worker sits idle afterwards for ``--idle`` seconds (``track_functions`` counts them).

``.venv/bin/python bench/due.py [--jobs 100] [--spread 20] [--idle 30]``
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import threading
import time
from datetime import datetime, timedelta

import psycopg

from pyjobq import ClaimedJob, JobQueue
from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import migrate
from pyjobq.worker import Retry, Worker

DELAYED, RETRIED = 1, 2  # the job type codes every install has (SEARCH, OUTBOX)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def report(kind: str, lateness: list[float]) -> None:
    ms = [1000 * s for s in lateness]
    print(
        f"| {kind} | {len(ms)} | {statistics.median(ms):.1f} | {percentile(ms, 0.99):.1f}"
        f" | {max(ms):.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100, help="jobs of each kind")
    parser.add_argument("--spread", type=float, default=20.0, help="seconds the due times span")
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of idle afterwards")
    args = parser.parse_args()
    logging.getLogger("pyjobq").setLevel(logging.ERROR)  # a log line per retry otherwise

    lateness: dict[int, list[float]] = {DELAYED: [], RETRIED: []}
    lock = threading.Lock()

    def started(job: ClaimedJob) -> None:
        late = time.time() - job.run_after.timestamp()
        if job.job_type == RETRIED and job.attempt == 1:
            raise Retry(delay_seconds=job.payload["retry_in"])
        with lock:
            lateness[job.job_type].append(late)

    with LocalPostgres(settings={"track_functions": "pl"}) as server:
        dsn = server.dsn()
        migrate(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            queue = JobQueue(conn)
            for _ in range(args.jobs):
                queue.enqueue(DELAYED, {}, run_after=_db_now(conn) + _later(args.spread))
                queue.enqueue(RETRIED, {"retry_in": _later(args.spread).total_seconds()})
        worker = Worker(dsn, {DELAYED: started, RETRIED: started})
        thread = threading.Thread(target=worker.run)
        thread.start()
        try:
            deadline = time.monotonic() + args.spread + 60
            while time.monotonic() < deadline:
                with lock:
                    if min(len(v) for v in lateness.values()) >= args.jobs:
                        break
                time.sleep(0.1)
            # The last completions are sent; a backend reports its function calls up to
            # 10 s late (pgstat's idle flush), so the busy minute is not counted as idle.
            time.sleep(12)
            idle_calls = _calls_over(dsn, args.idle)
        finally:
            worker.stop()
            thread.join(60)

    print("| jobs | n | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|")
    report("delayed", lateness[DELAYED])
    report("retried", lateness[RETRIED])
    per_minute = ", ".join(f"{name} {60 * n / args.idle:.1f}" for name, n in idle_calls.items())
    print(f"idle worker, calls per minute over {args.idle:.0f} s: {per_minute}")


def _later(spread: float) -> timedelta:
    return timedelta(seconds=random.uniform(0.5, spread))


def _db_now(conn: psycopg.Connection[tuple[datetime]]) -> datetime:
    row = conn.execute("select now()").fetchone()
    assert row is not None
    return row[0]


def _calls_over(dsn: str, seconds: float) -> dict[str, int]:
    """Calls of each public pyjobq function over ``seconds`` (track_functions counts them)."""
    query = (
        "select funcname, calls from pg_stat_user_functions"
        " where schemaname = 'pyjobq' and funcname like 'job%'"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select pg_stat_clear_snapshot()")
        before: dict[str, int] = dict(conn.execute(query).fetchall())
        time.sleep(seconds)
        conn.execute("select pg_stat_clear_snapshot()")
        after: dict[str, int] = dict(conn.execute(query).fetchall())
    calls = {name: n - before.get(name, 0) for name, n in after.items()}
    return {name: n for name, n in sorted(calls.items()) if n}


if __name__ == "__main__":
    main()
