"""Leases: the heartbeat renews every held job's lease well before it ends (and learns of
cancels and lost leases), gives back prefetched jobs that waited too long, and the reaper takes
back the expired leases of workers that died."""

from __future__ import annotations

import asyncio
import logging
import time

from pyjobq.worker.claiming import Claimer
from pyjobq.worker.outcomes import Outcomes
from pyjobq.worker.state import DATABASE_ERRORS, MAX_BATCH, Held, WorkerState

log = logging.getLogger("pyjobq.worker")


class Heartbeat:
    """Every sixth of a lease: renew the leases a third of a lease old, in one
    ``job_renew_lease_many`` call per ``MAX_BATCH``."""

    def __init__(self, state: WorkerState, claimer: Claimer, outcomes: Outcomes) -> None:
        self.state = state
        self.claimer = claimer
        self.outcomes = outcomes
        self.lease_seconds = state.config.lease_seconds

    async def run(self) -> None:
        s = self.state
        tick = max(0.05, self.lease_seconds / 6)
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            stale = [h for h in s.buffer if self.claimer.is_stale(h, now)]
            for h in stale:
                s.buffer.remove(h)
            if stale:
                s.room.set()
                await self.claimer.release(stale)
            due = [
                h
                for h in [*s.running, *s.done, *s.flushing]
                if not h.lost
                and not h.completed_in_tx
                and now - h.renewed_at > self.lease_seconds / 3
            ]
            for start in range(0, len(due), MAX_BATCH):
                error = await self.renew(due[start : start + MAX_BATCH])
                if error is not None:
                    # The database is away or refusing: the rest would fail alike. One line,
                    # and the next tick tries them all again.
                    log.warning(
                        "renew_lease failed, %d of %d leases not renewed this round: %s",
                        len(due) - start,
                        len(due),
                        str(error).strip() or type(error).__name__,
                        extra=s.extra(),
                    )
                    break

    async def renew(self, batch: list[Held]) -> BaseException | None:
        """Renew the leases of ``batch`` in one ``job_renew_lease_many`` call; returns the
        database error that prevented it, if any."""
        s = self.state
        started = time.monotonic()
        try:
            rows = await s.call(
                "renew",
                s.queue.renew_lease_many(
                    s.worker_id,
                    [h.job.job_id for h in batch],
                    [h.job.attempt for h in batch],
                    self.lease_seconds,
                    [h.job.lease_token for h in batch],
                ),
            )
        except DATABASE_ERRORS as e:
            return e
        for held, row in zip(batch, rows, strict=True):
            if row.renewed:
                held.renewed_at = started
                s.metrics.renewed += 1
            elif held in s.running and row.cancelled:
                self.outcomes.cancel(held)
            elif held in s.running:
                held.lost = True
                log.warning("lease lost while running", extra=s.extra(held.job))
            # Not held and no longer running: its completion, maybe committed a moment ago,
            # tells whether the lease was lost.
        return None


class Reaper:
    """Calls ``job_reap`` when a lease has expired, as the claims read it (within a random part
    of ``reap_interval`` seconds after), and wakes the claimer when it took jobs back. With no
    job RUNNING, it calls nothing."""

    def __init__(self, state: WorkerState) -> None:
        self.state = state

    async def run(self) -> None:
        s = self.state
        reaped_at = time.monotonic()
        while True:
            await s.chore_due(s.next_expiry, reaped_at, s.config.reap_interval)
            try:
                reaped = await s.call("reap", s.queue.reap())
            except DATABASE_ERRORS as e:
                log.warning("reap failed: %s", e, extra=s.extra())
                continue
            finally:
                # Done for the time read so far, or failed: the next claim's read says when.
                reaped_at = time.monotonic()
            if reaped:
                s.metrics.reaped += len(reaped)
                log.info(
                    "reaped %d expired leases",
                    len(reaped),
                    extra=s.extra(workers=sorted({r.worker_id for r in reaped})),
                )
                s.wake()
