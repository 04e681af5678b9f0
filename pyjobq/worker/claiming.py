"""Claiming: how many jobs to take (the prefetch), taking them, giving unstarted ones back,
and the wake-ups (LISTEN) that end an idle claimer's sleep."""

from __future__ import annotations

import asyncio
import math
import random
import time
from typing import Any

import psycopg

from pyjobq.aio import AsyncJobQueue
from pyjobq.rows import ClaimBatch
from pyjobq.worker.state import (
    DATABASE_ERRORS,
    MAX_BATCH,
    Held,
    WorkerState,
    suppress_timeout,
)

CHANNEL = "pyjobq_job"
# The longest the listener goes without looking at the worker's state (a stop).
LISTEN_TICK = 1.0
# How soon a listener asks job_worker_idle again when the mark's fence is still held by a
# producer that looked before the mark: doubling, up to a second (or the poll interval). The
# job of a transaction open when the worker fell asleep starts at most that long after its
# commit, unless a later NOTIFY wakes the worker first.
FENCE_RETRY_FIRST = 0.01
FENCE_RETRY_MAX = 1.0

# job_claim takes at most this many jobs per call.
MAX_CLAIM = 1000
# The adaptive prefetch (prefetch=None) keeps about this many seconds of work
# waiting per runner, between ``concurrency`` jobs and ``max(256, 8 x concurrency)``.
PREFETCH_HORIZON_S = 0.1
PREFETCH_CAP_FLOOR = 256
PREFETCH_CAP_PER_RUNNER = 8
# Weight of the newest handler duration in the running average the prefetch follows.
DURATION_EWMA_WEIGHT = 0.05
# job_finish_many calls in flight at once: one can run while the next batch fills.
MAX_FLUSHES = 2


class Claimer:
    """Claims up to the free capacity (``concurrency`` + prefetch less the running and
    prefetched jobs) in one ``job_claim``, then waits for a NOTIFY, free room, the time the
    next job becomes due (``job_next_due``, read in the same statement) or the poll interval;
    it also waits while finished jobs pile up unsent, since their rows stay RUNNING until
    completed. Woken from its sleep by NOTIFYs of jobs due now alone, it sends ``job_claim``
    by itself (``claim_announced``): the next due time it read before still holds."""

    def __init__(self, state: WorkerState, job_types: list[int]) -> None:
        self.state = state
        self.job_types = job_types
        config = state.config
        self.concurrency = config.concurrency
        # Claims are sized by free room: a small prefetch means many small claims, and a
        # claim costs a round trip whatever its size; a large one keeps long jobs from
        # other workers. None follows the handlers' durations (see prefetch_now).
        self.prefetch = config.prefetch
        self.max_prefetch = (
            max(PREFETCH_CAP_FLOOR, PREFETCH_CAP_PER_RUNNER * config.concurrency)
            if config.prefetch is None
            else config.prefetch
        )
        self.max_prefetch_age = config.lease_seconds * config.prefetch_lease_fraction
        # Completions are sent at once when this many are waiting: a full batch, or half
        # of what the claimer may hold at most.
        self.flush_at = max(
            1, min(config.flush_batch, (config.concurrency + self.max_prefetch) // 2)
        )
        # The running average of how long a runner is busy with one job.
        self.job_seconds: float | None = None
        # When (time.monotonic()) the next job still to come becomes due, as job_next_due
        # last said; None: none is scheduled.
        self.next_due_at: float | None = None

    def observe_duration(self, seconds: float) -> None:
        """Fold how long a runner was busy with one job into the average the prefetch follows."""
        if self.job_seconds is None:
            self.job_seconds = seconds
        else:
            self.job_seconds += DURATION_EWMA_WEIGHT * (seconds - self.job_seconds)

    def prefetch_now(self) -> int:
        """The prefetch to claim for: fixed, or about PREFETCH_HORIZON_S of work per runner."""
        if self.prefetch is not None:
            return self.prefetch
        if self.job_seconds is None:
            return self.concurrency  # nothing measured yet: one job ahead per runner
        wanted = self.concurrency * PREFETCH_HORIZON_S / max(self.job_seconds, 1e-6)
        return int(min(self.max_prefetch, max(self.concurrency, wanted)))

    def low_water(self) -> bool:
        """True once the buffer is down to half the prefetch: time to claim more."""
        return len(self.state.buffer) <= self.prefetch_now() // 2

    def wake_if_low(self) -> None:
        """A job left the buffer or a runner: let the claimer claim again if it is low."""
        if not self.state.room.is_set() and self.low_water():
            self.state.room.set()

    def is_stale(self, held: Held, now: float) -> bool:
        """True when ``held`` waited in the buffer past its share of the lease."""
        return now - held.claimed_at > self.max_prefetch_age

    def unsent_full(self) -> bool:
        """True while ``MAX_FLUSHES + 1`` flushes' worth of finished jobs wait to be sent: a
        flush in flight in each slot and a full one waiting. Their rows stay RUNNING until
        completed, and a SIGKILL would make them run again: no more are claimed or started
        until a flush ends."""
        s = self.state
        return len(s.done) + len(s.flushing) >= (MAX_FLUSHES + 1) * self.flush_at

    def room_for(self) -> int:
        if not self.low_water() or self.unsent_full():
            return 0
        s = self.state
        held = len(s.running) + len(s.buffer)
        room = self.concurrency + self.prefetch_now() - held
        return max(0, min(room, MAX_CLAIM))

    async def run(self) -> None:
        s, config = self.state, self.state.config
        failures = 0
        while not s.stopping:
            s.room.clear()
            want = self.room_for()
            if want == 0:
                await s.room.wait()
                continue
            # Asleep and woken by NOTIFYs of jobs due now alone: what is to come later is
            # known (read by the claim that put it to sleep, or announced since with its
            # time), so the claim needs neither job_next_due nor job_next_chores. Leases
            # taken and schedules set meanwhile are not announced: the chores are read at
            # least once per poll interval, as an idle worker's polls would.
            announced = (
                s.marked
                and s.woken_for_due_now
                and not s.rate_limited
                and time.monotonic() - s.next_expiry.read_at < config.poll_interval
            )
            s.notified.clear()
            s.woken_for_due_now = False
            s.next_claim_at = math.inf
            started = time.monotonic()
            try:
                if announced:
                    claimed = ClaimBatch(
                        await s.call(
                            "claim_announced",
                            s.queue.claim(s.worker_id, want, config.lease_seconds, self.job_types),
                        ),
                        None,
                    )
                else:
                    claimed = await s.call(
                        "claim",
                        s.queue.claim_with_next_due(
                            s.worker_id, want, config.lease_seconds, self.job_types
                        ),
                    )
            except DATABASE_ERRORS as e:
                failures += 1
                await s.backoff(failures, "claim", e)
                continue
            failures = 0
            if not announced:
                s.next_tick.read(claimed.next_tick_in, started)
                s.next_expiry.read(claimed.next_expiry_in, started)
                self.next_due_at = (
                    None if claimed.next_due_in is None else started + claimed.next_due_in
                )
            jobs = claimed.jobs
            s.metrics.claims += 1
            s.metrics.claimed += len(jobs)
            held = [Held(job, started, started) for job in jobs]
            for job in jobs:
                s.hook(s.hooks.on_job_claimed, job)
            if s.stopping:
                await self.release(held)
                return
            s.buffer.extend(held)
            if held:
                s.job_ready.set()
            s.set_idle(len(jobs) < want)
            if len(jobs) < want:
                # Nothing more is due: sleep until the next job becomes due, a NOTIFY of one
                # due sooner, the reaper, or the poll.
                timeout = config.poll_interval * random.uniform(0.9, 1.1)
                next_due_in = (
                    None if self.next_due_at is None else self.next_due_at - time.monotonic()
                )
                if s.rate_limited:
                    next_due_in = await self.next_due_in()
                if next_due_in is not None:
                    timeout = min(timeout, next_due_in)
                s.next_claim_at = time.time() + timeout
                with suppress_timeout():
                    await asyncio.wait_for(s.notified.wait(), timeout)

    async def next_due_in(self) -> float | None:
        """``job_next_due`` read again after a claim that may have filled a rate window: when
        the window opens, or ``None`` (the poll decides) if the database cannot say."""
        try:
            return await self.state.call("next_due", self.state.queue.next_due_in(self.job_types))
        except DATABASE_ERRORS:
            return None

    async def release(self, held: list[Held]) -> None:
        """Give unstarted jobs back with ``job_release_many``, one call per ``MAX_BATCH``."""
        s = self.state
        for h in held:  # not started here, whatever the database answers
            s.hook(s.hooks.on_job_released, h.job)
        for start in range(0, len(held), MAX_BATCH):
            chunk = held[start : start + MAX_BATCH]
            ids, attempts = [h.job.job_id for h in chunk], [h.job.attempt for h in chunk]
            tokens = [h.job.lease_token for h in chunk]
            for failures in range(1, 6):
                try:
                    rows = await s.call(
                        "release", s.queue.release_many(s.worker_id, ids, attempts, tokens)
                    )
                    # A job not released was reaped meanwhile: nothing to give back.
                    s.metrics.released += sum(r.released for r in rows)
                    break
                except DATABASE_ERRORS as e:
                    if s.hard_stop.is_set():
                        return
                    await s.backoff(failures, "release", e)


class Listener:
    """LISTENs on ``pyjobq_job`` on a connection of its own and wakes the claimer when a job of
    a handled type (or of no type named) is announced.

    Producers notify only while some worker is marked asleep, so while the claimer sleeps for
    want of due jobs (:attr:`WorkerState.idle`) this session holds the mark
    (``job_worker_idle``). Once its fence has closed, every producer that looked before the
    mark has committed: the claimer is woken for the one claim that finds their jobs. A claim
    that fills ends the mark (``job_worker_busy``)."""

    def __init__(
        self, state: WorkerState, handled: set[int], conninfo: str, kwargs: dict[str, Any]
    ) -> None:
        self.state = state
        self.handled = handled
        self.conninfo = conninfo
        self.kwargs = kwargs

    async def run(self) -> None:
        s = self.state
        failures = 0
        while not s.stopping:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.conninfo, **self.kwargs
                ) as conn:
                    await conn.execute(f"listen {CHANNEL}")
                    failures = 0
                    # Anything enqueued while we were not listening was not announced.
                    s.wake()
                    await self.serve(AsyncJobQueue(conn), conn)
            except DATABASE_ERRORS as e:
                failures += 1
                await s.backoff(failures, "listen", e)

    async def serve(self, queue: AsyncJobQueue, conn: psycopg.AsyncConnection[Any]) -> None:
        """Keep the session's mark in step with the claimer, and pass on what is announced."""
        s = self.state
        s.marked = False  # a new session holds no mark
        retry_in, retry_at = FENCE_RETRY_FIRST, 0.0
        try:
            while not s.stopping:
                s.idle_changed.clear()
                wait = LISTEN_TICK
                if s.idle and not s.marked:
                    now = time.monotonic()
                    if now >= retry_at:
                        if await queue.worker_idle():
                            retry_in, retry_at = FENCE_RETRY_FIRST, 0.0
                            s.wake()  # the one claim after the fence, then:
                            s.marked = True
                        else:  # a producer that looked before the mark is still open
                            retry_at = now + retry_in
                            retry_in = min(2 * retry_in, FENCE_RETRY_MAX, s.config.poll_interval)
                    if not s.marked:
                        wait = min(wait, max(0.0, retry_at - now))
                elif s.marked and not s.idle:
                    await queue.worker_busy()
                    s.marked = False
                await self.hear(conn, wait)
        finally:
            s.marked = False  # the mark ends with the session

    async def hear(self, conn: psycopg.AsyncConnection[Any], seconds: float) -> None:
        """Pass on the notifications that arrive within ``seconds``, or until the claimer goes
        idle or busy; a broken connection raises."""
        s = self.state

        async def listen() -> None:
            async for notify in conn.notifies():
                if self.wanted(notify.payload):
                    s.wake(due_now="@" not in notify.payload)

        listening = asyncio.ensure_future(listen())
        changed = asyncio.ensure_future(s.idle_changed.wait())
        try:
            done, _ = await asyncio.wait(
                {listening, changed}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            # Also when this task is cancelled: a listen() left running holds the connection.
            for task in (listening, changed):
                task.cancel()
            await asyncio.gather(listening, changed, return_exceptions=True)
        if listening in done:
            listening.result()  # listen() ends only by an error of the connection

    def wanted(self, payload: str) -> bool:
        """True for a job of a handled type (or of no type named) that is due before the claimer
        claims anyway: the payload is ``type``, ``type@epoch`` for a job due later, or empty."""
        job_type, _, due = payload.partition("@")
        try:
            if job_type and int(job_type) not in self.handled:
                return False
            return not due or float(due) < self.state.next_claim_at
        except ValueError:
            return True
