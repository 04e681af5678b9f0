"""The outcomes of an attempt other than completion: failed (retry or DEAD), snoozed, waiting
for an event, lease lost, cancelled; and what a handler raises to choose one."""

from __future__ import annotations

import asyncio
import logging
import traceback
from datetime import datetime
from typing import Any
from uuid import UUID

from pyjobq.rows import ClaimedJob, Finish, JobStatus, Outcome
from pyjobq.storable import storable_text
from pyjobq.worker.state import Held, WorkerState

log = logging.getLogger("pyjobq.worker")


class Retry(Exception):
    """Raise from a handler to fail this attempt and retry after ``delay_seconds``.

    ``None`` keeps the queue's exponential backoff. With no attempts left the job is DEAD.
    """

    def __init__(self, delay_seconds: float | None = None, reason: str = "retry requested") -> None:
        super().__init__(reason)
        self.delay_seconds = delay_seconds

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled with both arguments: it comes back whole from a handler's child process.
        return (type(self), (self.delay_seconds, *self.args))


class DeadLetter(Exception):
    """Raise from a handler to fail the job for good (DEAD), whatever attempts remain."""


# The longest snooze job_finish_many takes: a year.
MAX_SNOOZE_SECONDS = 31_536_000


class Waiting(BaseException):
    """Raised by ``ctx.wait_for`` when the job has gone to sleep until its event or timeout:
    the attempt has ended in the queue already, so nothing of it is sent. A ``BaseException``,
    as ``asyncio.CancelledError`` is, so that a handler's ``except Exception`` does not keep it
    running on a job it no longer holds."""

    def __init__(self, name: str, until: datetime) -> None:
        super().__init__(f"waiting for event {name!r} until {until.isoformat()}")
        self.name = name
        self.until = until


class WaitTimedOut(TimeoutError):
    """Raised by ``ctx.wait_for`` when the wait for the event ended at its timeout, no signal
    sent."""

    def __init__(self, name: str, until: datetime) -> None:
        super().__init__(f"no event {name!r} by {until.isoformat()}")
        self.name = name
        self.until = until


class Snooze(Exception):
    """Raise from a handler (or call ``job_context().snooze``) to put the job back to sleep
    for ``seconds``: PENDING again, its try given back, its steps kept; no worker slot,
    connection or lease is held while it sleeps. The type bounds how many times a job may
    snooze (``job_type_set_snoozes``); past that, the job is DEAD."""

    def __init__(self, seconds: float) -> None:
        if not 0 <= seconds <= MAX_SNOOZE_SECONDS:
            raise ValueError(f"a snooze lasts 0 to {MAX_SNOOZE_SECONDS} seconds, not {seconds}")
        super().__init__(f"snoozed for {seconds}s")
        self.seconds = seconds

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.seconds,))


def outcome_of(error: BaseException) -> tuple[Outcome, float | None]:
    """What ``error``, raised by a handler, makes of its attempt, and the delay to send with it:
    snoozed for ``Snooze`` (its seconds), DEAD for ``DeadLetter``, failed for ``Retry`` (its
    delay; None: the queue's backoff) and for any other exception (the queue's backoff)."""
    if isinstance(error, Snooze):
        return "snoozed", error.seconds
    if isinstance(error, DeadLetter):
        return "dead", None
    if isinstance(error, Retry):
        return "failed", error.delay_seconds
    return "failed", None


def error_text(error: BaseException) -> str:
    """The exception and the last frames of its traceback, as kept in ``last_error``."""
    return storable_text("".join(traceback.format_exception(error, limit=-5)).strip())


# (job_id, attempt) of the jobs job_cancel took from a handler of this process.
_cancelled: set[tuple[UUID, int]] = set()


def is_cancelled(job: ClaimedJob) -> bool:
    """True once ``job_cancel`` took ``job`` from the worker running it, which learns it at its
    next heartbeat. A sync handler can check it between steps and return early; an async handler
    is cancelled instead (``asyncio.CancelledError`` at its next await). Either way nothing the
    attempt returns is recorded: the job is already CANCELLED."""
    return (job.job_id, job.attempt) in _cancelled


class Outcomes:
    """Records an attempt that did not complete, whichever duty found out: the runner (the
    handler raised), the completer (the result was refused) or the heartbeat (cancelled)."""

    def __init__(self, state: WorkerState, async_types: set[int]) -> None:
        self.state = state
        self.async_types = async_types

    def lost(self, held: Held) -> None:
        """The attempt no longer counts: its lease was lost, or the job was cancelled."""
        s = self.state
        _cancelled.discard((held.job.job_id, held.job.attempt))
        if held.cancelled:
            s.metrics.cancelled += 1
            s.hook(s.hooks.on_job_end, held.job, "cancelled", None)
            log.info("job cancelled: handler stopped, nothing recorded", extra=s.extra(held.job))
            return
        s.metrics.lease_lost += 1
        s.hook(s.hooks.on_job_end, held.job, "lease_lost", None)
        log.warning("lease lost: result dropped", extra=s.extra(held.job))

    def cancel(self, held: Held) -> None:
        """job_cancel took ``held``'s job: stop its handler (an async one is cancelled, a sync
        one sees :func:`is_cancelled`), and drop whatever it returns."""
        held.lost = held.cancelled = True
        _cancelled.add((held.job.job_id, held.job.attempt))
        if held.runner is not None:
            held.runner.cancel()
        elif held.task is not None and held.job.job_type in self.async_types:
            held.task.cancel()

    @staticmethod
    def end_cancellable(held: Held) -> None:
        """The handler awaited in this runner's task has returned or raised: a cancel may no
        longer interrupt the runner, and one that was delivered is taken back from it (the job
        was cancelled, or ran past its deadline, not the runner)."""
        held.runner = None
        runner = asyncio.current_task()
        if (held.cancelled or held.timed_out) and runner is not None and runner.cancelling():
            runner.uncancel()

    @staticmethod
    def snooze(held: Held, seconds: float) -> None:
        """Record in ``held`` that its handler snoozed for ``seconds``, for the flush to send."""
        held.outcome = "snoozed"
        held.delay = seconds

    def snoozed(self, held: Held, row: Finish) -> None:
        """The flush recorded the snooze: count it and say until when."""
        s = self.state
        s.metrics.snoozed += 1
        s.hook(s.hooks.on_job_end, held.job, "snoozed", None)
        until = row.run_after.isoformat() if row.run_after is not None else "now"
        log.info("job snoozed until %s", until, extra=s.extra(held.job))

    def waiting(self, held: Held, wait: Waiting) -> None:
        """``held``'s handler went to sleep until its event (``job_event_wait`` ended the
        attempt): nothing is sent for it."""
        s = self.state
        s.metrics.waiting += 1
        s.hook(s.hooks.on_job_end, held.job, "waiting", None)
        log.info("job %s", wait, extra=s.extra(held.job))

    @classmethod
    def raised(cls, held: Held, error: BaseException) -> None:
        """Record in ``held`` what its handler's ``error`` makes of the attempt (``outcome_of``),
        for the flush to send."""
        outcome, delay = outcome_of(error)
        if outcome == "snoozed":
            cls.snooze(held, delay or 0.0)
        else:
            cls.fail(held, error, delay, outcome == "dead")

    @staticmethod
    def fail(held: Held, error: BaseException, delay: float | None, dead_letter: bool) -> None:
        """Record in ``held`` that its attempt failed, for the flush to send with the
        completions (``job_finish_many``): retried after ``delay`` (None: the queue's backoff)
        while tries are left, or DEAD at once with ``dead_letter``."""
        held.outcome = "dead" if dead_letter else "failed"
        held.error = error
        held.error_text = error_text(error)
        held.delay = delay

    def failed(self, held: Held, row: Finish) -> None:
        """The flush recorded the failure: count and log whether the job will be retried or is
        DEAD."""
        s, job = self.state, held.job
        s.metrics.failed += 1
        dead = row.status is JobStatus.DEAD
        if dead:
            s.metrics.dead += 1
        else:
            s.metrics.retried += 1
        s.hook(s.hooks.on_job_end, job, "dead" if dead else "retry", held.error)
        error = held.error
        # A planned retry is routine (INFO); the attempt that leaves the job DEAD is not. The
        # message names the job, for a handler of the application's own logging setup.
        log.log(
            logging.WARNING if dead else logging.INFO,
            "job %s failed on attempt %d: %s",
            job.job_id,
            job.attempt,
            "dead" if dead or row.run_after is None else f"retry at {row.run_after.isoformat()}",
            extra=s.extra(job, error=(str(error) or type(error).__name__) if error else None),
        )
