"""Completing: finished jobs go to ``job_complete_many`` in batches, a few milliseconds after
the first of a batch finished or at once when half the capacity waits, with up to two calls in
flight (one runs while the next batch fills)."""

from __future__ import annotations

import asyncio

from pyjobq.storable import UnstorableResult
from pyjobq.worker.claiming import MAX_FLUSHES
from pyjobq.worker.outcomes import Outcomes
from pyjobq.worker.state import DATA_ERRORS, DATABASE_ERRORS, Held, WorkerState, suppress_timeout


class Completer:
    """Sends finished jobs; a batch PostgreSQL refuses as data is sent again a job at a time,
    so that only the job at fault fails."""

    def __init__(self, state: WorkerState, outcomes: Outcomes) -> None:
        self.state = state
        self.outcomes = outcomes
        self.flush_batch = state.config.flush_batch

    async def run(self) -> None:
        """Send finished jobs in batches, with up to ``MAX_FLUSHES`` calls in flight."""
        s = self.state
        slots = asyncio.Semaphore(MAX_FLUSHES)
        flushes: set[asyncio.Task[None]] = set()

        def finished(task: asyncio.Task[None]) -> None:
            flushes.discard(task)
            slots.release()

        try:
            while True:
                await s.have_done.wait()
                if not s.closing:
                    with suppress_timeout():
                        await asyncio.wait_for(s.flush_now.wait(), s.config.flush_delay)
                s.flush_now.clear()
                while s.done:
                    await slots.acquire()
                    batch = s.done[: self.flush_batch]
                    del s.done[: len(batch)]
                    s.flushing.update(batch)
                    task = s.spawn(self.flush(batch))
                    flushes.add(task)
                    task.add_done_callback(finished)
                s.have_done.clear()
                if s.closing:
                    await asyncio.gather(*flushes)
                    if not s.done:
                        return
        finally:
            for task in flushes:
                task.cancel()

    async def flush(self, batch: list[Held]) -> None:
        """Complete one batch; if PostgreSQL refuses its data, each of its jobs on its own."""
        try:
            await self.complete_retrying(batch)
        except DATA_ERRORS:
            # Refused as data: send each job alone, so that only the one at fault fails.
            for held in batch:
                await self.complete_alone(held)
        finally:
            self.state.flushing.difference_update(batch)
            self.state.room.set()
            if self.state.limited:
                self.state.notified.set()

    async def complete_alone(self, held: Held) -> None:
        try:
            await self.complete_retrying([held])
        except DATA_ERRORS as e:
            await self.outcomes.fail(held, UnstorableResult(f"result refused: {e}"), None, True)

    async def complete_retrying(self, batch: list[Held]) -> None:
        """Complete a batch, retrying with backoff on any error but one about its data."""
        failures = 0
        while True:
            try:
                await self.complete(batch)
                return
            except DATA_ERRORS:
                raise
            except DATABASE_ERRORS as e:
                failures += 1
                await self.state.backoff(failures, "complete_many", e)
                if self.state.hard_stop.is_set():
                    return

    async def complete(self, batch: list[Held]) -> None:
        s = self.state
        rows = await s.call(
            "complete",
            s.queue.complete_many(
                s.worker_id,
                [h.job.job_id for h in batch],
                [h.job.attempt for h in batch],
                [h.result for h in batch],
                [h.job.lease_token for h in batch],
            ),
        )
        s.metrics.flushes += 1
        completed = {r.job_id for r in rows if r.completed}
        for held in batch:
            if held.job.job_id in completed:
                s.metrics.completed += 1
                s.hook(s.hooks.on_job_end, held.job, "completed", None)
            else:
                self.outcomes.lost(held)
