"""Small helpers the SQL-level tests share: freezing the clock, asserting SQLSTATEs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
import pytest

FROZEN = datetime.fromisoformat("2030-01-01T00:00:00+00:00")


def freeze(conn: psycopg.Connection[Any], at: datetime | str) -> None:
    """Set this session's pyjobq clock (``pyjobq.fake_now``) to ``at``."""
    conn.execute("select set_config('pyjobq.fake_now', %s, false)", (str(at),))


@contextmanager
def raises_sqlstate(sqlstate: str) -> Iterator[None]:
    """Expect the block to fail with exactly ``sqlstate``."""
    with pytest.raises(psycopg.Error) as caught:
        yield
    assert caught.value.sqlstate == sqlstate, caught.value


def table_snapshot(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """Every job row, for asserting that a failed call changed nothing."""
    return conn.execute("select j.* from pyjobq.job j order by j.job_id").fetchall()


def enqueue(conn: psycopg.Connection[Any], *args: Any) -> Any:
    """``job_enqueue(1, '{}')`` (or with ``args``), returning the new job id."""
    placeholders = ", ".join(["%s"] * len(args)) if args else "1, '{}'"
    return conn.execute(f"select job_id from pyjobq.job_enqueue({placeholders})", args).fetchone()[
        0
    ]


def claim(
    conn: psycopg.Connection[Any], worker: str = "w1", limit: int = 1
) -> list[tuple[Any, ...]]:
    """``job_claim(worker, limit)`` as (job_id, attempt) pairs."""
    return conn.execute(
        "select job_id, attempt from pyjobq.job_claim(%s, %s)", (worker, limit)
    ).fetchall()


def status_of(conn: psycopg.Connection[Any], job_id: Any) -> tuple[Any, ...]:
    """(status, attempts, worker_id, run_after, lease_until) of one job."""
    row = conn.execute(
        "select status, attempts, worker_id, run_after, lease_until"
        " from pyjobq.job where job_id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None
    return row
