"""Completing: the outcomes of finished attempts (completed, failed, dead, snoozed) go to
``job_finish_many`` together in batches, a few milliseconds after the first of a batch finished
or at once when half the capacity waits, with up to two calls in flight (one runs while the
next batch fills)."""

from __future__ import annotations

import asyncio
import logging

from pyjobq.rows import JobStatus
from pyjobq.storable import UnstorableResult, storable_text
from pyjobq.worker.claiming import MAX_FLUSHES
from pyjobq.worker.outcomes import Outcomes
from pyjobq.worker.state import DATA_ERRORS, DATABASE_ERRORS, Held, WorkerState, suppress_timeout

log = logging.getLogger("pyjobq.worker")


class Completer:
    """Sends the outcomes of finished attempts; a batch PostgreSQL refuses as data is sent
    again a job at a time, so that only the job at fault fails."""

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
        """Send one batch; if PostgreSQL refuses its data, each of its jobs on its own."""
        try:
            await self.send_retrying(batch)
        except DATA_ERRORS:
            # Refused as data: send each job alone, so that only the one at fault fails.
            for held in batch:
                await self.send_alone(held)
        finally:
            self.state.flushing.difference_update(batch)
            self.state.room.set()
            self.state.sent.set()
            if self.state.limited:
                self.state.wake()

    async def send_alone(self, held: Held) -> None:
        """Send one job PostgreSQL refused as data: a result it cannot store fails the job DEAD,
        a retry delay out of range gives way to the backoff, and a failure still refused is
        logged (the reaper takes the job back once its lease runs out)."""
        while True:
            try:
                await self.send_retrying([held])
                return
            except DATA_ERRORS as e:
                if held.outcome == "done":
                    held.result = None
                    self.outcomes.fail(held, UnstorableResult(f"result refused: {e}"), None, True)
                elif held.delay is not None:
                    note = f"(retry delay {held.delay!r} refused: {e})"
                    held.error_text = storable_text(f"{held.error_text}\n{note}")
                    held.delay = None
                else:
                    log.error("job could not be failed: %s", e, extra=self.state.extra(held.job))
                    return

    async def send_retrying(self, batch: list[Held]) -> None:
        """Send a batch, retrying with backoff on any error but one about its data."""
        failures = 0
        while True:
            try:
                await self.send(batch)
                return
            except DATA_ERRORS:
                raise
            except DATABASE_ERRORS as e:
                failures += 1
                await self.state.backoff(failures, "finish_many", e)
                if self.state.hard_stop.is_set():
                    return

    async def send(self, batch: list[Held]) -> None:
        """One ``job_finish_many`` call for the batch's completions and failures together."""
        s = self.state
        failed = [h for h in batch if h.outcome != "done"]
        rows = await s.call(
            "finish",
            s.queue.finish_many(
                s.worker_id,
                [h.job.job_id for h in batch],
                [h.job.attempt for h in batch],
                [h.outcome for h in batch],
                [h.result for h in batch] if len(failed) < len(batch) else None,
                [h.error_text for h in batch] if failed else None,
                [h.delay for h in batch] if any(h.delay is not None for h in failed) else None,
                [h.job.lease_token for h in batch],
            ),
        )
        s.metrics.flushes += 1
        for held, row in zip(batch, rows, strict=True):
            if row.status is None:
                self.outcomes.lost(held)
            elif held.outcome == "done":
                s.metrics.completed += 1
                s.hook(s.hooks.on_job_end, held.job, "completed", None)
            elif held.outcome == "snoozed" and row.status is JobStatus.PENDING:
                self.outcomes.snoozed(held, row)
            else:
                self.outcomes.failed(held, row)
