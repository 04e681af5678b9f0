"""What the worker's duties share: the jobs it holds, the signals between duties, the database.

A job moves through the collections here in one direction: ``buffer`` (claimed, not started),
``running`` (a handler has it), ``done`` (its handler returned or raised, its outcome not yet
sent), ``flushing`` (in a ``job_finish_many`` call). Each duty owns its moves; the events wake
the duty that waits for them.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import PoolTimeout

from pyjobq.aio import AsyncJobQueue
from pyjobq.errors import InvalidArgument, LockTimeout, PyjobqError
from pyjobq.metrics import WorkerHooks, WorkerMetrics
from pyjobq.rows import ClaimedJob, Outcome
from pyjobq.worker.alarms import Alarm
from pyjobq.worker.config import WorkerConfig

T = TypeVar("T")

# Jobs per job_finish_many / job_renew_lease_many / job_release_many call: their limit.
MAX_BATCH = 10000

# Errors that mean "the database cannot do this right now": retry with backoff. The
# OperationalError family covers lost connections, 40001/40P01, 57014, 57P01 and 53300;
# LockTimeout is 55P03 as the binding reports it.
RETRYABLE_ERRORS: tuple[type[Exception], ...] = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    PoolTimeout,
    LockTimeout,
)
# Errors about the data a call carried (class 22 or 54): the fault of one job, not the worker's.
DATA_ERRORS: tuple[type[Exception], ...] = (psycopg.DataError, InvalidArgument)
# Everything else a database call can raise.
DATABASE_ERRORS: tuple[type[Exception], ...] = (psycopg.Error, PyjobqError)

log = logging.getLogger("pyjobq.worker")


@dataclass(eq=False)
class Held:
    """A job this worker holds a lease on, from claim to complete/fail/release."""

    job: ClaimedJob
    claimed_at: float
    renewed_at: float
    lost: bool = False
    cancelled: bool = False
    # How the attempt ended, for the flush to send: done with ``result``, or failed (retried
    # after ``delay``, None: the backoff) or dead with ``error`` and its stored text.
    outcome: Outcome = "done"
    result: Jsonb | None = None
    error: BaseException | None = None
    error_text: str | None = None
    delay: float | None = None
    task: asyncio.Future[Any] | None = field(default=None, repr=False)
    # The runner's own task while it awaits an async handler in it.
    runner: asyncio.Task[Any] | None = field(default=None, repr=False)
    # The pool thread's future of a sync handler: done only when the thread is free again.
    thread: Future[Any] | None = field(default=None, repr=False)
    # When (time.monotonic()) its handler must have finished, the limit that sets it (seconds),
    # and whether it did not.
    deadline_at: float | None = None
    deadline_seconds: float | None = None
    timed_out: bool = False
    # The handler completed the job in its own transaction (ctx.complete_tx): nothing to send,
    # and the heartbeat leaves its row to that transaction.
    completed_in_tx: bool = False


class WorkerState:
    """The worker's shared state and its one way to the database (:meth:`call`)."""

    def __init__(
        self, config: WorkerConfig, worker_id: str, hooks: WorkerHooks, metrics: WorkerMetrics
    ) -> None:
        self.config = config
        self.worker_id = worker_id
        self.hooks = hooks
        self.metrics = metrics
        self.buffer: deque[Held] = deque()
        self.running: set[Held] = set()
        self.done: list[Held] = []
        self.flushing: set[Held] = set()
        # A NOTIFY, a reap or a start: jobs may be due. Set through wake().
        self.notified = asyncio.Event()
        # Every wake-up since the claimer last cleared ``notified`` was a NOTIFY of a job due
        # now: a claim for it alone needs no job_next_due (what is to come later was read
        # before, or announced with its time).
        self.woken_for_due_now = False
        # Some handled type has a concurrency limit (job_type_limits, read at the start): a job
        # that ends frees room that no NOTIFY announces, so its completion wakes the claimer.
        self.limited = False
        # Some handled type has a rate limit: a claim that fills its window leaves due jobs
        # behind until the window opens, which job_next_due says once the claim committed.
        self.rate_limited = False
        # When (time.time()) the claimer claims next unless woken: infinity while it claims,
        # so that a job announced meanwhile wakes it whenever it is due.
        self.next_claim_at = math.inf
        # When a schedule next ticks and a lease next expires, as the claims read them.
        self.next_tick = Alarm()
        self.next_expiry = Alarm()
        # The claimer's last claim came back short: it sleeps until a NOTIFY or its poll, and
        # the listener marks its session asleep (job_worker_idle) so that producers notify.
        self.idle = False
        self.idle_changed = asyncio.Event()
        # The listener's session holds the mark, and the fence after it closed.
        self.marked = False
        # The claimer may have room to claim.
        self.room = asyncio.Event()
        # The buffer has a job for a runner.
        self.job_ready = asyncio.Event()
        # Finished jobs wait to be completed; flush_now: send them without waiting.
        self.have_done = asyncio.Event()
        # A flush ended: runners held back by unsent finished jobs may look again.
        self.sent = asyncio.Event()
        self.flush_now = asyncio.Event()
        self.stop_requested = asyncio.Event()
        self.hard_stop = asyncio.Event()
        # The phases of a shutdown: no more claims; runners end when the buffer is empty;
        # the flusher sends what is left and ends.
        self.stopping = False
        self.draining = False
        self.closing = False
        # Set when an internal task failed and stopped the worker (the CLI then exits 1).
        self.crashed: BaseException | None = None
        # The loop the worker runs on, once it runs: stop() from another thread goes through it.
        self.loop: asyncio.AbstractEventLoop | None = None
        self._queue: AsyncJobQueue | None = None

    def wake(self, due_now: bool = False) -> None:
        """Wake the claimer: jobs may be due. ``due_now``: a NOTIFY of a job due now, and
        nothing else, woke it (see :attr:`woken_for_due_now`)."""
        self.woken_for_due_now = due_now and (self.woken_for_due_now or not self.notified.is_set())
        self.notified.set()

    def set_idle(self, idle: bool) -> None:
        """Say whether the claimer sleeps for want of due jobs (see :attr:`idle`)."""
        if idle != self.idle:
            self.idle = idle
            self.idle_changed.set()

    @property
    def queue(self) -> AsyncJobQueue:
        if self._queue is None:
            raise RuntimeError("the worker is not running")
        return self._queue

    @queue.setter
    def queue(self, queue: AsyncJobQueue) -> None:
        self._queue = queue

    def stop(self, graceful: bool = True) -> None:
        """Ask the worker to stop: drain (default) or stop at once. From any thread: called
        outside the worker's loop, the request is handed to that loop."""
        loop = self.loop
        if loop is not None and not loop.is_closed() and _running_loop() is not loop:
            loop.call_soon_threadsafe(self.stop, graceful)
            return
        self.stop_requested.set()
        if not graceful:
            self.hard_stop.set()

    async def chore_due(self, alarm: Alarm, last_done: float, spread: float) -> None:
        """Wait for ``alarm`` (see Alarm.wait). A read may grow two polls old before the chore
        goes by a pace of its own, every ``spread`` seconds: an idle claimer reads at every
        poll, a busy one only when it has room."""
        await alarm.wait(last_done, spread, max(spread, 2 * self.config.poll_interval))

    async def call(self, statement: str, operation: Coroutine[Any, Any, T]) -> T:
        """Await one queue statement, counting it as a round trip; the hooks learn how long
        ``statement`` (claim, claim_announced, finish, renew, release, reap, next_due,
        schedule_tick) took and what it raised."""
        self.metrics.round_trips += 1
        started = time.perf_counter()
        error: Exception | None = None
        try:
            return await operation
        except RETRYABLE_ERRORS as e:
            self.metrics.db_errors += 1
            error = e
            raise
        except Exception as e:
            error = e
            raise
        finally:
            self.hook(self.hooks.on_statement, statement, time.perf_counter() - started, error)

    async def backoff(self, failures: int, what: str, error: BaseException) -> None:
        """Wait before trying ``what`` again: capped, jittered, cut short by a hard stop."""
        delay = min(5.0, 0.05 * 2**failures) * random.uniform(0.5, 1.0)
        log.warning(
            "%s failed, retrying in %.2fs: %s",
            what,
            delay,
            str(error).strip() or type(error).__name__,
            extra=self.extra(),
        )
        with suppress_timeout():
            await asyncio.wait_for(self.hard_stop.wait(), delay)

    def hook(self, hook: Callable[..., None], *args: Any) -> None:
        """Call one of the user's hooks: what it raises is logged (against the job, when the
        first argument is one), and neither a job's outcome nor the worker depends on it."""
        try:
            hook(*args)
        except (Exception, SystemExit) as e:
            self.metrics.hook_errors += 1
            job = args[0] if args and isinstance(args[0], ClaimedJob) else None
            log.error(
                "hook %s raised",
                hook.__name__,
                exc_info=e,
                extra=self.extra(job, error=str(e) or type(e).__name__),
            )

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Start one of the worker's own tasks; if it fails, the worker stops."""
        task = asyncio.ensure_future(coro)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            # A defect of the worker itself, never a job's or the database's doing.
            self.crashed = task.exception()
            log.error(
                "worker task crashed: stopping",
                exc_info=task.exception(),
                extra=self.extra(),
            )
            self.stop(graceful=False)

    def extra(self, job: ClaimedJob | None = None, **fields: Any) -> dict[str, Any]:
        """The record attributes of a log line: the worker, and the job it is about."""
        extra: dict[str, Any] = {"worker_id": self.worker_id, **fields}
        if job is not None:
            extra.update(job_id=str(job.job_id), job_type=job.job_type, attempt=job.attempt)
        return extra


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class suppress_timeout:
    """``with suppress_timeout(): await asyncio.wait_for(...)``: a timeout is a normal wake-up."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> bool:
        return exc_type is not None and issubclass(exc_type, TimeoutError)
