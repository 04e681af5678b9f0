"""What dependencies and batches cost: drains of graphs and batches against the plain drain.

On one throwaway server, one in-process worker (concurrency ``--workers``, its defaults
otherwise) drains ``--jobs`` no-op jobs in each shape, in rotation, ``--repeat`` times:

- **plain**: ``--jobs`` jobs, no parents, no batch (what every other job pays);
- **fan-in**: ``--jobs`` parents and one child that names them all, enqueued after them
  (``job_enqueue(p_depends_on)``): the child runs once the last parent is DONE;
- **fan-out**: one parent and ``--jobs`` children naming it (``job_enqueue_many`` with
  ``p_depends_on``): its completion makes them all PENDING at once;
- **chains**: ``--jobs`` jobs as chains of 10, each naming the one before (one
  ``job_enqueue_many`` call per chain, by position);
- **batch**: ``--jobs`` jobs in one batch with a ``success`` callback, closed after the
  enqueue: every completion counts in the batch row.

For each it prints the median jobs/s of the drain (from the first claim to the last
completion, the callback or child included), its range, and the ratio to the plain drain of
the same round; and the enqueue's time. Then, on a session of its own, the cost of one
completion: ``job_complete`` of a job with no dependant, with one, and with 100 WAITING
dependants that it makes PENDING, each the median of ``--completions`` calls, in
microseconds, the transaction included.

``.venv/bin/python bench/dependencies.py [--jobs 10000] [--workers 8] [--repeat 3]
[--completions 300] [--shapes plain,fan-in,...]``

``--shapes plain --completions 0`` runs only what any version of pyjobq can run: with
``PYTHONPATH`` at another checkout, the plain drain of that version (its package and its
migrations), for a same-machine comparison run by run.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import threading
import time
from collections.abc import Callable

import psycopg
from psycopg import sql

from pyjobq import ClaimedJob, JobQueue
from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import migrate
from pyjobq.worker import Worker

JOB_TYPE = 1
CHAIN = 10


def noop(job: ClaimedJob) -> None:
    return None


def enqueue_plain(q: JobQueue, jobs: int) -> int:
    for first in range(0, jobs, 10000):
        q.enqueue_many(JOB_TYPE, [{}] * min(10000, jobs - first))
    return jobs


def enqueue_fan_in(q: JobQueue, jobs: int) -> int:
    parents = [e.job_id for e in q.enqueue_many(JOB_TYPE, [{}] * jobs)]
    q.enqueue(JOB_TYPE, {"fan": "in"}, depends_on=parents)
    return jobs + 1


def enqueue_fan_out(q: JobQueue, jobs: int) -> int:
    parent = q.enqueue(JOB_TYPE, {"fan": "out"}).job_id
    q.enqueue_many(JOB_TYPE, [{}] * jobs, depends_on=[[parent]] * jobs)
    return jobs + 1


def enqueue_chains(q: JobQueue, jobs: int) -> int:
    rows: list[list[int] | None] = [None, *([i] for i in range(1, CHAIN))]
    for _ in range(jobs // CHAIN):
        q.enqueue_many(JOB_TYPE, [{}] * CHAIN, depends_on=rows)
    return jobs // CHAIN * CHAIN


def enqueue_batch(q: JobQueue, jobs: int) -> int:
    with q.batch(on_success=(JOB_TYPE, {"batch": "done"})) as batch:
        for first in range(0, jobs, 10000):
            q.enqueue_many(JOB_TYPE, [{}] * min(10000, jobs - first), batch_id=batch)
    return jobs + 1


SHAPES: dict[str, Callable[[JobQueue, int], int]] = {
    "plain": enqueue_plain,
    "fan-in": enqueue_fan_in,
    "fan-out": enqueue_fan_out,
    "chains of 10": enqueue_chains,
    "batch with a callback": enqueue_batch,
}


def empty(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """No jobs, edges or batches (the last two where the schema has them)."""
    conn.execute("truncate pyjobq.job, pyjobq.job_history")
    for table in ("job_edge", "job_batch"):
        if conn.execute("select to_regclass(%s) is not null", (f"pyjobq.{table}",)).fetchone() == (
            True,
        ):
            conn.execute(sql.SQL("truncate {}").format(sql.Identifier("pyjobq", table)))


def drain(dsn: str, shape: str, jobs: int, workers: int) -> tuple[float, float]:
    """(jobs/s of the drain, seconds of the enqueue) of one shape."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        empty(conn)
        conn.execute("vacuum analyze pyjobq.job, pyjobq.job_history")
        started = time.perf_counter()
        total = SHAPES[shape](JobQueue(conn), jobs)
        enqueued = time.perf_counter() - started
        worker = Worker(dsn, {JOB_TYPE: noop}, concurrency=workers, schedules=False)
        started = time.perf_counter()
        runner = threading.Thread(target=worker.run)
        runner.start()
        while conn.execute("select count(*) from pyjobq.job_all where status = 3").fetchone() != (
            total,
        ):
            time.sleep(0.02)
        seconds = time.perf_counter() - started
        worker.stop()
        runner.join(60)
        return total / seconds, enqueued


def completion_us(dsn: str, dependants: int, calls: int) -> float:
    """Median microseconds of one job_complete of a job with ``dependants`` WAITING jobs."""
    times = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        empty(conn)
        q = JobQueue(conn)
        for _ in range(calls):
            parent = q.enqueue(2, {}).job_id
            if dependants:
                q.enqueue_many(2, [{}] * dependants, depends_on=[[parent]] * dependants)
            (job,) = q.claim("b", 1, job_types=[2])
            started = time.perf_counter()
            q.complete(job.job_id, "b", job.attempt, lease_token=job.lease_token)
            times.append(time.perf_counter() - started)
            conn.execute("truncate pyjobq.job, pyjobq.job_history")
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--completions", type=int, default=300)
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated, in order")
    args = parser.parse_args()
    shapes = [s for s in args.shapes.split(",") if s]
    logging.basicConfig(level=logging.WARNING)
    rates: dict[str, list[float]] = {s: [] for s in shapes}
    ratios: dict[str, list[float]] = {s: [] for s in shapes}
    enqueues: dict[str, list[float]] = {s: [] for s in shapes}
    with LocalPostgres() as pg:
        dsn = pg.dsn()
        migrate(dsn)
        for _ in range(args.repeat):
            plain = 0.0
            for shape in shapes:
                rate, enqueued = drain(dsn, shape, args.jobs, args.workers)
                plain = rate if shape == "plain" or not plain else plain
                rates[shape].append(rate)
                ratios[shape].append(rate / plain)
                enqueues[shape].append(enqueued)
        print(f"{args.jobs} jobs, one worker of concurrency {args.workers}, {args.repeat} rounds")
        print(f"{'shape':<24} {'jobs/s (median, range)':>28} {'/ plain':>16} {'enqueue s':>10}")
        for shape in shapes:
            r, q = rates[shape], ratios[shape]
            print(
                f"{shape:<24} {statistics.median(r):>10,.0f} ({min(r):,.0f}-{max(r):,.0f})"
                f" {statistics.median(q):>8.2f} ({min(q):.2f}-{max(q):.2f})"
                f" {statistics.median(enqueues[shape]):>10.2f}"
            )
        for dependants in (0, 1, 100) if args.completions else ():
            us = completion_us(dsn, dependants, args.completions)
            print(f"job_complete with {dependants:>3} WAITING dependants: {us:,.0f} us (median)")


if __name__ == "__main__":
    main()
