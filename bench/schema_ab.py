"""The plain drain of this schema against an earlier one's, on one server, in alternating rounds.

Two databases of one throwaway server get ``sql/pyjobq.sql`` as it is now and as it was at
``--before`` (``git show REV:sql/pyjobq.sql``). Each round, in both (which goes first alternates),
``--jobs`` jobs are enqueued in one call and drained by the loop any client drains with: claim
``--batch``, complete them in one ``job_complete_many`` (bench/sqlloop.py). It prints each
round's jobs/s, each side's median and range, and the per-round ratio now / before: what a change
costs the queue's own SQL on jobs that do not use it, with the machine's drift shared by both;
and each side's WAL bytes per job drained (the server's flushed WAL position around the drain).

``--payload-bytes`` gives each job a payload of about that many bytes (``{"data": "xx…"}``;
0, the default, is ``{}``). ``--job-types 1`` claims with ``p_job_types`` ``{1}``, as a worker
that names its types does, where the default claims every type (null). ``--key-limit N`` gives
type 1 a limit of N running jobs per concurrency key and each job one of ``--keys`` keys in turn,
so that every claim is a limited one.

``.venv/bin/python bench/schema_ab.py --before 3a95d88 [--jobs 20000] [--batch 50] [--rounds 10]
[--payload-bytes 0] [--job-types 1] [--key-limit 1000 [--keys 100]]``
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from pathlib import Path

import psycopg
from psycopg import sql

from pyjobq.localpg import LocalPostgres
from sqlloop import drain_loop, enqueue_empty

ROOT = Path(__file__).resolve().parent.parent


def enqueue(conn: psycopg.Connection[tuple[object, ...]], jobs: int, size: int, keys: int) -> None:
    """``jobs`` jobs of type 1 in one call, each with a payload of about ``size`` bytes, and
    with ``keys``, one of that many concurrency keys each, in turn."""
    if size == 0 and keys == 0:
        enqueue_empty(conn, 1, jobs)
        return
    conn.execute(
        "select count(*) from pyjobq.job_enqueue_many(1, array(select case when %s::int = 0"
        " then '{}'::jsonb else jsonb_build_object('data', repeat('x', %s::int - 12)) end"
        " from generate_series(1, %s::int)), p_concurrency_keys => case when %s::int > 0 then"
        " array(select 'k' || i %% %s::int from generate_series(1, %s::int) i) end)",
        (size, size, jobs, keys, max(keys, 1), jobs),
    )


def now_and_before(rev: str) -> dict[str, str]:
    """The schema as it is now (``sql/pyjobq.sql``) and as it was at commit ``rev``, by name."""
    return {
        "now": (ROOT / "sql" / "pyjobq.sql").read_text(),
        "before": subprocess.run(
            ["git", "show", f"{rev}:sql/pyjobq.sql"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="a commit whose schema to compare with")
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--payload-bytes", type=int, default=0)
    parser.add_argument("--job-types", type=int, nargs="+", help="the claims' p_job_types")
    parser.add_argument("--key-limit", type=int, help="type 1's running jobs per key")
    parser.add_argument("--keys", type=int, default=100, help="keys, with --key-limit")
    args = parser.parse_args()
    keys = args.keys if args.key_limit else 0
    schemas = now_and_before(args.before)
    rates: dict[str, list[float]] = {name: [] for name in schemas}
    wal: dict[str, list[float]] = {name: [] for name in schemas}
    flushed = "select pg_current_wal_flush_lsn()::text"
    with LocalPostgres() as pg, psycopg.connect(pg.dsn(), autocommit=True) as admin:
        for name, schema in schemas.items():
            admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
            with psycopg.connect(pg.dsn(name), autocommit=True) as conn:
                conn.execute(schema)
                if args.key_limit:
                    conn.execute(
                        "select pyjobq.job_type_set_limits(1, p_key_max_running => %s)",
                        (args.key_limit,),
                    )
        for round_ in range(args.rounds):
            order = ["now", "before"] if round_ % 2 == 0 else ["before", "now"]
            for name in order:
                with psycopg.connect(pg.dsn(name), autocommit=True) as conn:
                    # A schema before the history (27) has the job table alone.
                    history = conn.execute("select to_regclass('pyjobq.job_history')").fetchone()
                    tables = (
                        "pyjobq.job, pyjobq.job_history" if history and history[0] else "pyjobq.job"
                    )
                    conn.execute(f"truncate {tables}")
                    conn.execute(f"vacuum analyze {tables}")
                    enqueue(conn, args.jobs, args.payload_bytes, keys)
                    start = conn.execute(flushed).fetchone()
                    started = time.perf_counter()
                    done = drain_loop(conn, "ab", args.batch, args.job_types).jobs
                    rates[name].append(done / (time.perf_counter() - started))
                    written = conn.execute(
                        f"select pg_wal_lsn_diff(({flushed})::pg_lsn, %s)", start
                    ).fetchone()
                    wal[name].append(float(written[0]) / done if written else 0.0)
            print(
                f"round {round_ + 1}: now {rates['now'][-1]:,.0f}, before "
                f"{rates['before'][-1]:,.0f} jobs/s",
                flush=True,
            )
    for name, values in rates.items():
        print(
            f"{name:<7} median {statistics.median(values):,.0f} jobs/s"
            f" ({min(values):,.0f}-{max(values):,.0f}),"
            f" WAL {statistics.median(wal[name]):,.0f} B/job"
        )
    ratios = [a / b for a, b in zip(rates["now"], rates["before"], strict=True)]
    print(
        f"now / before per round: median {statistics.median(ratios):.3f}"
        f" ({min(ratios):.3f}-{max(ratios):.3f})"
    )


if __name__ == "__main__":
    main()
