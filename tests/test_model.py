"""Model-based test: random sequences of queue calls checked step by step against a Python model.

Hypothesis drives enqueue (with and without dedupe keys, and uniqueness windows), enqueue with
parents (dependencies, either policy on a parent's failure), batches (open, join, close, and their
callbacks), claim, complete, complete_many, fail, renew, release, reap, redrive, cancel, prune, a
schedule's set and tick, a type's concurrency and rate limits, checkpointed steps, snoozes (and
their bound), waits for events and their signals, progress, and clock moves against one database.
``Model`` predicts every row and every outcome (including which SQLSTATE a stale holder gets);
where the queue may legitimately choose (ties in claim order, backoff jitter) the test checks the
choice is allowed and then adopts it. After every step the whole table, ``job_counts()``, the
steps, events and snoozes, and the structural invariants are compared with the model.

Every draw has the same constraints whatever the model holds: a rule that acts on a job or a
token draws an index (``PICK``) and takes that index modulo what the model holds at that step,
never a ``sampled_from`` of the model's contents, a bundle or a precondition. The model follows
the queue where the queue chooses (backoff jitter), so what it holds can differ between a run and
its replay; draws that depended on it made Hypothesis report inconsistent data generation. The
session's ``random()`` is seeded as well, so a replay also meets the same jitter.

``PYJOBQ_TEST_SCALE=10`` runs ten times as many examples (the default is bounded so the suite
stays fast); past a few, it needs more than the suite's per-test timeout of 180 s:
``PYJOBQ_TEST_SCALE=8 .venv/bin/pytest --timeout=2400 tests/test_model.py`` took 264 s here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar
from uuid import UUID, uuid4

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from pyjobq import (
    BatchClosed,
    JobAlreadyFinished,
    JobCancelled,
    JobNotFound,
    JobQueue,
    JobStatus,
    LeaseLost,
)
from tests.sqlhelp import FROZEN, freeze

Conn = psycopg.Connection[Any]

SCALE = float(os.environ.get("PYJOBQ_TEST_SCALE", "1"))

PENDING, RUNNING, DONE, DEAD, CANCELLED, WAITING = 1, 2, 3, 4, 5, 6
ACTIVE = (PENDING, RUNNING, WAITING)
ENDED = (DONE, DEAD, CANCELLED)
WORKERS = ("w1", "w2")
KEYS = ("k1", "k2", "k3")
TYPES = (1, 2)
STEPS = ("s1", "s2")
EVENTS = ("e1", "e2")

# An index into a list the model holds (jobs in enqueue order, tokens in claim order), taken
# modulo the list's length when the rule runs: see the module docstring.
PICK = st.integers(0, 1023)
# Every type's default deadline for an attempt, from its claim (job_type.timeout_seconds).
DEADLINE = timedelta(seconds=3600)

T = TypeVar("T")


def pick(items: Sequence[T], index: int) -> T | None:
    """``items[index % len(items)]``, or None when there are none."""
    return items[index % len(items)] if items else None


COLUMNS = (
    "job_id, job_type, status, priority, dedupe_key, attempts, attempts_refunded, max_attempts,"
    " run_after, lease_until, worker_id, updated_at"
)


@dataclass(frozen=True)
class Row:
    """What the model knows of one ``pyjobq.job_all`` row (the columns in COLUMNS)."""

    job_id: UUID
    job_type: int
    status: int
    priority: int
    dedupe_key: str | None
    attempts: int
    attempts_refunded: int
    max_attempts: int
    run_after: datetime
    lease_until: datetime | None
    worker_id: str | None
    updated_at: datetime


@dataclass(frozen=True)
class Token:
    """What a claim handed out: the fencing token a holder passes back."""

    job_id: UUID
    worker_id: str
    attempt: int


@dataclass
class Batch:
    """What the model knows of one batch: its members, whether it is closed, when it finished,
    the ends of its members since pruned, and the callback jobs it enqueued, by name."""

    members: list[UUID] = field(default_factory=list)
    closed: bool = False
    finished_at: datetime | None = None
    pruned: dict[int, int] = field(default_factory=dict)
    fired: dict[str, UUID] = field(default_factory=dict)


@dataclass
class Schedule:
    """Schedule "s": a tick every ``every`` minutes (UTC), its grace and policy for late ticks,
    and its next tick."""

    every: int
    job_type: int
    catch_up: bool
    grace: timedelta
    next_fire: datetime
    fired: int = 0
    misses: int = 0

    def cron(self) -> str:
        return "0 * * * *" if self.every == 60 else f"*/{self.every} * * * *"

    def tick_after(self, at: datetime) -> datetime:
        """The first tick strictly after ``at``: the next whole multiple of ``every`` minutes."""
        minutes = int((at - EPOCH).total_seconds() // 60)
        return EPOCH + timedelta(minutes=(minutes // self.every + 1) * self.every)


EPOCH = datetime.fromisoformat("1970-01-01T00:00:00+00:00")


def backoff(attempt: int) -> timedelta:
    """The upper bound of ``pyjobq.retry_backoff(attempt)``; the jitter takes off up to 25%."""
    return timedelta(seconds=min(3600.0, 2.0 * 2.0 ** (max(attempt, 1) - 1)))


def tries_used(job: Row) -> int:
    """Claims that count against max_attempts: the others were given back or forgiven."""
    return job.attempts - job.attempts_refunded


def tries_left(job: Row) -> int:
    return min(job.max_attempts - tries_used(job), 32767 - job.attempts)


def lease_of(job: Row) -> datetime:
    """The end of a RUNNING job's lease: the model gives every RUNNING job one."""
    assert job.lease_until is not None, job
    return job.lease_until


def assert_backoff(run_after: datetime, now: datetime, attempt: int) -> None:
    upper = backoff(attempt)
    # timestamptz keeps microseconds: allow one for rounding at each end.
    tick = timedelta(microseconds=1)
    assert now + upper * 0.75 - tick <= run_after <= now + upper + tick, (run_after, now, attempt)


class QueueMachine(RuleBasedStateMachine):
    """The pyjobq state machine, one database, one session whose clock the machine moves."""

    def __init__(self, conn: Conn) -> None:
        super().__init__()
        self.conn = conn
        self.q = JobQueue(conn)
        self.now = FROZEN
        self.jobs: dict[UUID, Row] = {}
        # When each job's current attempt was claimed: its deadline runs from there.
        self.claimed_at: dict[UUID, datetime] = {}
        # Every token a claim handed out, held or not any more, in claim order.
        self.tokens: list[Token] = []
        # The one schedule the machine sets, "s", as the model expects it to be.
        self.schedule: Schedule | None = None
        # Each type's limits: RUNNING jobs at most, and claims per period at most.
        self.max_running: dict[int, int | None] = dict.fromkeys(TYPES)
        self.rate: dict[int, tuple[int, timedelta] | None] = dict.fromkeys(TYPES)
        # The claims each type's rate counts: (when, how many jobs), in claim order.
        self.claims: dict[int, list[tuple[datetime, int]]] = {t: [] for t in TYPES}
        # Dependencies: each child's parents in the order named, whether it runs after a parent
        # failed, and the (parent, child) edges whose parent has not ended yet.
        self.parents: dict[UUID, list[UUID]] = {}
        self.runs_anyway: dict[UUID, bool] = {}
        self.unresolved: set[tuple[UUID, UUID]] = set()
        # Batches in the order opened, and the batch of each member.
        self.batches: dict[UUID, Batch] = {}
        self.batch_of: dict[UUID, UUID] = {}
        # Each job's recorded steps by name; each (job, event name)'s first wait's timeout, the
        # payload sent and whether one was; each active job's snoozes, and their bound.
        self.steps: dict[UUID, dict[str, Any]] = {}
        self.events: dict[tuple[UUID, str], tuple[datetime | None, Any, bool]] = {}
        self.snoozes: dict[UUID, int] = {}
        self.max_snoozes = 1000
        # Each job's last progress report, kept in its row while it is yet to end.
        self.progress: dict[UUID, dict[str, int]] = {}

    def token_at(self, index: int) -> Token:
        """A token the queue handed out, or, before the first claim, one it never did."""
        return pick(self.tokens, index) or Token(uuid4(), WORKERS[0], 1)

    def job_at(self, index: int) -> UUID:
        """A job the model holds, or, when it holds none, an id no job has."""
        return pick(list(self.jobs), index) or uuid4()

    # -- helpers -------------------------------------------------------------

    def active_holder(self, job_type: int, key: str | None) -> UUID | None:
        """The active job holding ``key`` for ``job_type``: keys are per job type."""
        if key is None:
            return None
        for job in self.jobs.values():
            if (job.job_type, job.dedupe_key) == (job_type, key) and job.status in ACTIVE:
                return job.job_id
        return None

    def ended_within(self, job_type: int, key: str | None, window: timedelta | None) -> set[UUID]:
        """The jobs ``job_enqueue`` may return for ``key`` under ``window``: of the type's ended
        jobs with the key that ended within it, those that ended last."""
        if key is None or window is None:
            return set()
        ended = [
            j
            for j in self.jobs.values()
            if (j.job_type, j.dedupe_key) == (job_type, key)
            and j.status in (DONE, DEAD, CANCELLED)
            and j.updated_at >= self.now - window
        ]
        last = max((j.updated_at for j in ended), default=None)
        return {j.job_id for j in ended if j.updated_at == last}

    def room(self, job_type: int) -> float:
        """How many more jobs of ``job_type`` a claim may take now: its limits' least room, none
        when a lowered limit leaves more RUNNING than it allows."""
        room = float("inf")
        most = self.max_running[job_type]
        if most is not None:
            running = sum(
                1 for j in self.jobs.values() if (j.job_type, j.status) == (job_type, RUNNING)
            )
            room = min(room, most - running)
        rate = self.rate[job_type]
        if rate is not None:
            limit, period = rate
            used = sum(n for at, n in self.claims[job_type] if at > self.now - period)
            room = min(room, limit - used)
        return max(0, room)

    def next_claim_at(self, job_type: int) -> datetime | None:
        """When a full rate window of ``job_type`` lets a claim in again; None if it does now."""
        rate = self.rate[job_type]
        if rate is None:
            return None
        limit, period = rate
        window = [(at, n) for at, n in self.claims[job_type] if at > self.now - period]
        used = sum(n for _, n in window)
        for at, n in window:
            if used < limit:
                break
            used -= n
            if used < limit:
                return at + period
        return None

    def ended(self, job_ids: set[UUID]) -> None:
        """The jobs ``job_ids`` just ended: their WAITING dependants count them down (PENDING,
        due now, at none left) or, for a parent that did not end DONE, are CANCELLED unless they
        run anyway; dependants so cancelled end in turn."""
        touched = {self.batch_of[j] for j in job_ids if j in self.batch_of}
        while job_ids:
            edges = {(p, c) for p, c in self.unresolved if p in job_ids}
            self.unresolved -= edges
            cancelled: set[UUID] = set()
            for child_id in {c for _, c in edges}:
                child = self.jobs.get(child_id)
                if child is None or child.status != WAITING:
                    continue
                failed = any(self.jobs[p].status != DONE for p, c in edges if c == child_id)
                if failed and not self.runs_anyway[child_id]:
                    self.jobs[child_id] = replace(child, status=CANCELLED, updated_at=self.now)
                    cancelled.add(child_id)
                    if child_id in self.batch_of:
                        touched.add(self.batch_of[child_id])
                elif any(c == child_id for _, c in self.unresolved):
                    self.jobs[child_id] = replace(child, updated_at=self.now)  # counted down
                else:
                    self.jobs[child_id] = replace(
                        child, status=PENDING, run_after=max(child.run_after, self.now),
                        updated_at=self.now,
                    )  # fmt: skip
            job_ids = cancelled
        for batch_id in sorted(touched):
            self.fire(batch_id)

    def batch_counts(self, batch_id: UUID) -> tuple[int, int, int, int]:
        """(total, done, dead, cancelled) of a batch: its members' ends, pruned ones included."""
        batch = self.batches[batch_id]
        ends = [self.jobs[j].status for j in batch.members if j in self.jobs]
        return (
            len(batch.members),
            ends.count(DONE) + batch.pruned.get(DONE, 0),
            ends.count(DEAD) + batch.pruned.get(DEAD, 0),
            ends.count(CANCELLED) + batch.pruned.get(CANCELLED, 0),
        )

    def fire(self, batch_id: UUID) -> None:
        """The callbacks of the batch that are due and not yet enqueued: the queue enqueued each
        (a new PENDING job of type 2, whose id job_batch_get shows), and no other."""
        batch = self.batches[batch_id]
        total, done, dead, cancelled = self.batch_counts(batch_id)
        finished = batch.closed and done + dead + cancelled == total
        due = []
        if dead and "dead" not in batch.fired:
            due.append("dead")
        if finished and "finish" not in batch.fired:
            due.append("finish")
        if finished and done == total and "success" not in batch.fired:
            due.append("success")
        if finished and batch.finished_at is None:
            batch.finished_at = self.now
        info = self.q.get_batch(batch_id)
        assert info is not None
        for which in due:
            job_id = getattr(info, f"{which}_job")
            assert job_id is not None
            assert job_id not in self.jobs
            batch.fired[which] = job_id
            self.jobs[job_id] = Row(
                job_id, 2, PENDING, 100, None, 0, 0, 3, self.now, None, None, self.now
            )

    def db_rows(self) -> dict[UUID, Row]:
        rows = self.conn.execute(f"select {COLUMNS} from pyjobq.job_all").fetchall()
        return {r[0]: Row(*r) for r in rows}

    def expect_not_held(self, token: Token) -> type[Exception] | None:
        """None if ``token`` holds its job now, else the exception a transition must raise."""
        job = self.jobs.get(token.job_id)
        if job is None:
            return JobNotFound
        if job.status == CANCELLED:
            return JobCancelled
        mine = job.worker_id == token.worker_id and job.attempts == token.attempt
        if job.status == RUNNING and mine:
            return None
        if job.status in (DONE, DEAD) and mine:
            return JobAlreadyFinished
        return LeaseLost

    def call_as_holder(self, token: Token, call: Any) -> Any:
        """Run ``call``; it must succeed exactly when the model says ``token`` holds the job."""
        expected = self.expect_not_held(token)
        if expected is None:
            return call()
        before = self.db_rows()
        with pytest.raises(expected):
            call()
        # A refused transition changes nothing at all.
        assert self.db_rows() == before
        return None

    # -- rules ---------------------------------------------------------------

    @initialize(
        max_running=st.sampled_from([None, 1, 2]),
        rate=st.sampled_from([None, (2, 60), (3, 5)]),
    )
    def clean_database(self, max_running: int | None, rate: tuple[int, int] | None) -> None:
        """An empty queue; most examples start with limits in force (a limit on type 2's
        RUNNING jobs, a rate on type 1's claims), which set_limits changes as it goes."""
        self.conn.execute(
            "truncate pyjobq.job, pyjobq.job_history, pyjobq.rate_window, pyjobq.job_edge,"
            " pyjobq.job_batch, pyjobq.job_step, pyjobq.job_event, pyjobq.job_attempt"
        )
        self.conn.execute("delete from pyjobq.schedule")
        self.set_limits(1, None, rate)
        self.set_limits(2, max_running, None)
        self.set_snoozes(1000)
        # Backoff jitter and the random bits of job ids: the same for a replay of this example.
        self.conn.execute("select setseed(0.5)")
        # The clock goes back to FROZEN: the claim front assumes a clock that does not go back.
        self.conn.execute("reset pyjobq.claim_front")
        self.now = FROZEN
        freeze(self.conn, self.now)

    @rule(seconds=st.sampled_from([0, 1, 2, 5, 30, 61, 299, 301, 3600]))
    def advance_clock(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)
        freeze(self.conn, self.now)
        # As workers do, tick the schedules whenever time has moved.
        self.schedule_tick()

    @rule(
        every=st.sampled_from([1, 5, 60]),
        job_type=st.sampled_from(TYPES),
        catch_up=st.booleans(),
        grace=st.sampled_from([60, 600, 7200]),
    )
    def schedule_set(self, every: int, job_type: int, catch_up: bool, grace: int) -> None:
        new = Schedule(every, job_type, catch_up, timedelta(seconds=grace), self.now)
        new.next_fire = new.tick_after(self.now)
        on_miss = "catch_up" if catch_up else "skip"
        got = self.q.schedule_set("s", new.cron(), job_type, on_miss=on_miss, grace_seconds=grace)
        assert got == new.next_fire
        if self.schedule is not None:  # a replaced schedule keeps its counters
            new.fired, new.misses = self.schedule.fired, self.schedule.misses
        self.schedule = new

    @rule()
    def schedule_tick(self) -> None:
        """Every due tick once: a tick later than the grace is skipped, or with catch_up stood
        for by one job, and the ticks within the grace fire."""
        want: list[tuple[datetime, bool]] = []
        s = self.schedule
        if s is not None and s.next_fire <= self.now:
            if s.next_fire < self.now - s.grace:
                s.misses += 1
                if s.catch_up:
                    want.append((s.next_fire, True))
                s.next_fire = s.tick_after(self.now - s.grace - timedelta(microseconds=1))
            while s.next_fire <= self.now:
                want.append((s.next_fire, False))
                s.next_fire = s.tick_after(s.next_fire)
            s.fired += len(want)
        got = self.q.schedule_tick()
        assert [(f.name, f.tick, f.created, f.catch_up) for f in got] == [
            ("s", tick, True, catch_up) for tick, catch_up in want
        ]
        for fired in got:
            assert s is not None
            self.jobs[fired.job_id] = Row(
                fired.job_id, s.job_type, PENDING, 100, None, 0, 0, 3, self.now, None, None,
                self.now,
            )  # fmt: skip
        if s is not None:
            (row,) = self.q.schedules()
            assert (row.next_fire_at, row.fired, row.misses) == (s.next_fire, s.fired, s.misses)

    @rule(
        job_type=st.sampled_from(TYPES),
        max_running=st.sampled_from([None, 1, 2]),
        rate=st.sampled_from([None, (2, 60), (3, 5)]),
    )
    def set_limits(
        self, job_type: int, max_running: int | None, rate: tuple[int, int] | None
    ) -> None:
        period = None if rate is None else timedelta(seconds=rate[1])
        self.q.type_set_limits(
            job_type,
            max_running,
            rate_limit=None if rate is None else rate[0],
            rate_period=period,
        )
        self.max_running[job_type] = max_running
        self.rate[job_type] = None if rate is None or period is None else (rate[0], period)
        if rate is None:
            self.claims[job_type] = []  # a rate removed forgets its windows

    @rule(
        job_type=st.sampled_from(TYPES),
        priority=st.sampled_from([None, 0, 5, 100]),
        delay=st.sampled_from([None, -10, 0, 30, 600]),
        key=st.sampled_from([None, *KEYS]),
        max_attempts=st.sampled_from([None, 1, 2, 3]),
        unique_for=st.sampled_from([None, 60, 3600]),
    )
    def enqueue(
        self,
        job_type: int,
        priority: int | None,
        delay: int | None,
        key: str | None,
        max_attempts: int | None,
        unique_for: int | None,
    ) -> None:
        run_after = None if delay is None else self.now + timedelta(seconds=delay)
        # A window needs a key: drawn for every enqueue, it applies to those with one.
        window = timedelta(seconds=unique_for) if unique_for and key else None
        holder = self.active_holder(job_type, key)
        ended = self.ended_within(job_type, key, window)
        got = self.q.enqueue(
            job_type, {"n": 1}, priority, run_after, key, max_attempts, unique_for=window
        )
        if holder is not None:
            assert (got.job_id, got.created) == (holder, False)
            return
        if ended:
            # The job that ended last; among ties on a still clock, any of them.
            assert got.job_id in ended
            assert not got.created
            return
        assert got.created
        assert got.job_id not in self.jobs
        self.jobs[got.job_id] = Row(
            got.job_id,
            job_type,
            PENDING,
            100 if priority is None else priority,
            key,
            0,
            0,
            3 if max_attempts is None else max_attempts,
            run_after or self.now,
            None,
            None,
            self.now,
        )

    @rule(
        job_type=st.sampled_from(TYPES),
        indexes=st.lists(PICK, min_size=1, max_size=3),
        runs_anyway=st.booleans(),
        key=st.sampled_from([None, *KEYS]),
    )
    def enqueue_child(
        self, job_type: int, indexes: list[int], runs_anyway: bool, key: str | None
    ) -> None:
        parents = [self.job_at(i) for i in indexes]

        def enqueue() -> Any:
            return self.q.enqueue(
                job_type,
                {"n": 2},
                dedupe_key=key,
                depends_on=parents,
                on_parent_failure="run" if runs_anyway else None,
            )

        if any(p not in self.jobs for p in parents):
            before = self.db_rows()
            with pytest.raises(JobNotFound):
                enqueue()
            assert self.db_rows() == before
            return
        holder = self.active_holder(job_type, key)
        got = enqueue()
        if holder is not None:
            assert (got.job_id, got.created) == (holder, False)
            return
        assert got.created
        assert got.job_id not in self.jobs
        named = list(dict.fromkeys(parents))
        ended = {self.jobs[p].status for p in named if self.jobs[p].status in ENDED}
        if not runs_anyway and ended - {DONE}:
            status = CANCELLED
        elif any(self.jobs[p].status in ACTIVE for p in named):
            status = WAITING
        else:
            status = PENDING
        self.jobs[got.job_id] = Row(
            got.job_id, job_type, status, 100, key, 0, 0, 3, self.now, None, None, self.now
        )
        self.parents[got.job_id] = named
        self.runs_anyway[got.job_id] = runs_anyway
        self.unresolved |= {(p, got.job_id) for p in named if self.jobs[p].status in ACTIVE}

    @rule()
    def open_batch(self) -> None:
        batch_id = self.q.open_batch(
            on_success=(2, {"on": "success"}),
            on_finish=(2, {"on": "finish"}),
            on_dead=(2, {"on": "dead"}),
        )
        assert batch_id not in self.batches
        self.batches[batch_id] = Batch()

    @rule(index=PICK, job_type=st.sampled_from(TYPES), key=st.sampled_from([None, *KEYS]))
    def join_batch(self, index: int, job_type: int, key: str | None) -> None:
        batch_id = pick(list(self.batches), index) or uuid4()
        batch = self.batches.get(batch_id)

        def enqueue() -> Any:
            return self.q.enqueue(job_type, {"n": 3}, dedupe_key=key, batch_id=batch_id)

        if batch is None or batch.closed:
            before = self.db_rows()
            with pytest.raises(JobNotFound if batch is None else BatchClosed):
                enqueue()
            assert self.db_rows() == before
            return
        holder = self.active_holder(job_type, key)
        got = enqueue()
        if holder is not None:
            assert (got.job_id, got.created) == (holder, False)
            return
        assert got.created
        self.jobs[got.job_id] = Row(
            got.job_id, job_type, PENDING, 100, key, 0, 0, 3, self.now, None, None, self.now
        )
        batch.members.append(got.job_id)
        self.batch_of[got.job_id] = batch_id

    @rule(index=PICK)
    def close_batch(self, index: int) -> None:
        batch_id = pick(list(self.batches), index)
        if batch_id is None:
            with pytest.raises(JobNotFound):
                self.q.close_batch(uuid4())
            return
        self.q.close_batch(batch_id)
        self.batches[batch_id].closed = True
        self.fire(batch_id)

    @rule(
        job_type=st.sampled_from(TYPES),
        keys=st.lists(st.sampled_from([None, *KEYS]), min_size=1, max_size=4),
        priority=st.sampled_from([None, 7]),
    )
    def enqueue_many(self, job_type: int, keys: list[str | None], priority: int | None) -> None:
        got = self.q.enqueue_many(job_type, [{"i": i} for i in range(len(keys))], keys, priority)
        assert len(got) == len(keys)
        for key, enq in zip(keys, got, strict=True):
            holder = self.active_holder(job_type, key)
            if holder is not None:
                assert (enq.job_id, enq.created) == (holder, False)
                continue
            assert enq.created
            self.jobs[enq.job_id] = Row(
                enq.job_id, job_type, PENDING, 100 if priority is None else priority, key,
                0, 0, 3, self.now, None, None, self.now,
            )  # fmt: skip

    @rule(
        worker=st.sampled_from(WORKERS),
        limit=st.integers(1, 3),
        lease=st.sampled_from([1, 30, 300]),
        types=st.sampled_from([None, [1], [2], [1, 2]]),
    )
    def claim(self, worker: str, limit: int, lease: int, types: list[int] | None) -> None:
        due = [
            j
            for j in self.jobs.values()
            if j.status == PENDING
            and j.run_after <= self.now
            and (types is None or j.job_type in types)
        ]
        room = {t: self.room(t) for t in TYPES}
        got = self.q.claim(worker, limit, lease, types)
        # The claim walks the due jobs in claim order and takes each whose type has room.
        takes = sum(min(room[t], sum(1 for j in due if j.job_type == t)) for t in TYPES)
        assert len(got) == min(limit, takes)
        order = [(c.priority, c.run_after) for c in got]
        assert order == sorted(order), "claimed jobs come back in claim order"
        claimed = {c.job_id for c in got}
        assert claimed <= {j.job_id for j in due}
        for t in TYPES:
            assert sum(1 for c in got if c.job_type == t) <= room[t], "a limit was passed"
        # Any order among equal (priority, run_after) is fine; a better job must not be skipped,
        # unless its type had no room left.
        full = {t for t in TYPES if sum(1 for c in got if c.job_type == t) >= room[t]}
        left = [
            (j.priority, j.run_after)
            for j in due
            if j.job_id not in claimed and j.job_type not in full
        ]
        if got and left:
            assert max(order) <= min(left)
        for t in TYPES:
            taken = sum(1 for c in got if c.job_type == t)
            if self.rate[t] is not None and taken:
                self.claims[t].append((self.now, taken))
        for c in got:
            job = self.jobs[c.job_id]
            assert c.attempt == job.attempts + 1
            assert c.lease_until == self.now + timedelta(seconds=lease)
            assert (c.job_type, c.priority, c.dedupe_key, c.max_attempts) == (
                job.job_type, job.priority, job.dedupe_key, job.max_attempts,
            )  # fmt: skip
            parents = self.parents.get(c.job_id)
            if parents is None:
                assert c.parent_results is None
            else:
                assert c.parent_results is not None
                shown = [(r["job_id"], r["status"]) for r in c.parent_results]
                assert shown == [(str(p), JobStatus(self.jobs[p].status).name) for p in parents]
                # A dependant runs only once its parents ended: DONE, unless it runs anyway.
                assert not any(child == c.job_id for _, child in self.unresolved)
                if not self.runs_anyway[c.job_id]:
                    assert {status for _, status in shown} <= {"DONE"}
            self.jobs[c.job_id] = replace(
                job,
                status=RUNNING,
                attempts=c.attempt,
                worker_id=worker,
                lease_until=c.lease_until,
                updated_at=self.now,
            )
            self.claimed_at[c.job_id] = self.now
            self.tokens.append(Token(c.job_id, worker, c.attempt))

    @rule(index=PICK)
    def complete(self, index: int) -> None:
        token = self.token_at(index)
        self.call_as_holder(
            token, lambda: self.q.complete(token.job_id, token.worker_id, token.attempt, {"ok": 1})
        )
        if self.expect_not_held(token) is None:
            job = self.jobs[token.job_id]
            self.jobs[token.job_id] = replace(
                job, status=DONE, lease_until=None, updated_at=self.now
            )
            self.ended({token.job_id})

    @rule(indexes=st.lists(PICK, min_size=1, max_size=3), stranger=st.booleans())
    def complete_many(self, indexes: list[int], stranger: bool) -> None:
        batch = [self.token_at(i) for i in indexes]
        # One worker completes the lot: tokens of the other worker are simply not held by it.
        worker = batch[0].worker_id
        pairs = [(t.job_id, t.attempt) for t in batch] + ([(uuid4(), 1)] if stranger else [])
        # Each (job, attempt) counts: a stale attempt listed beside the held one is not completed,
        # and a held attempt listed twice is reported completed both times.
        held = {
            (job_id, attempt)
            for job_id, attempt in pairs
            if self.expect_not_held(Token(job_id, worker, attempt)) is None
        }
        # An attempt this worker already completed is reported completed again (a safe retry).
        done_before = {
            (job.job_id, job.attempts)
            for job in self.jobs.values()
            if job.status == DONE and job.worker_id == worker
        }
        got = self.q.complete_many(worker, [p[0] for p in pairs], [p[1] for p in pairs])
        expected = [(p[0], p in held or p in done_before) for p in pairs]
        assert [(c.job_id, c.completed) for c in got] == expected
        for job_id in {job_id for job_id, _ in held}:
            job = self.jobs[job_id]
            self.jobs[job_id] = replace(job, status=DONE, lease_until=None, updated_at=self.now)
        self.ended({job_id for job_id, _ in held})

    @rule(
        index=PICK,
        delay=st.sampled_from([None, 0, 5]),
        dead_letter=st.sampled_from([None, False, True]),
    )
    def fail(self, index: int, delay: int | None, dead_letter: bool | None) -> None:
        token = self.token_at(index)
        held = self.expect_not_held(token) is None
        outcome = self.call_as_holder(
            token,
            lambda: self.q.fail(
                token.job_id, token.worker_id, token.attempt, "boom", delay, dead_letter
            ),
        )
        if not held:
            return
        job = self.jobs[token.job_id]
        if dead_letter or tries_left(job) <= 0:
            assert outcome.status == DEAD
            assert outcome.run_after == job.run_after
            self.jobs[token.job_id] = replace(
                job, status=DEAD, lease_until=None, updated_at=self.now
            )
            self.ended({token.job_id})
            return
        assert outcome.status == PENDING
        if delay is None:
            assert_backoff(outcome.run_after, self.now, tries_used(job))
        else:
            assert outcome.run_after == self.now + timedelta(seconds=delay)
        self.jobs[token.job_id] = replace(
            job,
            status=PENDING,
            run_after=outcome.run_after,
            worker_id=None,
            lease_until=None,
            updated_at=self.now,
        )

    @rule(index=PICK, lease=st.sampled_from([1, 60]))
    def renew(self, index: int, lease: int) -> None:
        self.renew_as(self.token_at(index), lease)

    def renew_as(self, token: Token, lease: int) -> None:
        """Renew as ``token``: it succeeds exactly when the model says the token holds its job
        and the attempt's deadline has not come, and the lease then ends by that deadline."""
        held = self.expect_not_held(token) is None

        def renew() -> datetime:
            return self.q.renew_lease(token.job_id, token.worker_id, token.attempt, lease)

        deadline = self.claimed_at.get(token.job_id, self.now) + DEADLINE
        if held and self.now >= deadline:
            # Still held, but past the attempt's deadline: no renewal, and nothing changes.
            before = self.db_rows()
            with pytest.raises(LeaseLost):
                renew()
            assert self.db_rows() == before
            return
        until = self.call_as_holder(token, renew)
        if held:
            assert until == min(self.now + timedelta(seconds=lease), deadline)
            job = self.jobs[token.job_id]
            self.jobs[token.job_id] = replace(job, lease_until=until, updated_at=self.now)

    @rule(index=PICK)
    def release(self, index: int) -> None:
        token = self.token_at(index)
        held = self.expect_not_held(token) is None
        self.call_as_holder(
            token, lambda: self.q.release(token.job_id, token.worker_id, token.attempt)
        )
        if held:
            job = self.jobs[token.job_id]
            self.jobs[token.job_id] = replace(
                job,
                status=PENDING,
                attempts_refunded=job.attempts_refunded + 1,  # the token itself is not given back
                worker_id=None,
                lease_until=None,
                updated_at=self.now,
            )

    @rule(limit=st.sampled_from([None, 1, 2]))
    def reap(self, limit: int | None) -> None:
        expired = [
            j
            for j in self.jobs.values()
            if j.status == RUNNING and j.lease_until is not None and j.lease_until < self.now
        ]
        got = self.q.reap(limit)
        assert len(got) == min(limit or 1000, len(expired))
        reaped = {r.job_id for r in got}
        assert reaped <= {j.job_id for j in expired}
        left = [lease_of(j) for j in expired if j.job_id not in reaped]
        if got and left:
            assert max(lease_of(self.jobs[r]) for r in reaped) <= min(left)
        for r in got:
            job = self.jobs[r.job_id]
            assert (r.worker_id, r.attempt, r.job_type) == (
                job.worker_id, job.attempts, job.job_type,
            )  # fmt: skip
            if tries_left(job) <= 0:
                assert (r.status, r.run_after) == (DEAD, job.run_after)
                # The worker is cleared: the holder that lost its lease gets JQ001, not JQ003.
                self.jobs[r.job_id] = replace(
                    job, status=DEAD, worker_id=None, lease_until=None, updated_at=self.now
                )
                self.ended({r.job_id})
            else:
                assert r.status == PENDING
                assert_backoff(r.run_after, self.now, tries_used(job))
                self.jobs[r.job_id] = replace(
                    job,
                    status=PENDING,
                    run_after=r.run_after,
                    worker_id=None,
                    lease_until=None,
                    updated_at=self.now,
                )

    @rule(
        by_ids=st.booleans(),
        indexes=st.lists(PICK, max_size=3),
        stranger=st.booleans(),
        job_type=st.sampled_from([None, 1]),
        limit=st.sampled_from([None, 1, 2]),
    )
    def redrive(
        self,
        by_ids: bool,
        indexes: list[int],
        stranger: bool,
        job_type: int | None,
        limit: int | None,
    ) -> None:
        ids: list[UUID] | None = None
        if by_ids:
            ids = [self.job_at(i) for i in indexes] + ([uuid4()] if stranger else [])
        eligible = [
            j
            for j in self.jobs.values()
            if j.status in (DEAD, CANCELLED)
            and (ids is None or j.job_id in ids)
            and (job_type is None or j.job_type == job_type)
        ]
        moved = self.q.redrive(ids, job_type, limit)
        assert len(moved) == len(set(moved)) <= (limit or 1000)
        assert set(moved) <= {j.job_id for j in eligible}
        held_keys = {(j.job_type, j.dedupe_key) for j in self.jobs.values() if j.status in ACTIVE}
        for job_id in moved:
            job = self.jobs[job_id]
            assert job.dedupe_key is None or (job.job_type, job.dedupe_key) not in held_keys
            held_keys.add((job.job_type, job.dedupe_key))
            self.jobs[job_id] = replace(
                job, status=PENDING, attempts_refunded=job.attempts, run_after=self.now,
                worker_id=None, updated_at=self.now,
            )  # fmt: skip
            self.snoozes.pop(job_id, None)  # a fresh count, and no progress
            self.progress.pop(job_id, None)
            if job_id in self.batch_of:
                self.batches[self.batch_of[job_id]].finished_at = None
        # A dependant moved only with none of its parents left DEAD or CANCELLED by the call,
        # unless it runs anyway, and waits for those yet to end.
        for job_id in moved:
            if job_id not in self.parents:
                continue
            parents = [self.jobs[p] for p in self.parents[job_id]]
            if not self.runs_anyway[job_id]:
                assert all(p.status not in (DEAD, CANCELLED) for p in parents), job_id
            live = {p.job_id for p in parents if p.status in ACTIVE}
            self.unresolved |= {(p, job_id) for p in live}
            if live:
                self.jobs[job_id] = replace(self.jobs[job_id], status=WAITING)
        if len(eligible) <= (limit or 1000):
            # Every eligible job was a candidate: one stays DEAD or CANCELLED only because an
            # active job holds its key, an older one of its key was the candidate, or a parent
            # of it stays DEAD or CANCELLED.
            for job in eligible:
                if job.job_id in moved:
                    continue
                key = (job.job_type, job.dedupe_key)
                older_of_key = job.dedupe_key is not None and any(
                    (o.job_type, o.dedupe_key) == key
                    and (o.updated_at, o.job_id) < (job.updated_at, job.job_id)
                    for o in eligible
                )
                blocked = not self.runs_anyway.get(job.job_id, True) and any(
                    self.jobs[p].status in (DEAD, CANCELLED) for p in self.parents[job.job_id]
                )
                assert (
                    (job.dedupe_key is not None and key in held_keys) or older_of_key or (blocked)
                ), job

    @rule(indexes=st.lists(PICK, min_size=1, max_size=3), stranger=st.booleans())
    def cancel(self, indexes: list[int], stranger: bool) -> None:
        ids = [self.job_at(i) for i in indexes] + ([uuid4()] if stranger else [])
        before = {job_id: self.jobs[job_id].status for job_id in set(ids) if job_id in self.jobs}
        got = self.q.cancel(ids)
        outcome = {PENDING: "cancelled", WAITING: "cancelled", RUNNING: "cancelled_running"}
        assert [(c.job_id, c.outcome) for c in got] == [
            (i, outcome.get(before[i], "finished") if i in before else "not_found") for i in ids
        ]
        for job_id, status in before.items():
            if status in ACTIVE:
                self.jobs[job_id] = replace(
                    self.jobs[job_id], status=CANCELLED, lease_until=None, updated_at=self.now
                )
        self.ended({job_id for job_id, status in before.items() if status in ACTIVE})

    @rule(older_than=st.sampled_from([0, 60, 3600]), limit=st.sampled_from([None, 1]))
    def prune(self, older_than: int, limit: int | None) -> None:
        cutoff = self.now - timedelta(seconds=older_than)
        # A parent stays while one of its dependants has yet to end.
        needed = {p for c, ps in self.parents.items() if self.jobs[c].status in ACTIVE for p in ps}
        eligible = {
            j.job_id
            for j in self.jobs.values()
            if j.status in ENDED and j.updated_at < cutoff and j.job_id not in needed
        }
        deleted = self.q.prune(timedelta(seconds=older_than), limit)
        assert deleted == min(limit or 10000, len(eligible))
        gone = set(self.jobs) - set(self.db_rows())
        assert len(gone) == deleted
        assert gone <= eligible
        for job_id in gone:
            if job_id in self.batch_of:
                pruned = self.batches[self.batch_of[job_id]].pruned
                pruned[self.jobs[job_id].status] = pruned.get(self.jobs[job_id].status, 0) + 1
            del self.jobs[job_id]
            self.parents.pop(job_id, None)
        for batch_id, batch in list(self.batches.items()):
            if (
                batch.finished_at is not None
                and batch.finished_at < cutoff
                and not any(j in self.jobs for j in batch.members)
            ):
                del self.batches[batch_id]
        for child, parents in self.parents.items():
            self.parents[child] = [p for p in parents if p not in gone]

    @rule(index=PICK, name=st.sampled_from(STEPS), value=st.integers(0, 9))
    def save_step(self, index: int, name: str, value: int) -> None:
        """Only the holder records a step; the first record of a name stays, in every attempt."""
        token = self.token_at(index)
        got = self.call_as_holder(
            token,
            lambda: self.q.step_save(token.job_id, token.worker_id, token.attempt, name, value),
        )
        if got is None:
            return
        recorded = self.steps.setdefault(token.job_id, {})
        assert (got.saved, got.result) == (name not in recorded, recorded.get(name, value))
        recorded.setdefault(name, value)
        steps = self.q.steps(token.job_id, token.worker_id, token.attempt)
        assert {s.name: s.result for s in steps} == recorded

    @rule(index=PICK, done=st.integers(0, 9))
    def report_progress(self, index: int, done: int) -> None:
        """Only the holder reports; the latest report stays with the job through its attempts."""
        token = self.token_at(index)
        report = {"done": done}
        self.call_as_holder(
            token,
            lambda: self.q.progress(token.job_id, token.worker_id, token.attempt, report),
        )
        if self.expect_not_held(token) is None:
            self.progress[token.job_id] = report

    @rule(bound=st.sampled_from([0, 1, 2, 1000]))
    def set_snoozes(self, bound: int) -> None:
        for job_type in TYPES:
            self.q.type_set_snoozes(job_type, bound)
        self.max_snoozes = bound

    @rule(index=PICK, delay=st.sampled_from([0, 5, 60]))
    def snooze(self, index: int, delay: int) -> None:
        """A holder's snooze: PENDING after the delay, the try given back, counted; DEAD past
        the bound. Any other token's changes nothing."""
        token = self.token_at(index)
        held = self.expect_not_held(token) is None
        before = self.db_rows()
        (got,) = self.q.finish_many(
            token.worker_id, [token.job_id], [token.attempt], ["snoozed"], None, None, [delay]
        )
        if not held:
            assert self.db_rows() == before
            return
        job, count = self.jobs[token.job_id], self.snoozes.get(token.job_id, 0)
        if count >= self.max_snoozes:
            assert got.status == DEAD
            self.jobs[token.job_id] = replace(
                job, status=DEAD, lease_until=None, updated_at=self.now
            )
            self.ended({token.job_id})
            return
        woken = self.now + timedelta(seconds=delay)
        assert (got.status, got.run_after) == (PENDING, woken)
        self.jobs[token.job_id] = replace(
            job,
            status=PENDING,
            run_after=woken,
            attempts_refunded=job.attempts_refunded + 1,
            worker_id=None,
            lease_until=None,
            updated_at=self.now,
        )
        self.snoozes[token.job_id] = count + 1

    @rule(index=PICK, name=st.sampled_from(EVENTS), timeout=st.sampled_from([1, 60]))
    def wait(self, index: int, name: str, timeout: int) -> None:
        """A holder's wait: the payload once signalled, timed out once the first wait's timeout
        has come, else asleep (PENDING until the timeout, the try given back)."""
        token = self.token_at(index)
        got = self.call_as_holder(
            token,
            lambda: self.q.event_wait(token.job_id, token.worker_id, token.attempt, name, timeout),
        )
        if got is None:
            return
        key = (token.job_id, name)
        until, payload, signalled = self.events.get(key, (None, None, False))
        until = until or self.now + timedelta(seconds=timeout)
        self.events[key] = (until, payload, signalled)
        if signalled:
            assert (got.outcome, got.payload) == ("signalled", payload)
        elif until <= self.now:
            assert (got.outcome, got.payload) == ("timed_out", None)
        else:
            assert (got.outcome, got.wait_until) == ("waiting", until)
            job = self.jobs[token.job_id]
            self.jobs[token.job_id] = replace(
                job,
                status=PENDING,
                run_after=until,
                attempts_refunded=job.attempts_refunded + 1,
                worker_id=None,
                lease_until=None,
                updated_at=self.now,
            )

    @rule(index=PICK, name=st.sampled_from(EVENTS), payload=st.integers(0, 9))
    def signal(self, index: int, name: str, payload: int) -> None:
        """A signal to a job yet to end is taken once; a job asleep for it is due at once."""
        job_id = self.job_at(index)
        job = self.jobs.get(job_id)
        if job is None or job.status in ENDED:
            before = self.db_rows()
            with pytest.raises(JobNotFound if job is None else JobAlreadyFinished):
                self.q.signal(job_id, name, payload)
            assert self.db_rows() == before
            return
        until, _, signalled = self.events.get((job_id, name), (None, None, False))
        assert self.q.signal(job_id, name, payload) is not signalled
        if signalled:
            return
        self.events[(job_id, name)] = (until, payload, True)
        asleep = job.status == PENDING and job.run_after > self.now
        if until is not None and until > self.now and asleep:
            self.jobs[job_id] = replace(job, run_after=self.now, updated_at=self.now)

    @rule(index=PICK, worker=st.sampled_from(WORKERS), attempt=st.integers(1, 4))
    def forged_token(self, index: int, worker: str, attempt: int) -> None:
        """Any (job, worker, attempt) the model says is not held is refused with the right code
        (one that happens to be the holder's renews as the holder does, its deadline included)."""
        self.renew_as(Token(self.job_at(index), worker, attempt), 60)

    # -- invariants ----------------------------------------------------------

    @invariant()
    def table_matches_model(self) -> None:
        assert self.db_rows() == self.jobs

    @invariant()
    def structural_invariants(self) -> None:
        active: set[tuple[int, str]] = set()
        for job in self.jobs.values():
            assert 0 <= job.attempts_refunded <= job.attempts
            assert 0 <= tries_used(job) <= job.max_attempts
            assert (job.status == RUNNING) == (job.lease_until is not None)
            if job.status == RUNNING:
                assert job.worker_id is not None
            if job.status == PENDING:
                assert job.worker_id is None
            if job.status in ACTIVE and job.dedupe_key is not None:
                held = (job.job_type, job.dedupe_key)
                assert held not in active, "two active jobs of a type share a dedupe key"
                active.add(held)

    @invariant()
    def durable_state_matches(self) -> None:
        """The steps and events of the jobs the model holds are what it recorded (those of a
        pruned job may go later, with its prune's limit), and each active job's snoozes and
        progress."""
        steps: dict[UUID, dict[str, Any]] = {}
        for job_id, name, result in self.conn.execute(
            "select job_id, name, result from pyjobq.job_step"
        ):
            steps.setdefault(job_id, {})[name] = result
        assert {j: s for j, s in steps.items() if j in self.jobs} == {
            j: s for j, s in self.steps.items() if j in self.jobs and s
        }
        assert steps.keys() <= self.steps.keys()
        events = {
            (j, n): (until, payload, sent is not None)
            for j, n, until, payload, sent in self.conn.execute(
                "select job_id, name, wait_until, payload, signalled_at from pyjobq.job_event"
            )
        }
        assert {k: e for k, e in events.items() if k[0] in self.jobs} == {
            k: e for k, e in self.events.items() if k[0] in self.jobs
        }
        assert events.keys() <= self.events.keys()
        snoozes = dict(
            self.conn.execute("select job_id, snoozes from pyjobq.job where snoozes > 0")
        )
        assert snoozes == {
            j: n
            for j, n in self.snoozes.items()
            if n and j in self.jobs and self.jobs[j].status in ACTIVE
        }
        reported = dict(
            self.conn.execute("select job_id, progress from pyjobq.job where progress is not null")
        )
        assert reported == {
            j: p
            for j, p in self.progress.items()
            if j in self.jobs and self.jobs[j].status in ACTIVE
        }

    @invariant()
    def edges_match(self) -> None:
        """job_edge holds each child's parents and which are still to end; a WAITING job counts
        its unresolved edges, and every unresolved edge's parent is still to end."""
        rows = self.conn.execute(
            "select e.parent_id, e.child_id, e.resolved, c.status, c.waiting_on"
            " from pyjobq.job_edge e join pyjobq.job_all c on c.job_id = e.child_id"
        ).fetchall()
        assert {(p, c) for p, c, *_ in rows} == {
            (p, c) for c, ps in self.parents.items() for p in ps
        }
        assert {(p, c) for p, c, resolved, *_ in rows if not resolved} == {
            (p, c) for p, c in self.unresolved if c in self.jobs and p in self.jobs
        }
        assert all(self.jobs[p].status in ACTIVE for p, _ in self.unresolved if p in self.jobs)
        for c, ps in self.parents.items():
            if self.jobs[c].status == WAITING:
                waiting = sum(1 for p in ps if (p, c) in self.unresolved)
                assert waiting > 0
                assert {r[4] for r in rows if r[1] == c} == {waiting}

    @invariant()
    def batches_match(self) -> None:
        """Each batch's state, counts and callback jobs are the model's: a callback is enqueued
        once, when due, and its job id never changes."""
        for batch_id, batch in self.batches.items():
            info = self.q.get_batch(batch_id)
            assert info is not None
            total, done, dead, cancelled = self.batch_counts(batch_id)
            state = "finished" if batch.finished_at else "closed" if batch.closed else "open"
            assert (info.state, info.total, info.done, info.dead, info.cancelled) == (
                state, total, done, dead, cancelled,
            )  # fmt: skip
            assert (info.success_job, info.finish_job, info.dead_job) == (
                batch.fired.get("success"), batch.fired.get("finish"), batch.fired.get("dead"),
            )  # fmt: skip
        assert self.conn.execute("select count(*) from pyjobq.job_batch").fetchone() == (
            len(self.batches),
        )

    @invariant()
    def limits_match(self) -> None:
        got = {row.job_type: row for row in self.q.type_limits()}
        for job_type in TYPES:
            rate = self.rate[job_type]
            if self.max_running[job_type] is None and rate is None:
                assert job_type not in got
                continue
            row = got[job_type]
            assert (row.max_running, row.rate_limit, row.rate_period) == (
                self.max_running[job_type], *(rate or (None, None)),
            )  # fmt: skip
            assert row.next_claim_at == self.next_claim_at(job_type)

    @invariant()
    def counts_match(self) -> None:
        got = {
            (c.job_type, int(c.status)): (c.jobs, c.oldest_due_seconds, c.expired_leases, c.exact)
            for c in self.q.counts()
        }
        want = {}
        for job_type in TYPES:
            for status in (PENDING, RUNNING, DONE, DEAD, CANCELLED, WAITING):
                rows = [
                    j for j in self.jobs.values() if j.job_type == job_type and j.status == status
                ]
                oldest: float | None = None
                expired: int | None = None
                if status == PENDING:
                    due = [j.run_after for j in rows if j.run_after <= self.now]
                    oldest = (self.now - min(due)).total_seconds() if due else 0.0
                if status == RUNNING:
                    expired = sum(1 for j in rows if lease_of(j) < self.now)
                # The model's table stays far below 1 MiB: every figure is exact.
                want[(job_type, status)] = (len(rows), oldest, expired, True)
        assert got == want


@pytest.mark.slow
def test_queue_matches_its_model(conn: Conn) -> None:
    class Machine(QueueMachine):
        """The machine on this test's connection: hypothesis builds it with no arguments."""

        def __init__(self) -> None:
            super().__init__(conn)

    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=int(150 * SCALE),
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


def test_a_fencing_token_is_never_valid_twice_for_a_job(conn: Conn) -> None:
    """attempt only grows: neither a redrive nor a release hands out a token again, so a holder
    of a lost attempt (here with the same worker id claiming the job anew) is refused."""
    freeze(conn, FROZEN)
    q = JobQueue(conn)
    job = q.enqueue(1, max_attempts=1)
    (first,) = q.claim("w1", 1, 1)
    freeze(conn, FROZEN + timedelta(seconds=5))
    assert [r.job_id for r in q.reap()] == [job.job_id]
    assert q.redrive([job.job_id]) == [job.job_id]
    (second,) = q.claim("w1", 1, 60)
    assert (first.attempt, second.attempt) == (1, 2)
    q.release(job.job_id, "w1", second.attempt)
    (third,) = q.claim("w1", 1, 60)
    assert third.attempt == 3
    for stale in (first, second):
        with pytest.raises(LeaseLost):
            q.complete(job.job_id, "w1", stale.attempt)
    # The redrive gave a fresh budget of max_attempts = 1 and the release gave its try back:
    # the third claim is the one try of that budget, so a failure ends DEAD.
    assert q.fail(job.job_id, "w1", third.attempt, "boom").status == JobStatus.DEAD
