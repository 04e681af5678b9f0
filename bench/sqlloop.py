"""The plain SQL that bench/counts.py and bench/overhead.py time: a bulk enqueue in one call, and
the loop any client without the Python worker drains with (claim a batch, complete it in one
call)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

Conn = psycopg.Connection[Any]


def enqueue_empty(conn: Conn, job_type: int, count: int) -> None:
    """``job_enqueue_many`` of ``count`` jobs of ``job_type`` with an empty payload."""
    conn.execute(
        "select count(*) from pyjobq.job_enqueue_many(%s::int,"
        " array(select '{}'::jsonb from generate_series(1, %s::int)))",
        (job_type, count),
    )


def drain_loop(
    conn: Conn, worker_id: str, batch: int = 20, job_types: Sequence[int] | None = None
) -> int:
    """Claim up to ``batch`` due jobs (of ``job_types``, or any) and complete them with one
    ``job_complete_many``, until a claim comes back empty; returns the jobs completed."""
    types = None if job_types is None else list(job_types)
    done = 0
    while rows := conn.execute(
        "select job_id, attempt from pyjobq.job_claim(%s, %s::int, null, %s::int[])",
        (worker_id, batch, types),
    ).fetchall():
        conn.execute(
            "select count(*) from pyjobq.job_complete_many(%s, %s::uuid[], %s::int[])",
            (worker_id, [r[0] for r in rows], [r[1] for r in rows]),
        )
        done += len(rows)
    return done
