"""Running pending jobs in a test's own process and transaction: Celery's ``task_always_eager``.

::

    with conn.transaction():
        signup(conn, "ada@example.com")          # enqueues a SEND_EMAIL job
        ran = run_pending(conn, tasks.handlers())  # runs it here, now
        assert [r.status for r in ran] == ["DONE"]

:func:`run_pending` claims the due jobs of the handlers' types on the test's connection, in the
transaction it has open (a test that rolls back undoes the jobs and what they did), calls each
handler here, synchronously, and ends its job as a worker would, with ``job_finish_many``:
done with its result, failed (retried after backoff, or DEAD when its tries are spent), or
snoozed. It does in one process what a worker does, through the same SQL functions, so the jobs
go through the queue's own transitions; it does not run the worker's machinery (leases,
heartbeats, timeouts, a handler's ``job_context``), which the worker's own tests cover.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast
from uuid import UUID

import psycopg

from pyjobq.queue import JobQueue
from pyjobq.rows import ClaimedJob, Outcome
from pyjobq.worker.outcomes import error_text, outcome_of
from pyjobq.worker.running import Handler


@dataclass(frozen=True, slots=True)
class Ran:
    """A job :func:`run_pending` ran: its id and type, and its status after the run (``DONE``,
    ``PENDING`` again for a retry or a snooze, ``DEAD``), with the error it raised."""

    job_id: UUID
    job_type: int
    status: str
    error: str | None


def run_pending(
    conn: psycopg.Connection[Any] | JobQueue,
    handlers: Mapping[int | str, Handler],
    *,
    job_types: Sequence[int | str] | None = None,
    worker_id: str = "pyjobq-testing",
    limit: int = 10_000,
) -> list[Ran]:
    """Run the due jobs of ``job_types`` (default: the handlers' types) here and now, on
    ``conn`` and in its transaction, each with its handler, until none is due or ``limit`` ran;
    a job that a run makes due again (a retry without delay) runs again. Returns what ran, in
    order. A job whose handler is missing is left to the claim's order: name ``job_types``
    to leave types out."""
    queue = conn if isinstance(conn, JobQueue) else JobQueue(conn)
    by_code = {_code(queue, key): handler for key, handler in handlers.items()}
    types = list(by_code) if job_types is None else [_code(queue, t) for t in job_types]
    missing = sorted(set(types) - set(by_code))
    if missing:
        raise ValueError(f"job_types without a handler: {missing}")
    ran: list[Ran] = []
    while len(ran) < limit:
        claimed = queue.claim(worker_id, limit=min(100, limit - len(ran)), job_types=types)
        if not claimed:
            return ran
        for job in claimed:
            ran.append(_run(queue, worker_id, job, by_code[job.job_type]))
    return ran


def _code(queue: JobQueue, job_type: int | str) -> int:
    return queue.type_code(job_type) if isinstance(job_type, str) else job_type


def _run(queue: JobQueue, worker_id: str, job: ClaimedJob, handler: Handler) -> Ran:
    """One job's handler, and the job ended as a worker ends it."""
    outcome: Outcome = "done"
    result, error, delay = None, None, None
    try:
        value = handler(job)
        if inspect.isawaitable(value):
            value = asyncio.run(_awaited(value))
        result = cast(Mapping[str, Any] | None, value)
    except (Exception, SystemExit) as e:  # the attempt's end, as a worker records it
        outcome, delay = outcome_of(e)
        error = None if outcome == "snoozed" else error_text(e)
    (finished,) = queue.finish_many(
        worker_id, [job.job_id], [job.attempt], [outcome], [result], [error], [delay],
        [job.lease_token],
    )  # fmt: skip
    return Ran(job.job_id, job.job_type, finished.status.name if finished.status else "LOST", error)


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value
