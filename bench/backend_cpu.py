"""What bench/enqueue_cpu.py and bench/claim_cpu.py share: the backend's CPU time per
transaction, from /proc, over rounds of statements in rotation, and the table they print."""

from __future__ import annotations

import os
import statistics

import psycopg

TICK = os.sysconf("SC_CLK_TCK")

# A statement to time, and its parameters (None: none).
Statement = tuple[str, tuple[object, ...] | None]


def backend_cpu(pid: int) -> float:
    """Seconds of CPU (user + system) that process ``pid`` has used."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def run(conn: psycopg.Connection, statement: Statement) -> None:
    """One transaction of ``statement``, its rows read if it returns any."""
    cursor = conn.execute(*statement)
    if cursor.description is not None:
        cursor.fetchall()


def per_transaction(conn: psycopg.Connection, pid: int, statement: Statement, jobs: int) -> float:
    """Microseconds of the backend's CPU per transaction running ``statement`` (autocommit)."""
    run(conn, statement)  # planned, cached, and the connection warm
    before = backend_cpu(pid)
    for _ in range(jobs):
        run(conn, statement)
    return (backend_cpu(pid) - before) * 1e6 / jobs


def measure(
    conn: psycopg.Connection, statements: dict[str, Statement], jobs: int, repeat: int
) -> dict[str, list[float]]:
    """Each statement ``jobs`` transactions a round, the statements in rotation for ``repeat``
    rounds: the microseconds per transaction of each round, by name."""
    pid = conn.execute("select pg_backend_pid()").fetchone()[0]  # type: ignore[index]
    figures: dict[str, list[float]] = {name: [] for name in statements}
    for _ in range(repeat):
        for name, statement in statements.items():
            figures[name].append(per_transaction(conn, pid, statement, jobs))
    return figures


def report(
    figures: dict[str, list[float]], ceiling: str, jobs: int, repeat: int, version: int
) -> None:
    """The median and range of each statement, and its ratio to ``ceiling``'s median."""
    base = statistics.median(figures[ceiling])
    print(
        f"one connection, one statement per transaction, {jobs} a round, {repeat}"
        f" rounds; PostgreSQL {version // 10000}.{version % 100}, default settings"
    )
    print()
    print(f"| statement | backend CPU per transaction, µs, median (range) | / {ceiling} |")
    print("|---|---:|---:|")
    for name, values in figures.items():
        median = statistics.median(values)
        print(
            f"| {name} | {median:,.0f} ({min(values):,.0f} to {max(values):,.0f})"
            f" | {median / base:.2f} |"
        )
