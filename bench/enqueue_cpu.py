"""The server's CPU per single-job enqueue transaction, and where it goes.

bench/producers.py measures what 16 producers commit per second, a figure that the client
processes, the scheduler and the disk share. This measures one thing: the CPU time (user and
system, from /proc) that the server's backend spends per transaction, one connection sending
one statement per transaction in autocommit. The client waits for each answer, so its own CPU
is not counted; the commit's flush is, as the backend's system time.

    insert           an INSERT into a plain table with a bigserial key (the ceiling)
    job row          an INSERT of a PENDING row into pyjobq.job as its owner: what the table
                     itself costs (its ten indexes, seven checks), without the SQL API
    job_enqueue      pyjobq.job_enqueue(1, '{}'): no worker asleep, so no NOTIFY
    with a key       job_enqueue with a dedupe key
    select 1         the round trip and an empty transaction

On one throwaway server (default settings), each statement runs ``--jobs`` (3000)
transactions per round, rotating over ``--repeat`` (5) rounds; each line shows the median
microseconds per transaction, the range, and the ratio to ``insert``.

``.venv/bin/python bench/enqueue_cpu.py [--jobs 3000] [--repeat 5]``
"""

from __future__ import annotations

import argparse
import os
import statistics

import psycopg

from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import migrate

PLAIN = (
    "create table plain"
    " (id bigserial primary key, payload jsonb, created_at timestamptz default now())"
)
STATEMENTS = {
    "insert": "insert into plain (payload) values ('{}')",
    "job row": (
        "insert into pyjobq.job (job_id, job_type, payload, run_after, created_at, updated_at)"
        " values (gen_random_uuid(), 1, '{}', now(), now(), now())"
    ),
    "job_enqueue": "select pyjobq.job_enqueue(1, '{}')",
    "with a key": "select pyjobq.job_enqueue(1, '{}', p_dedupe_key => gen_random_uuid()::text)",
    "select 1": "select 1",
}
TICK = os.sysconf("SC_CLK_TCK")


def backend_cpu(pid: int) -> float:
    """Seconds of CPU (user + system) that process ``pid`` has used."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def per_transaction(conn: psycopg.Connection, pid: int, statement: str, jobs: int) -> float:
    """Microseconds of the backend's CPU per transaction running ``statement``."""
    conn.execute(statement)  # planned, cached, and the connection warm
    before = backend_cpu(pid)
    for _ in range(jobs):
        conn.execute(statement)
    return (backend_cpu(pid) - before) * 1e6 / jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    figures: dict[str, list[float]] = {s: [] for s in STATEMENTS}
    with LocalPostgres() as server:
        migrate(server.dsn())
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute(PLAIN)
            pid = conn.execute("select pg_backend_pid()").fetchone()[0]  # type: ignore[index]
            version = conn.info.server_version
            for _ in range(args.repeat):
                for name, statement in STATEMENTS.items():
                    figures[name].append(per_transaction(conn, pid, statement, args.jobs))
    ceiling = statistics.median(figures["insert"])
    print(
        f"one connection, one statement per transaction, {args.jobs} a round, {args.repeat}"
        f" rounds; PostgreSQL {version // 10000}.{version % 100}, default settings"
    )
    print()
    print("| statement | backend CPU per transaction, µs, median (range) | / insert |")
    print("|---|---:|---:|")
    for name, values in figures.items():
        median = statistics.median(values)
        print(
            f"| {name} | {median:,.0f} ({min(values):,.0f} to {max(values):,.0f})"
            f" | {median / ceiling:.2f} |"
        )


if __name__ == "__main__":
    main()
