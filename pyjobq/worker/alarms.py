"""Alarms: when the worker's chores are next due, as its claims read them (``job_next_chores``
in the claim's statement). The reaper and the ticker sleep until their alarm's time comes, so
an idle worker with no schedule and no job RUNNING anywhere sends nothing but its claims."""

from __future__ import annotations

import asyncio
import random
import time


class Alarm:
    """The next time of one chore, as last read; each read wakes its waiter."""

    def __init__(self) -> None:
        # time.monotonic() of the next time, or None when there is none; and of the read.
        self.at: float | None = None
        self.read_at = -float("inf")
        self._read = asyncio.Event()

    def read(self, due_in: float | None, sent_at: float) -> None:
        """A claim's statement, sent at ``sent_at`` (time.monotonic()), read the chore's next
        time as ``due_in`` seconds from then. A statement sent before the chore's last run
        ended may have read what that run changed as it was before: it counts as read then."""
        self.read_at = sent_at
        self.at = None if due_in is None else sent_at + due_in
        self._read.set()

    async def wait(self, last_done: float, spread: float, stale_after: float) -> None:
        """Until the time of a read made after ``last_done`` (the chore's last run, or its
        loop's start, on time.monotonic()) comes, plus a random part of ``spread`` seconds, so
        that the workers of a fleet do not all do the chore at once. A read before then that
        says sooner, later or never moves the wait along with it. With no read for
        ``stale_after`` seconds since ``last_done`` (the claimer, busy with held jobs, reads
        nothing; an idle one reads at every poll), until then and that random part: the chore
        keeps a pace of its own while no claim says when."""
        jitter = random.uniform(0.0, spread)
        while True:
            self._read.clear()
            if self.read_at <= last_done:
                deadline: float | None = last_done + stale_after + jitter
            elif self.at is not None:
                deadline = self.at + jitter
            else:
                deadline = None
            delay = None if deadline is None else deadline - time.monotonic()
            if delay is not None and delay <= 0:
                return
            try:
                await asyncio.wait_for(self._read.wait(), delay)
            except TimeoutError:
                return
