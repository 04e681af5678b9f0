"""procrastinate driver for the benchmark contract (see contract.py).

Settings follow procrastinate's documentation: ``batch_defer_async`` for bulk
enqueue; one worker with ``concurrency=W`` async sub-workers and LISTEN/NOTIFY
on (the default), default polling interval. The psycopg pool is sized W + 3:
one connection is held by the listener, and side tasks (heartbeat, abort
polling) need one now and then.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from importlib.metadata import version
from typing import Any

import psycopg

# procrastinate is in bench/.venv-peers only, not in the .venv the type check runs in.
from procrastinate import App, PsycopgConnector  # type: ignore[import-not-found]

import contract

TASK = "noop"


def make_app(pool_size: int) -> tuple[App, contract.Probes, list[int]]:
    app = App(connector=PsycopgConnector(conninfo="", min_size=pool_size, max_size=pool_size))
    probes = contract.Probes()
    handled = [0]

    async def noop(i: int | None = None) -> None:
        if i is not None:
            probes.handler_started(i)
        else:
            await contract.work()
        handled[0] += 1

    # Registered by a call, not as a decorator: where procrastinate is not installed (the
    # type check), a decorator from it would leave noop untyped.
    app.task(name=TASK)(noop)
    return app, probes, handled


async def setup() -> dict[str, Any]:
    app, _, _ = make_app(1)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
    return {
        "version": version("procrastinate"),
        "settings": {
            "enqueue": "Task.batch_defer_async (one statement)",
            "worker": "run_worker_async(concurrency=W, listen_notify=True)",
            "pool": "psycopg_pool max_size=W+3",
            "fetch_job_polling_interval_s": 5.0,
        },
    }


async def enqueue(n: int) -> float:
    app, _, _ = make_app(1)
    async with app.open_async():
        task = app.tasks[TASK]
        kwargs: list[dict[str, Any]] = [{} for _ in range(n)]
        started = time.perf_counter()
        await task.batch_defer_async(*kwargs)
        return time.perf_counter() - started


async def count_succeeded() -> int:
    async with await psycopg.AsyncConnection.connect("", autocommit=True) as conn:
        cur = await conn.execute(
            "select count(*) from procrastinate_jobs where status = 'succeeded'"
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


async def drain(n: int, w: int) -> contract.DrainResult:
    app, probes, handled = make_app(w + 3)
    del probes
    async with app.open_async():
        started = time.perf_counter()
        worker = asyncio.create_task(
            app.run_worker_async(concurrency=w, install_signal_handlers=False)
        )
        while handled[0] < n and not worker.done():
            await asyncio.sleep(0.005)
        done = await contract.confirm(count_succeeded, n)
        seconds = time.perf_counter() - started
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(worker, timeout=30)
    async with await psycopg.AsyncConnection.connect("", autocommit=True) as conn:
        cur = await conn.execute("select status::text, count(*) from procrastinate_jobs group by 1")
        by_status = {str(s): int(c) for s, c in await cur.fetchall()}
    return contract.DrainResult(
        seconds=seconds,
        verified={
            "ok": done == n and by_status.get("succeeded", 0) == n and sum(by_status.values()) == n,
            "handled": handled[0],
            "by_status": by_status,
        },
    )


async def latency(k: int, w: int) -> list[float | None]:
    # Probes are deferred through the same app (and pool) the worker uses.
    app, probes, _ = make_app(w + 3)
    async with app.open_async():
        worker = asyncio.create_task(
            app.run_worker_async(concurrency=w, install_signal_handlers=False)
        )
        await asyncio.sleep(0.5)  # let the worker LISTEN before the first probe
        task = app.tasks[TASK]

        async def enqueue_one(i: int) -> None:
            await task.defer_async(i=i)

        samples = await probes.run(k, enqueue_one)
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(worker, timeout=30)
    return samples


if __name__ == "__main__":
    contract.main(contract.Driver(setup=setup, enqueue=enqueue, drain=drain, latency=latency))
