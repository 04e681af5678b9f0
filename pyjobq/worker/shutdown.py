"""Shutdown: signals ask for it, the drain carries it out in order (no more claims, prefetched
jobs given back, running jobs given ``shutdown_timeout``, completions sent), and the exit code
says how it ended."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pyjobq.worker.claiming import Claimer
from pyjobq.worker.state import WorkerState

T = TypeVar("T")

# Exit codes of `pyjobq worker` once it is running (2 and 3 are the command line's, for bad
# usage and an unreachable database at start).
EXIT_DRAINED = 0  # stopped when asked, every job it held accounted for
EXIT_UNFINISHED = 1  # jobs still running at the end of shutdown_timeout, or an internal error

log = logging.getLogger("pyjobq.worker")


async def with_signals(state: WorkerState, serve: Callable[[], Awaitable[T]]) -> T:
    """Await ``serve()`` with SIGTERM and SIGINT asking for a drain (a second: a hard stop).

    Only the main thread may take signals: in any other thread the worker runs without them,
    and whoever started it stops it with :meth:`~pyjobq.worker.Worker.stop`."""
    if threading.current_thread() is not threading.main_thread():
        return await serve()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, state, signum)
    try:
        return await serve()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


def on_signal(state: WorkerState, signum: int) -> None:
    name = signal.Signals(signum).name
    if state.stop_requested.is_set():
        log.warning("%s again: stopping at once", name, extra=state.extra())
        state.stop(graceful=False)
    else:
        log.info("%s: draining (send it again to stop at once)", name, extra=state.extra())
        state.stop()


class Drain:
    """The drain, once a stop was asked for; counts the jobs it had to abandon."""

    def __init__(self, state: WorkerState, claimer: Claimer) -> None:
        self.state = state
        self.claimer = claimer
        self.abandoned = 0

    async def run(
        self, tasks: dict[str, asyncio.Task[None]], runners: list[asyncio.Task[None]]
    ) -> None:
        s = self.state
        s.stopping = True
        s.wake()
        s.room.set()
        hard = asyncio.ensure_future(s.hard_stop.wait())
        try:
            await asyncio.wait([tasks["claimer"], hard], return_when=asyncio.FIRST_COMPLETED)
            # Out of the buffer before the release is sent: a runner that frees up meanwhile
            # must not start a job that is being given back (it would run twice).
            unstarted = list(s.buffer)
            s.buffer.clear()
            if not s.hard_stop.is_set():
                await self.claimer.release(unstarted)
            s.draining = True
            s.job_ready.set()
            if s.running and not s.hard_stop.is_set():
                log.info("waiting for %d running jobs", len(s.running), extra=s.extra())
            await self.wait_runners(runners, hard)
            for held in list(s.running):
                self.abandoned += 1
                s.hook(s.hooks.on_job_end, held.job, "abandoned", None)
                log.warning(
                    "job still running at shutdown: left to its lease", extra=s.extra(held.job)
                )
                if held.task is not None:
                    held.task.cancel()
            if not s.hard_stop.is_set():
                s.closing = True
                s.flush_now.set()
                s.have_done.set()
                await asyncio.wait(
                    [tasks["completer"], hard],
                    timeout=s.config.shutdown_timeout,
                    return_when=asyncio.FIRST_COMPLETED,
                )
        finally:
            hard.cancel()

    async def wait_runners(
        self, runners: list[asyncio.Task[None]], hard: asyncio.Future[Any]
    ) -> None:
        """Wait for the runners to finish their jobs, until the deadline or a hard stop."""
        s = self.state
        deadline = time.monotonic() + s.config.shutdown_timeout
        pending: set[asyncio.Future[Any]] = set(runners)
        while pending and not s.hard_stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            _, pending = await asyncio.wait(
                [*pending, hard], timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
            pending.discard(hard)
