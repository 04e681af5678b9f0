"""The demo's crash: the worker process it SIGKILLs mid-job, and the leases that process held.

The victim is the worker that runs the demo's checkpointed job (``demo_durable``), stopped at its
checkpoint gate, once another of its handlers is stopped at the demo's write gate too: it dies
holding jobs it cannot finish, and the surviving workers' reapers take them back.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg

from pyjobq import demo_durable
from pyjobq.demo_durable import Durable

# Each worker process's sessions carry application_name APP_NAME-n.
APP_NAME = "pyjobq-demo-worker"


@dataclass(frozen=True)
class Killed:
    """The worker process the demo SIGKILLed, and the leases it held once its sessions had ended."""

    pid: int
    job_ids: list[UUID]
    attempts: list[int]


def kill_a_worker_mid_job(
    conn: psycopg.Connection[Any],
    gates: tuple[psycopg.Connection[Any], psycopg.Connection[Any]],
    procs: list[subprocess.Popen[bytes]],
    durable: Durable,
) -> Killed:
    """SIGKILL the worker process that runs the checkpointed job, stopped at its checkpoint
    gate, once one of its other handlers is mid-job too; return what it held.

    The first of ``gates`` holds ``GATE``, so every handler stops at its first write: the
    process is killed once one of its sessions waits on that lock, certainly holding a job it
    cannot finish. Both locks are released after the kill, and the process's leases are read
    once all of its sessions have ended: until then a completion it sent just before dying can
    still commit, and that job ends DONE without a reap. Worker ids are ``host:pid:random``, so
    they name the process.
    """
    gate, checkpoint_gate = gates
    by_pid = {p.pid: (f"{APP_NAME}-{n}", p) for n, p in enumerate(procs)}
    deadline = time.monotonic() + 30
    while (pid := demo_durable.checkpointed_holder(conn, durable)) is None:
        if time.monotonic() > deadline:
            raise RuntimeError("waited 30 s for the checkpointed job to stop at its gate")
        time.sleep(0.01)
    app_name, victim = by_pid[pid]
    waiting = (
        "select 1 from pg_stat_activity"
        " where %s = any(pg_blocking_pids(pid)) and application_name = %s limit 1"
    )
    _poll(conn, waiting, (gate.info.backend_pid, app_name), f"a handler of {app_name} mid-job")
    victim.kill()
    victim.wait()
    gate.rollback()
    checkpoint_gate.rollback()
    left = "select 1 where not exists (select from pg_stat_activity where application_name = %s)"
    _poll(conn, left, (app_name,), f"the killed worker's sessions ({app_name}) to end")
    rows = conn.execute(
        "select job_id, attempts, worker_id from pyjobq.job where status = 2"
    ).fetchall()
    held = [(job_id, attempt) for job_id, attempt, worker in rows
            if demo_durable.worker_pid(worker) == victim.pid]  # fmt: skip
    return Killed(victim.pid, [j for j, _ in held], [a for _, a in held])


def _poll(
    conn: psycopg.Connection[Any], query: str, params: tuple[Any, ...], what: str
) -> tuple[Any, ...]:
    """The first row ``query`` returns, asked again every 10 ms for up to 30 s."""
    deadline = time.monotonic() + 30
    while (row := conn.execute(query, params).fetchone()) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"waited 30 s for {what}")
        time.sleep(0.01)
    return tuple(row)
