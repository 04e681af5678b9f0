"""``Worker``: runs handlers for claimed jobs: batched, with heartbeats, wake-ups and a clean drain.

Architecture: one asyncio event loop per process drives everything through
:class:`~pyjobq.aio.AsyncJobQueue`. ``async def`` handlers run on that loop;
plain functions run in a thread pool of ``concurrency`` threads. Around them:

* the claimer takes up to the free capacity (``concurrency`` + ``prefetch`` less
  the running and prefetched jobs) in one ``job_claim`` and waits for a NOTIFY,
  free room or the poll interval; it also waits while finished jobs pile up
  unsent, since their rows stay RUNNING until completed;
* runners start prefetched jobs; a job that waited more than a fraction of its
  lease in the prefetch buffer is released instead;
* the flusher completes finished jobs with ``job_complete_many`` a few
  milliseconds after the first of a batch finished, or at once when half the
  capacity waits for it, with up to two calls in flight (one runs while the
  next batch fills);
* the heartbeat renews the lease of every running job well before it ends; a
  lease found lost marks the job so its result is dropped, never completed;
* the listener LISTENs on ``pyjobq_job`` on a dedicated connection (optional);
* the reaper calls ``job_reap`` every ``reap_interval`` seconds, with jitter.

Every statement goes through one wrapper that counts round trips. No job and no
database error stops the worker, only :meth:`Worker.stop` (or a signal) does:

* whatever a handler returns or raises decides the outcome of its own job only.
  Its result is encoded as soon as it returns (:mod:`pyjobq.storable`); one that
  cannot be stored fails the attempt for good (DEAD) with the reason as its
  error, and error text is made storable rather than refused;
* a lost connection, a lock wait past ``lock_timeout`` (55P03), a serialization
  failure, a deadlock, a cancelled statement, an administrator's shutdown or a
  full server (the ``OperationalError`` family) are retried with capped,
  jittered backoff while the heartbeat keeps the leases;
* a batch of completions that PostgreSQL refuses as data (class 22 or 54) is
  sent again one job at a time, so that only the job at fault fails;
* any other error (a privilege revoked, a function missing) is logged and the
  call retried with backoff: it is not a job's fault, so no job is failed for it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import random
import secrets
import signal
import socket
import time
import traceback
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from pyjobq.aio import AsyncJobQueue
from pyjobq.errors import (
    InvalidArgument,
    JobCancelled,
    JobStateError,
    LeaseLost,
    LockTimeout,
    PyjobqError,
)
from pyjobq.metrics import WorkerHooks, WorkerMetrics
from pyjobq.migrate import check_schema_version
from pyjobq.params import Payload
from pyjobq.rows import ClaimedJob, FailOutcome, JobStatus
from pyjobq.storable import UnstorableResult, encode_result, storable_text

T = TypeVar("T")

SyncHandler = Callable[[ClaimedJob], Payload | None]
AsyncHandler = Callable[[ClaimedJob], Awaitable[Payload | None]]
Handler = SyncHandler | AsyncHandler

CHANNEL = "pyjobq_job"

# job_claim takes at most this many jobs per call.
MAX_CLAIM = 1000
# The adaptive prefetch (prefetch=None) keeps about this many seconds of work
# waiting per runner, between ``concurrency`` jobs and ``max(256, 8 x concurrency)``.
PREFETCH_HORIZON_S = 0.1
PREFETCH_CAP_FLOOR = 256
PREFETCH_CAP_PER_RUNNER = 8
# Weight of the newest handler duration in the running average the prefetch follows.
DURATION_EWMA_WEIGHT = 0.05
# job_complete_many calls in flight at once: one can run while the next batch fills.
MAX_FLUSHES = 2
# Jobs per job_complete_many / job_renew_lease_many / job_release_many call: their limit.
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


class Retry(Exception):
    """Raise from a handler to fail this attempt and retry after ``delay_seconds``.

    ``None`` keeps the queue's exponential backoff. With no attempts left the job is DEAD.
    """

    def __init__(self, delay_seconds: float | None = None, reason: str = "retry requested") -> None:
        super().__init__(reason)
        self.delay_seconds = delay_seconds


class DeadLetter(Exception):
    """Raise from a handler to fail the job for good (DEAD), whatever attempts remain."""


def make_worker_id() -> str:
    """``host:pid:random``, unique per process and at most 80 characters (the SQL limit)."""
    suffix = f":{os.getpid()}:{secrets.token_hex(4)}"
    return socket.gethostname()[: 80 - len(suffix)] + suffix


def error_text(error: BaseException) -> str:
    """The exception and the last frames of its traceback, as kept in ``last_error``."""
    return storable_text("".join(traceback.format_exception(error, limit=-5)).strip())


@dataclass(eq=False)
class _Held:
    """A job this worker holds a lease on, from claim to complete/fail/release."""

    job: ClaimedJob
    claimed_at: float
    renewed_at: float
    lost: bool = False
    cancelled: bool = False
    result: Jsonb | None = None
    task: asyncio.Future[Any] | None = field(default=None, repr=False)
    # The runner's own task while it awaits an async handler in it (no job_timeout).
    runner: asyncio.Task[Any] | None = field(default=None, repr=False)


# (job_id, attempt) of the jobs job_cancel took from a handler of this process.
_cancelled: set[tuple[UUID, int]] = set()


def is_cancelled(job: ClaimedJob) -> bool:
    """True once ``job_cancel`` took ``job`` from the worker running it, which learns it at its
    next heartbeat. A sync handler can check it between steps and return early; an async handler
    is cancelled instead (``asyncio.CancelledError`` at its next await). Either way nothing the
    attempt returns is recorded: the job is already CANCELLED."""
    return (job.job_id, job.attempt) in _cancelled


class Worker:
    """Claims jobs of the handled types and runs them; see the module docstring.

    ``source`` is a libpq conninfo/URL (the worker opens a small pool and, unless
    ``listen`` is false, one LISTEN connection) or an :class:`AsyncConnectionPool`
    whose connections are in autocommit mode. ``handlers`` maps job type codes to
    functions taking the :class:`ClaimedJob` and returning a JSON object (the
    job's result) or ``None``; raising :class:`Retry` or :class:`DeadLetter`
    chooses what happens next, any other exception fails the attempt with the
    default backoff. ``listen_dsn`` opens the LISTEN connection elsewhere than
    ``source``: LISTEN needs a session, so when ``source`` goes through a pooler
    in transaction mode, point ``listen_dsn`` at the server itself (and, before
    PgBouncer 1.21, pass ``prepared_statements=False`` with a conninfo ``source``).
    """

    def __init__(
        self,
        source: str | AsyncConnectionPool,
        handlers: Mapping[int, Handler],
        *,
        concurrency: int = 8,
        prefetch: int | None = None,
        lease_seconds: int = 60,
        job_timeout: float | None = None,
        listen: bool = True,
        listen_dsn: str | None = None,
        prepared_statements: bool = True,
        poll_interval: float = 5.0,
        reap_interval: float = 30.0,
        flush_delay: float = 0.01,
        flush_batch: int = 100,
        prefetch_lease_fraction: float = 0.25,
        shutdown_timeout: float = 30.0,
        worker_id: str | None = None,
        hooks: WorkerHooks | None = None,
    ) -> None:
        if not handlers:
            raise ValueError("handlers must map at least one job type to a function")
        if concurrency < 1 or lease_seconds < 1 or poll_interval <= 0:
            raise ValueError("concurrency, lease_seconds and poll_interval must be positive")
        if prefetch is not None and prefetch < 0:
            raise ValueError("prefetch must be None (adaptive) or at least 0")
        self.source = source
        self.handlers = {int(t): h for t, h in handlers.items()}
        self.job_types = sorted(self.handlers)
        self.concurrency = concurrency
        # Claims are sized by free room: a small prefetch means many small claims, and a
        # claim costs a round trip whatever its size; a large one keeps long jobs from
        # other workers. None follows the handlers' durations (see _prefetch_now).
        self.prefetch = prefetch
        self.max_prefetch = (
            max(PREFETCH_CAP_FLOOR, PREFETCH_CAP_PER_RUNNER * concurrency)
            if prefetch is None
            else prefetch
        )
        self.job_seconds: float | None = None
        self.lease_seconds = lease_seconds
        self.job_timeout = job_timeout
        self.listen = listen
        self.listen_dsn = listen_dsn
        # With a conninfo source: PgBouncer < 1.21 in transaction mode does not track
        # prepared statements, so psycopg must not prepare any (prepare_threshold=None).
        self._own_kwargs: dict[str, Any] = {"autocommit": True}
        if not prepared_statements:
            self._own_kwargs["prepare_threshold"] = None
        self.poll_interval = poll_interval
        self.reap_interval = reap_interval
        self.flush_delay = flush_delay
        self.flush_batch = min(flush_batch, MAX_BATCH)
        self.max_prefetch_age = lease_seconds * prefetch_lease_fraction
        self.shutdown_timeout = shutdown_timeout
        self.worker_id = worker_id or make_worker_id()
        self.hooks = hooks or WorkerHooks()
        self.metrics = WorkerMetrics()
        # Set once the worker is connected and claiming (tests and supervisors wait on it).
        self.ready = asyncio.Event()
        self.abandoned = 0
        # Set when an internal task failed and stopped the worker (the CLI then exits 1).
        self.crashed: BaseException | None = None
        self._buffer: deque[_Held] = deque()
        self._running: set[_Held] = set()
        self._done: list[_Held] = []
        self._flushing: set[_Held] = set()
        self._notified = asyncio.Event()
        self._room = asyncio.Event()
        self._job_ready = asyncio.Event()
        self._have_done = asyncio.Event()
        self._flush_now = asyncio.Event()
        self._stop_requested = asyncio.Event()
        self._hard_stop = asyncio.Event()
        self._stopping = False
        self._draining = False
        self._closing = False
        self._pool: AsyncConnectionPool | None = None
        self._queue: AsyncJobQueue | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._async_types = {t for t, h in self.handlers.items() if _is_async(h)}
        # Completions are sent at once when this many are waiting: a full batch, or half
        # of what the claimer may hold at most.
        self._flush_at = max(1, min(self.flush_batch, (concurrency + self.max_prefetch) // 2))

    # -- control -------------------------------------------------------------

    def stop(self, graceful: bool = True) -> None:
        """Ask the worker to stop: drain (default) or stop at once. Safe from the loop only."""
        self._stop_requested.set()
        if not graceful:
            self._hard_stop.set()

    def run(self) -> WorkerMetrics:
        """Run until SIGTERM/SIGINT (a second signal stops at once); returns the metrics."""
        return asyncio.run(self._run_with_signals())

    async def _run_with_signals(self) -> WorkerMetrics:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_signal, signum)
        try:
            return await self.serve()
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)

    def _on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self._stop_requested.is_set():
            log.warning("%s again: stopping at once", name, extra=self._extra())
            self.stop(graceful=False)
        else:
            log.info("%s: draining (send it again to stop at once)", name, extra=self._extra())
            self.stop()

    # -- main ----------------------------------------------------------------

    async def serve(self) -> WorkerMetrics:
        """Run until :meth:`stop`; returns the metrics. The coroutine form of :meth:`run`."""
        await self._probe()
        own_pool = isinstance(self.source, str)
        if isinstance(self.source, str):
            self._pool = AsyncConnectionPool(
                self.source,
                min_size=1,
                max_size=MAX_FLUSHES + 3,  # claimer, flushes, heartbeat and one more
                kwargs=self._own_kwargs,
                timeout=5.0,
                open=False,
                name=f"pyjobq-{self.worker_id}",
            )
            await self._pool.open(wait=True, timeout=10.0)
        else:
            self._pool = self.source
        self._queue = AsyncJobQueue(self._pool)
        if len(self._async_types) < len(self.handlers):
            self._executor = ThreadPoolExecutor(self.concurrency, thread_name_prefix="pyjobq-job")
        tasks = {
            "claimer": self._spawn(self._claimer()),
            "flusher": self._spawn(self._flusher()),
            "heartbeat": self._spawn(self._heartbeat()),
            "reaper": self._spawn(self._reaper()),
        }
        if self.listen:
            tasks["listener"] = self._spawn(self._listener())
        runners = [self._spawn(self._runner()) for _ in range(self.concurrency)]
        log.info(
            "worker started",
            extra=self._extra(job_types=self.job_types, concurrency=self.concurrency),
        )
        self.ready.set()
        try:
            await self._stop_requested.wait()
            await self._drain(tasks, runners)
        finally:
            for task in [*tasks.values(), *runners]:
                task.cancel()
            await asyncio.gather(*tasks.values(), *runners, return_exceptions=True)
            if self._executor is not None:
                self._executor.shutdown(wait=False, cancel_futures=True)
            if own_pool and self._pool is not None:
                await self._pool.close(timeout=1.0)
        log.info("worker stopped", extra=self._extra(metrics=self.metrics.as_dict()))
        return self.metrics

    async def _probe(self) -> None:
        """Fail fast, with the real error, when the database is unreachable, not migrated,
        newer than this package (:class:`~pyjobq.errors.SchemaTooNew`), or lacks a job type
        the handlers are for (``ValueError``)."""
        conninfo, kwargs = self._conninfo()
        async with await psycopg.AsyncConnection.connect(conninfo, **kwargs) as conn:
            queue = AsyncJobQueue(conn)
            warning = check_schema_version(await queue.schema_version())
            registered = {t.job_type for t in await queue.types()}
        if warning:
            log.warning(warning, extra=self._extra())
        # A configuration error stops the worker before its first claim; later, every claim
        # would be refused (22023) and retried for ever.
        unknown = sorted(set(self.handlers) - registered)
        if unknown:
            raise ValueError(f"handlers for job types that are not registered: {unknown}")

    async def _drain(
        self, tasks: dict[str, asyncio.Task[None]], runners: list[asyncio.Task[None]]
    ) -> None:
        self._stopping = True
        self._notified.set()
        self._room.set()
        hard = asyncio.ensure_future(self._hard_stop.wait())
        try:
            await asyncio.wait([tasks["claimer"], hard], return_when=asyncio.FIRST_COMPLETED)
            if not self._hard_stop.is_set():
                await self._release(list(self._buffer))
            self._buffer.clear()
            self._draining = True
            self._job_ready.set()
            if self._running and not self._hard_stop.is_set():
                log.info("waiting for %d running jobs", len(self._running), extra=self._extra())
            await self._wait_runners(runners, hard)
            for held in list(self._running):
                self.abandoned += 1
                self._hook(self.hooks.on_job_end, held.job, "abandoned", None)
                log.warning(
                    "job still running at shutdown: left to its lease",
                    extra=self._extra(held.job),
                )
                if held.task is not None:
                    held.task.cancel()
            if not self._hard_stop.is_set():
                self._closing = True
                self._flush_now.set()
                self._have_done.set()
                await asyncio.wait(
                    [tasks["flusher"], hard],
                    timeout=self.shutdown_timeout,
                    return_when=asyncio.FIRST_COMPLETED,
                )
        finally:
            hard.cancel()

    async def _wait_runners(
        self, runners: list[asyncio.Task[None]], hard: asyncio.Future[Any]
    ) -> None:
        """Wait for the runners to finish their jobs, until the deadline or a hard stop."""
        deadline = time.monotonic() + self.shutdown_timeout
        pending: set[asyncio.Future[Any]] = set(runners)
        while pending and not self._hard_stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            _, pending = await asyncio.wait(
                [*pending, hard], timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
            pending.discard(hard)

    # -- the database --------------------------------------------------------

    def _conninfo(self) -> tuple[str, dict[str, Any]]:
        if isinstance(self.source, str):
            return self.source, self._own_kwargs
        conninfo, kwargs = self.source.conninfo, self.source.kwargs
        if not isinstance(conninfo, str) or not isinstance(kwargs, dict):
            raise TypeError("the worker needs a pool whose conninfo and kwargs are plain values")
        return conninfo, {**kwargs, "autocommit": True}

    @property
    def queue(self) -> AsyncJobQueue:
        if self._queue is None:
            raise RuntimeError("the worker is not running")
        return self._queue

    async def _call(self, operation: Coroutine[Any, Any, T]) -> T:
        """Await one queue statement, counting it as a round trip."""
        self.metrics.round_trips += 1
        try:
            return await operation
        except RETRYABLE_ERRORS:
            self.metrics.db_errors += 1
            raise

    async def _backoff(self, failures: int, what: str, error: BaseException) -> None:
        delay = min(5.0, 0.05 * 2**failures) * random.uniform(0.5, 1.0)
        log.warning(
            "%s failed, retrying in %.2fs: %s",
            what,
            delay,
            str(error).strip() or type(error).__name__,
            extra=self._extra(),
        )
        with _suppress_timeout():
            await asyncio.wait_for(self._hard_stop.wait(), delay)

    # -- claiming ------------------------------------------------------------

    def _prefetch_now(self) -> int:
        """The prefetch to claim for: fixed, or about PREFETCH_HORIZON_S of work per runner."""
        if self.prefetch is not None:
            return self.prefetch
        if self.job_seconds is None:
            return self.concurrency  # nothing measured yet: one job ahead per runner
        wanted = self.concurrency * PREFETCH_HORIZON_S / max(self.job_seconds, 1e-6)
        return int(min(self.max_prefetch, max(self.concurrency, wanted)))

    def _low_water(self) -> bool:
        """True once the buffer is down to half the prefetch: time to claim more."""
        return len(self._buffer) <= self._prefetch_now() // 2

    def _room_for(self) -> int:
        if not self._low_water():
            return 0
        # Finished jobs still hold their rows RUNNING: stop claiming while they pile up.
        if len(self._done) + len(self._flushing) >= (MAX_FLUSHES + 1) * self._flush_at:
            return 0
        held = len(self._running) + len(self._buffer)
        room = self.concurrency + self._prefetch_now() - held
        return max(0, min(room, MAX_CLAIM))

    async def _claimer(self) -> None:
        failures = 0
        while not self._stopping:
            self._room.clear()
            want = self._room_for()
            if want == 0:
                await self._room.wait()
                continue
            self._notified.clear()
            started = time.monotonic()
            try:
                jobs = await self._call(
                    self.queue.claim(self.worker_id, want, self.lease_seconds, self.job_types)
                )
            except DATABASE_ERRORS as e:
                failures += 1
                await self._backoff(failures, "claim", e)
                continue
            failures = 0
            self.metrics.claims += 1
            self.metrics.claimed += len(jobs)
            held = [_Held(job, started, started) for job in jobs]
            if self._stopping:
                await self._release(held)
                return
            self._buffer.extend(held)
            if held:
                self._job_ready.set()
            if len(jobs) < want:
                # Nothing more is due: sleep until a NOTIFY, the reaper, or the poll.
                timeout = self.poll_interval * random.uniform(0.9, 1.1)
                with _suppress_timeout():
                    await asyncio.wait_for(self._notified.wait(), timeout)

    async def _release(self, held: list[_Held]) -> None:
        """Give unstarted jobs back with ``job_release_many``, one call per ``MAX_BATCH``."""
        for start in range(0, len(held), MAX_BATCH):
            chunk = held[start : start + MAX_BATCH]
            ids, attempts = [h.job.job_id for h in chunk], [h.job.attempt for h in chunk]
            for failures in range(1, 6):
                try:
                    rows = await self._call(self.queue.release_many(self.worker_id, ids, attempts))
                    # A job not released was reaped meanwhile: nothing to give back.
                    self.metrics.released += sum(r.released for r in rows)
                    break
                except DATABASE_ERRORS as e:
                    if self._hard_stop.is_set():
                        return
                    await self._backoff(failures, "release", e)

    # -- running -------------------------------------------------------------

    async def _runner(self) -> None:
        while True:
            while not self._buffer:
                if self._draining:
                    return
                self._job_ready.clear()
                await self._job_ready.wait()
            held = self._buffer.popleft()
            if not self._room.is_set() and self._low_water():
                self._room.set()
            if time.monotonic() - held.claimed_at > self.max_prefetch_age:
                await self._release([held])
                continue
            self._running.add(held)
            started = time.monotonic()
            try:
                await self._run(held)
            finally:
                self._running.discard(held)
                self._observe_duration(time.monotonic() - started)
                if not self._room.is_set() and self._low_water():
                    self._room.set()

    def _observe_duration(self, seconds: float) -> None:
        """Fold how long a runner was busy with one job into the average the prefetch follows."""
        if self.job_seconds is None:
            self.job_seconds = seconds
        else:
            self.job_seconds += DURATION_EWMA_WEIGHT * (seconds - self.job_seconds)

    async def _run(self, held: _Held) -> None:
        job = held.job
        self.metrics.started += 1
        self.metrics.observe_latency(max(0.0, (datetime.now(UTC) - job.run_after).total_seconds()))
        self._hook(self.hooks.on_job_start, job)
        handler = self.handlers[job.job_type]
        try:
            if self.job_timeout is None:
                # No deadline: no extra task or shield per job. An async handler runs in
                # this runner's task (a hard stop or a cancel cancels the runner), a sync one
                # in the pool.
                if job.job_type in self._async_types:
                    held.runner = asyncio.current_task()
                    try:
                        result = await handler(job)  # type: ignore[misc]
                    finally:
                        self._end_cancellable(held)
                else:
                    loop = asyncio.get_running_loop()
                    held.task = loop.run_in_executor(self._executor, handler, job)
                    result = await held.task
            else:
                if job.job_type in self._async_types:
                    coro: Awaitable[Payload | None] = handler(job)  # type: ignore[assignment]
                    held.task = asyncio.ensure_future(coro)
                else:
                    loop = asyncio.get_running_loop()
                    held.task = loop.run_in_executor(self._executor, handler, job)
                result = await asyncio.wait_for(asyncio.shield(held.task), self.job_timeout)
        except asyncio.CancelledError:
            if not held.cancelled:
                raise  # a hard stop
            self._lost(held)
        except Retry as e:
            await self._fail(held, e, e.delay_seconds, False)
        except DeadLetter as e:
            await self._fail(held, e, None, True)
        except TimeoutError as e:
            if self.job_timeout is None or held.task is None:  # raised by the handler itself
                await self._fail(held, e, None, False)
                return
            held.task.cancel()
            self.metrics.timed_out += 1
            timeout = TimeoutError(f"handler did not finish within {self.job_timeout}s")
            timeout.__cause__ = e
            await self._fail(held, timeout, None, False)
        except (Exception, SystemExit) as e:  # a handler's sys.exit() fails its job, not us
            await self._fail(held, e, None, False)
        else:
            if held.lost:
                self._lost(held)
                return
            try:
                held.result = encode_result(result)
            except UnstorableResult as e:
                await self._fail(held, e, None, True)
                return
            self._done.append(held)
            self._have_done.set()
            if len(self._done) >= self._flush_at:
                self._flush_now.set()

    def _hook(self, hook: Callable[..., None], job: ClaimedJob, *args: Any) -> None:
        """Call one of the user's hooks: what it raises is logged against the job, and neither
        the job's outcome nor the worker depends on it."""
        try:
            hook(job, *args)
        except (Exception, SystemExit) as e:
            self.metrics.hook_errors += 1
            log.error(
                "hook %s raised",
                hook.__name__,
                exc_info=e,
                extra=self._extra(job, error=str(e) or type(e).__name__),
            )

    def _lost(self, held: _Held) -> None:
        """The attempt no longer counts: its lease was lost, or the job was cancelled."""
        _cancelled.discard((held.job.job_id, held.job.attempt))
        if held.cancelled:
            self.metrics.cancelled += 1
            self._hook(self.hooks.on_job_end, held.job, "cancelled", None)
            log.info(
                "job cancelled: handler stopped, nothing recorded", extra=self._extra(held.job)
            )
            return
        self.metrics.lease_lost += 1
        self._hook(self.hooks.on_job_end, held.job, "lease_lost", None)
        log.warning("lease lost: result dropped", extra=self._extra(held.job))

    def _end_cancellable(self, held: _Held) -> None:
        """The handler awaited in this runner's task has returned or raised: a cancel may no
        longer interrupt the runner, and one that was delivered is taken back from it (the job
        was cancelled, not the runner)."""
        held.runner = None
        runner = asyncio.current_task()
        if held.cancelled and runner is not None and runner.cancelling():
            runner.uncancel()

    def _cancel(self, held: _Held) -> None:
        """job_cancel took ``held``'s job: stop its handler (an async one is cancelled, a sync
        one sees :func:`is_cancelled`), and drop whatever it returns."""
        held.lost = held.cancelled = True
        _cancelled.add((held.job.job_id, held.job.attempt))
        if held.runner is not None:
            held.runner.cancel()
        elif held.task is not None and held.job.job_type in self._async_types:
            held.task.cancel()

    async def _fail(
        self, held: _Held, error: BaseException, delay: float | None, dead_letter: bool
    ) -> None:
        job = held.job
        text = error_text(error)
        failures = 0
        while True:
            try:
                outcome: FailOutcome = await self._call(
                    self.queue.fail(
                        job.job_id, self.worker_id, job.attempt, text, delay, dead_letter
                    )
                )
                break
            except (LeaseLost, JobCancelled) as e:
                held.cancelled = isinstance(e, JobCancelled)
                self._lost(held)
                return
            except JobStateError as e:
                log.error("job could not be failed: %s", e, extra=self._extra(job))
                return
            except DATA_ERRORS as e:
                if delay is None:  # the text is made storable: nothing else is the job's
                    log.error("job could not be failed: %s", e, extra=self._extra(job))
                    return
                # Retry(delay) out of job_fail's range: keep the queue's backoff instead.
                text = storable_text(f"{text}\n(retry delay {delay!r} refused: {e})")
                delay = None
            except DATABASE_ERRORS as e:
                failures += 1
                if self._hard_stop.is_set():
                    return
                await self._backoff(failures, "fail", e)
        self.metrics.failed += 1
        dead = outcome.status is JobStatus.DEAD
        if dead:
            self.metrics.dead += 1
        else:
            self.metrics.retried += 1
        self._hook(self.hooks.on_job_end, job, "dead" if dead else "retry", error)
        log.warning(
            "job failed: %s",
            "dead" if dead else f"retry at {outcome.run_after.isoformat()}",
            extra=self._extra(job, error=str(error) or type(error).__name__),
        )

    # -- completing ----------------------------------------------------------

    async def _flusher(self) -> None:
        """Send finished jobs in batches, with up to ``MAX_FLUSHES`` calls in flight."""
        slots = asyncio.Semaphore(MAX_FLUSHES)
        flushes: set[asyncio.Task[None]] = set()

        def finished(task: asyncio.Task[None]) -> None:
            flushes.discard(task)
            slots.release()

        try:
            while True:
                await self._have_done.wait()
                if not self._closing:
                    with _suppress_timeout():
                        await asyncio.wait_for(self._flush_now.wait(), self.flush_delay)
                self._flush_now.clear()
                while self._done:
                    await slots.acquire()
                    batch = self._done[: self.flush_batch]
                    del self._done[: len(batch)]
                    self._flushing.update(batch)
                    task = self._spawn(self._flush(batch))
                    flushes.add(task)
                    task.add_done_callback(finished)
                self._have_done.clear()
                if self._closing:
                    await asyncio.gather(*flushes)
                    if not self._done:
                        return
        finally:
            for task in flushes:
                task.cancel()

    async def _flush(self, batch: list[_Held]) -> None:
        """Complete one batch; if PostgreSQL refuses its data, each of its jobs on its own."""
        try:
            await self._complete_retrying(batch)
        except DATA_ERRORS:
            # Refused as data: send each job alone, so that only the one at fault fails.
            for held in batch:
                await self._complete_alone(held)
        finally:
            self._flushing.difference_update(batch)
            self._room.set()

    async def _complete_alone(self, held: _Held) -> None:
        try:
            await self._complete_retrying([held])
        except DATA_ERRORS as e:
            await self._fail(held, UnstorableResult(f"result refused: {e}"), None, True)

    async def _complete_retrying(self, batch: list[_Held]) -> None:
        """Complete a batch, retrying with backoff on any error but one about its data."""
        failures = 0
        while True:
            try:
                await self._complete(batch)
                return
            except DATA_ERRORS:
                raise
            except DATABASE_ERRORS as e:
                failures += 1
                await self._backoff(failures, "complete_many", e)
                if self._hard_stop.is_set():
                    return

    async def _complete(self, batch: list[_Held]) -> None:
        rows = await self._call(
            self.queue.complete_many(
                self.worker_id,
                [h.job.job_id for h in batch],
                [h.job.attempt for h in batch],
                [h.result for h in batch],
            )
        )
        self.metrics.flushes += 1
        completed = {r.job_id for r in rows if r.completed}
        for held in batch:
            if held.job.job_id in completed:
                self.metrics.completed += 1
                self._hook(self.hooks.on_job_end, held.job, "completed", None)
            else:
                self._lost(held)

    # -- leases, wake-ups, reaping -------------------------------------------

    async def _heartbeat(self) -> None:
        tick = max(0.05, self.lease_seconds / 6)
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            stale = [h for h in self._buffer if now - h.claimed_at > self.max_prefetch_age]
            for h in stale:
                self._buffer.remove(h)
            if stale:
                self._room.set()
                await self._release(stale)
            due = [
                h
                for h in [*self._running, *self._done, *self._flushing]
                if not h.lost and now - h.renewed_at > self.lease_seconds / 3
            ]
            for start in range(0, len(due), MAX_BATCH):
                error = await self._renew(due[start : start + MAX_BATCH])
                if error is not None:
                    # The database is away or refusing: the rest would fail alike. One line,
                    # and the next tick tries them all again.
                    log.warning(
                        "renew_lease failed, %d of %d leases not renewed this round: %s",
                        len(due) - start,
                        len(due),
                        str(error).strip() or type(error).__name__,
                        extra=self._extra(),
                    )
                    break

    async def _renew(self, batch: list[_Held]) -> BaseException | None:
        """Renew the leases of ``batch`` in one ``job_renew_lease_many`` call; returns the
        database error that prevented it, if any."""
        started = time.monotonic()
        try:
            rows = await self._call(
                self.queue.renew_lease_many(
                    self.worker_id,
                    [h.job.job_id for h in batch],
                    [h.job.attempt for h in batch],
                    self.lease_seconds,
                )
            )
        except DATABASE_ERRORS as e:
            return e
        for held, row in zip(batch, rows, strict=True):
            if row.renewed:
                held.renewed_at = started
                self.metrics.renewed += 1
            elif held in self._running and row.cancelled:
                self._cancel(held)
            elif held in self._running:
                held.lost = True
                log.warning("lease lost while running", extra=self._extra(held.job))
            # Not held and no longer running: its completion, maybe committed a moment ago,
            # tells whether the lease was lost.
        return None

    async def _reaper(self) -> None:
        while True:
            await asyncio.sleep(self.reap_interval * random.uniform(0.5, 1.5))
            try:
                reaped = await self._call(self.queue.reap())
            except DATABASE_ERRORS as e:
                log.warning("reap failed: %s", e, extra=self._extra())
                continue
            if reaped:
                self.metrics.reaped += len(reaped)
                log.info(
                    "reaped %d expired leases",
                    len(reaped),
                    extra=self._extra(workers=sorted({r.worker_id for r in reaped})),
                )
                self._notified.set()

    async def _listener(self) -> None:
        if self.listen_dsn is not None:
            conninfo, kwargs = self.listen_dsn, self._own_kwargs
        else:
            conninfo, kwargs = self._conninfo()
        failures = 0
        while not self._stopping:
            try:
                async with await psycopg.AsyncConnection.connect(conninfo, **kwargs) as conn:
                    await conn.execute(f"listen {CHANNEL}")
                    failures = 0
                    # Anything enqueued while we were not listening was not announced.
                    self._notified.set()
                    while not self._stopping:
                        async for notify in conn.notifies(timeout=1.0):
                            if self._wanted(notify.payload):
                                self._notified.set()
            except DATABASE_ERRORS as e:
                failures += 1
                await self._backoff(failures, "listen", e)

    def _wanted(self, payload: str) -> bool:
        try:
            return not payload or int(payload) in self.handlers
        except ValueError:
            return True

    # -- helpers -------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
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
                extra=self._extra(),
            )
            self.stop(graceful=False)

    def _extra(self, job: ClaimedJob | None = None, **fields: Any) -> dict[str, Any]:
        extra: dict[str, Any] = {"worker_id": self.worker_id, **fields}
        if job is not None:
            extra.update(job_id=str(job.job_id), job_type=job.job_type, attempt=job.attempt)
        return extra


def _is_async(handler: Handler) -> bool:
    call = getattr(handler, "__call__", None)  # noqa: B004 - callable objects with async __call__
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


class _suppress_timeout:
    """``with _suppress_timeout(): await asyncio.wait_for(...)``: a timeout is a normal wake-up."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> bool:
        return exc_type is not None and issubclass(exc_type, TimeoutError)
