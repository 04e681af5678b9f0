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

With ``--before REV``, the claims of this schema (``sql/pyjobq.sql``) and of the schema at
commit REV instead, in two databases of the one server, the rounds alternating between them:
``job_claim`` and the Worker's claim each way, and each claim's time in the server as
``track_functions`` counts it (the function's own, the round trip and the commit left out).

``.venv/bin/python bench/claim_cpu.py [--jobs 2000] [--repeat 3] [--before REV]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import psycopg
from psycopg import sql

from backend_cpu import Statement, measure, report, run
from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import migrate
from pyjobq.statements import CLAIM, CLAIM_WITH_NEXT_DUE
from schema_ab import now_and_before

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
CLAIMS = ("job_claim", "worker's claim")
JOB_CLAIM = "pyjobq.job_claim(text, int, int, int[])"


def backlog_of(conn: psycopg.Connection, jobs: int) -> None:
    """``jobs`` PENDING jobs of type 1, enqueued in one call, and the tables analyzed."""
    conn.execute(
        "select count(*) from pyjobq.job_enqueue_many(1,"
        " array(select '{}'::jsonb from generate_series(1, %s)))",
        (jobs,),
    )
    conn.execute("vacuum analyze")


def in_server(conn: psycopg.Connection, statement: Statement, jobs: int) -> float:
    """Microseconds per call that ``job_claim`` took in the server over ``jobs`` transactions
    of ``statement`` (track_functions)."""
    conn.execute("set track_functions = 'pl'")
    conn.execute("select pg_stat_reset_single_function_counters(%s::regprocedure)", (JOB_CLAIM,))
    for _ in range(jobs):
        run(conn, statement)
    conn.execute("select pg_stat_force_next_flush()")
    for _ in range(100):  # the counters reach the view once flushed
        row = conn.execute(
            "select calls, total_time from pg_stat_user_functions where funcid = %s::regprocedure",
            (JOB_CLAIM,),
        ).fetchone()
        if row and row[0] >= jobs:
            return float(row[1]) * 1000 / int(row[0])
        time.sleep(0.05)
    raise SystemExit("claim_cpu: the function counters never reached pg_stat_user_functions")


def before_and_now(rev: str, jobs: int, repeat: int) -> None:
    """The claims of this schema and of the schema at ``rev``, alternating round by round."""
    schemas = now_and_before(rev)
    cpu: dict[str, list[float]] = {}
    server_us: dict[str, list[float]] = {name: [] for name in schemas}
    with LocalPostgres() as pg, psycopg.connect(pg.dsn(), autocommit=True) as admin:
        conns = {}
        for name, schema in schemas.items():
            admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
            conns[name] = psycopg.connect(pg.dsn(name), autocommit=True)
            conns[name].execute(schema)
            backlog_of(conns[name], (jobs + 1) * repeat * 3)
        for round_ in range(repeat):
            for name in ["now", "before"] if round_ % 2 == 0 else ["before", "now"]:
                conn = conns[name]
                picked = {claim: STATEMENTS[claim] for claim in CLAIMS}
                for claim, values in measure(conn, picked, jobs, 1).items():
                    cpu.setdefault(f"{claim}, {name}", []).extend(values)
                server_us[name].append(in_server(conn, STATEMENTS["job_claim"], jobs))
        version = conns["now"].info.server_version
        for conn in conns.values():
            conn.close()
    report(cpu, "job_claim, before", jobs, repeat, version)
    print()
    for name, values in server_us.items():
        print(
            f"job_claim in the server, {name}: {statistics.median(values):,.0f} µs"
            f" ({min(values):,.0f} to {max(values):,.0f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", help="a commit whose schema's claims to compare with")
    args = parser.parse_args()
    if args.before:
        before_and_now(args.before, args.jobs, args.repeat)
        return
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
