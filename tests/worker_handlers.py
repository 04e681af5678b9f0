"""Handlers the worker processes started by the tests import (``tests.worker_handlers:HANDLERS``).

Each run records (job_id, attempt, pid) in the test database's ``effects`` table, whose
primary key makes a second run of the same attempt fail loudly; ``payload.sleep`` makes
the job take that many seconds, ``payload.fail`` makes it raise after recording. Type 2 runs
until the job is cancelled (at most a minute) and records it when it sees the cancel, with the
attempt negated.
"""

from __future__ import annotations

import os
import time

import psycopg

from pyjobq.params import Payload
from pyjobq.rows import ClaimedJob
from pyjobq.worker import is_cancelled

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
