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

import psycopg

from backend_cpu import Statement, measure, report
from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import migrate
from pyjobq.statements import CLAIM, CLAIM_WITH_NEXT_DUE

PLAIN = (
    "create table plain (id bigserial primary key, status int not null default 1,"
    " worker text, lease_until timestamptz, attempts int not null default 0,"
    " payload jsonb not null default '{}');"
    " create index plain_pending on plain (id) where status = 1"
)
STATEMENTS: dict[str, Statement] = {
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    backlog = (args.jobs + 1) * args.repeat * CLAIMS_PER_ROUND
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
            figures = measure(conn, STATEMENTS, args.jobs, args.repeat)
            version = conn.info.server_version
    report(figures, "raw claim", args.jobs, args.repeat, version)


if __name__ == "__main__":
    main()
