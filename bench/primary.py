"""The single primary's ceiling for this queue: where adding workers stops helping, and what
moves it.

One throwaway server (default settings but ``max_connections``), pyjobq only. Each drain runs
``--jobs`` pending no-op jobs (enqueued in one call beforehand) with W connections in total,
spread over P client processes, each connection looping the SQL API's drain (claim up to B,
complete them in one ``job_complete_many``, bench/sqlloop.py), or, with ``--worker``, P
processes each running a ``pyjobq.worker.Worker(concurrency=W/P)``. Per drain it prints
jobs/s, the server's CPU per job (user + system time of every PostgreSQL process of the server,
from /proc, before and after), the clients' CPU per job, WAL bytes per job
(``pg_current_wal_lsn()`` around it) and commits per job (``pg_stat_database.xact_commit``).

Then the knobs at the sweep's best W: ``synchronous_commit = off`` (ALTER SYSTEM, reloaded),
and the claim's batch size.

``.venv/bin/python bench/primary.py [--jobs 40000] [--workers 4,8,16,32,64,128]
[--processes 1,2,4] [--batch 50] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import psycopg

from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import migrate
from sqlloop import drain_all, enqueue_empty

TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Drain:
    jobs_per_s: float
    server_cpu_us: float  # per job
    client_cpu_us: float  # per job
    wal_bytes: float  # per job
    commits: float  # per job
    retries: int  # completions refused with 55P03 and retried (SQL loop)


def server_cpu_seconds(server: LocalPostgres) -> float:
    """User + system seconds of the postmaster, of every process it started that lives now
    (backends, autovacuum, the writers), and of those that exited (its children's times)."""
    postmaster = int((server.data_dir / "postmaster.pid").read_text().split()[0])
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(stat.parent.name), int(fields[1])
        if pid == postmaster:  # its own, and its exited children's (cutime, cstime)
            total += sum(int(f) for f in fields[11:15])
        elif ppid == postmaster:
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


def _part(target: Callable[..., tuple[int, int, float]], results: Any, *args: Any) -> None:
    results.put(target(*args))


def _loop_part(
    dsn: str, part: int, connections: int, batch: int, go: Any
) -> tuple[int, int, float]:
    conns = [psycopg.connect(dsn, autocommit=True) for _ in range(connections)]
    go.wait()
    cpu = time.process_time()
    drained = drain_all(conns, f"p{part}-", batch)
    for conn in conns:
        conn.close()
    return drained.jobs, drained.retries, time.process_time() - cpu


def _worker_part(
    dsn: str, part: int, concurrency: int, jobs: int, go: Any, handled: Any
) -> tuple[int, int, float]:
    """A Worker until every part together has handled ``jobs`` (the shared counter
    ``handled``), then until the database shows them DONE: no query polls during the drain."""
    import asyncio

    from pyjobq.worker import Worker

    async def serve() -> tuple[int, int, float]:
        mine = 0

        async def noop(job: Any) -> None:
            nonlocal mine
            mine += 1
            with handled.get_lock():
                handled.value += 1

        worker = Worker(dsn, {1: noop}, concurrency=concurrency, worker_id=f"p{part}")
        task = asyncio.create_task(worker.serve())
        await worker.ready.wait()
        await asyncio.to_thread(go.wait)
        cpu = time.process_time()
        while handled.value < jobs:
            await asyncio.sleep(0.002)
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            while True:  # completions are flushed in batches: until the last is recorded
                cur = await conn.execute("select count(*) from pyjobq.job_all where status = 3")
                row = await cur.fetchone()
                if row is not None and row[0] >= jobs:
                    break
                await asyncio.sleep(0.002)
        worker.stop()
        await task
        return mine, 0, time.process_time() - cpu  # the Worker retries what is refused

    return asyncio.run(serve())


def drain(
    server: LocalPostgres, jobs: int, workers: int, processes: int, batch: int, worker: bool
) -> Drain:
    dsn = server.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("truncate pyjobq.job, pyjobq.job_history")
        enqueue_empty(conn, 1, jobs)
        conn.execute("vacuum analyze pyjobq.job, pyjobq.job_history")
        conn.execute("checkpoint")
    ctx = get_context("spawn")
    go = ctx.Event()
    share = workers // processes
    target: Callable[..., tuple[int, int, float]]
    args: list[tuple[Any, ...]]
    if worker:
        handled = ctx.Value("q", 0)
        target, args = _worker_part, [(dsn, p, share, jobs, go, handled) for p in range(processes)]
    else:
        target, args = _loop_part, [(dsn, p, share, batch, go) for p in range(processes)]
    results = ctx.Queue()
    parts = [ctx.Process(target=_part, args=(target, results, *a)) for a in args]
    for part in parts:
        part.start()
    with psycopg.connect(dsn, autocommit=True) as conn:
        time.sleep(1.0)  # the parts connect (and, with --worker, start) before the clock runs
        lsn = conn.execute("select pg_current_wal_lsn()").fetchone()
        commits = conn.execute(
            "select xact_commit from pg_stat_database where datname = current_database()"
        ).fetchone()
        cpu = server_cpu_seconds(server)
        started = time.perf_counter()
        go.set()
        ends: list[tuple[int, int, float]] = []
        while len(ends) < len(parts):
            try:
                ends.append(results.get(timeout=1))
            except queue.Empty:
                failed = [part.exitcode for part in parts if part.exitcode not in (None, 0)]
                if failed:
                    raise RuntimeError(f"a drain process failed (exit codes {failed})") from None
        done, retries = sum(e[0] for e in ends), sum(e[1] for e in ends)
        client_cpu = sum(e[2] for e in ends)
        for part in parts:
            part.join(timeout=60)
        seconds = time.perf_counter() - started
        cpu_after = server_cpu_seconds(server)
        wal = conn.execute("select pg_current_wal_lsn() - %s::pg_lsn", lsn).fetchone()
        conn.execute("select pg_stat_clear_snapshot()")
        commits_after = conn.execute(
            "select xact_commit from pg_stat_database where datname = current_database()"
        ).fetchone()
        left = conn.execute("select count(*) from pyjobq.job_all where status <> 3").fetchone()
    assert done >= jobs, (done, jobs)
    assert left == (0,), left
    assert wal is not None
    assert commits is not None
    assert commits_after is not None
    return Drain(
        jobs_per_s=jobs / seconds,
        server_cpu_us=(cpu_after - cpu) / jobs * 1e6,
        client_cpu_us=client_cpu / jobs * 1e6,
        wal_bytes=float(wal[0]) / jobs,
        commits=(commits_after[0] - commits[0]) / jobs,
        retries=retries,
    )


def median_drain(
    rounds: int, server: LocalPostgres, jobs: int, w: int, p: int, batch: int, worker: bool
) -> tuple[Drain, float, float]:
    """The median of each figure over ``rounds`` drains, and the range of jobs/s."""
    runs = [drain(server, jobs, w, p, batch, worker) for _ in range(rounds)]
    rates = [r.jobs_per_s for r in runs]

    def med(get: Callable[[Drain], float]) -> float:
        return statistics.median(get(r) for r in runs)

    figure = Drain(
        jobs_per_s=med(lambda d: d.jobs_per_s),
        server_cpu_us=med(lambda d: d.server_cpu_us),
        client_cpu_us=med(lambda d: d.client_cpu_us),
        wal_bytes=med(lambda d: d.wal_bytes),
        commits=med(lambda d: d.commits),
        retries=sum(r.retries for r in runs),
    )
    return figure, min(rates), max(rates)


HEADER = (
    "| drain | W | P | jobs/s (median, range) | server CPU µs/job | client CPU µs/job"
    " | WAL B/job | commits/job | 55P03 retries |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def row(label: str, w: int, p: int, result: tuple[Drain, float, float]) -> str:
    d, low, high = result
    return (
        f"| {label} | {w} | {p} | {d.jobs_per_s:,.0f} ({low:,.0f}-{high:,.0f})"
        f" | {d.server_cpu_us:.0f} | {d.client_cpu_us:.0f} | {d.wal_bytes:.0f} | {d.commits:.3f}"
        f" | {d.retries} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=40000)
    parser.add_argument("--workers", default="4,8,16,32,64,128")
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ws = [int(w) for w in args.workers.split(",")]
    ps = [int(p) for p in args.processes.split(",")]
    with LocalPostgres(settings={"max_connections": "300"}) as server:
        migrate(server.dsn())
        with psycopg.connect(server.dsn()) as conn:
            version = conn.execute("show server_version").fetchone()
        print(f"PostgreSQL {version[0] if version else '?'}, {os.cpu_count()} CPUs")
        print(HEADER)
        best: tuple[float, int, int] = (0.0, 0, 0)
        for label, worker in (("SQL loop", False), ("Worker", True)):
            for p in ps:
                for w in ws:
                    if w % p:
                        continue
                    result = median_drain(args.rounds, server, args.jobs, w, p, args.batch, worker)
                    print(row(label, w, p, result), flush=True)
                    if not worker and result[0].jobs_per_s > best[0]:
                        best = (result[0].jobs_per_s, w, p)
        _, w, p = best
        print(f"\nknobs at the SQL loop's best, W={w} P={p}:")
        print(HEADER)
        for batch in (10, 200):
            result = median_drain(args.rounds, server, args.jobs, w, p, batch, False)
            print(row(f"SQL loop, claim {batch}", w, p, result), flush=True)
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute("alter system set synchronous_commit = off")
            conn.execute("select pg_reload_conf()")
        for label, worker in (("SQL loop, synchronous_commit off", False), ("Worker, same", True)):
            result = median_drain(args.rounds, server, args.jobs, w, p, args.batch, worker)
            print(row(label, w, p, result), flush=True)


if __name__ == "__main__":
    main()
