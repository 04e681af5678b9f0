"""The CPU a drain costs per job: the Worker's process and the server's, side by side.

On a machine whose cores the Worker shares with the server, the drain's pace is set by the CPU
that the two spend together per job. On one throwaway server (default settings), each round
enqueues ``--jobs`` jobs with empty payloads and drains them with a ``Worker`` of concurrency
``--concurrency`` whose handler does nothing, its defaults otherwise, started in a process of
its own. The figures per round: jobs/s from the Worker's start to its last job, the Worker
process's CPU per job (user and system, from ``getrusage``, start-up and imports left out) and
the server's (its processes' CPU from /proc, those that exited during the drain included).

With ``--before REV``, the Worker of commit REV (its ``pyjobq`` package, run against this
schema) drains as well, the rounds alternating; the table then shows each one's medians, with
ranges, and the ratio of this Worker's to REV's.

``.venv/bin/python bench/worker_cpu.py [--jobs 20000] [--concurrency 8] [--repeat 3]
[--before REV]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

import psycopg

from primary import server_cpu_seconds
from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import migrate

ROOT = Path(__file__).resolve().parent.parent

# Run in the Worker's own process, with the pyjobq on its PYTHONPATH.
DRAIN = """
import asyncio, json, resource, sys, time
from pyjobq.worker import Worker

JOBS = int(sys.argv[2])

async def main() -> None:
    handled = 0
    done = asyncio.Event()

    async def noop(job: object) -> None:
        nonlocal handled
        handled += 1
        if handled >= JOBS:
            done.set()

    worker = Worker(sys.argv[1], {1: noop}, concurrency=int(sys.argv[3]))
    started, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    task = asyncio.create_task(worker.serve())
    await done.wait()
    seconds, used = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF)
    worker.stop()
    await task
    print(json.dumps({"seconds": seconds,
                      "cpu": used.ru_utime - cpu.ru_utime + used.ru_stime - cpu.ru_stime}))

asyncio.run(main())
"""


def package_at(rev: str, into: Path) -> Path:
    """The ``pyjobq`` package of commit ``rev`` and the migrations it checks the schema
    against, extracted under ``into``."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", rev, "pyjobq", "migrations"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def drain(server: LocalPostgres, pythonpath: Path, jobs: int, concurrency: int) -> dict[str, float]:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("truncate pyjobq.job")
        conn.execute(
            "select pyjobq.job_enqueue_many(1, array_fill('{}'::jsonb, array[%s]))", (jobs,)
        )
        conn.execute("vacuum analyze pyjobq.job")
        conn.execute("checkpoint")
    before = server_cpu_seconds(server)
    out = subprocess.run(
        [sys.executable, "-c", DRAIN, server.dsn(), str(jobs), str(concurrency)],
        env={**os.environ, "PYTHONPATH": str(pythonpath)},
        cwd=pythonpath,  # "-c" puts the working directory first on sys.path
        capture_output=True,
        text=True,
        timeout=600,
    )
    if out.returncode:
        raise SystemExit(f"the Worker's drain failed:\n{out.stderr}")
    server_seconds = server_cpu_seconds(server) - before
    worker: dict[str, float] = json.loads(out.stdout)
    return {
        "jobs/s": jobs / worker["seconds"],
        "Worker CPU µs/job": worker["cpu"] * 1e6 / jobs,
        "server CPU µs/job": server_seconds * 1e6 / jobs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", metavar="REV")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, LocalPostgres() as server:
        migrate(server.dsn())
        variants = {"this Worker": ROOT}
        if args.before:
            variants[args.before] = package_at(args.before, Path(tmp))
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
        for _ in range(args.repeat):
            for name, path in variants.items():
                rounds[name].append(drain(server, path, args.jobs, args.concurrency))
    print(f"{args.jobs} jobs, Worker(concurrency={args.concurrency}), {args.repeat} rounds")
    print()
    names = list(variants)
    header = " | ".join(names) + (f" | this ÷ {args.before}" if args.before else "")
    print(f"| figure | {header} |")
    print("|---|" + "---:|" * (len(names) + (1 if args.before else 0)))
    for figure in rounds[names[0]][0]:
        cells, medians = [], []
        for name in names:
            values = [r[figure] for r in rounds[name]]
            medians.append(statistics.median(values))
            cells.append(f"{medians[-1]:,.0f} ({min(values):,.0f} to {max(values):,.0f})")
        if args.before:
            cells.append(f"{medians[0] / medians[1]:.2f}")
        print(f"| {figure} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
