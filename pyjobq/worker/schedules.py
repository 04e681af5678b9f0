"""Schedules: the ticker calls ``job_schedule_tick`` when a schedule's next tick comes, as the
claims read it (within a random part of ``schedule_interval`` seconds after), so that periodic
jobs fire while any worker runs, and a worker where no schedule exists never ticks. The tick is
exact in SQL whoever calls it; many workers ticking only make a due tick fire sooner."""

from __future__ import annotations

import logging
import time

from psycopg.errors import InsufficientPrivilege, UndefinedFunction

from pyjobq.worker.state import DATABASE_ERRORS, WorkerState

log = logging.getLogger("pyjobq.worker")


class Ticker:
    """Ticks the schedules until the worker stops; a role not allowed to tick (no EXECUTE on
    ``job_schedule_tick``), or a schema older than schedules, is told once and the ticker stops,
    the worker goes on."""

    def __init__(self, state: WorkerState) -> None:
        self.state = state

    async def run(self) -> None:
        s = self.state
        ticked_at = time.monotonic()
        while True:
            await s.chore_due(s.next_tick, ticked_at, s.config.schedule_interval)
            try:
                fired = await s.call("schedule_tick", s.queue.schedule_tick())
            except (InsufficientPrivilege, UndefinedFunction) as e:
                log.warning("schedules not ticked by this worker: %s", e, extra=s.extra())
                return
            except DATABASE_ERRORS as e:
                log.warning("schedule tick failed: %s", e, extra=s.extra())
                continue
            finally:
                # Done for the time read so far, or failed: the next claim's read says when.
                ticked_at = time.monotonic()
            if fired:
                s.metrics.scheduled += len(fired)
                log.info(
                    "schedules fired %d jobs",
                    len(fired),
                    extra=s.extra(schedules=sorted({f.name for f in fired})),
                )
                s.wake()
