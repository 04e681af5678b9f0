"""What the checks every job passes through cost a drain: per-type privileges, the done trigger.

On one throwaway server, a LOGIN member of ``pyjobq_worker`` drains N jobs (claim 20,
``job_complete_many``) four ways, in rotation: on the schema as the given git revision had it
(default ``HEAD``, for a before/after); on the working tree's schema as installed; with one
per-type grant on another type (so every claim and completion computes the types the worker may
not work); and with the trigger that announces watched jobs dropped (none is watched: what the
trigger costs the jobs that did not ask for it). Prints each median and its ratio to the first.

``.venv/bin/python bench/overhead.py [--jobs 30000] [--rounds 4] [--before HEAD]``
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

from pyjobq.localpg import LocalPostgres
from sqlloop import drain_loop, enqueue_empty

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {"fsync": "off", "synchronous_commit": "off"}


def drain(dsn: str, jobs: int) -> float:
    """Jobs per second of one SQL loop claiming 20 at a time and completing them in one call."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        done = drain_loop(conn, "w1").jobs
        assert done == jobs, done
        return jobs / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--before", default="HEAD", help="git revision of the 'before' schema")
    args = parser.parse_args()
    before = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{args.before}:sql/pyjobq.sql"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    after = (ROOT / "sql" / "pyjobq.sql").read_text()
    variants = [
        (f"schema at {args.before}", before, ""),
        ("as installed", after, ""),
        ("a grant on another type", after, "select pyjobq.job_type_grant(2, 'other_team', 'work')"),
        ("done trigger dropped", after, "drop trigger job_done_notify on pyjobq.job_history"),
    ]
    rates: dict[str, list[float]] = {label: [] for label, _, _ in variants}
    with LocalPostgres(settings=SETTINGS) as server:
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute("create role bench_worker login")
            admin.execute("create role other_team nologin")
        for n in range(args.rounds):
            for v, (label, schema, change) in enumerate(variants):
                name = f"overhead_{n}_{v}"
                with psycopg.connect(server.dsn(), autocommit=True) as admin:
                    admin.execute(f"create database {name}")
                with psycopg.connect(server.dsn(name), autocommit=True) as conn:
                    conn.execute(schema)
                    conn.execute("grant pyjobq_worker to bench_worker")
                    if change:
                        conn.execute(change)
                    enqueue_empty(conn, 1, args.jobs)
                    conn.execute("vacuum analyze pyjobq.job, pyjobq.job_history")
                rates[label].append(
                    drain(make_conninfo(server.dsn(name), user="bench_worker"), args.jobs)
                )
                print(f"{label}: {rates[label][-1]:,.0f} jobs/s", flush=True)
    first = statistics.median(rates[variants[0][0]])
    print()
    print("| schema | jobs/s, median (runs) | vs before |")
    print("|---|---:|---:|")
    for label, runs in rates.items():
        rate = statistics.median(runs)
        listed = ", ".join(f"{r:,.0f}" for r in runs)
        print(f"| {label} | {rate:,.0f} ({listed}) | {rate / first:.3f} |")


if __name__ == "__main__":
    main()
