"""A blocked key's backlog against every other key: what a claim visits, and what it costs.

The shape of one customer's million jobs under a per-key limit: on one throwaway server, type 1
gets ``key_max_running`` 1; ``--jobs`` jobs of the key ``big`` are enqueued first, then one job
of each of ``--keys`` other keys. One ``big`` job is claimed and held, so the key is full and
its backlog can only wait. Then, one session, claims of ``--limit`` jobs until the other keys'
jobs are all claimed, and then claims behind the blocked backlog alone, which find nothing.

For each claim it prints, as median, 99th percentile and maximum: its time (the call's round
trip on loopback), and the rows of ``pyjobq.job`` it visited (``pg_stat_xact_user_tables``:
tuples read by scans and fetched by index, in the claim's own transaction, the session's
statistics flushed just before). And how many
claims returned the other keys' jobs, against how many the other keys needed at ``--limit``
each: the claim's work should be bounded by the keys that have room, not by the backlog.

``.venv/bin/python bench/blocked_key.py [--jobs 1000000] [--keys 1000] [--limit 10]
[--empty 50]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import psycopg

from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import migrate

CHUNK = 10_000
VISITED = (
    "select coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)"
    " from pg_stat_xact_user_tables where relid = 'pyjobq.job'::regclass"
)


def fill(conn: psycopg.Connection[Any], jobs: int, keys: int) -> None:
    """The blocked key's backlog first, then one job of each other key; one ``big`` held."""
    conn.execute("select pyjobq.job_type_set_limits(1, p_key_max_running => 1)")
    for start in range(0, jobs, CHUNK):
        n = min(CHUNK, jobs - start)
        conn.execute(
            "select count(*) from pyjobq.job_enqueue_many(1, array_fill('{}'::jsonb, array[%s]),"
            " p_concurrency_keys => array_fill('big'::text, array[%s]))",
            (n, n),
        )
    conn.execute("select pyjobq.job_claim('holder', 1)")
    conn.execute(
        "select count(*) from pyjobq.job_enqueue_many(1, array_fill('{}'::jsonb, array[%s]),"
        " p_concurrency_keys => array(select 'k' || i from generate_series(1, %s) i))",
        (keys, keys),
    )
    conn.execute("vacuum analyze pyjobq.job")


def claim(conn: psycopg.Connection[Any], limit: int) -> tuple[int, float, int]:
    """One claim in its own transaction: jobs claimed, seconds, rows of pyjobq.job visited."""
    # A session's counts reach the statistics views up to a second late; until then the
    # transaction's view holds every transaction's since, not just its own.
    conn.execute("select pg_stat_force_next_flush()")
    with conn.transaction():
        start = time.perf_counter()
        got = len(
            conn.execute("select job_id from pyjobq.job_claim('bench', %s)", (limit,)).fetchall()
        )
        took = time.perf_counter() - start
        row = conn.execute(VISITED).fetchone()
    return got, took, int(row[0]) if row else 0


def summary(values: list[float], scale: float = 1, unit: str = "", digits: int = 0) -> str:
    """Median, 99th percentile and maximum of ``values`` times ``scale``."""
    ordered = sorted(v * scale for v in values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    median = statistics.median(ordered)
    return (
        f"median {median:,.{digits}f}{unit}, p99 {p99:,.{digits}f}{unit},"
        f" max {ordered[-1]:,.{digits}f}{unit}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000, help="the blocked key's backlog")
    parser.add_argument("--keys", type=int, default=1000, help="other keys, one job each")
    parser.add_argument("--limit", type=int, default=10, help="jobs per claim")
    parser.add_argument("--empty", type=int, default=50, help="empty claims timed at the end")
    args = parser.parse_args()
    with LocalPostgres() as server:
        dsn = server.dsn()
        migrate(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            fill(conn, args.jobs, args.keys)
            useful: list[tuple[int, float, int]] = []
            claimed = 0
            while claimed < args.keys:
                got, took, visited = claim(conn, args.limit)
                if got == 0:
                    break
                claimed += got
                useful.append((got, took, visited))
            empty = [claim(conn, args.limit) for _ in range(args.empty)]
    needed = -(-args.keys // args.limit)
    print(
        f"key_max_running 1; {args.jobs:,} jobs of a blocked key enqueued first, then"
        f" {args.keys:,} other keys of one job; claims of {args.limit}"
    )
    print(
        f"claims that returned other keys' jobs: {len(useful):,} (they needed {needed:,});"
        f" other keys' jobs claimed: {claimed:,} of {args.keys:,}"
    )
    if useful:
        print(f"  time: {summary([t for _, t, _ in useful], 1000, ' ms', 2)}")
        print(f"  rows visited: {summary([float(v) for _, _, v in useful])}")
    print(f"empty claims behind the blocked backlog: {len(empty)}")
    print(f"  time: {summary([t for _, t, _ in empty], 1000, ' ms', 2)}")
    print(f"  rows visited: {summary([float(v) for _, _, v in empty])}")
    assert all(got == 0 for got, _, _ in empty), "the blocked key's jobs were claimed"


if __name__ == "__main__":
    main()
