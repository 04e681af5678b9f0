"""The drain under the two pressures an operator's session puts on a queue: a transaction left
idle holding a snapshot, and a reader scanning the history.

On one throwaway server (autovacuum on), ``--history`` ended jobs are made first. Then a
producer keeps a backlog of due jobs (topping it up by 10,000 whenever fewer than 20,000 wait)
while ``--drainers`` sessions run the SQL drain loop flat out (claim 20, complete them in one
call), and the jobs completed are counted each second. Each pressure runs for ``--hold``
seconds between ``--settle`` seconds before and after it:

- **idle in transaction**: a session opens a REPEATABLE READ transaction, reads one row of the
  history (its snapshot is now taken, and pins the horizon of every table), and waits;
- **history reader**: a session scans the whole history in a loop, each scan a statement of its
  own (READ COMMITTED), summing its payloads' sizes.

It prints, per pressure, the drain's median jobs/s before, during and after, each against
before, and the dead rows of ``pyjobq.job`` at the end of each phase.

``.venv/bin/python bench/pressure.py [--history 500000] [--drainers 4] [--settle 20]
[--hold 60]``
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import migrate
from sqlloop import enqueue_empty

Conn = psycopg.Connection[Any]
BACKLOG_LOW, TOP_UP = 20_000, 10_000
DEAD_ROWS = "select n_dead_tup from pg_stat_user_tables where relid = 'pyjobq.job'::regclass"


def make_history(conn: Conn, jobs: int) -> None:
    """``jobs`` jobs enqueued, claimed and completed in calls of 1,000 (the claim's most)."""
    for start in range(0, jobs, 1_000):
        enqueue_empty(conn, 1, min(1_000, jobs - start))
        rows = conn.execute("select job_id, attempt from pyjobq.job_claim('maker', 1000)")
        claimed = rows.fetchall()
        conn.execute(
            "select count(*) from pyjobq.job_complete_many('maker', %s::uuid[], %s::int[])",
            ([r[0] for r in claimed], [r[1] for r in claimed]),
        )
    # Settled before the load starts: no autovacuum of what was just made inside "before".
    conn.execute("vacuum analyze pyjobq.job")
    conn.execute("vacuum analyze pyjobq.job_history")


class Load:
    """The producer and the drainers, running until ``stop`` is set; ``done`` counts the
    jobs the drainers completed."""

    def __init__(self, dsn: str, drainers: int) -> None:
        self.dsn = dsn
        self.stop = threading.Event()
        self.done = 0
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._produce)] + [
            threading.Thread(target=self._drain, args=(f"d{i}",)) for i in range(drainers)
        ]

    def _produce(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                row = conn.execute("select count(*) from pyjobq.job where status = 1").fetchone()
                if row is not None and row[0] < BACKLOG_LOW:
                    enqueue_empty(conn, 1, TOP_UP)
                else:
                    time.sleep(0.05)

    def _drain(self, worker: str) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                rows = conn.execute(
                    "select job_id, attempt from pyjobq.job_claim(%s, 20)", (worker,)
                ).fetchall()
                if not rows:
                    time.sleep(0.005)
                    continue
                conn.execute(
                    "select count(*) from pyjobq.job_complete_many(%s, %s::uuid[], %s::int[])",
                    (worker, [r[0] for r in rows], [r[1] for r in rows]),
                )
                with self._lock:
                    self.done += len(rows)

    def per_second(self, seconds: int) -> list[float]:
        """Jobs completed in each of the next ``seconds`` seconds."""
        rates = []
        for _ in range(seconds):
            before, start = self.done, time.monotonic()
            time.sleep(1)
            rates.append((self.done - before) / (time.monotonic() - start))
        return rates


def hold_snapshot(dsn: str, stop: threading.Event) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("set transaction isolation level repeatable read")
        conn.execute("select job_id from pyjobq.job_history limit 1").fetchall()
        stop.wait()
        conn.rollback()


def scan_history(dsn: str, stop: threading.Event) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            conn.execute("select sum(octet_length(payload::text)) from pyjobq.job_history")


PRESSURES: dict[str, Callable[[str, threading.Event], None]] = {
    "idle in transaction": hold_snapshot,
    "history reader": scan_history,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=500_000, help="ended jobs made first")
    parser.add_argument("--drainers", type=int, default=4)
    parser.add_argument("--settle", type=int, default=20, help="seconds before and after")
    parser.add_argument("--hold", type=int, default=60, help="seconds of each pressure")
    args = parser.parse_args()
    with LocalPostgres() as server:
        dsn = server.dsn()
        migrate(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            make_history(conn, args.history)
            load = Load(dsn, args.drainers)
            for t in load.threads:
                t.start()
            try:
                load.per_second(args.settle)  # warm up: the backlog and autovacuum settle
                print(
                    f"SQL drain loop, {args.drainers} sessions, a backlog kept above"
                    f" {BACKLOG_LOW:,}; {args.history:,} ended jobs in the history"
                )
                print("| pressure | phase | jobs/s (median) | / before | dead rows of pyjobq.job |")
                print("|---|---|---:|---:|---:|")
                for name, pressure in PRESSURES.items():
                    phases: dict[str, float] = {}
                    stop = threading.Event()
                    presser = threading.Thread(target=pressure, args=(dsn, stop))
                    for phase, seconds in (
                        ("before", args.settle),
                        ("during", args.hold),
                        ("after", args.settle),
                    ):
                        if phase == "during":
                            presser.start()
                        elif phase == "after":
                            stop.set()
                            presser.join()
                        phases[phase] = statistics.median(load.per_second(seconds))
                        row = conn.execute(DEAD_ROWS).fetchone()
                        dead = row[0] if row else "?"
                        ratio = phases[phase] / phases["before"]
                        print(
                            f"| {name} | {phase} | {phases[phase]:,.0f} | {ratio:.2f} | {dead} |",
                            flush=True,
                        )
            finally:
                load.stop.set()
                for t in load.threads:
                    t.join()


if __name__ == "__main__":
    main()
