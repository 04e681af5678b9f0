"""An action on a filtered set of jobs: a preview of what it touches, then the change.

The set is what ``job_list`` returns for the filter, oldest first, up to ``CAP`` jobs. The
preview keeps their ids (:class:`Previews`, in the dashboard's memory, for ``KEPT_FOR``
seconds), and the run acts on those ids and no others: a job that came to match the filter
after the preview was shown is not touched, and one that moved on since is left as it is by
the function itself. The change calls ``job_redrive`` or ``job_cancel`` on ``CHUNK`` ids at a
time, each chunk in its own transaction that names the actor for the audit line the function
writes. A run cut short (a crash, a lock timeout) leaves every chunk done or not; a new
preview of the same filter finds the rest, since a redriven or cancelled job no longer
matches it (each action keeps to the statuses it moves).
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from uuid import UUID

from psycopg_pool import AsyncConnectionPool

from pyjobq.aio import AsyncJobQueue
from pyjobq.dashboard.filters import JobFilter
from pyjobq.rows import JobStatus, JobSummary

CAP = 10_000
CHUNK = 1_000
PAGE = 1_000
SAMPLE = 20
# How long a preview can be run, and how many this process keeps at most (the oldest go first).
KEPT_FOR = 15 * 60.0
KEPT = 64

# The statuses each action moves: a filter on any other status touches nothing.
MOVES = {
    "redrive": (JobStatus.DEAD, JobStatus.CANCELLED),
    "cancel": (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.WAITING),
}


class BadAction(ValueError):
    """An action that does not apply to the filter; the message says why."""


@dataclass(frozen=True)
class Preview:
    """What an action would touch now: the ``ids`` of ``count`` jobs (more matched than
    ``CAP`` when ``capped``: one run takes ``CAP``), the first of them in ``sample``."""

    action: str
    filter: JobFilter
    ids: tuple[UUID, ...]
    capped: bool
    sample: list[JobSummary]

    @property
    def count(self) -> int:
        return len(self.ids)


class Previews:
    """The previews this dashboard showed, each under a random key until it runs or
    ``KEPT_FOR`` seconds pass: what a run may touch is what its preview counted."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, tuple[float, Preview]] = OrderedDict()

    def keep(self, preview: Preview) -> str:
        """Keep ``preview``; returns the key its run names."""
        self._forget(time.monotonic() - KEPT_FOR)
        while len(self._kept) >= KEPT:
            self._kept.popitem(last=False)
        key = secrets.token_urlsafe(16)
        self._kept[key] = (time.monotonic(), preview)
        return key

    def take(self, key: str) -> Preview | None:
        """The preview kept under ``key``, forgotten now (a preview runs once); None when it
        ran already, expired or was never shown."""
        self._forget(time.monotonic() - KEPT_FOR)
        kept = self._kept.pop(key, None)
        return None if kept is None else kept[1]

    def _forget(self, before: float) -> None:
        while self._kept and next(iter(self._kept.values()))[0] < before:
            self._kept.popitem(last=False)


def checked(action: str, flt: JobFilter) -> JobFilter:
    """The filter an action runs on: its status must be one the action moves."""
    if action not in MOVES:
        raise BadAction(f"no action {action!r}: redrive or cancel")
    status = flt.status or MOVES[action][0]
    if status not in MOVES[action]:
        allowed = " or ".join(s.name for s in MOVES[action])
        raise BadAction(f"{action} moves {allowed} jobs, and the filter is on {status.name}")
    return replace(flt, status=status)


async def _matching(queue: AsyncJobQueue, flt: JobFilter, cap: int) -> list[JobSummary]:
    """Up to ``cap`` jobs of the filter, oldest first, a keyset page at a time."""
    found: list[JobSummary] = []
    after: UUID | None = None
    while len(found) < cap:
        page = await flt.list_jobs(
            queue, oldest_first=True, after=after, limit=min(PAGE, cap - len(found))
        )
        found += page
        if len(page) < PAGE:
            break
        after = page[-1].job_id
    return found


async def preview(queue: AsyncJobQueue, action: str, flt: JobFilter) -> Preview:
    """Count what ``action`` on ``flt`` touches now (up to ``CAP``, and whether there is more)."""
    flt = checked(action, flt)
    jobs = await _matching(queue, flt, CAP + 1)
    ids = tuple(job.job_id for job in jobs[:CAP])
    return Preview(action, flt, ids, len(jobs) > CAP, jobs[:SAMPLE])


async def run(pool: AsyncConnectionPool, preview: Preview, actor: str) -> int:
    """Apply ``preview``'s action to its jobs, and to no other; returns how many it changed."""
    ids = list(preview.ids)
    changed = 0
    for start in range(0, len(ids), CHUNK):
        changed += await apply(pool, preview.action, ids[start : start + CHUNK], actor)
    return changed


@asynccontextmanager
async def acting_as(pool: AsyncConnectionPool, actor: str) -> AsyncIterator[AsyncJobQueue]:
    """A queue on one transaction that names ``actor`` (the setting ``pyjobq.actor``) in the
    audit lines its cancels, redrives and prunes write; committed when the block ends."""
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("select set_config('pyjobq.actor', %s, true)", (actor,))
        yield AsyncJobQueue(conn)


async def apply(pool: AsyncConnectionPool, action: str, ids: list[UUID], actor: str) -> int:
    """``job_redrive`` or ``job_cancel`` of ``ids`` in one transaction, in the name of
    ``actor``; returns how many jobs it changed."""
    async with acting_as(pool, actor) as queue:
        if action == "redrive":
            return len(await queue.redrive(ids, limit=max(len(ids), 1)))
        outcomes = await queue.cancel(ids)
        return sum(o.outcome in ("cancelled", "cancelled_running") for o in outcomes)
