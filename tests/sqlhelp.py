"""Small helpers the SQL-level tests share: the clock, SQLSTATEs, parallel connections."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, LiteralString

import psycopg
import pytest
from psycopg.abc import Params
from psycopg.conninfo import make_conninfo

from tests.workerhelp import wait_for

FROZEN = datetime.fromisoformat("2030-01-01T00:00:00+00:00")


def freeze(conn: psycopg.Connection[Any], at: datetime | str) -> None:
    """Set this session's pyjobq clock (``pyjobq.fake_now``) to ``at``."""
    conn.execute("select set_config('pyjobq.fake_now', %s, false)", (str(at),))


def frozen_dsn(dsn: str, at: datetime = FROZEN) -> str:
    """``dsn`` with the pyjobq clock of every session opened from it frozen at ``at``."""
    return make_conninfo(dsn, options=f"-c pyjobq.fake_now={at.isoformat()}")


@contextmanager
def raises_sqlstate(sqlstate: str) -> Iterator[None]:
    """Expect the block to fail with exactly ``sqlstate``."""
    with pytest.raises(psycopg.Error) as caught:
        yield
    assert caught.value.sqlstate == sqlstate, caught.value


def table_snapshot(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """Every job row, for asserting that a failed call changed nothing."""
    return conn.execute("select j.* from pyjobq.job_all j order by j.job_id").fetchall()


def one_row(
    conn: psycopg.Connection[tuple[Any, ...]], query: LiteralString, params: Params | None = None
) -> tuple[Any, ...]:
    """The row ``query`` returns; the test fails if it returns none."""
    row = conn.execute(query, params).fetchone()
    assert row is not None, f"no row from {query!r}"
    return row


def one(
    conn: psycopg.Connection[tuple[Any, ...]], query: LiteralString, params: Params | None = None
) -> Any:
    """The first column of the row ``query`` returns; the test fails if it returns none."""
    return one_row(conn, query, params)[0]


def enqueue(conn: psycopg.Connection[Any], *args: Any) -> Any:
    """``job_enqueue(1, '{}')`` (or with ``args``), returning the new job id."""
    placeholders = ", ".join(["%s"] * len(args)) if args else "1, '{}'"
    return one(conn, f"select job_id from pyjobq.job_enqueue({placeholders})", args)


def claim(
    conn: psycopg.Connection[Any], worker: str = "w1", limit: int = 1
) -> list[tuple[Any, ...]]:
    """``job_claim(worker, limit)`` as (job_id, attempt) pairs."""
    return conn.execute(
        "select job_id, attempt from pyjobq.job_claim(%s, %s)", (worker, limit)
    ).fetchall()


def status_of(conn: psycopg.Connection[Any], job_id: Any) -> tuple[Any, ...]:
    """(status, attempts, worker_id, run_after, lease_until) of one job."""
    return one_row(
        conn,
        "select status, attempts, worker_id, run_after, lease_until"
        " from pyjobq.job_all where job_id = %s",
        (job_id,),
    )


def granted_functions(conn: psycopg.Connection[Any]) -> dict[str, set[str]]:
    """The public functions each pyjobq group role may execute, as the catalog says."""
    granted: dict[str, set[str]] = {}
    for role, function in conn.execute(
        "select r.rolname, p.proname from pg_proc p cross join pg_roles r"
        " where p.pronamespace = 'pyjobq'::regnamespace and p.proname not like '\\_%'"
        " and r.rolname like 'pyjobq\\_%' and has_function_privilege(r.oid, p.oid, 'EXECUTE')"
    ).fetchall():
        granted.setdefault(role, set()).add(function)
    return granted


def run_threads(targets: list[Callable[[], None]]) -> None:
    """Start every target on its own thread, wait for all, and re-raise the first failure."""
    errors: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as e:  # surfaced below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def lock_waits(conn: psycopg.Connection[Any]) -> int:
    """How many sessions of ``conn``'s database wait for a lock now."""
    return int(
        one(
            conn,
            "select count(*) from pg_locks l join pg_database d on d.oid = l.database"
            " where not l.granted and d.datname = current_database()",
        )
    )


def wait_for_lock_wait(
    monitor: psycopg.Connection[Any], waiter: psycopg.Connection[Any], what: str
) -> None:
    """Wait, proven by the lock manager and not by sleeping, until ``waiter``'s statement
    waits on a lock; ``what`` names the wait in the failure after the deadline."""
    pid = waiter.info.backend_pid
    query = "select wait_event_type from pg_stat_activity where pid = %s"
    wait_for(lambda: monitor.execute(query, (pid,)).fetchone() == ("Lock",), what)


UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def mask(text: str) -> str:
    """Number uuids in order of first appearance: the ids differ, the shape must not."""
    seen: dict[str, str] = {}

    def number(match: re.Match[str]) -> str:
        return seen.setdefault(match.group(0), f"<uuid {len(seen) + 1}>".ljust(36, "."))

    return UUID.sub(number, text)


def heap_records_of(conn: psycopg.Connection[Any], statement: LiteralString) -> list[str]:
    """The types of the heap's WAL records that ``statement``'s transaction wrote
    (pg_walinspect)."""
    conn.execute("create extension if not exists pg_walinspect")
    with conn.transaction():
        conn.execute("set local synchronous_commit = on")  # its commit flushes: readable records
        start = one(conn, "select pg_current_wal_insert_lsn()::text")
        xid = one(conn, "select xid(pg_current_xact_id())::text")
        conn.execute(statement)
    return [
        record
        for (record,) in conn.execute(
            "select record_type from pg_get_wal_records_info(%s, pg_current_wal_flush_lsn())"
            " where resource_manager = 'Heap' and xid::text = %s",
            (start, xid),
        )
    ]
