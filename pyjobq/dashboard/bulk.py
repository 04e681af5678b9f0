"""An action on a filtered set of jobs: a preview of what it touches, then the change.

The set is what ``job_list`` returns for the filter, oldest first, up to ``CAP`` jobs; the
change calls ``job_redrive`` or ``job_cancel`` on ``CHUNK`` ids at a time, each chunk in its
own transaction that names the actor for the audit line the function writes. A run cut short
(a crash, a lock timeout) leaves every chunk done or not, and running it again continues: a
redriven or cancelled job no longer matches the filter, which is why each action keeps to
the statuses it moves.
"""

from __future__ import annotations

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

# The statuses each action moves: a filter on any other status touches nothing.
MOVES = {
    "redrive": (JobStatus.DEAD, JobStatus.CANCELLED),
    "cancel": (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.WAITING),
}


class BadAction(ValueError):
    """An action that does not apply to the filter; the message says why."""


@dataclass(frozen=True)
class Preview:
    """What an action would touch now: ``count`` jobs (more than ``CAP`` when ``capped``:
    one run takes ``CAP``), the first of them in ``sample``."""

    action: str
    filter: JobFilter
    count: int
    capped: bool
    sample: list[JobSummary]


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
    return Preview(action, flt, min(len(jobs), CAP), len(jobs) > CAP, jobs[:20])


async def run(pool: AsyncConnectionPool, action: str, flt: JobFilter, actor: str) -> int:
    """Apply ``action`` to up to ``CAP`` jobs of ``flt``; returns how many it changed."""
    flt = checked(action, flt)
    ids = [job.job_id for job in await _matching(AsyncJobQueue(pool), flt, CAP)]
    changed = 0
    for start in range(0, len(ids), CHUNK):
        changed += await apply(pool, action, ids[start : start + CHUNK], actor)
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
