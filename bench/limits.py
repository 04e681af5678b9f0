"""What concurrency limits cost the drain: jobs/s with limits in force against none.

On one throwaway server, each run enqueues ``--jobs`` no-op jobs of one type, spread over
``--keys`` concurrency keys, and one in-process worker (``concurrency`` ``--workers``, its
defaults otherwise) drains them. The shapes, in rotation, ``--repeat`` times each:

- **unlimited**: no limit on the type (the claim takes the path it takes without limits);
- **type limit that never binds**: ``max_running`` far above what the worker can hold;
- **key limit 1**: ``key_max_running`` 1 over the keys (the River #1145 shape);
- **rate limit**: ``rate_limit`` ``--rate`` claims a second, below what the worker drains;
- **fair share**: ``fair_share`` over one big key and 100 small ones of 10 jobs each, which
  are enqueued after the big key's.

It prints each shape's median jobs/s, its range, and its ratio to the unlimited drain of the
same round (round by round, so that the machine's drift cancels); for the rate, the claims per
second over the whole seconds from the first claim against the limit, and the most claims any
window of a second held (``run_started_at``, which the window counts): never above the limit;
for fair share, how many jobs had been claimed when the small keys' last job was, against what
a drain in claim order claims first (all of the big key's).

``.venv/bin/python bench/limits.py [--jobs 20000] [--keys 1000] [--workers 8] [--rate 1500]
[--repeat 3]``
"""

from __future__ import annotations

import argparse
import logging
import statistics
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg

from pyjobq import ClaimedJob, JobQueue
from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import migrate
from pyjobq.worker import Worker

JOB_TYPE = 1
RATE = "rate limit"
FAIR = "fair share"
SMALL_KEYS, SMALL_JOBS = 100, 10


def shapes(rate: int) -> dict[str, dict[str, Any]]:
    """Each shape's name and the limits it sets (``JobQueue.type_set_limits``'s arguments)."""
    return {
        "unlimited": {},
        "type limit that never binds": {"max_running": 100000},
        "key limit 1": {"key_max_running": 1},
        RATE: {"rate_limit": rate, "rate_period": timedelta(seconds=1)},
        FAIR: {"fair_share": True},
    }


def key_layout(name: str, jobs: int, keys: int) -> list[str]:
    """The concurrency keys of a drain's jobs, in the order they are enqueued: for fair share
    one big key and then ``SMALL_KEYS`` of ``SMALL_JOBS`` jobs each, else ``keys`` in turn."""
    if name != FAIR:
        return [f"k{i % keys}" for i in range(jobs)]
    small = SMALL_KEYS * SMALL_JOBS
    return ["big"] * (jobs - small) + [f"small{i % SMALL_KEYS}" for i in range(small)]


def noop(job: ClaimedJob) -> None:
    return None


def drain(dsn: str, layout: list[str], workers: int, limits: dict[str, Any]) -> float:
    """Jobs/s of one drain of jobs with the concurrency keys of ``layout`` under ``limits``."""
    jobs = len(layout)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("truncate pyjobq.job, pyjobq.job_history")
        queue = JobQueue(conn)
        queue.type_set_limits(JOB_TYPE, **limits)
        for first in range(0, jobs, 10000):
            count = min(10000, jobs - first)
            queue.enqueue_many(
                JOB_TYPE,
                [{} for _ in range(count)],
                concurrency_keys=layout[first : first + count],
            )
        conn.execute("vacuum analyze pyjobq.job, pyjobq.job_history")
        worker = Worker(dsn, {JOB_TYPE: noop}, concurrency=workers, schedules=False)
        thread = threading.Thread(target=worker.run)
        started = time.monotonic()
        thread.start()
        try:
            while _unfinished(conn):
                time.sleep(0.02)
            elapsed = time.monotonic() - started
        finally:
            worker.stop()
            thread.join(60)
    return jobs / elapsed


def claim_rate(dsn: str) -> tuple[float, int]:
    """The last drain's claims per second over the whole seconds from its first claim (the
    last, partial second left out), and the most claims that any window of a second,
    [t, t + 1 s), held."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "with span as (select min(run_started_at) as first,"
            " floor(extract(epoch from max(run_started_at) - min(run_started_at))) as seconds"
            " from pyjobq.job_all)"
            " select (select count(*) from pyjobq.job_all, span"
            "          where run_started_at < first + seconds * interval '1 second') / seconds,"
            " (select max(n) from (select count(*) over (order by run_started_at range between"
            " current row and interval '999999 microseconds' following) n from pyjobq.job_all) w)"
            " from span"
        ).fetchone()
    assert row is not None
    return float(row[0]), int(row[1])


def small_keys_done_after(dsn: str) -> int:
    """How many jobs the last drain had claimed when it claimed the small keys' last one."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "select count(*) from pyjobq.job_all where run_started_at <="
            " (select max(run_started_at) from pyjobq.job_all where concurrency_key like 'small%')"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _unfinished(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute("select exists (select from pyjobq.job where status in (1, 2))").fetchone()
    return bool(row and row[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=8, help="the worker's concurrency")
    parser.add_argument("--rate", type=int, default=1500, help="the rate shape's claims/s")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    logging.getLogger("pyjobq").setLevel(logging.ERROR)
    shaped = shapes(args.rate)
    rates: dict[str, list[float]] = {name: [] for name in shaped}
    claimed: list[tuple[float, int]] = []
    small_done: list[int] = []
    with LocalPostgres() as server:
        dsn = server.dsn()
        migrate(dsn)
        for _ in range(args.repeat):
            for name, limits in shaped.items():
                layout = key_layout(name, args.jobs, args.keys)
                rates[name].append(drain(dsn, layout, args.workers, limits))
                if name == RATE:
                    claimed.append(claim_rate(dsn))
                if name == FAIR:
                    small_done.append(small_keys_done_after(dsn))
    print(f"drain of {args.jobs} no-op jobs over {args.keys} keys, one worker of {args.workers}")
    print("| shape | jobs/s (median, range) | / unlimited (median of rounds, range) |")
    print("|---|---|---|")
    for name, values in rates.items():
        ratios = [v / u for v, u in zip(values, rates["unlimited"], strict=True)]
        print(
            f"| {name} | {statistics.median(values):,.0f} ({min(values):,.0f}..{max(values):,.0f})"
            f" | {statistics.median(ratios):.2f} ({min(ratios):.2f}..{max(ratios):.2f}) |"
        )
    per_second = [r / args.rate for r, _ in claimed]
    print(
        f"rate limit {args.rate}/s: claims/s / limit {statistics.median(per_second):.3f}"
        f" ({min(per_second):.3f}..{max(per_second):.3f}); most in any second"
        f" {max(most for _, most in claimed)}"
    )
    print(
        f"fair share: the {SMALL_KEYS} small keys' {SMALL_KEYS * SMALL_JOBS} jobs all claimed"
        f" within the first {statistics.median(small_done):,.0f} jobs"
        f" ({min(small_done):,}..{max(small_done):,}) of {args.jobs:,}; in claim order, the last"
        f" {SMALL_KEYS * SMALL_JOBS:,}"
    )


if __name__ == "__main__":
    main()
