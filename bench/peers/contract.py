"""Command-line contract shared by the Python drivers in bench/peers.

Every driver, whatever its language, is a program that finds its database in
the libpq environment (PGHOST, PGPORT, PGUSER, PGDATABASE) and takes one of:

    setup            install the system's schema; print {"version", "settings"}
    enqueue N [C]    bulk-enqueue N no-op jobs, C per call (default all N in one);
                     print {"jobs", "seconds"}, the time of the bulk calls alone,
                     connection set-up excluded
    drain N W [S]    W workers run the N pending jobs, each handler sleeping S ms
                     (default 0: a no-op); print {"jobs", "seconds", "jobs_per_s",
                     "verified"}
    latency K [W [D]]  idle workers, K single enqueues D ms apart (default 20);
                     print {"samples", "p50_ms", "p99_ms", ...}

It prints exactly one JSON object on the last line of stdout; logs go to
stderr. bench/peers/contract.mjs is the same contract for node drivers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

# How long a latency probe may wait unserved.
LATENCY_TIMEOUT_S = 15.0
LATENCY_WARMUP = 10
# How often the end of a drain is confirmed from the database once every
# handler has run (completions may be buffered by the peer).
CONFIRM_POLL_S = 0.010
CONFIRM_TIMEOUT_S = 60.0


@dataclass
class Settings:
    """What this run of the contract asks besides N and W, from its command line: how long a
    drain's handler sleeps, and how far apart latency probes are enqueued."""

    handler_sleep_s: float = 0.0
    latency_spacing_s: float = 0.020


SETTINGS = Settings()


async def work() -> None:
    """A drain handler's work: nothing, or a sleep of ``SETTINGS.handler_sleep_s``."""
    if SETTINGS.handler_sleep_s:
        await asyncio.sleep(SETTINGS.handler_sleep_s)


@dataclass(frozen=True)
class DrainResult:
    seconds: float
    verified: dict[str, Any]


@dataclass
class Driver:
    """The four operations a driver supplies; the contract times and prints."""

    setup: Callable[[], Awaitable[dict[str, Any]]]
    # Returns the seconds taken by the bulk call alone (client start-up excluded).
    enqueue: Callable[[int], Awaitable[float]]
    drain: Callable[[int, int], Awaitable[DrainResult]]
    # Returns pickup latencies in milliseconds, one per probe (None if lost).
    latency: Callable[[int, int], Awaitable[list[float | None]]]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    rank = max(1, math.ceil(q / 100.0 * len(values)))
    return values[rank - 1]


def latency_summary(samples: Sequence[float | None]) -> dict[str, Any]:
    got = sorted(s for s in samples if s is not None)
    if not got:
        return {"samples": len(samples), "lost": len(samples)}
    return {
        "samples": len(samples),
        "lost": len(samples) - len(got),
        "p50_ms": round(percentile(got, 50), 3),
        "p99_ms": round(percentile(got, 99), 3),
        "max_ms": round(got[-1], 3),
        "mean_ms": round(sum(got) / len(got), 3),
        "latencies_ms": [round(s, 3) for s in got],
    }


class Probes:
    """Clock bookkeeping for the latency scenario, on one monotonic clock."""

    def __init__(self) -> None:
        self.committed: dict[int, float] = {}
        self.started: dict[int, float] = {}
        self.arrived = asyncio.Event()

    def handler_started(self, probe: int) -> None:
        # The first statement of every handler: nothing may run before it.
        self.started.setdefault(probe, time.perf_counter())
        self.arrived.set()

    async def run(
        self,
        k: int,
        enqueue_one: Callable[[int], Awaitable[None]],
    ) -> list[float | None]:
        """Warm up, then enqueue probes 0..k-1 spaced ``SETTINGS.latency_spacing_s`` apart."""
        for i in range(-LATENCY_WARMUP, 0):
            await enqueue_one(i)
        await self.wait_for(range(-LATENCY_WARMUP, 0))
        next_at = time.perf_counter()
        for i in range(k):
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            next_at += SETTINGS.latency_spacing_s
            await enqueue_one(i)
            self.committed[i] = time.perf_counter()
        await self.wait_for(range(k))
        return [
            (self.started[i] - self.committed[i]) * 1000.0 if i in self.started else None
            for i in range(k)
        ]

    async def wait_for(self, probes: range) -> None:
        deadline = time.perf_counter() + LATENCY_TIMEOUT_S
        while not all(i in self.started for i in probes):
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                log(f"latency: probes not served within {LATENCY_TIMEOUT_S}s")
                return
            self.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), timeout=remaining)


async def confirm(count_done: Callable[[], Awaitable[int]], n: int) -> int:
    """Poll the peer's own tables until n jobs show as done; return the count."""
    deadline = time.perf_counter() + CONFIRM_TIMEOUT_S
    while True:
        done = await count_done()
        if done >= n or time.perf_counter() > deadline:
            return done
        await asyncio.sleep(CONFIRM_POLL_S)


def emit(payload: dict[str, Any]) -> None:
    print(json.dumps(payload), flush=True)


def main(driver: Driver, argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("setup")
    p_enqueue = sub.add_parser("enqueue")
    p_enqueue.add_argument("n", type=int)
    p_enqueue.add_argument("chunk", type=int, nargs="?")
    p_drain = sub.add_parser("drain")
    p_drain.add_argument("n", type=int)
    p_drain.add_argument("w", type=int)
    p_drain.add_argument("sleep_ms", type=float, nargs="?", default=0.0)
    p_latency = sub.add_parser("latency")
    p_latency.add_argument("k", type=int)
    p_latency.add_argument("w", type=int, nargs="?", default=1)
    p_latency.add_argument("spacing_ms", type=float, nargs="?", default=20.0)
    args = parser.parse_args(argv)
    SETTINGS.handler_sleep_s = getattr(args, "sleep_ms", 0.0) / 1000.0
    SETTINGS.latency_spacing_s = getattr(args, "spacing_ms", 20.0) / 1000.0
    emit(asyncio.run(_dispatch(driver, args)))


async def _dispatch(driver: Driver, args: argparse.Namespace) -> dict[str, Any]:
    if args.command == "setup":
        return await driver.setup()
    if args.command == "enqueue":
        chunk = args.chunk or args.n
        seconds = 0.0
        for start in range(0, args.n, chunk):
            seconds += await driver.enqueue(min(chunk, args.n - start))
        return {
            "jobs": args.n,
            "chunk": chunk,
            "seconds": round(seconds, 4),
            "jobs_per_s": round(args.n / seconds, 1),
        }
    if args.command == "drain":
        result = await driver.drain(args.n, args.w)
        return {
            "jobs": args.n,
            "workers": args.w,
            "sleep_ms": args.sleep_ms,
            "seconds": round(result.seconds, 4),
            "jobs_per_s": round(args.n / result.seconds, 1),
            "verified": result.verified,
        }
    samples = await driver.latency(args.k, args.w)
    return {"workers": args.w, "spacing_ms": args.spacing_ms, **latency_summary(samples)}
