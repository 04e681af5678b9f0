"""What per-type privileges cost the claim and the drain.

On one throwaway server, a LOGIN member of ``pyjobq_worker`` drains N jobs (claim 20,
``job_complete_many``) three ways, in rotation: on the schema as the given git revision had it
(default ``HEAD``, for a before/after), on the working tree's schema with no per-type grant, and
on the working tree's schema with one grant on another type (so every claim and completion
computes the types the worker may not work). Prints each median and its ratio to the first.

``.venv/bin/python bench/grants.py [--jobs 30000] [--rounds 4] [--before HEAD]``
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

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {"fsync": "off", "synchronous_commit": "off"}


def drain(dsn: str, jobs: int) -> float:
    """Jobs per second of one SQL loop claiming 20 at a time and completing them in one call."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        done = 0
        while rows := conn.execute(
            "select job_id, attempt from pyjobq.job_claim('w1', 20)"
        ).fetchall():
            conn.execute(
                "select count(*) from pyjobq.job_complete_many('w1', %s::uuid[], %s::int[])",
                ([r[0] for r in rows], [r[1] for r in rows]),
            )
            done += len(rows)
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
        (f"schema at {args.before}", before, False),
        ("no per-type grant", after, False),
        ("a grant on another type", after, True),
    ]
    rates: dict[str, list[float]] = {label: [] for label, _, _ in variants}
    with LocalPostgres(settings=SETTINGS) as server:
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute("create role bench_worker login")
            admin.execute("create role other_team nologin")
        for n in range(args.rounds):
            for v, (label, schema, grant) in enumerate(variants):
                name = f"grants_{n}_{v}"
                with psycopg.connect(server.dsn(), autocommit=True) as admin:
                    admin.execute(f"create database {name}")
                with psycopg.connect(server.dsn(name), autocommit=True) as conn:
                    conn.execute(schema)
                    conn.execute("grant pyjobq_worker to bench_worker")
                    if grant:
                        conn.execute("select pyjobq.job_type_grant(2, 'other_team', 'work')")
                    conn.execute(
                        "select count(*) from pyjobq.job_enqueue_many(1,"
                        " array(select '{}'::jsonb from generate_series(1, %s)))",
                        (args.jobs,),
                    )
                    conn.execute("vacuum analyze pyjobq.job")
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
