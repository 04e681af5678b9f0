"""What PostgreSQL 18 offers the queue, measured on its server (the wheel's, or PYJOBQ_PG_BINDIR).

1. ``uuidv7()`` against the schema's ``_new_job_ids`` (time-ordered ids in UUIDv7's layout, the
   job's seq in the low bits): per id in one call of 100,000, and per call of one id, timed in
   the server (a DO loop), so no round trip is counted.
2. Asynchronous I/O: for each ``io_method`` the server accepts (sync, worker, io_uring), the plain
   SQL drain (``--jobs`` enqueued in one call, drained by ``--workers`` connections claiming
   ``--batch`` and completing them in one call, bench/sqlloop.py), then a VACUUM of the drained
   table after a restart (its shared buffers empty, the OS's page cache as the drain left it).

``PYJOBQ_PG=18 .venv/bin/python bench/pg18.py [--jobs 20000] [--workers 8] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import psycopg

from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import migrate
from sqlloop import drain_all, enqueue_empty

IO_METHODS = ("sync", "worker", "io_uring")


def timed(conn: psycopg.Connection[Any], query: str, repeat: int = 5) -> float:
    """The median seconds of ``query`` over ``repeat`` runs."""
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        conn.execute(query.encode())
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def ids(server: LocalPostgres) -> None:
    rows, calls = 100_000, 20_000
    per_row = {
        "_new_job_ids": f"select count(*) from pyjobq._new_job_ids(now(), {rows})",
        "nextval + uuidv7()": "select count(*) from (select nextval('pyjobq.job_seq'), uuidv7()"
        f" from generate_series(1, {rows})) s",
        "uuidv7() alone": "select count(*) from (select uuidv7()"
        f" from generate_series(1, {rows})) s",
    }
    per_call = {
        "_new_job_ids": "perform * from pyjobq._new_job_ids(now(), 1);",
        "nextval + uuidv7()": "perform nextval('pyjobq.job_seq'), uuidv7();",
    }
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        print("\nids, µs in the server          per id (100,000 in a call)   per call of one id")
        for name, query in per_row.items():
            row = timed(conn, query) / rows * 1e6
            body = per_call.get(name)
            loop = f"do $$ begin for i in 1..{calls} loop {body} end loop; end $$"
            call = f"{timed(conn, loop, 3) / calls * 1e6:8.2f}" if body else "       -"
            print(f"  {name:30s} {row:8.2f}                     {call}")


def drain(server: LocalPostgres, jobs: int, workers: int, batch: int) -> float:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        enqueue_empty(conn, 1, jobs)
    connections = [psycopg.connect(server.dsn(), autocommit=True) for _ in range(workers)]
    try:
        start = time.perf_counter()
        done = drain_all(connections, "w", batch).jobs
        seconds = time.perf_counter() - start
    finally:
        for conn in connections:
            conn.close()
    assert done == jobs, (done, jobs)
    return jobs / seconds


def cold_vacuum(server: LocalPostgres) -> float:
    server.restart()
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        return timed(conn, "vacuum pyjobq.job, pyjobq.job_history", 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with LocalPostgres() as server:
        migrate(server.dsn())
        with psycopg.connect(server.dsn()) as conn:
            version = conn.execute("show server_version").fetchone()
        print(f"PostgreSQL {version[0] if version else '?'} from {server.bindir}")
        ids(server)
    print(f"\nio_method   drain jobs/s (median, range of {args.rounds})   cold VACUUM s (median)")
    for method in IO_METHODS:
        try:
            server = LocalPostgres(settings={"io_method": method})
            server.start()
        except RuntimeError as refused:
            said = [line for line in str(refused).splitlines() if "io_method" in line]
            print(f"  {method:9s} not available: {(said or ['refused'])[-1].strip()[:90]}")
            continue
        try:
            migrate(server.dsn())
            rates, vacuums = [], []
            for _ in range(args.rounds):
                rates.append(drain(server, args.jobs, args.workers, args.batch))
                vacuums.append(cold_vacuum(server))
            print(
                f"  {method:9s} {statistics.median(rates):8.0f} ({min(rates):.0f}-{max(rates):.0f})"
                f"                  {statistics.median(vacuums):.3f}"
            )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
