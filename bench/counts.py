"""How ``job_counts()`` behaves as the DONE history grows, and what calling it costs a drain.

On one throwaway server, for each history size (DONE jobs; default 1k, 1M, 10M) with the same
active jobs beside them (10,000 PENDING, 100 RUNNING, 100 DEAD), it times ``job_counts()`` and,
for reference, the same figures counted by reading the whole table (what ``job_counts()`` did
before it read only the active jobs through their indexes). Then, on the largest history below
10M, it drains 50,000 jobs with W SQL-loop workers (claim 20, complete_many) three ways: alone,
beside a reader calling ``job_counts()`` every 100 ms, and beside a reader running the
whole-table count every 100 ms; ``--repeat R`` runs the three in rotation R times and reports the
median.

``.venv/bin/python bench/counts.py [--history 1000,1000000,10000000] [--workers 4]``
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import migrate
from sqlloop import drain_loop, enqueue_empty

SETTINGS = {"shared_buffers": "1GB", "max_wal_size": "8GB", "checkpoint_timeout": "30min"}

# The figures job_counts() gives, counted the way it did before: one pass over every row.
WHOLE_TABLE = """
select j.job_type, j.status, count(*),
       min(j.run_after) filter (where j.status = 1 and j.run_after <= now()),
       count(*) filter (where j.status = 2 and j.lease_until < now())
  from pyjobq.job_all j
 group by j.job_type, j.status
"""

ACTIVE = {"pending": 10_000, "running": 100, "dead": 100}
READERS: list[tuple[str, str | None]] = [
    ("none", None),
    ("job_counts() every 100 ms", "select * from pyjobq.job_counts()"),
    ("whole-table count every 100 ms", WHOLE_TABLE),
]
DRAIN_JOBS = 50_000


@dataclass(frozen=True)
class Latency:
    history: int
    counts_ms: float
    whole_table_ms: float


@dataclass(frozen=True)
class Drain:
    reader: str
    jobs_per_second: float
    reader_calls: int


def build(dsn: str, history: int) -> None:
    """A migrated database holding ``history`` DONE jobs and the active jobs of ACTIVE."""
    migrate(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Written directly, as years of drains would leave them: the functions would take hours.
        conn.execute(
            "insert into pyjobq.job_history (job_type, status, attempts, run_after, run_started_at,"
            " created_at, updated_at, result)"
            " select 1, 3, 1, now(), now(), now(), now(), '{\"ok\": true}'"
            " from generate_series(1, %s)",
            (history,),
        )
        enqueue_empty(conn, 1, ACTIVE["pending"] + ACTIVE["running"] + ACTIVE["dead"])
        claimed = conn.execute(
            "select job_id, attempt from pyjobq.job_claim('bench', %s)",
            (ACTIVE["running"] + ACTIVE["dead"],),
        ).fetchall()
        for job_id, attempt in claimed[ACTIVE["running"] :]:
            conn.execute(
                "select pyjobq.job_fail(%s, 'bench', %s, 'x', null, true)", (job_id, attempt)
            )
        conn.execute("vacuum analyze pyjobq.job, pyjobq.job_history")


def median_ms(conn: psycopg.Connection[tuple[object, ...]], query: str, calls: int) -> float:
    conn.execute(query).fetchall()  # warm the cache and the plan
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        conn.execute(query).fetchall()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def latency(dsn: str, history: int) -> Latency:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return Latency(
            history=history,
            counts_ms=median_ms(conn, "select * from pyjobq.job_counts()", 30),
            whole_table_ms=median_ms(conn, WHOLE_TABLE, 3),
        )


def drain(dsn: str, workers: int, reader_query: str | None, label: str) -> Drain:
    """Enqueue DRAIN_JOBS (type 2, apart from the history) and time W loops draining them."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_empty(conn, 2, DRAIN_JOBS)
        conn.execute("analyze pyjobq.job, pyjobq.job_history")
    stop = threading.Event()
    calls = 0

    def reader() -> None:
        nonlocal calls
        assert reader_query is not None
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                conn.execute(reader_query).fetchall()
                calls += 1
                stop.wait(0.1)

    def worker(n: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            drain_loop(conn, f"w{n}", job_types=[2])

    side = threading.Thread(target=reader) if reader_query else None
    if side:
        side.start()
    started = time.perf_counter()
    run(worker, workers)
    seconds = time.perf_counter() - started
    stop.set()
    if side:
        side.join()
    return Drain(reader=label, jobs_per_second=DRAIN_JOBS / seconds, reader_calls=calls)


def run(target: Callable[[int], None], count: int) -> None:
    threads = [threading.Thread(target=target, args=(n,)) for n in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--history", default="1000,1000000,10000000", help="DONE jobs, comma-separated"
    )
    parser.add_argument("--workers", type=int, default=4, help="drain loops")
    parser.add_argument("--repeat", type=int, default=3, help="drains per reader, in rotation")
    args = parser.parse_args()
    sizes = [int(s) for s in args.history.split(",")]
    drain_history = max([s for s in sizes if s < 10_000_000] or sizes[:1])
    latencies: list[Latency] = []
    drains: list[Drain] = []
    with LocalPostgres(settings=SETTINGS) as server:
        for n, history in enumerate(sizes):
            name = f"counts{n}"
            with psycopg.connect(server.dsn(), autocommit=True) as admin:
                admin.execute(f"create database {name}")
            dsn = server.dsn(name)
            build(dsn, history)
            latencies.append(latency(dsn, history))
            print(latencies[-1], flush=True)
            if history == drain_history:
                for _ in range(args.repeat):
                    for label, query in READERS:
                        drains.append(drain(dsn, args.workers, query, label))
                        print(drains[-1], flush=True)
            with psycopg.connect(server.dsn(), autocommit=True) as admin:
                admin.execute(f"drop database {name}")
    smallest = latencies[0]
    print()
    print("| DONE jobs | job_counts() ms | vs smallest | whole-table count ms |")
    print("|---:|---:|---:|---:|")
    for lat in latencies:
        print(
            f"| {lat.history:,} | {lat.counts_ms:.2f} | {lat.counts_ms / smallest.counts_ms:.2f}"
            f" | {lat.whole_table_ms:.1f} |"
        )
    print()
    print(
        f"Drain of {DRAIN_JOBS:,} jobs beside {drain_history:,} DONE,"
        f" {args.workers} loops, {args.repeat} runs:"
    )
    print()
    print("| reader | jobs/s, median (runs) | vs none |")
    print("|---|---:|---:|")
    medians = {
        label: statistics.median(d.jobs_per_second for d in drains if d.reader == label)
        for label, _ in READERS
    }
    for label, rate in medians.items():
        runs = ", ".join(f"{d.jobs_per_second:,.0f}" for d in drains if d.reader == label)
        print(f"| {label} | {rate:,.0f} ({runs}) | {rate / medians['none']:.2f} |")


if __name__ == "__main__":
    main()
