"""A running job's context: what its handler may do beside returning. Checkpointed steps, named
units of work recorded as each finishes (``job_step_save``) so that a later attempt of the same
job takes a finished step's stored result instead of doing the work again; snoozes and waits for
events, which end the attempt and put the job to sleep; progress reports; and completing the job
in the handler's own transaction.

Inside a handler the worker runs, :func:`job_context` (async handlers) and
:func:`sync_job_context` (sync ones) return it (both are in :mod:`pyjobq.worker`)::

    async def ship(job: ClaimedJob) -> dict[str, Any]:
        ctx = job_context()
        charge = await ctx.step("charge", charge_card, job.payload["order"])
        await ctx.step_tx(conn, "ship", record_shipment, conn, charge)
        return {"charge": charge}

``step`` runs the work and then records it, in a transaction of its own: what the work does
outside the database happens at least once (a worker killed between the two runs it again),
so it should be idempotent; :meth:`JobContext.idempotency_key` names it for the service it
calls. ``step_tx`` runs the work in a transaction on the caller's connection and records the
step in that same transaction: what the work writes to that database happens exactly once.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, NoReturn

import psycopg
from psycopg.types.json import Jsonb

from pyjobq.aio import AsyncJobQueue
from pyjobq.errors import InvalidArgument, PyjobqError
from pyjobq.queue import JobQueue
from pyjobq.rows import ClaimedJob, StepSaved
from pyjobq.storable import encode_result
from pyjobq.worker.outcomes import Snooze, Waiting, WaitTimedOut
from pyjobq.worker.state import Held

log = logging.getLogger("pyjobq.worker")

# At most one progress report a second per job reaches the database.
PROGRESS_INTERVAL = 1.0


class _Recorded(Exception):
    """The step was recorded before this run of it: leaving its transaction by this exception
    rolls back what the run wrote; it carries the stored result out."""

    def __init__(self, result: Any) -> None:
        super().__init__("step recorded before")
        self.result = result


class RunningJob:
    """What the worker knows of the job a handler runs: the job as held, its holder, the
    worker's queue and loop, and the steps recorded so far (read once, at the first step)."""

    def __init__(
        self,
        held: Held,
        worker_id: str,
        queue: AsyncJobQueue,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.held = held
        self.job = held.job
        self.worker_id = worker_id
        self.queue = queue
        self.loop = loop
        self.recorded: dict[str, Any] | None = None
        # Progress: the report not sent yet, the send under way or waiting for its turn, and
        # when (time.monotonic()) the last one went.
        self.unsent: Jsonb | None = None
        self.sending: asyncio.Task[None] | None = None
        self.sent_at = -PROGRESS_INTERVAL

    async def read_steps(self) -> dict[str, Any]:
        """The recorded steps by name (``job_steps``), read at the first step only."""
        if self.recorded is None:
            job = self.job
            rows = await self.queue.steps(job.job_id, self.worker_id, job.attempt, job.lease_token)
            self.recorded = {row.name: row.result for row in rows}
        return self.recorded

    def save_args(self, name: str, value: object) -> tuple[Any, ...]:
        """``step_save``'s arguments for step ``name`` that returned ``value``."""
        job, result = self.job, encode_result(value)
        return (job.job_id, self.worker_id, job.attempt, name, result, job.lease_token)

    async def wait_for(self, name: str, timeout: float | None) -> Any:
        """``job_event_wait``: the signal's payload, or WaitTimedOut, or Waiting (asleep)."""
        job = self.job
        row = await self.queue.event_wait(
            job.job_id, self.worker_id, job.attempt, name, timeout, job.lease_token
        )
        if row.outcome == "signalled":
            return row.payload
        if row.outcome == "timed_out":
            raise WaitTimedOut(name, row.wait_until)
        raise Waiting(name, row.wait_until)

    async def sleep(self, name: str, seconds: float) -> None:
        """A durable sleep: a wait for event ``name`` that its timeout ends (or a signal,
        early); Waiting (asleep) until then."""
        with suppress(WaitTimedOut):
            await self.wait_for(name, max(0.0, seconds))

    def report(self, progress: Mapping[str, Any]) -> None:
        """Keep ``progress`` as the latest report and have it sent (from any thread)."""
        encoded = encode_result(dict(progress))
        self.loop.call_soon_threadsafe(self.keep, encoded)

    def keep(self, progress: Jsonb | None) -> None:
        """On the loop: the latest report replaces the one not sent yet; a send starts unless
        one is under way or waiting for its turn."""
        self.unsent = progress
        if self.sending is None:
            self.sending = self.loop.create_task(self.send())

    async def send(self) -> None:
        """Send the latest report once a ``PROGRESS_INTERVAL`` has passed since the last; a
        report refused (the job no longer this attempt's) is dropped with it."""
        try:
            await asyncio.sleep(max(0.0, self.sent_at + PROGRESS_INTERVAL - time.monotonic()))
            progress, self.unsent = self.unsent, None
            self.sent_at = time.monotonic()
            job = self.job
            await self.queue.progress(
                job.job_id, self.worker_id, job.attempt, progress, job.lease_token
            )
        except InvalidArgument as e:  # the handler's report itself: say so
            log.warning("progress refused: %s", e, extra={"job_id": str(self.job.job_id)})
        except (PyjobqError, psycopg.Error) as e:  # the job ended, or the database is away
            log.debug("progress not recorded: %s", e, extra={"job_id": str(self.job.job_id)})
        finally:
            self.sending = None
        if self.unsent is not None and not self.held.lost:
            self.sending = self.loop.create_task(self.send())

    def idempotency_key(self, name: str) -> str:
        """The job's id and the step's name: the same in every attempt."""
        return f"{self.job.job_id}:{name}"

    def complete_args(self, result: object) -> tuple[Any, ...]:
        """``complete``'s arguments for this job and ``result``; from here on the heartbeat
        leaves the job's row to the caller's transaction, which holds it."""
        job, encoded = self.job, encode_result(result)
        self.held.completed_in_tx = True
        return (job.job_id, self.worker_id, job.attempt, encoded, job.lease_token)

    def remember(self, name: str, row: StepSaved) -> Any:
        """Keep and return what the step's record holds (this run's result as stored, or the
        earlier record's)."""
        if self.recorded is not None:
            self.recorded[name] = row.result
        return row.result

    def remember_in_tx(self, name: str, row: StepSaved) -> Any:
        """As :meth:`remember`, inside the step's transaction: a step recorded before raises
        ``_Recorded``, which rolls back what this run wrote."""
        result = self.remember(name, row)
        if not row.saved:
            raise _Recorded(result)
        return result


_running: ContextVar[RunningJob | None] = ContextVar("pyjobq_running_job", default=None)


@contextmanager
def running(job: RunningJob) -> Iterator[None]:
    """Make ``job`` the one :func:`job_context` returns, for the handler run in this block."""
    token = _running.set(job)
    try:
        yield
    finally:
        _running.reset(token)


def _current() -> RunningJob:
    job = _running.get()
    if job is None:
        raise RuntimeError("no job runs here: job_context() works inside a worker's handler")
    return job


class _Context:
    """What a job's context is and does alike for async and sync handlers."""

    def __init__(self, running_job: RunningJob) -> None:
        self._run = running_job

    @property
    def job(self) -> ClaimedJob:
        return self._run.job

    def idempotency_key(self, name: str) -> str:
        """A key naming step ``name`` of this job, the same in every attempt: pass it to the
        service a step calls, so that a step run again after a crash is not applied twice."""
        return self._run.idempotency_key(name)

    def snooze(self, seconds: float) -> NoReturn:
        """End this attempt by putting the job back to sleep for ``seconds`` (raises
        :class:`~pyjobq.worker.Snooze`): PENDING again, its try given back, its recorded steps
        kept for the attempt that wakes; nothing is held while it sleeps."""
        raise Snooze(seconds)

    def progress(self, progress: Mapping[str, Any]) -> None:
        """Report how far the handler got (``job_progress``): a JSON object of at most 8 KiB
        that ``get``, ``pyjobq show`` and the dashboard show while the job runs. Returns at
        once: the report is sent in the background, at most one per second per job (the
        latest wins), so a handler may report as often as it likes."""
        self._run.report(progress)


class JobContext(_Context):
    """The context of the job an ``async`` handler runs (:func:`job_context`)."""

    async def complete_tx(self, conn: psycopg.AsyncConnection[Any], result: Any = None) -> None:
        """Complete the job (``job_complete``, with ``result``) on ``conn``, in the transaction
        open there: the handler's writes and the job's DONE commit together. Call it inside a
        transaction block that commits right after, then return (what the handler returns is
        not stored). If that transaction rolls back and the handler returns anyway, the job is
        not DONE: it runs again once its lease has run out; if the handler raises, the attempt
        fails as any other."""
        await AsyncJobQueue(conn).complete(*self._run.complete_args(result))

    async def wait_for(self, name: str, timeout: float | None = None) -> Any:
        """The payload of event ``name`` (``job_signal``), sent before or after this call. If
        it has not come, the attempt ends here and the job sleeps, holding nothing, until the
        signal or ``timeout`` seconds after the first wait for the name (a day when None);
        the attempt that wakes runs the handler again, its steps recorded, and this call then
        returns the payload or raises :class:`~pyjobq.worker.WaitTimedOut`. (Until then it
        raises :class:`~pyjobq.worker.outcomes.Waiting`, a ``BaseException``: let it pass.)"""
        return await self._run.wait_for(name, timeout)

    async def sleep(self, name: str, seconds: float) -> None:
        """Sleep ``name``: the first call ends the attempt and puts the job to sleep, holding
        nothing, for ``seconds`` (at most a year); the attempt that wakes runs the handler
        again, its steps recorded, and the call then returns at once. It is a wait for event
        ``name`` (:meth:`wait_for`) that nothing signals, so ``job_signal`` of the name ends
        it early. Unlike :meth:`snooze`, a handler run again passes a sleep that is over."""
        await self._run.sleep(name, seconds)

    async def sleep_until(self, name: str, when: datetime) -> None:
        """:meth:`sleep` until ``when`` (an aware datetime), counted from the first call."""
        await self._run.sleep(name, _seconds_until(when))

    async def step(self, name: str, work: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Step ``name``: its stored result if an earlier run recorded it, else what ``work``
        returns (awaited when it is a coroutine), recorded (``job_step_save``) and returned as
        stored (JSON). Raises :class:`~pyjobq.errors.LeaseLost` when the job is no longer
        this attempt's."""
        recorded = await self._run.read_steps()
        if name in recorded:
            return recorded[name]
        value = work(*args, **kwargs)
        if inspect.isawaitable(value):
            value = await value
        row = await self._run.queue.step_save(*self._run.save_args(name, value))
        return self._run.remember(name, row)

    async def step_tx(
        self,
        conn: psycopg.AsyncConnection[Any],
        name: str,
        work: Callable[..., Any],
        /,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        """Step ``name`` in a transaction on ``conn`` (a savepoint when one is open): ``work``
        makes its writes there and the step is recorded in the same transaction, so they
        happen once. An attempt that finds the step recorded by another (a lease lost while
        it ran) rolls its writes back and returns the recorded result."""
        recorded = await self._run.read_steps()
        if name in recorded:
            return recorded[name]
        try:
            async with conn.transaction():
                value = work(*args, **kwargs)
                if inspect.isawaitable(value):
                    value = await value
                row = await AsyncJobQueue(conn).step_save(*self._run.save_args(name, value))
                return self._run.remember_in_tx(name, row)
        except _Recorded as earlier:
            return earlier.result


class SyncJobContext(_Context):
    """The context of the job a sync handler runs (:func:`sync_job_context`): the same steps,
    called from the handler's thread."""

    def complete_tx(self, conn: psycopg.Connection[Any], result: Any = None) -> None:
        """See :meth:`JobContext.complete_tx`."""
        JobQueue(conn).complete(*self._run.complete_args(result))

    def wait_for(self, name: str, timeout: float | None = None) -> Any:
        """See :meth:`JobContext.wait_for`."""
        return self._on_loop(self._run.wait_for(name, timeout))

    def sleep(self, name: str, seconds: float) -> None:
        """See :meth:`JobContext.sleep`."""
        self._on_loop(self._run.sleep(name, seconds))

    def sleep_until(self, name: str, when: datetime) -> None:
        """See :meth:`JobContext.sleep_until`."""
        self._on_loop(self._run.sleep(name, _seconds_until(when)))

    def step(self, name: str, work: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """See :meth:`JobContext.step`; the calls go through the worker's connections."""
        recorded = self._on_loop(self._run.read_steps())
        if name in recorded:
            return recorded[name]
        value = work(*args, **kwargs)
        row = self._on_loop(self._run.queue.step_save(*self._run.save_args(name, value)))
        return self._run.remember(name, row)

    def step_tx(
        self,
        conn: psycopg.Connection[Any],
        name: str,
        work: Callable[..., Any],
        /,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        """See :meth:`JobContext.step_tx`."""
        recorded = self._on_loop(self._run.read_steps())
        if name in recorded:
            return recorded[name]
        try:
            with conn.transaction():
                value = work(*args, **kwargs)
                row = JobQueue(conn).step_save(*self._run.save_args(name, value))
                return self._run.remember_in_tx(name, row)
        except _Recorded as earlier:
            return earlier.result

    def _on_loop(self, call: Any) -> Any:
        """Run a coroutine of the worker's on its loop, from the handler's thread."""
        return asyncio.run_coroutine_threadsafe(call, self._run.loop).result()


def _seconds_until(when: datetime) -> float:
    """Seconds from now to ``when``, an aware datetime (0 when past)."""
    if when.tzinfo is None:
        raise InvalidArgument("when must be an aware datetime (with a tzinfo)")
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def job_context() -> JobContext:
    """The context of the job the calling ``async`` handler runs; RuntimeError elsewhere."""
    return JobContext(_current())


def sync_job_context() -> SyncJobContext:
    """The context of the job the calling sync handler runs; RuntimeError elsewhere."""
    return SyncJobContext(_current())
