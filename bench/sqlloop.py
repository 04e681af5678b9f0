"""The plain SQL that bench/counts.py and bench/overhead.py time: a bulk enqueue in one call, and
the loop any client without the Python worker drains with (claim a batch, complete it in one
call)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import psycopg

Conn = psycopg.Connection[Any]


def enqueue_empty(conn: Conn, job_type: int, count: int) -> None:
    """``job_enqueue_many`` of ``count`` jobs of ``job_type`` with an empty payload."""
    conn.execute(
        "select count(*) from pyjobq.job_enqueue_many(%s::int,"
        " array(select '{}'::jsonb from generate_series(1, %s::int)))",
        (job_type, count),
    )


class Drained(NamedTuple):
    jobs: int  # completed
    retries: int  # completions refused with 55P03 (lock_timeout) and sent again


def drain_loop(
    conn: Conn, worker_id: str, batch: int = 20, job_types: Sequence[int] | None = None
) -> Drained:
    """Claim up to ``batch`` due jobs (of ``job_types``, or any) and complete them with one
    ``job_complete_many``, until a claim comes back empty. A completion refused with 55P03
    (past the knee it can wait that long behind a claim, docs/scaling.md) is sent again, as
    the SQL API says any client may."""
    types = None if job_types is None else list(job_types)
    done = retries = 0
    while rows := conn.execute(
        "select job_id, attempt from pyjobq.job_claim(%s, %s::int, null, %s::int[])",
        (worker_id, batch, types),
    ).fetchall():
        while True:
            try:
                conn.execute(
                    "select count(*) from pyjobq.job_complete_many(%s, %s::uuid[], %s::int[])",
                    (worker_id, [r[0] for r in rows], [r[1] for r in rows]),
                )
                break
            except psycopg.errors.LockNotAvailable:
                retries += 1
        done += len(rows)
    return Drained(done, retries)


def drain_all(conns: Sequence[Conn], prefix: str, batch: int) -> Drained:
    """``drain_loop`` on every connection at once, a thread each (workers ``prefix0``, ...)."""
    with ThreadPoolExecutor(len(conns)) as pool:
        ends = list(
            pool.map(lambda i: drain_loop(conns[i], f"{prefix}{i}", batch), range(len(conns)))
        )
    return Drained(sum(e.jobs for e in ends), sum(e.retries for e in ends))
