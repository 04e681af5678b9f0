"""The raw-SQL ceiling: what PostgreSQL itself allows on this server, per scenario.

The enqueue ceiling is COPY into pyjobq.job itself and one INSERT into a plain
table; the drain ceiling is pgbench running bench/ceiling/*.sql, the simplest
queue that is still a queue. The figures carry the system name CEILING, so the
report can give every other figure as a ratio to them.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from cluster import db_name
from context import Context
from figures import Figure
from systems import BENCH, CEILING, DRIVER_TIMEOUT_S, DriverError

SCRIPTS = BENCH / "ceiling"


@dataclass(frozen=True, kw_only=True)
class PgbenchRun:
    """What one pgbench run reports. Both are floats, as the result files always held them."""

    tps: float
    transactions: float


def pgbench(ctx: Context, dbname: str, script: str, clients: int, *extra: str) -> PgbenchRun:
    """Run bench/ceiling/``script`` with ``clients`` clients, prepared statements."""
    info = ctx.cluster.conninfo(dbname)
    argv = [
        str(ctx.cluster.program("pgbench")),
        "-n",
        "-M",
        "prepared",
        "-c",
        str(clients),
        "-j",
        str(min(clients, os.cpu_count() or 1)),
        "-f",
        str(SCRIPTS / script),
        *extra,
        "-h",
        info.get("host", ""),
        "-p",
        info.get("port", "5432"),
        "-U",
        info.get("user", ""),
        dbname,
    ]
    env = {**os.environ, **({"PGPASSWORD": info["password"]} if "password" in info else {})}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=DRIVER_TIMEOUT_S)
    if proc.returncode != 0:
        raise DriverError(
            f"pgbench {script} exited {proc.returncode}:\n"
            + proc.stdout[-2000:]
            + proc.stderr[-2000:]
        )
    tps = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", proc.stdout)
    done = re.search(r"number of transactions actually processed: (\d+)", proc.stdout)
    if not tps or not done:
        raise DriverError(f"cannot read pgbench output:\n{proc.stdout}")
    return PgbenchRun(tps=float(tps.group(1)), transactions=float(done.group(1)))


def ceiling_enqueue(ctx: Context) -> list[Figure]:
    return [ceiling_copy(ctx), ceiling_insert(ctx)]


def ceiling_copy(ctx: Context) -> Figure:
    """COPY N rows into pyjobq.job itself: its indexes, defaults and checks, no function."""
    from pyjobq.migrate import migrate

    n = ctx.options.enqueue_jobs
    with ctx.cluster.fresh_database(db_name(CEILING, "copy")) as db:
        migrate(ctx.cluster.dsn(db))
        ctx.cluster.settle(db)
        data = (
            b"1\t{}\t2000-01-01 00:00:00+00\t2000-01-01 00:00:00+00\t2000-01-01 00:00:00+00\n" * n
        )
        with ctx.cluster.connect(db) as conn:
            started = time.perf_counter()
            with (
                conn.cursor() as cur,
                cur.copy(
                    "copy pyjobq.job (job_type, payload, run_after, created_at, updated_at)"
                    " from stdin"
                ) as copy,
            ):
                copy.write(data)
            seconds = time.perf_counter() - started
    return Figure(
        scenario="enqueue",
        system=CEILING,
        metric=f"COPY N={n} rows into pyjobq.job",
        unit="jobs/s",
        value=n / seconds,
        better="higher",
        detail={"seconds": seconds},
    )


def ceiling_schema(ctx: Context, dbname: str) -> None:
    """The plain tables of bench/ceiling/schema.sql, empty."""
    with ctx.cluster.connect(dbname) as conn:
        conn.execute((SCRIPTS / "schema.sql").read_text())


def ceiling_insert(ctx: Context) -> Figure:
    """One INSERT ... SELECT of N rows into a plain table: no queue can enqueue faster."""
    n = ctx.options.enqueue_jobs
    with ctx.cluster.fresh_database(db_name(CEILING, "enqueue")) as db:
        ceiling_schema(ctx, db)
        ctx.cluster.settle(db)
        with ctx.cluster.connect(db) as conn:
            started = time.perf_counter()
            conn.execute(
                "insert into ceiling_job (payload) select '{}' from generate_series(1, %s)", (n,)
            )
            seconds = time.perf_counter() - started
    return Figure(
        scenario="enqueue",
        system=CEILING,
        metric=f"insert N={n} rows into a plain table, one statement",
        unit="jobs/s",
        value=n / seconds,
        better="higher",
        detail={"seconds": seconds},
    )


def ceiling_drain(ctx: Context) -> list[Figure]:
    """Per W: the SKIP LOCKED claim-1 + complete loop, and UPDATE by primary key beside it.

    The UPDATE is the cheapest write transaction there is: it shows the commit
    (WAL flush) rate that bounds any design committing once per job.
    """
    n, seconds = ctx.options.jobs, ctx.options.ceiling_seconds
    figures = []
    for w in ctx.options.workers:
        with ctx.cluster.fresh_database(db_name(CEILING, f"drain{w}")) as db:
            ceiling_schema(ctx, db)
            with ctx.cluster.connect(db) as conn:
                conn.execute("insert into ceiling_counter (id) select generate_series(1, %s)", (n,))
                conn.execute(
                    "insert into ceiling_job (payload) select '{}' from generate_series(1, %s)",
                    (n,),
                )
            ctx.cluster.settle(db, analyze=True)
            upd = pgbench(ctx, db, "update_by_pk.sql", w, "-T", str(seconds), "-D", f"rows={n}")
            ctx.cluster.settle(db)
            per_client = n // w
            started = time.perf_counter()
            cyc = pgbench(ctx, db, "claim_complete.sql", w, "-t", str(per_client))
            wall = time.perf_counter() - started
            with ctx.cluster.connect(db) as conn:
                row = conn.execute(
                    "select count(*) filter (where state = 'done') from ceiling_job"
                ).fetchone()
            done = int(row[0]) if row else 0
            if done != per_client * w:
                raise DriverError(
                    f"ceiling claim/complete finished {done} of {per_client * w} jobs"
                )
        figures += [
            Figure(
                scenario=f"drain W={w}",
                system=CEILING,
                metric=f"SKIP LOCKED claim-1 + complete, N={done} W={w}",
                unit="jobs/s",
                value=cyc.tps,
                better="higher",
                detail={**asdict(cyc), "wall_s": wall, "done": done},
            ),
            Figure(
                scenario=f"update-by-pk W={w}",
                system=CEILING,
                metric=f"UPDATE by primary key, {seconds}s W={w}",
                unit="tps",
                value=upd.tps,
                better="higher",
                detail=asdict(upd),
            ),
        ]
    return figures


CEILINGS: dict[str, Callable[[Context], list[Figure]]] = {
    "enqueue": ceiling_enqueue,
    "drain": ceiling_drain,
}
