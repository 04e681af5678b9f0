"""Running handlers: runners take prefetched jobs, run each handler (async on the loop, sync in
the thread pool) under its timeout and cancellation, and hand its outcome on."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import cast

from pyjobq.params import Payload
from pyjobq.rows import ClaimedJob
from pyjobq.storable import UnstorableResult, encode_result
from pyjobq.worker.claiming import Claimer
from pyjobq.worker.config import WorkerConfig
from pyjobq.worker.outcomes import DeadLetter, Outcomes, Retry
from pyjobq.worker.state import Held, WorkerState

SyncHandler = Callable[[ClaimedJob], Payload | None]
AsyncHandler = Callable[[ClaimedJob], Awaitable[Payload | None]]
Handler = SyncHandler | AsyncHandler

log = logging.getLogger("pyjobq.worker")


def is_async(handler: Handler) -> bool:
    """True for an ``async def`` handler, or a callable object whose ``__call__`` is one."""
    call = getattr(handler, "__call__", None)  # noqa: B004 - callable objects with async __call__
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


class Runner:
    """``concurrency`` runners share one of these: each takes the next prefetched job (or gives
    it back when it waited too long), runs its handler, and records what came of it."""

    def __init__(
        self,
        state: WorkerState,
        claimer: Claimer,
        outcomes: Outcomes,
        handlers: Mapping[int, Handler],
        executor: ThreadPoolExecutor | None,
        timeouts: Mapping[int, float] | None = None,
    ) -> None:
        self.state = state
        self.claimer = claimer
        self.outcomes = outcomes
        self.handlers = handlers
        self.executor = executor
        self.job_timeout = state.config.job_timeout
        # Per job type, the execution timeout of its policy (job_type_set_policy): it wins over
        # the worker's job_timeout.
        self.timeouts = dict(timeouts or {})
        # Threads still held by sync handlers past their timeout (see linger), and how many
        # the executor has beyond one per runner to take their place.
        self.lingering = 0
        self.spare_threads = lingering_limit(state.config)

    async def run(self) -> None:
        """One runner: until the worker drains and the buffer is empty."""
        s = self.state
        while True:
            while not s.buffer:
                if s.draining:
                    return
                s.job_ready.clear()
                await s.job_ready.wait()
            held = s.buffer.popleft()
            self.claimer.wake_if_low()
            if self.claimer.is_stale(held, time.monotonic()):
                await self.claimer.release([held])
                continue
            s.running.add(held)
            started = time.monotonic()
            try:
                await self.run_job(held)
            finally:
                s.running.discard(held)
                self.claimer.observe_duration(time.monotonic() - started)
                self.claimer.wake_if_low()

    async def run_job(self, held: Held) -> None:
        """Run one handler; whatever it returns or raises decides this job's outcome only."""
        s, job = self.state, held.job
        s.metrics.started += 1
        s.metrics.observe_latency(max(0.0, (datetime.now(UTC) - job.run_after).total_seconds()))
        s.hook(s.hooks.on_job_start, job)
        handler = self.handlers[job.job_type]
        is_async_job = job.job_type in self.outcomes.async_types
        deadline = self.timeouts.get(job.job_type, self.job_timeout)
        try:
            if deadline is None:
                # No deadline: no extra task or shield per job. An async handler runs in
                # this runner's task (a hard stop or a cancel cancels the runner), a sync one
                # in the pool.
                if is_async_job:
                    held.runner = asyncio.current_task()
                    try:
                        result = await handler(job)  # type: ignore[misc]
                    finally:
                        self.outcomes.end_cancellable(held)
                else:
                    held.task = self.in_thread(held, handler)
                    result = await held.task
            else:
                if is_async_job:
                    coro: Awaitable[Payload | None] = handler(job)  # type: ignore[assignment]
                    held.task = asyncio.ensure_future(coro)
                else:
                    held.task = self.in_thread(held, handler)
                result = await asyncio.wait_for(asyncio.shield(held.task), deadline)
        except asyncio.CancelledError:
            if not held.cancelled:
                raise  # a hard stop
            self.outcomes.lost(held)
        except Retry as e:
            await self.outcomes.fail(held, e, e.delay_seconds, False)
        except DeadLetter as e:
            await self.outcomes.fail(held, e, None, True)
        except TimeoutError as e:
            if deadline is None or held.task is None:  # raised by the handler itself
                await self.outcomes.fail(held, e, None, False)
                return
            held.task.cancel()
            s.metrics.timed_out += 1
            if not is_async_job:
                self.linger(held)
            timeout = TimeoutError(f"handler did not finish within {deadline}s")
            timeout.__cause__ = e
            await self.outcomes.fail(held, timeout, None, False)
        except (Exception, SystemExit) as e:  # a handler's sys.exit() fails its job, not us
            await self.outcomes.fail(held, e, None, False)
        else:
            if held.lost:
                self.outcomes.lost(held)
                return
            try:
                held.result = encode_result(result)
            except UnstorableResult as e:
                await self.outcomes.fail(held, e, None, True)
                return
            s.done.append(held)
            s.have_done.set()
            if len(s.done) >= self.claimer.flush_at:
                s.flush_now.set()

    def in_thread(self, held: Held, handler: Handler) -> asyncio.Future[Payload | None]:
        """Run a sync handler in the pool; ``held.thread`` keeps the thread's own future, since
        only it tells when the thread is free again."""
        if self.executor is None:
            raise RuntimeError("a sync handler, yet no thread pool")
        sync = cast(SyncHandler, handler)
        held.thread = self.executor.submit(sync, held.job)
        return asyncio.wrap_future(held.thread)

    def linger(self, held: Held) -> None:
        """A sync handler ran past its timeout: its attempt has failed, but a thread cannot be
        interrupted, so it keeps its thread until it returns. One of the pool's spare threads
        takes its place; once they are all held, the worker runs with fewer threads than
        runners, and says so, until a lingering handler returns."""
        if held.thread is None:
            return
        s, loop = self.state, asyncio.get_running_loop()
        self.lingering += 1
        s.metrics.lingering_threads += 1
        short = self.lingering > self.spare_threads
        log.log(
            logging.ERROR if short else logging.WARNING,
            "handler past its timeout still holds its thread: %d threads held, %d spare%s",
            self.lingering,
            self.spare_threads,
            ": fewer threads than runners until one returns" if short else "",
            extra=s.extra(held.job),
        )
        held.thread.add_done_callback(lambda _: loop.call_soon_threadsafe(self.returned))

    def returned(self) -> None:
        """A lingering handler returned: its thread is free again (what it returned is
        dropped, its attempt failed at the timeout)."""
        self.lingering -= 1


def lingering_limit(config: WorkerConfig) -> int:
    """How many threads the pool has beyond one per runner, for lingering handlers."""
    if config.max_lingering_threads is None:
        return config.concurrency
    return config.max_lingering_threads
