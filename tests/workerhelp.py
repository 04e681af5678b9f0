"""Helpers for the worker tests: a worker serving in a background event loop, waits on DB state."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from pyjobq.metrics import WorkerMetrics
from pyjobq.worker import Worker
from tests.worker_handlers import DSN_ENV, EFFECTS

ROOT = Path(__file__).resolve().parent.parent
Conn = psycopg.Connection[Any]

# Generous upper bounds for conditions that normally hold within milliseconds; a test
# only waits this long when it is about to fail.
PATIENCE = 60.0


def wait_for(condition: Callable[[], Any], what: str, patience: float = PATIENCE) -> Any:
    deadline = time.monotonic() + patience
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def prepare(conn: Conn) -> None:
    """Create the side table the test handlers record their effects in."""
    conn.execute(EFFECTS)


def statuses(conn: Conn) -> dict[int, int]:
    return dict(
        conn.execute("select status, count(*) from pyjobq.job_all group by status").fetchall()
    )


def asleep(conn: Conn) -> int:
    """How many sessions of this database hold the idle mark (``job_worker_idle``): workers
    LISTENing and asleep, for whom every enqueue notifies."""
    row = conn.execute(
        "select count(*) from pg_locks l join pg_database d on d.oid = l.database"
        " where d.datname = current_database() and l.locktype = 'advisory'"
        " and (l.classid, l.objid, l.objsubid) = (1887005297, 4294967295, 2) and l.granted"
    ).fetchone()
    assert row is not None
    return int(row[0])


class Running:
    """A Worker serving in its own thread and event loop."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.loop = asyncio.new_event_loop()
        self.result: WorkerMetrics | BaseException | None = None
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        try:
            self.result = self.loop.run_until_complete(self.worker.serve())
        except BaseException as e:  # surfaced by stop()
            self.result = e

    def start(self) -> Running:
        self.thread.start()
        wait_for(lambda: self.worker.ready.is_set() or self.result, "the worker to start")
        return self

    def stop(self, graceful: bool = True) -> WorkerMetrics:
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.worker.stop, graceful)
            self.thread.join(PATIENCE)
        assert not self.thread.is_alive(), "worker did not stop"
        if isinstance(self.result, BaseException):
            raise self.result
        assert self.result is not None
        return self.result


@contextmanager
def running(worker: Worker) -> Iterator[Running]:
    r = Running(worker).start()
    try:
        yield r
    finally:
        if r.thread.is_alive():
            r.stop()


def spawn_worker(
    dsn: str, tmp: Path, name: str, *args: str, handlers: str = "HANDLERS"
) -> subprocess.Popen[bytes]:
    """A CLI worker process running ``handlers`` of tests.worker_handlers; its sessions (and its
    handlers') carry application_name test-NAME."""
    command = [
        sys.executable, "-m", "pyjobq", "worker", f"tests.worker_handlers:{handlers}",
        "--dsn", dsn, "--metrics-file", str(tmp / f"{name}.json"), *args,
    ]  # fmt: skip
    env = {**os.environ, DSN_ENV: dsn, "PGAPPNAME": f"test-{name}"}
    log = (tmp / f"{name}.log").open("wb")
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)


def wait_until_sessions_end(conn: Conn, name: str) -> None:
    """Wait until no session of spawn_worker(name) is left. A killed process's statement in
    flight (a completion, say) can still commit until its backend has gone."""
    wait_for(
        lambda: (
            conn.execute(
                "select count(*) = 0 from pg_stat_activity where application_name = %s",
                (f"test-{name}",),
            ).fetchone()
            == (True,)
        ),
        f"the sessions of worker {name} to end",
    )
