"""The server's CPU per one-job claim transaction, and where it goes.

Like bench/enqueue_cpu.py, for the other end of the queue: the CPU time (user and system, from
/proc) that the server's backend spends per transaction, one connection sending one statement
per transaction in autocommit, the client waiting for each answer:

    raw claim         an UPDATE of a plain table's oldest PENDING row, picked FOR UPDATE SKIP
                      LOCKED in the same statement (the ceiling)
    job_claim         pyjobq.job_claim(worker, 1): one job, no limits
    worker's claim    the statement the Worker sends: job_claim with job_next_due and
                      job_next_chores in one statement
    job_next_due      alone, in a read-only transaction
    job_next_chores   alone, in a read-only transaction
    select 1          the round trip and an empty transaction

On one throwaway server (default settings), with a backlog of PENDING jobs enough for every
claim, each statement runs ``--jobs`` (2000) transactions per round, rotating over
``--repeat`` (3) rounds; each line shows the median microseconds per transaction, the range,
and the ratio to ``raw claim``.

``.venv/bin/python bench/claim_cpu.py [--jobs 2000] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import statistics

import psycopg

from enqueue_cpu import backend_cpu
from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import migrate
from pyjobq.statements import CLAIM, CLAIM_WITH_NEXT_DUE

PLAIN = (
    "create table plain (id bigserial primary key, status int not null default 1,"
    " worker text, lease_until timestamptz, attempts int not null default 0,"
    " payload jsonb not null default '{}');"
    " create index plain_pending on plain (id) where status = 1"
)
STATEMENTS: dict[str, tuple[str, tuple[object, ...] | None]] = {
    "raw claim": (
        "update plain p set status = 2, worker = 'w1', lease_until = now() + interval '300 s',"
        " attempts = p.attempts + 1"
        " where p.id = (select id from plain where status = 1 order by id limit 1"
        " for update skip locked) returning p.*",
        None,
    ),
    "job_claim": (CLAIM, ("w1", 1, 300, None)),
    "worker's claim": (CLAIM_WITH_NEXT_DUE, (None, "w1", 1, 300, None)),
    "job_next_due": ("select pyjobq.job_next_due(null)", None),
    "job_next_chores": ("select * from pyjobq.job_next_chores()", None),
    "select 1": ("select 1", None),
}
CLAIMS_PER_ROUND = 3  # the statements above that take a job


def per_transaction(
    conn: psycopg.Connection, pid: int, statement: str, params: tuple[object, ...] | None, jobs: int
) -> float:
    """Microseconds of the backend's CPU per transaction running ``statement``."""
    conn.execute(statement, params).fetchall()  # planned, cached, and the connection warm
    before = backend_cpu(pid)
    for _ in range(jobs):
        conn.execute(statement, params).fetchall()
    return (backend_cpu(pid) - before) * 1e6 / jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    backlog = (args.jobs + 1) * args.repeat * CLAIMS_PER_ROUND
    figures: dict[str, list[float]] = {s: [] for s in STATEMENTS}
    with LocalPostgres() as server:
        migrate(server.dsn())
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute(PLAIN)
            conn.execute(
                "insert into plain (status) select 1 from generate_series(1, %s)", (backlog,)
            )
            conn.execute(
                "select count(*) from pyjobq.job_enqueue_many(1,"
                " array(select '{}'::jsonb from generate_series(1, %s)))",
                (backlog,),
            )
            conn.execute("vacuum analyze")
            pid = conn.execute("select pg_backend_pid()").fetchone()[0]  # type: ignore[index]
            version = conn.info.server_version
            for _ in range(args.repeat):
                for name, (statement, params) in STATEMENTS.items():
                    figures[name].append(per_transaction(conn, pid, statement, params, args.jobs))
    ceiling = statistics.median(figures["raw claim"])
    print(
        f"one connection, one statement per transaction, {args.jobs} a round, {args.repeat}"
        f" rounds; PostgreSQL {version // 10000}.{version % 100}, default settings"
    )
    print()
    print("| statement | backend CPU per transaction, µs, median (range) | / raw claim |")
    print("|---|---:|---:|")
    for name, values in figures.items():
        median = statistics.median(values)
        print(
            f"| {name} | {median:,.0f} ({min(values):,.0f} to {max(values):,.0f})"
            f" | {median / ceiling:.2f} |"
        )


if __name__ == "__main__":
    main()
