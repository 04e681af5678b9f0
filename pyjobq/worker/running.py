"""Running handlers: runners take prefetched jobs, run each handler (async on the loop, sync in
the thread pool) under its timeout and cancellation, and hand its outcome on."""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import cast

from pyjobq.params import Payload
from pyjobq.rows import ClaimedJob
from pyjobq.storable import UnstorableResult, encode_result
from pyjobq.tracing import handler_span, in_current_context
from pyjobq.worker.claiming import Claimer
from pyjobq.worker.config import WorkerConfig
from pyjobq.worker.context import RunningJob, running
from pyjobq.worker.outcomes import Outcomes, Waiting
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
        # Per job type, the deadline of its policy (job_type_set_policy, 3600 s by default);
        # the worker's job_timeout applies where it is shorter.
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
            if self.claimer.unsent_full():
                # Completions are not keeping up: what a SIGKILL would run again stays bounded.
                s.metrics.held_back += 1
                s.sent.clear()
                await s.sent.wait()
                continue
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
        self.set_deadline(held)
        # No task, shield or timer per job: an async handler runs in this runner's task, a
        # sync one in the pool, and the watchdog stops either at its deadline.
        try:
            with handler_span(job, s.worker_id):
                context = RunningJob(held, s.worker_id, s.queue, asyncio.get_running_loop())
                if job.job_type in self.outcomes.async_types:
                    held.runner = asyncio.current_task()
                    try:
                        with running(context):
                            result = await handler(job)  # type: ignore[misc]
                    finally:
                        self.outcomes.end_cancellable(held)
                else:
                    held.task = self.in_thread(held, handler, context)
                    result = await held.task
        except Waiting as e:  # asleep until its event: the attempt ended in the queue
            self.outcomes.waiting(held, e)
            return
        except asyncio.CancelledError:
            if held.timed_out:
                self.past_deadline(held)
            elif not held.cancelled:
                raise  # a hard stop
        except (Exception, SystemExit) as e:  # a handler's sys.exit() fails its job, not us
            self.outcomes.raised(held, e)
        else:
            if held.completed_in_tx:  # DONE in the handler's own transaction: nothing to send
                s.metrics.completed += 1
                s.hook(s.hooks.on_job_end, job, "completed", None)
                return
            if not held.lost:
                try:
                    held.result = encode_result(result)
                except UnstorableResult as e:
                    self.outcomes.fail(held, e, None, True)
        if held.lost:  # cancelled, or its lease lost: nothing of the attempt counts
            self.outcomes.lost(held)
            return
        # Completed or failed, the outcome goes with the next flush.
        s.done.append(held)
        s.have_done.set()
        if len(s.done) >= self.claimer.flush_at:
            s.flush_now.set()

    def set_deadline(self, held: Held) -> None:
        """When the handler starting now must have finished: its type's deadline counted from
        the claim, as the queue counts it (no lease reaches past it), or the worker's
        ``job_timeout`` counted from now, whichever comes first."""
        ends = []
        if (type_deadline := self.timeouts.get(held.job.job_type)) is not None:
            ends.append((held.claimed_at + type_deadline, type_deadline))
        if self.job_timeout is not None:
            ends.append((time.monotonic() + self.job_timeout, self.job_timeout))
        if ends:
            held.deadline_at, held.deadline_seconds = min(ends)

    async def watch_deadlines(self) -> None:
        """The watchdog: one task for every running job's deadline, instead of a timer each.
        It looks as often as a twentieth of the shortest deadline (10 ms to 1 s)."""
        s = self.state
        shortest = min([*self.timeouts.values(), self.job_timeout or math.inf])
        tick = min(1.0, max(0.01, shortest / 20))
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            for held in list(s.running):
                if held.deadline_at is not None and held.deadline_at <= now:
                    self.stop_handler(held)

    def stop_handler(self, held: Held) -> None:
        """``held`` ran past its deadline: interrupt the await of its handler, if still on."""
        if held.timed_out:
            return
        if held.runner is not None:
            held.timed_out = True
            held.runner.cancel()  # an async handler: CancelledError at its next await
        elif held.task is not None and not held.task.done():
            held.timed_out = True
            held.task.cancel()  # a sync one: its runner stops waiting; the thread lingers

    def past_deadline(self, held: Held) -> None:
        """Fail the attempt that ran past its deadline; a sync handler keeps its thread."""
        self.state.metrics.timed_out += 1
        if held.job.job_type not in self.outcomes.async_types:
            self.linger(held)
        timeout = TimeoutError(f"handler did not finish within {held.deadline_seconds}s")
        self.outcomes.fail(held, timeout, None, False)

    def in_thread(
        self, held: Held, handler: Handler, context: RunningJob
    ) -> asyncio.Future[Payload | None]:
        """Run a sync handler in the pool, ``context`` its job's (sync_job_context);
        ``held.thread`` keeps the thread's own future, since only it tells when the thread is
        free again."""
        if self.executor is None:
            raise RuntimeError("a sync handler, yet no thread pool")
        sync = cast(SyncHandler, handler)

        def call(job: ClaimedJob) -> Payload | None:
            with running(context):
                return sync(job)

        held.thread = self.executor.submit(in_current_context(call), held.job)
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
