"""Single-job enqueue transactions from many producers at once: a web application's shape.

On one throwaway server (default settings), ``--producers`` processes (16), each on a
connection of its own, commit one job per transaction for ``--seconds`` (5) per figure, one
statement each in autocommit:

    insert           an INSERT into a plain table with a bigserial key (the ceiling)
    insert+notify    the same INSERT and a pg_notify in one statement, as a queue that notifies
                     on every enqueue does: a NOTIFY makes the commits of notifying
                     transactions run one at a time
    job row          an INSERT of a PENDING row into pyjobq.job as its owner: what the table
                     itself allows, its indexes and checks, without the SQL API
    pyjobq           job_enqueue while no worker is asleep (a busy fleet, or none): it does not
                     notify, and holds the wake-up fence until its commit
    pyjobq asleep    job_enqueue while one session LISTENs, marked asleep (job_worker_idle):
                     every enqueue notifies, as before schema 44
    graphile-worker  graphile_worker.add_job (with --graphile: its schema is installed by
                     bench/peers/graphile.mjs setup, so bench/setup must have run)

Each system runs in a database of its own; the figures rotate over ``--repeat`` rounds (3),
and each line shows the median jobs/s, the range, and the ratio to ``insert``.

``.venv/bin/python bench/producers.py [--producers 16] [--seconds 5] [--repeat 3] [--graphile]``
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import migrate

BENCH = Path(__file__).resolve().parent
PLAIN = (
    "create table plain"
    " (id bigserial primary key, payload jsonb, created_at timestamptz default now())"
)
STATEMENTS = {
    "insert": "insert into plain (payload) values ('{}')",
    "insert+notify": (
        "with i as (insert into plain (payload) values ('{}') returning id)"
        " select pg_notify('bench', '1') from i"
    ),
    "job row": (
        "insert into pyjobq.job (job_id, job_type, payload, run_after, created_at, updated_at)"
        " values (gen_random_uuid(), 1, '{}', now(), now(), now())"
    ),
    "pyjobq": "select pyjobq.job_enqueue(1, '{}')",
    "pyjobq asleep": "select pyjobq.job_enqueue(1, '{}')",
    "graphile-worker": "select graphile_worker.add_job('noop', '{}')",
}
DATABASES = {
    "insert": "plain",
    "insert+notify": "plain",
    "job row": "pyjobq",
    "pyjobq": "pyjobq",
    "pyjobq asleep": "pyjobq",
    "graphile-worker": "graphile",
}


def produce(dsn: str, statement: str, start: float, stop: float, counts: Any, i: int) -> None:
    """One producer: one transaction per job from ``start`` to ``stop`` (time.time())."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement)  # warm: the statement is parsed, the connection ready
        while time.time() < start:
            time.sleep(0.001)
        done = 0
        while time.time() < stop:
            conn.execute(statement)
            done += 1
        counts[i] = done


class Sleeper:
    """A session that LISTENs on pyjobq_job, marked asleep, reading what it is sent."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.conn.execute("listen pyjobq_job")
        assert self.conn.execute("select pyjobq.job_worker_idle()").fetchone() == (True,)
        self.heard = 0
        self.running = True
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def read(self) -> None:
        while self.running:
            for _ in self.conn.notifies(timeout=0.2):
                self.heard += 1

    def close(self) -> int:
        self.running = False
        self.thread.join()
        self.conn.close()
        return self.heard


def run_once(dsn: str, statement: str, producers: int, seconds: float) -> float:
    """Jobs per second that ``producers`` processes commit running ``statement``."""
    counts = multiprocessing.Array("q", producers)
    start = time.time() + 1.0 + 0.05 * producers
    stop = start + seconds
    procs = [
        multiprocessing.Process(target=produce, args=(dsn, statement, start, stop, counts, i))
        for i in range(producers)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0, f"a producer exited {p.exitcode}"
    return float(sum(counts[:])) / seconds


def setup(server: LocalPostgres, graphile: bool) -> dict[str, str]:
    """A database per system, each ready; their conninfo by database name."""
    dsns: dict[str, str] = {}
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        for name in ("plain", "pyjobq", *(("graphile",) if graphile else ())):
            admin.execute(f"create database {name}")
            dsns[name] = server.dsn(name)
    with psycopg.connect(dsns["plain"], autocommit=True) as conn:
        conn.execute(PLAIN)
    migrate(dsns["pyjobq"])
    if graphile:
        with psycopg.connect(dsns["graphile"]) as conn:
            info = conn.info
            env = {
                **os.environ,
                "PGHOST": info.host,
                "PGPORT": str(info.port),
                "PGUSER": info.user,
                "PGDATABASE": "graphile",
            }
        subprocess.run(
            ["node", str(BENCH / "peers" / "graphile.mjs"), "setup"],
            env=env,
            cwd=BENCH,
            check=True,
            capture_output=True,
            timeout=300,
        )
    return dsns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--producers", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--graphile", action="store_true")
    args = parser.parse_args()
    systems = [s for s in STATEMENTS if args.graphile or s != "graphile-worker"]
    figures: dict[str, list[float]] = {s: [] for s in systems}
    with LocalPostgres() as server:
        dsns = setup(server, args.graphile)
        version = psycopg.connect(dsns["plain"]).info.server_version
        for _ in range(args.repeat):
            for system in systems:
                dsn = dsns[DATABASES[system]]
                sleeper = Sleeper(dsn) if system == "pyjobq asleep" else None
                try:
                    figures[system].append(
                        run_once(dsn, STATEMENTS[system], args.producers, args.seconds)
                    )
                finally:
                    if sleeper is not None:
                        sleeper.close()
    ceiling = statistics.median(figures["insert"])
    print(
        f"{args.producers} producers, one job per transaction, {args.seconds:g} s a figure,"
        f" {args.repeat} rounds; PostgreSQL {version // 10000}.{version % 100}, default settings"
    )
    print()
    print("| system | jobs/s, median (range) | / insert |")
    print("|---|---:|---:|")
    for system in systems:
        values = figures[system]
        median = statistics.median(values)
        print(
            f"| {system} | {median:,.0f} ({min(values):,.0f} to {max(values):,.0f})"
            f" | {median / ceiling:.2f} |"
        )


if __name__ == "__main__":
    main()
