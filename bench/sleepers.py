"""Sleeping jobs against the drain and the claim of other jobs, on one server, alternating rounds.

A sleeping job (a snooze, an event wait) is a PENDING row of ``pyjobq.job`` whose ``run_after``
lies in the future: no lease, no worker, no lock. This measures what a crowd of them costs the
jobs that are due. Two databases of one throwaway server (default settings) get
``sql/pyjobq.sql`` as it is now. In ``B`` alone, ``--sleepers`` (100000) jobs of type 2 are put to
sleep the way a handler's snooze leaves them: enqueued, claimed ``--sleeper-batch`` at a time
(``job_claim`` with ``p_job_types`` ``{2}``), and each claimed batch ended by ``job_finish_many``
with outcome ``snoozed`` and a delay of a day, so they are PENDING, due tomorrow, snoozes = 1.
Both databases are then ``VACUUM ANALYZE``d, and ``A`` stays without sleepers.

Each round, in both (which goes first alternates), ``--jobs`` jobs of type 1 are enqueued in one
call and drained by bench/sqlloop.py's loop (claim ``--batch`` of type 1, or of any type with
``--any-type``, and complete them with one ``job_complete_many``), timed. It prints each round's
jobs/s, each side's median and range, and the per-round ratio B / A.

Then, in each database, ``--claims`` (200) one-job claims, ``job_claim('w', 1, null, {1})`` and
``job_claim('w', 1)`` (every registered type, so type 2 as well in B): with a job of type 1 due
(each claimed job completed before the next claim), and with nothing due (what an idle worker's
poll costs: the scan passes every sleeper), and ``job_next_due(null)``, which an idle worker sends
with its claim. Each is timed twice, one statement per autocommit transaction: the client's round
trip, and the server's ``Execution Time`` from ``EXPLAIN (ANALYZE, TIMING OFF)`` of the same
statement; the medians are printed. It prints the size of ``pyjobq.job`` and its indexes in both
databases (``pg_total_relation_size``) before and after the rounds, and at the end counts B's
sleepers still PENDING with neither worker nor lease.

``--explain`` also prints the plans of the statements inside ``job_claim`` that read
``job_claim_idx`` (``auto_explain`` at NOTICE level, nested statements, ANALYZE and BUFFERS) for
one claim with nothing due in each database.

``.venv/bin/python bench/sleepers.py [--sleepers 100000] [--jobs 20000] [--batch 50] [--rounds 6]
[--claims 200] [--any-type] [--explain]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg
from psycopg import sql

from pyjobq.localpg import LocalPostgres
from sqlloop import Conn, drain_loop, enqueue_empty

ROOT = Path(__file__).resolve().parent.parent
DATABASES = {"A": "no sleepers", "B": "sleepers"}
SLEEP_SECONDS = 86400.0
ENQUEUE_MAX = 100000  # job_enqueue_many's most per call


def make_sleepers(conn: Conn, count: int, batch: int) -> int:
    """``count`` jobs of type 2 enqueued, claimed ``batch`` at a time and snoozed for a day."""
    left = count
    while left > 0:
        enqueue_empty(conn, 2, min(left, ENQUEUE_MAX))
        left -= min(left, ENQUEUE_MAX)
    snoozed = 0
    while rows := conn.execute(
        "select job_id, attempt, lease_token from pyjobq.job_claim('sleeper', %s::int, null,"
        " array[2])",
        (batch,),
    ).fetchall():
        ended = conn.execute(
            "select count(*) filter (where status = 1) from pyjobq.job_finish_many('sleeper',"
            " %s::uuid[], %s::int[], array_fill('snoozed'::text, array[%s::int]), null, null,"
            " array_fill(%s::float8, array[%s::int]), %s::uuid[])",
            (
                [r[0] for r in rows],
                [r[1] for r in rows],
                len(rows),
                SLEEP_SECONDS,
                len(rows),
                [r[2] for r in rows],
            ),
        ).fetchone()
        snoozed += int(ended[0]) if ended else 0
    return snoozed


def sizes(conn: Conn) -> str:
    """``pyjobq.job``: all of it, the heap, the indexes, and job_claim_idx alone."""
    row = conn.execute(
        "select pg_size_pretty(pg_total_relation_size('pyjobq.job')),"
        " pg_size_pretty(pg_relation_size('pyjobq.job')),"
        " pg_size_pretty(pg_indexes_size('pyjobq.job')),"
        " pg_size_pretty(pg_relation_size('pyjobq.job_claim_idx')),"
        " (select count(*) from pyjobq.job)"
    ).fetchone()
    assert row is not None
    return (
        f"total {row[0]} (heap {row[1]}, indexes {row[2]}, job_claim_idx {row[3]}), {row[4]} rows"
    )


def server_ms(conn: Conn, statement: str, params: Sequence[object]) -> float:
    """The ``Execution Time`` of ``statement`` under EXPLAIN (ANALYZE, TIMING OFF)."""
    plan = conn.execute(
        "explain (analyze, timing off, summary on, format json) " + statement, params
    ).fetchone()
    assert plan is not None
    return float(plan[0][0]["Execution Time"])


CLAIM = "select job_id, attempt from pyjobq.job_claim('w', 1, null, %s::int[])"
COMPLETE = "select count(*) from pyjobq.job_complete_many('w', %s::uuid[], %s::int[])"
CASES = ("one due", "drained", "idle", "job_next_due")


def time_calls(conn: Conn, claims: int, types: list[int] | None) -> dict[str, list[list[float]]]:
    """Round trip and server ms (``[trips, server]``) of a one-job claim of ``types``: with a
    type-1 job due (completed before the next claim); with nothing due right after claiming and
    completing the only due job (the session's claim front live, as for the last claim of a
    drain); with nothing due and no front (an idle worker's poll); and of job_next_due(null)."""
    samples: dict[str, list[list[float]]] = {case: [[], []] for case in CASES}

    def timed(case: str, statement: str, params: Sequence[object], claimed: int | None) -> None:
        started = time.perf_counter()
        rows = conn.execute(statement, params).fetchall()
        samples[case][0].append((time.perf_counter() - started) * 1000)
        if claimed is not None:
            assert len(rows) == claimed, (case, rows)
            complete_held(conn)
        samples[case][1].append(server_ms(conn, statement, params))
        if claimed is not None:
            complete_held(conn)

    enqueue_empty(conn, 1, 2 * claims)
    conn.execute("vacuum analyze pyjobq.job")
    for _ in range(claims):
        timed("one due", CLAIM, (types,), 1)
    for _ in range(claims):
        enqueue_empty(conn, 1, 1)
        rows = conn.execute(CLAIM, (types,)).fetchall()
        conn.execute(COMPLETE, ([r[0] for r in rows], [r[1] for r in rows]))
        timed("drained", CLAIM, (types,), 0)
    conn.execute(
        "select pg_sleep(1.1)"
    )  # the front has lived its second; an empty claim writes none
    for _ in range(claims):
        timed("idle", CLAIM, (types,), 0)
        timed("job_next_due", "select pyjobq.job_next_due(null)", (), None)
    left = conn.execute("select count(*) from pyjobq.job where job_type = 1").fetchone()
    assert left is not None
    assert left[0] == 0, left
    return samples


def complete_held(conn: Conn) -> None:
    """Complete every job that worker ``w`` holds (found through job_lease_idx)."""
    held = conn.execute(
        "select array_agg(job_id), array_agg(attempts) from pyjobq.job"
        " where lease_until is not null and worker_id = 'w'"
    ).fetchone()
    if held and held[0]:
        conn.execute(COMPLETE, (held[0], held[1]))


def explain_empty_claims(conn: Conn, types: list[int] | None) -> None:
    """The plans inside job_claim that read job_claim_idx, condensed, for a claim with nothing
    due right after claiming the only due job (front live), and one a second later (no front)."""
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    conn.execute("load 'auto_explain'")
    settings = {
        "log_nested_statements": "on",
        "log_analyze": "on",
        "log_buffers": "on",
        "log_timing": "on",
        "log_level": "notice",
    }
    for setting, value in settings.items():
        conn.execute("select set_config(%s, %s, false)", (f"auto_explain.{setting}", value))
    enqueue_empty(conn, 1, 1)
    rows = conn.execute(CLAIM, (types,)).fetchall()
    conn.execute(COMPLETE, ([r[0] for r in rows], [r[1] for r in rows]))
    for label in ("drained, front live", "idle, no front"):
        if label.startswith("idle"):
            conn.execute("select pg_sleep(1.1)")
        notices.clear()
        conn.execute("select set_config('auto_explain.log_min_duration', '0', false)")
        conn.execute(CLAIM, (types,)).fetchall()
        conn.execute("select set_config('auto_explain.log_min_duration', '-1', false)")
        print(f"  {label}:")
        for notice in notices:
            if "Index Scan using job_claim_idx" not in notice:
                continue
            node = False  # within an index scan of job_claim_idx: its detail lines follow
            for line in notice.splitlines():
                if "->" in line or "CTE " in line:
                    node = "Index Scan using job_claim_idx" in line
                if node or "CTE " in line or line.startswith("duration"):
                    print("    " + line.rstrip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sleepers", type=int, default=100000)
    parser.add_argument("--sleeper-batch", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--claims", type=int, default=200, help="calls timed per case and round")
    parser.add_argument("--claim-rounds", type=int, default=2)
    parser.add_argument(
        "--any-type", action="store_true", help="drain with p_job_types null (every type)"
    )
    parser.add_argument("--explain", action="store_true")
    args = parser.parse_args()
    schema = (ROOT / "sql" / "pyjobq.sql").read_text()
    drain_types = None if args.any_type else [1]
    rates: dict[str, list[float]] = {name: [] for name in DATABASES}
    with LocalPostgres() as pg, psycopg.connect(pg.dsn(), autocommit=True) as admin:
        for name in DATABASES:
            admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
            with psycopg.connect(pg.dsn(name), autocommit=True) as conn:
                conn.execute(schema)
        with psycopg.connect(pg.dsn("B"), autocommit=True) as conn:
            version = conn.execute("select pyjobq.schema_version()").fetchone()
            print(f"schema {version[0] if version else '?'} (sql/pyjobq.sql as it is now)")
            started = time.perf_counter()
            snoozed = make_sleepers(conn, args.sleepers, args.sleeper_batch)
            took = time.perf_counter() - started
            print(f"B: {snoozed:,} sleepers snoozed for a day in {took:.1f} s", flush=True)
        for name in DATABASES:
            with psycopg.connect(pg.dsn(name), autocommit=True) as conn:
                conn.execute("vacuum analyze pyjobq.job, pyjobq.job_history")
                print(f"{name} ({DATABASES[name]}) before: pyjobq.job {sizes(conn)}", flush=True)

        for round_ in range(args.rounds):
            order = list(DATABASES) if round_ % 2 == 0 else list(reversed(DATABASES))
            for name in order:
                with psycopg.connect(pg.dsn(name), autocommit=True) as conn:
                    # The job table keeps B's sleepers: vacuumed, not truncated, on both sides.
                    conn.execute("truncate pyjobq.job_history")
                    conn.execute("vacuum analyze pyjobq.job, pyjobq.job_history")
                    enqueue_empty(conn, 1, args.jobs)
                    started = time.perf_counter()
                    done = drain_loop(conn, "sl", args.batch, drain_types).jobs
                    rates[name].append(done / (time.perf_counter() - started))
                    assert done == args.jobs, (name, done)
            print(
                f"round {round_ + 1}: A {rates['A'][-1]:,.0f}, B {rates['B'][-1]:,.0f} jobs/s,"
                f" B / A {rates['B'][-1] / rates['A'][-1]:.3f}",
                flush=True,
            )

        for name in DATABASES:
            with psycopg.connect(pg.dsn(name), autocommit=True) as conn:
                conn.execute("truncate pyjobq.job_history")
                conn.execute("vacuum analyze pyjobq.job, pyjobq.job_history")
                print(f"{name} ({DATABASES[name]}) after:  pyjobq.job {sizes(conn)}", flush=True)
        # (database, p_job_types) -> case -> [round trips, server times], every round's samples
        claims: dict[tuple[str, str], dict[str, list[list[float]]]] = {}
        for round_ in range(args.claim_rounds):
            order = list(DATABASES) if round_ % 2 == 0 else list(reversed(DATABASES))
            for name in order:
                with psycopg.connect(pg.dsn(name), autocommit=True) as conn:
                    for label, types in (("{1}", [1]), ("null", None)):
                        got = time_calls(conn, args.claims, types)
                        into = claims.setdefault((name, label), {c: [[], []] for c in CASES})
                        for case, (trips, server) in got.items():
                            into[case][0].extend(trips)
                            into[case][1].extend(server)
        if args.explain:
            for name in DATABASES:
                with psycopg.connect(pg.dsn(name), autocommit=True) as conn:
                    print(
                        f"{name} ({DATABASES[name]}): job_claim('w', 1, null, {{1}}), nothing due"
                    )
                    explain_empty_claims(conn, [1])

        with psycopg.connect(pg.dsn("B"), autocommit=True) as conn:
            row = conn.execute(
                "select count(*), count(*) filter (where status = 1 and worker_id is null"
                " and lease_until is null and snoozes = 1"
                " and run_after > now() + interval '23 hours'),"
                " count(*) filter (where lease_token is not null),"
                " (select count(*) from pg_locks l where l.relation = 'pyjobq.job'::regclass"
                " and l.pid <> pg_backend_pid())"
                " from pyjobq.job where job_type = 2"
            ).fetchone()
            assert row is not None
            print(
                f"B sleepers: {row[0]:,} of type 2, {row[1]:,} of them PENDING, due in more than"
                f" 23 h, snoozes = 1, no worker_id, no lease_until ({row[2]:,} keep their last"
                f" attempt's lease_token); locks on pyjobq.job held by other sessions: {row[3]}"
            )

    what = "any type" if args.any_type else "type 1"
    print(f"\ndrain of {args.jobs:,} jobs ({what}, claim {args.batch}), {args.rounds} rounds:")
    for name, values in rates.items():
        print(
            f"{name} ({DATABASES[name]:<11}) median {statistics.median(values):,.0f} jobs/s"
            f" ({min(values):,.0f}-{max(values):,.0f})"
        )
    ratios = [b / a for a, b in zip(rates["A"], rates["B"], strict=True)]
    print(
        f"B / A per round: median {statistics.median(ratios):.3f}"
        f" ({min(ratios):.3f}-{max(ratios):.3f})"
    )
    print(
        f"\none call, ms, median of {args.claims * args.claim_rounds} (p90): round trip | server"
        " (EXPLAIN ANALYZE Execution Time); one statement per autocommit transaction"
    )
    for case in CASES:
        print(f"  {case}:")
        for (name, label), figures in claims.items():
            trips, server = figures[case]
            where = f"in the {label} pass" if case == "job_next_due" else f"p_job_types {label}"
            print(
                f"    {name} ({DATABASES[name]:<11}) {where:<16}"
                f" {statistics.median(trips):6.3f} ({percentile(trips, 0.9):6.3f})"
                f" | {statistics.median(server):6.3f} ({percentile(server, 0.9):6.3f})"
            )


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(p * len(ordered) + 0.999999) - 1))]


if __name__ == "__main__":
    main()
