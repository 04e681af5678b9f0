"""What a producer's open transaction costs the completions of the jobs it names.

On one throwaway server, a batch of ``--members`` jobs and one more job, the parent, are
enqueued and claimed. Then a producer session enqueues a child of the parent into the batch and
keeps its transaction open, while a worker session completes the batch's members one call each
(``job_complete_many`` of one job, as a flushing worker does), and the parent last. The same is
timed without the open producer, on a batch of its own. It prints, for each, the completions'
time (median, p99, maximum) and how many waited for a lock (a completion that waits fails after
the function's own ``lock_timeout`` of 5 s, and is counted, not retried).

``.venv/bin/python bench/open_producer.py [--members 500]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import psycopg

from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import migrate


def claimed_batch(conn: psycopg.Connection[Any], members: int) -> tuple[Any, Any, list[Any]]:
    """A batch of ``members`` claimed jobs, and a claimed parent: (batch, parent, held)."""
    batch = conn.execute("select pyjobq.job_batch_open()").fetchone()
    assert batch is not None
    conn.execute(
        "select count(*) from pyjobq.job_enqueue_many(1, array_fill('{}'::jsonb, array[%s]),"
        " p_batch_id => %s)",
        (members, batch[0]),
    )
    conn.execute("select pyjobq.job_enqueue(1, '{}')")
    held = conn.execute("select job_id, attempt from pyjobq.job_claim('w', 1000)").fetchall()
    return batch[0], held[-1], held


def complete_each(conn: psycopg.Connection[Any], held: list[Any]) -> tuple[list[float], int]:
    """Complete each held job in a call of its own: the seconds of each, and the lock waits."""
    took: list[float] = []
    waited = 0
    for job_id, attempt in held:
        start = time.perf_counter()
        try:
            conn.execute(
                "select * from pyjobq.job_complete_many('w', array[%s]::uuid[], array[%s])",
                (job_id, attempt),
            )
        except psycopg.errors.LockNotAvailable:
            waited += 1
        took.append(time.perf_counter() - start)
    return took, waited


def summary(values: list[float]) -> str:
    ordered = sorted(v * 1000 for v in values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"median {statistics.median(ordered):.2f} ms, p99 {p99:.2f} ms, max {ordered[-1]:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=500, help="members of each batch")
    args = parser.parse_args()
    with LocalPostgres() as server:
        dsn = server.dsn()
        migrate(dsn)
        with (
            psycopg.connect(dsn, autocommit=True) as conn,
            psycopg.connect(dsn, autocommit=True) as worker,
            psycopg.connect(dsn) as producer,
        ):
            results = []
            for label, open_producer in (("no producer", False), ("a producer open", True)):
                batch, parent, held = claimed_batch(conn, args.members)
                if open_producer:
                    producer.execute(
                        "select pyjobq.job_enqueue(1, '{}', p_depends_on => array[%s]::uuid[],"
                        " p_batch_id => %s)",
                        (parent[0], batch),
                    )
                took, waited = complete_each(worker, held)
                if open_producer:
                    producer.commit()
                results.append((label, took, waited))
    print(f"{args.members} members and their parent completed one call each")
    for label, took, waited in results:
        print(f"  {label:16} {summary(took)}; waited for a lock: {waited}")


if __name__ == "__main__":
    main()
