"""pgqueuer driver for the benchmark contract (see contract.py).

Settings follow pgqueuer's documentation and its own tools/benchmark.py: the
asyncpg driver; one list-form ``Queries.enqueue`` call for bulk enqueue; W
QueueManagers, each on its own asyncpg connection ("a single connection for
QueueManager"), each dequeuing ``batch_size=10`` (the default).
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from importlib.metadata import version
from typing import Any

# The peers are in bench/.venv-peers only, not in the .venv the type check runs in.
import asyncpg  # type: ignore[import-not-found]
from pgqueuer import AsyncpgDriver, Job, QueueManager  # type: ignore[import-not-found]
from pgqueuer.queries import Queries  # type: ignore[import-not-found]

import contract

ENTRYPOINT = "noop"
BATCH_SIZE = 10


async def queries() -> Queries:
    return Queries(AsyncpgDriver(await asyncpg.connect()))


async def setup() -> dict[str, Any]:
    q = await queries()
    await q.install()
    return {
        "version": version("pgqueuer"),
        "settings": {
            "driver": "asyncpg, one connection per QueueManager",
            "enqueue": "Queries.enqueue(list form, one statement)",
            "worker": "W QueueManagers, continuous mode",
            "batch_size": BATCH_SIZE,
            "durability": "durable (default)",
        },
    }


async def enqueue(n: int) -> float:
    q = await queries()
    payloads: list[bytes | None] = [None] * n
    entrypoints, priorities = [ENTRYPOINT] * n, [0] * n
    started = time.perf_counter()
    await q.enqueue(entrypoints, payloads, priorities)
    return time.perf_counter() - started


async def make_managers(w: int, on_job: Any) -> list[QueueManager]:
    managers: list[QueueManager] = []
    for _ in range(w):
        qm = QueueManager(await queries())
        qm.entrypoint(ENTRYPOINT)(on_job)
        managers.append(qm)
    return managers


def launch(managers: list[QueueManager]) -> list[asyncio.Task[None]]:
    return [
        asyncio.create_task(qm.run(batch_size=BATCH_SIZE, dequeue_timeout=timedelta(seconds=30)))
        for qm in managers
    ]


async def stop_managers(managers: list[QueueManager], tasks: list[asyncio.Task[None]]) -> None:
    for qm in managers:
        qm.shutdown.set()
    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=60)


async def count_row(sql: str) -> int:
    conn = await asyncpg.connect()
    try:
        return int(await conn.fetchval(sql))
    finally:
        await conn.close()


async def count_done() -> int:
    # A finished job leaves the queue table and is logged; the log may already
    # have been folded into the statistics table, so count both.
    return await count_row(
        "select (select count(*) from pgqueuer_log where status = 'successful')"
        " + (select coalesce(sum(count), 0) from pgqueuer_statistics where status = 'successful')"
    )


async def drain(n: int, w: int) -> contract.DrainResult:
    handled = [0]

    async def noop(job: Job) -> None:
        await contract.work()
        handled[0] += 1

    managers = await make_managers(w, noop)
    started = time.perf_counter()
    tasks = launch(managers)
    while handled[0] < n and not all(t.done() for t in tasks):
        await asyncio.sleep(0.005)
    done = await contract.confirm(count_done, n)
    seconds = time.perf_counter() - started
    await stop_managers(managers, tasks)
    left = await count_row("select count(*) from pgqueuer")
    done = await count_done()
    return contract.DrainResult(
        seconds=seconds,
        verified={
            "ok": done == n and left == 0,
            "handled": handled[0],
            "successful": done,
            "left_in_queue": left,
        },
    )


async def latency(k: int, w: int) -> list[float | None]:
    probes = contract.Probes()

    async def noop(job: Job) -> None:
        probes.handler_started(int(job.payload or b"0"))

    managers = await make_managers(w, noop)
    tasks = launch(managers)
    await asyncio.sleep(0.5)  # let every manager LISTEN before the first probe
    producer = await queries()

    async def enqueue_one(i: int) -> None:
        await producer.enqueue(ENTRYPOINT, str(i).encode())

    samples = await probes.run(k, enqueue_one)
    await stop_managers(managers, tasks)
    return samples


if __name__ == "__main__":
    contract.main(contract.Driver(setup=setup, enqueue=enqueue, drain=drain, latency=latency))
