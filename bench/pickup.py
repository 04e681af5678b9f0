"""Where an idle Worker's pickup time goes: from a producer's committed enqueue to the first line
of the handler, piece by piece, and what the claim costs in the server.

One throwaway server with default settings. A ``Worker(concurrency=--workers)`` waits with two
job types, one with an async handler and one with a sync handler (run in the Worker's thread
pool). A producer on the same event loop enqueues ``--probes`` jobs, the types in turn, one every
``--spacing-ms``. Each probe is timed on one monotonic clock, with the Worker's public hooks and a
LISTEN connection of the bench's own (the Worker's listener gets the same message):

  enqueue returned -> NOTIFY heard   the commit's notification reaching a listener
  NOTIFY heard -> claim sent         the claimer's wake-up
  claim                              the claim's round trip: pool checkout, job_claim (with
                                     job_next_due in the same statement unless the claimer was
                                     woken by announcements alone), the rows read
  claim returned -> on_job_start     the hand-off to a free runner
  on_job_start -> handler            a task switch (async), the executor hop (sync)

(The NOTIFY may reach the listener before the producer has read its commit's reply, so the first
piece can be below zero.) The same probes run again with ``track_functions = all`` for the
server's share: the time per call of job_claim and job_next_due in pg_stat_user_functions
(tracking slows them a little). Last, the floor under any claim on this machine: ``select 1`` and
the Worker's claim statement on a connection of their own, back to back and ``--spacing-ms``
apart, since a CPU that idled between probes answers more slowly.

``.venv/bin/python bench/pickup.py [--probes 400] [--spacing-ms 10] [--workers 8]``
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from pyjobq import statements
from pyjobq.aio import AsyncJobQueue
from pyjobq.localpg import LocalPostgres
from pyjobq.metrics import WorkerHooks
from pyjobq.migrate import migrate
from pyjobq.rows import ClaimedJob
from pyjobq.worker import Handler, Worker

# Two of the types every install has.
ASYNC_TYPE, SYNC_TYPE = 1, 2
WARMUP = 20
# Each piece of the pickup: its name, and the two points it lies between.
PIECES = (
    ("enqueue returned -> NOTIFY heard", "committed", "NOTIFY heard"),
    ("NOTIFY heard -> claim sent", "NOTIFY heard", "claim sent"),
    ("claim", "claim sent", "claim returned"),
    ("claim returned -> on_job_start", "claim returned", "on_job_start"),
    ("on_job_start -> handler", "on_job_start", "handler"),
    ("enqueue returned -> handler", "committed", "handler"),
)


class Stamps(WorkerHooks):
    """The times one probe passed each point, by the probe's number."""

    def __init__(self) -> None:
        self.at: dict[str, dict[int, float]] = {}
        self.last_claim = (0.0, 0.0)
        self.claims: dict[str, int] = {}
        self.notifies: list[float] = []
        self.arrived = asyncio.Event()

    def mark(self, point: str, probe: int, when: float | None = None) -> None:
        when = time.perf_counter() if when is None else when
        self.at.setdefault(point, {}).setdefault(probe, when)

    def on_statement(self, statement: str, seconds: float, error: Exception | None) -> None:
        if statement in ("claim", "claim_announced"):
            ended = time.perf_counter()
            self.last_claim = (ended - seconds, ended)
            self.claims[statement] = self.claims.get(statement, 0) + 1

    def on_job_claimed(self, job: ClaimedJob) -> None:
        probe = int(job.payload["i"])
        self.mark("claim sent", probe, self.last_claim[0])
        self.mark("claim returned", probe, self.last_claim[1])

    def on_job_start(self, job: ClaimedJob) -> None:
        self.mark("on_job_start", int(job.payload["i"]))

    def handler(self, job: ClaimedJob, loop: asyncio.AbstractEventLoop) -> None:
        """The handler's first line, from the loop or from a thread of the Worker's pool."""
        self.mark("handler", int(job.payload["i"]))
        loop.call_soon_threadsafe(self.arrived.set)


def quantiles(ms: list[float]) -> str:
    ms = sorted(ms)
    pick = [ms[min(len(ms) - 1, int(q * len(ms)))] for q in (0.5, 0.9, 0.99)]
    return " / ".join(f"{v:.3f}" for v in pick)


async def listen(dsn: str, stamps: Stamps, ready: asyncio.Event) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("listen pyjobq_job")
        ready.set()
        async for _ in conn.notifies():
            stamps.notifies.append(time.perf_counter())


async def probe_worker(dsn: str, probes: int, spacing: float, workers: int) -> Stamps:
    """One Worker waiting, ``probes`` single enqueues; the stamps of each."""
    stamps = Stamps()
    loop = asyncio.get_running_loop()

    async def on_async(job: ClaimedJob) -> None:
        stamps.handler(job, loop)

    def on_sync(job: ClaimedJob) -> None:
        stamps.handler(job, loop)

    handlers: dict[int, Handler] = {ASYNC_TYPE: on_async, SYNC_TYPE: on_sync}
    worker = Worker(dsn, handlers, concurrency=workers, hooks=stamps)
    serving = asyncio.create_task(worker.serve())
    await asyncio.wait_for(worker.ready.wait(), 30)
    heard = asyncio.Event()
    listener = asyncio.create_task(listen(dsn, stamps, heard))
    await asyncio.wait_for(heard.wait(), 30)
    await asyncio.sleep(0.5)  # the Worker's own LISTEN is up by now
    sent: dict[int, float] = {}
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as producer:
        queue = AsyncJobQueue(producer)
        next_at = time.perf_counter()
        for i in range(-WARMUP, probes):
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            next_at += spacing
            sent[i] = time.perf_counter()
            await queue.enqueue(ASYNC_TYPE if i % 2 == 0 else SYNC_TYPE, {"i": i})
            stamps.mark("committed", i)
        deadline = time.perf_counter() + 30
        while len(stamps.at.get("handler", {})) < probes + WARMUP:
            if time.perf_counter() > deadline:
                raise RuntimeError("probes not handled within 30 s")
            stamps.arrived.clear()
            await asyncio.wait_for(stamps.arrived.wait(), 30)
    worker.stop()
    await asyncio.wait_for(serving, 60)
    listener.cancel()
    # Each probe's NOTIFY: the first heard after its enqueue was sent.
    for i, at in sent.items():
        heard_at = min((n for n in stamps.notifies if n >= at), default=None)
        if heard_at is not None:
            stamps.mark("NOTIFY heard", i, heard_at)
    return stamps


def report(stamps: Stamps, probes: int) -> None:
    print("| piece | async handler, ms p50 / p90 / p99 | sync handler, ms p50 / p90 / p99 |")
    print("|---|---:|---:|")
    for name, a, b in PIECES:
        row = []
        for kind in (0, 1):
            ms = [
                (stamps.at[b][i] - stamps.at[a][i]) * 1000
                for i in range(probes)
                if i % 2 == kind and i in stamps.at.get(a, {}) and i in stamps.at.get(b, {})
            ]
            row.append(quantiles(ms) if ms else "-")
        print(f"| {name} | {row[0]} | {row[1]} |")
    sent = ", ".join(f"{name} {n}" for name, n in sorted(stamps.claims.items()))
    print(f"\nclaims sent: {sent}")


async def server_share(dsn: str, probes: int, spacing: float, workers: int) -> None:
    """The probes again with function tracking: job_claim and job_next_due per call."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("alter database postgres set track_functions = 'all'")
        await conn.execute("select pg_stat_reset()")
    await probe_worker(dsn, probes, spacing, workers)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("alter database postgres reset track_functions")
        await asyncio.sleep(1.5)  # statistics reach the shared counters within a second
        cur = await conn.execute(
            "select funcname, calls, total_time / calls, self_time / calls"
            " from pg_stat_user_functions"
            " where schemaname = 'pyjobq'"
            " and funcname in ('job_claim', 'job_next_due', '_claim_pick')"
            " order by 1"
        )
        print("\n| server function | calls | ms per call | of which its own |")
        print("|---|---:|---:|---:|")
        for name, calls, total, own in await cur.fetchall():
            print(f"| {name} | {calls} | {total:.3f} | {own:.3f} |")


async def floor(dsn: str, spacing: float, rounds: int = 300) -> None:
    """``select 1`` and the Worker's claim statement alone, back to back and spaced."""
    claim_params = ([ASYNC_TYPE], "floor", 16, 60, [ASYNC_TYPE])
    async with (
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn,
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as producer,
    ):

        async def select1() -> None:
            await (await conn.execute("select 1")).fetchall()

        async def claim() -> None:
            cur = conn.cursor(binary=True)
            await cur.execute(statements.CLAIM_WITH_NEXT_DUE, claim_params)
            await cur.fetchall()

        async def timed(fn: Callable[[], Awaitable[None]], gap: float, enqueue: bool) -> str:
            ms = []
            for _ in range(rounds):
                if enqueue:
                    await producer.execute("select pyjobq.job_enqueue(%s, '{}')", (ASYNC_TYPE,))
                await asyncio.sleep(gap)
                started = time.perf_counter()
                await fn()
                ms.append((time.perf_counter() - started) * 1000)
            return quantiles(ms)

        print(
            f"\n| alone on a connection | back to back, ms p50 / p90 / p99"
            f" | {spacing * 1000:g} ms apart, ms p50 / p90 / p99 |"
        )
        print("|---|---:|---:|")
        for name, fn, enqueue in (("select 1", select1, False), ("one job's claim", claim, True)):
            hot, spaced = await timed(fn, 0, enqueue), await timed(fn, spacing, enqueue)
            print(f"| {name} | {hot} | {spaced} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probes", type=int, default=400)
    parser.add_argument("--spacing-ms", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    spacing = args.spacing_ms / 1000
    with LocalPostgres() as server:
        dsn = server.dsn()
        migrate(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            version: Any = conn.execute("show server_version").fetchone()
        print(
            f"PostgreSQL {version[0]}; Worker(concurrency={args.workers}), {args.probes} probes,"
            f" one every {args.spacing_ms:g} ms\n",
            flush=True,
        )
        report(asyncio.run(probe_worker(dsn, args.probes, spacing, args.workers)), args.probes)
        asyncio.run(server_share(dsn, args.probes, spacing, args.workers))
        asyncio.run(floor(dsn, spacing))


if __name__ == "__main__":
    main()
