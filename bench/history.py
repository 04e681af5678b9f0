"""History that grows without slowing anything: the claim and the drain on an empty history and
on one of ``--history`` finished jobs (50 M by default), job_prune of the oldest day, and what a
day of retention costs in table and WAL.

One throwaway server. First, with an empty history: ``--rounds`` drains of ``--jobs`` no-op jobs
by ``--workers`` connections looping the SQL API's drain (bench/sqlloop.py), each timed with the
WAL it wrote, and the claim's cost: ``--cycles`` of claim(10) + complete_many on one connection
with ``--pending`` jobs due. Then ``--history`` DONE jobs are written straight into job_history,
as many on each of ``--days`` days before today (each day's partition made first by
``_history_day``, as job_history_maintain makes them), and VACUUM ANALYZEd; the same drains and
claim cost run again. Last, ``job_prune`` cuts off the oldest day: how long it took, what it
returned, the WAL it wrote and the dead rows it left for vacuum, and the autovacuum workers seen
in the ``--settle`` seconds after it. For comparison, retention as it was before: ``--row-prune``
DONE jobs of a day without a partition deleted by job_prune's row path, and the VACUUM after.

``.venv/bin/python bench/history.py [--history 50000000] [--days 5] [--jobs 100000]
[--workers 8] [--rounds 3] [--pending 100000] [--cycles 2000] [--settle 30]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import migrate
from sqlloop import drain_all, enqueue_empty

Conn = psycopg.Connection[Any]

SETTINGS = {
    "shared_buffers": "2GB",
    "max_wal_size": "16GB",
    "checkpoint_timeout": "30min",
    "max_connections": "100",
}

# One day's DONE jobs, written as completions leave them: time-ordered ids, ended evenly
# across the day.
LOAD_DAY = """
insert into pyjobq.job_history
  (job_id, job_type, status, priority, payload, result, attempts, max_attempts, run_after,
   worker_id, run_started_at, created_at, updated_at, seq, attempts_refunded, notify_done,
   has_dependants)
select n.job_id, 1, 3, 100, '{}', '{"ok": true}', 1, 3, t.at, 'bench', t.at, t.at, t.at, n.seq,
       0, false, false
  from pyjobq._new_job_ids(%(day)s, %(n)s) with ordinality as n(seq, job_id, g)
 cross join lateral (select %(day)s::timestamptz
                            + (n.g * (86400000000 / %(n)s)) * interval '1 microsecond' as at) t
"""


def wal_lsn(conn: Conn) -> int:
    row = conn.execute("select pg_current_wal_lsn() - '0/0'").fetchone()
    assert row is not None
    return int(row[0])


def drain(server: LocalPostgres, jobs: int, workers: int) -> tuple[float, float]:
    """(jobs/s, WAL bytes per job) of one drain of ``jobs`` enqueued beforehand."""
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        enqueue_empty(conn, 2, jobs)
        conn.execute("vacuum analyze pyjobq.job")
        conns = [psycopg.connect(server.dsn(), autocommit=True) for _ in range(workers)]
        try:
            before = wal_lsn(conn)
            started = time.perf_counter()
            done = drain_all(conns, "bench", 50).jobs
            took = time.perf_counter() - started
            wal = wal_lsn(conn) - before
        finally:
            for c in conns:
                c.close()
    assert done == jobs, (done, jobs)
    return jobs / took, wal / jobs


def claim_cost(server: LocalPostgres, pending: int, cycles: int) -> float:
    """Median ms of claim(10) + complete_many on one connection, ``pending`` jobs due."""
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        enqueue_empty(conn, 2, pending)
        conn.execute("vacuum analyze pyjobq.job")
        samples = []
        for _ in range(cycles):
            started = time.perf_counter()
            held = conn.execute(
                "select job_id, attempt from pyjobq.job_claim('cost', 10)"
            ).fetchall()
            conn.execute(
                "select count(*) from pyjobq.job_complete_many('cost', %s::uuid[], %s::int[])",
                ([r[0] for r in held], [r[1] for r in held]),
            )
            samples.append((time.perf_counter() - started) * 1000)
        # What is left goes, so that the next measurement starts from no pending job.
        drain_all([conn], "rest", 1000)
    return statistics.median(samples)


def measure(
    server: LocalPostgres, args: argparse.Namespace, label: str
) -> tuple[list[tuple[float, float]], float]:
    drains = [drain(server, args.jobs, args.workers) for _ in range(args.rounds)]
    cost = claim_cost(server, args.pending, args.cycles)
    rates = ", ".join(f"{r:,.0f}" for r, _ in drains)
    wal = statistics.median(w for _, w in drains)
    print(
        f"{label}: drain {rates} jobs/s (W={args.workers}), WAL {wal:.0f} B/job;"
        f" claim(10) + complete_many {cost:.3f} ms",
        flush=True,
    )
    return drains, cost


def load(conn: Conn, history: int, days: int) -> None:
    """``history`` DONE jobs over the ``days`` days before today, each in its partition."""
    today = datetime.now(UTC).date()
    per_day = history // days
    for back in range(days, 0, -1):
        day = today - timedelta(days=back)
        conn.execute("select pyjobq._history_day(%s)", (day,))
        started = time.perf_counter()
        before = wal_lsn(conn)
        conn.execute(
            LOAD_DAY, {"day": datetime(day.year, day.month, day.day, tzinfo=UTC), "n": per_day}
        )
        wal = wal_lsn(conn) - before
        print(
            f"  {day}: {per_day:,} jobs in {time.perf_counter() - started:.0f} s,"
            f" WAL {wal / per_day:.0f} B/job",
            flush=True,
        )
    started = time.perf_counter()
    conn.execute("vacuum analyze pyjobq.job_history")
    print(f"  vacuum analyze: {time.perf_counter() - started:.0f} s", flush=True)
    sizes = conn.execute(
        "select c.relname::text, pg_relation_size(c.oid), pg_indexes_size(c.oid),"
        " c.reltuples::bigint from pg_partition_tree('pyjobq.job_history') t"
        " join pg_class c on c.oid = t.relid where t.isleaf order by 1"
    ).fetchall()
    for name, heap, indexes, rows in sizes:
        if rows > 0:
            print(
                f"  {name}: {rows:,} rows, heap {heap / 2**20:,.0f} MiB, indexes"
                f" {indexes / 2**20:,.0f} MiB, {(heap + indexes) / rows:.0f} B/job"
            )


def dead_rows(conn: Conn) -> int:
    conn.execute("select pg_stat_force_next_flush()")
    conn.execute("select pg_stat_clear_snapshot()")
    row = conn.execute("select coalesce(sum(n_dead_tup), 0) from pg_stat_user_tables").fetchone()
    assert row is not None
    return int(row[0])


def prune_rows(conn: Conn, rows: int, days: int) -> None:
    """Retention as it was before the history had partitions: ``rows`` DONE jobs of a day that
    has no partition (so in the default one) deleted by job_prune's row path, 100,000 a call,
    then the VACUUM that cleans up after them."""
    day = datetime.now(UTC).date() - timedelta(days=days + 10)
    conn.execute(LOAD_DAY, {"day": datetime(day.year, day.month, day.day, tzinfo=UTC), "n": rows})
    conn.execute("vacuum analyze pyjobq.job_history_default")
    age = datetime.now(UTC) - datetime(day.year, day.month, day.day, tzinfo=UTC) - timedelta(days=1)
    before = wal_lsn(conn)
    started = time.perf_counter()
    deleted = 0
    while True:
        row = conn.execute("select pyjobq.job_prune(%s, 100000)", (age,)).fetchone()
        deleted += int(row[0]) if row else 0
        if not row or row[0] < 100000:
            break
    took = time.perf_counter() - started
    wal = wal_lsn(conn) - before
    before = wal_lsn(conn)
    started = time.perf_counter()
    conn.execute("vacuum pyjobq.job_history_default")
    vacuumed = time.perf_counter() - started
    vacuum_wal = wal_lsn(conn) - before
    print(
        f"row by row (the default partition, as before schema 27): {deleted:,} jobs in"
        f" {took:.1f} s, WAL {wal / max(deleted, 1):.0f} B/job; then VACUUM {vacuumed:.1f} s,"
        f" WAL {vacuum_wal / max(deleted, 1):.0f} B/job",
        flush=True,
    )


def prune(conn: Conn, settle: int) -> None:
    """job_prune with the cutoff at the end of the oldest loaded day."""
    oldest = conn.execute(
        "select min(c.relname::text) from pg_partition_tree('pyjobq.job_history') t"
        " join pg_class c on c.oid = t.relid where t.isleaf and c.relname ~ '_[0-9]{8}$'"
    ).fetchone()
    assert oldest is not None
    day = datetime.strptime(oldest[0][-8:], "%Y%m%d").replace(tzinfo=UTC)
    age = datetime.now(UTC) - (day + timedelta(days=1))
    dead = dead_rows(conn)
    before = wal_lsn(conn)
    started = time.perf_counter()
    deleted = conn.execute("select pyjobq.job_prune(%s, 100000)", (age,)).fetchone()
    took = time.perf_counter() - started
    wal = wal_lsn(conn) - before
    print(
        f"job_prune of {oldest[0]}: {deleted[0] if deleted else 0:,} jobs in {took:.3f} s,"
        f" WAL {wal:,} B, dead rows left {dead_rows(conn) - dead:,}",
        flush=True,
    )
    seen = 0
    for _ in range(settle):
        row = conn.execute(
            "select count(*) from pg_stat_activity where backend_type = 'autovacuum worker'"
        ).fetchone()
        seen = max(seen, int(row[0]) if row else 0)
        time.sleep(1)
    print(f"autovacuum workers at once in the {settle} s after: at most {seen}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", type=int, default=50_000_000)
    parser.add_argument("--days", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--settle", type=int, default=30)
    parser.add_argument("--row-prune", type=int, default=10_000_000)
    args = parser.parse_args()
    with LocalPostgres(settings=SETTINGS) as server:
        migrate(server.dsn())
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            version = conn.execute("show server_version").fetchone()
            print(f"PostgreSQL {version[0] if version else '?'}", flush=True)
            conn.execute("select pyjobq.job_history_maintain()")
            empty, empty_cost = measure(server, args, "empty history")
            print(f"loading {args.history:,} finished jobs over {args.days} days:", flush=True)
            load(conn, args.history, args.days)
            full, full_cost = measure(server, args, f"{args.history:,} in history")
            ratio = statistics.median(r for r, _ in full) / statistics.median(r for r, _ in empty)
            print(
                f"with history / empty: drain {ratio:.2f}, claim cost {full_cost / empty_cost:.2f}",
                flush=True,
            )
            prune(conn, args.settle)
            if args.row_prune:
                prune_rows(conn, args.row_prune, args.days)


if __name__ == "__main__":
    main()
