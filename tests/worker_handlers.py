"""Handlers the worker processes started by the tests import (``tests.worker_handlers:HANDLERS``).

Each run records (job_id, attempt, pid) in the test database's ``effects`` table, whose
primary key makes a second run of the same attempt fail loudly; ``payload.sleep`` makes
the job take that many seconds, ``payload.fail`` makes it raise after recording. Type 2 runs
until the job is cancelled (at most a minute) and records it when it sees the cancel, with the
attempt negated. ``STEP_HANDLERS`` runs type 3, a job of ten checkpointed steps (``ten_steps``),
and ``WAIT_HANDLERS`` type 4, a job that waits for its event ``go`` (``await_go``).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any
from uuid import uuid4

import psycopg

from pyjobq.params import Payload
from pyjobq.rows import ClaimedJob
from pyjobq.worker import WaitTimedOut, is_cancelled, job_context

DSN_ENV = "PYJOBQ_TEST_DSN"

EFFECTS = """
create table if not exists effects (
  job_id uuid not null,
  attempt int not null,
  pid int not null,
  primary key (job_id, attempt)
)
"""


def record(job: ClaimedJob) -> Payload:
    with psycopg.connect(os.environ[DSN_ENV], autocommit=True) as conn:
        conn.execute(
            "insert into effects values (%s, %s, %s)", (job.job_id, job.attempt, os.getpid())
        )
    time.sleep(float(job.payload.get("sleep", 0)))
    if job.payload.get("fail"):
        raise ValueError("asked to fail")
    return {"pid": os.getpid()}


def until_cancelled(job: ClaimedJob) -> Payload:
    record(job)
    deadline = time.monotonic() + 60
    while not is_cancelled(job) and time.monotonic() < deadline:
        time.sleep(0.01)
    if is_cancelled(job):
        with psycopg.connect(os.environ[DSN_ENV], autocommit=True) as conn:
            conn.execute(
                "insert into effects values (%s, %s, %s)", (job.job_id, -job.attempt, os.getpid())
            )
    return {"cancelled": is_cancelled(job)}


HANDLERS = {1: record, 2: until_cancelled}

# ten_steps: each step's write (step_effects), made in the transaction that records the step,
# and each run of a step whatever became of it (step_runs, written outside that transaction).
STEP_TABLES = """
create table if not exists step_effects (job_id uuid not null, step int not null, token text);
create table if not exists step_runs (job_id uuid not null, step int not null, attempt int)
"""

STEPS = 10


async def ten_steps(job: ClaimedJob) -> Payload:
    """Ten steps, each a write recorded with the step in one transaction (``step_tx``); the
    result lists what each step returned, stored or fresh."""
    ctx = job_context()
    dsn = os.environ[DSN_ENV]
    async with (
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn,
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as log,
    ):

        async def write(step: int) -> str:
            await log.execute(
                "insert into step_runs values (%s, %s, %s)", (job.job_id, step, job.attempt)
            )
            token = uuid4().hex
            await conn.execute(
                "insert into step_effects values (%s, %s, %s)", (job.job_id, step, token)
            )
            await conn.execute("select pg_sleep(0.01)")  # a kill lands inside the transaction too
            return token

        tokens: list[Any] = [await ctx.step_tx(conn, f"step-{n}", write, n) for n in range(STEPS)]
    return {"tokens": tokens}


STEP_HANDLERS = {3: ten_steps}


async def await_go(job: ClaimedJob) -> Payload:
    """Waits for event ``go`` (its timeout in ``payload.timeout``) and returns how the wait
    ended. It holds the job a moment before and after, so that a kill can land on it."""
    await asyncio.sleep(0.05)
    try:
        got = await job_context().wait_for("go", timeout=job.payload["timeout"])
    except WaitTimedOut:
        outcome: Payload = {"outcome": "timed_out"}
    else:
        outcome = {"outcome": "signalled", "payload": got}
    await asyncio.sleep(0.05)
    return outcome


WAIT_HANDLERS = {4: await_go}
