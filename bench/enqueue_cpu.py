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

import psycopg

from backend_cpu import Statement, measure, report
from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import migrate

PLAIN = (
    "create table plain"
    " (id bigserial primary key, payload jsonb, created_at timestamptz default now())"
)
STATEMENTS: dict[str, Statement] = {
    "insert": ("insert into plain (payload) values ('{}')", None),
    "job row": (
        "insert into pyjobq.job (job_id, job_type, payload, run_after, created_at, updated_at)"
        " values (gen_random_uuid(), 1, '{}', now(), now(), now())",
        None,
    ),
    "job_enqueue": ("select pyjobq.job_enqueue(1, '{}')", None),
    "with a key": (
        "select pyjobq.job_enqueue(1, '{}', p_dedupe_key => gen_random_uuid()::text)",
        None,
    ),
    "select 1": ("select 1", None),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with LocalPostgres() as server:
        migrate(server.dsn())
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute(PLAIN)
            figures = measure(conn, STATEMENTS, args.jobs, args.repeat)
            version = conn.info.server_version
    report(figures, "insert", args.jobs, args.repeat, version)


if __name__ == "__main__":
    main()
