"""A CPU-bound drain: sync handlers in the worker's threads against its child processes.

On one throwaway server, each round enqueues ``--jobs`` jobs whose handler spins pure Python
for ``--work`` loop iterations (about ten milliseconds each by default) and drains them with one
in-process worker of concurrency ``--concurrency`` (the machine's cores by default), its
defaults otherwise:

- **threads**: the handler as it is, in the worker's thread pool (one GIL for all of them);
- **processes**: the worker's ``processes`` setting, each handler in a child process;
- **ceiling**: the same work, no queue: ``ProcessPoolExecutor(concurrency).map`` over the jobs;
- **one core**: the same work, no queue, one call after the other in this process.

It prints each shape's median jobs/s and range over ``--repeat`` rounds, and its ratio to the
ceiling of the same round. While a drain runs it also measures how late the worker's own
event loop is (an ``asyncio`` timer of 10 ms, its lateness at the median and the worst): the
loop that claims, renews leases and sends completions shares the GIL with threads.

``.venv/bin/python bench/cpu_drain.py [--jobs 400] [--work 200000] [--concurrency N]
[--repeat 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import psycopg

from pyjobq import ClaimedJob, JobQueue
from pyjobq.localpg import LocalPostgres
from pyjobq.metrics import WorkerHooks
from pyjobq.migrate import migrate
from pyjobq.params import Payload
from pyjobq.worker import Worker

JOB_TYPE = 1


def spin(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def crunch(job: ClaimedJob) -> Payload:
    return {"total": spin(int(job.payload["n"]))}


class LoopLateness(WorkerHooks):
    """Samples how late a 10 ms timer fires on the worker's loop, from its first claim on."""

    def __init__(self) -> None:
        self.late: list[float] = []
        self.task: asyncio.Task[None] | None = None

    def on_job_claimed(self, job: ClaimedJob) -> None:
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self.sample())

    async def sample(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.01)
            self.late.append(time.monotonic() - before - 0.01)


def drain(dsn: str, jobs: int, work: int, concurrency: int, processes: bool) -> tuple[float, Any]:
    """Jobs/s of one drain, and the loop's lateness samples."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("truncate pyjobq.job, pyjobq.job_history")
        JobQueue(conn).enqueue_many(JOB_TYPE, [{"n": work}] * jobs)
        conn.execute("vacuum analyze pyjobq.job")
        hooks = LoopLateness()
        worker = Worker(
            dsn, {JOB_TYPE: crunch}, concurrency=concurrency, processes=processes,
            schedules=False, hooks=hooks,
        )  # fmt: skip
        thread = threading.Thread(target=worker.run)
        started = time.monotonic()
        thread.start()
        try:
            while conn.execute("select exists (select from pyjobq.job)").fetchone() != (False,):
                time.sleep(0.01)
            elapsed = time.monotonic() - started
        finally:
            worker.stop()
            thread.join(60)
    return jobs / elapsed, hooks.late


def ceiling(jobs: int, work: int, concurrency: int) -> float:
    with ProcessPoolExecutor(concurrency) as pool:
        pool.submit(spin, 1).result()  # the children started: the queue's are reused too
        started = time.monotonic()
        list(pool.map(spin, [work] * jobs, chunksize=1))
        return jobs / (time.monotonic() - started)


def one_core(jobs: int, work: int) -> float:
    started = time.monotonic()
    for _ in range(jobs):
        spin(work)
    return jobs / (time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--work", type=int, default=200_000)
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    logging.getLogger("pyjobq").setLevel(logging.ERROR)
    shapes = ["threads", "processes", "ceiling", "one core"]
    rates: dict[str, list[float]] = {name: [] for name in shapes}
    late: dict[str, list[float]] = {"threads": [], "processes": []}
    with LocalPostgres() as server:
        dsn = server.dsn()
        migrate(dsn)
        for _ in range(args.repeat):
            for name in ("threads", "processes"):
                rate, samples = drain(
                    dsn, args.jobs, args.work, args.concurrency, name == "processes"
                )
                rates[name].append(rate)
                late[name] += samples
            rates["ceiling"].append(ceiling(args.jobs, args.work, args.concurrency))
            rates["one core"].append(one_core(args.jobs, args.work))
    ms = 1000 * statistics.median(rates["one core"]) ** -1
    print(
        f"CPU-bound drain: {args.jobs} jobs of {ms:.1f} ms of pure Python each,"
        f" concurrency {args.concurrency}, {os.cpu_count()} cores, {args.repeat} rounds"
    )
    print("| shape | jobs/s (median, range) | / ceiling (median of rounds) | loop late p50 / max |")
    print("|---|---|---|---|")
    for name in shapes:
        values = rates[name]
        ratios = [v / c for v, c in zip(values, rates["ceiling"], strict=True)]
        lateness = "" if name not in late or not late[name] else (
            f"{1000 * statistics.median(late[name]):.1f} / {1000 * max(late[name]):.0f} ms"
        )  # fmt: skip
        print(
            f"| {name} | {statistics.median(values):,.0f} ({min(values):,.0f}..{max(values):,.0f})"
            f" | {statistics.median(ratios):.2f} | {lateness} |"
        )
    ratio = [p / t for p, t in zip(rates["processes"], rates["threads"], strict=True)]
    spread = f"{min(ratio):.2f}..{max(ratio):.2f}"
    print(f"processes / threads: {statistics.median(ratio):.2f} ({spread})")


if __name__ == "__main__":
    main()
