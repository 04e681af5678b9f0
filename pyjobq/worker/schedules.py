"""Schedules: the ticker calls ``job_schedule_tick`` every ``schedule_interval`` seconds, with
jitter, so that periodic jobs fire while any worker runs. The tick is exact in SQL whoever
calls it; many workers ticking only make a due tick fire sooner."""

from __future__ import annotations

import asyncio
import logging
import random

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
        while True:
            await asyncio.sleep(s.config.schedule_interval * random.uniform(0.5, 1.5))
            try:
                fired = await s.call("schedule_tick", s.queue.schedule_tick())
            except (InsufficientPrivilege, UndefinedFunction) as e:
                log.warning("schedules not ticked by this worker: %s", e, extra=s.extra())
                return
            except DATABASE_ERRORS as e:
                log.warning("schedule tick failed: %s", e, extra=s.extra())
                continue
            if fired:
                s.metrics.scheduled += len(fired)
                log.info(
                    "schedules fired %d jobs",
                    len(fired),
                    extra=s.extra(schedules=sorted({f.name for f in fired})),
                )
                s.notified.set()
