"""Model-based test over several sessions at once: open transactions, rollbacks, late commits.

``test_model.py`` drives one session, where every claim front is exact. Here Hypothesis
interleaves three sessions, each with a transaction it keeps open across steps: it enqueues,
claims, completes, releases and cancels in it, then commits or rolls back later, while the
others go on and the one clock moves. The model knows what each session sees (the committed
jobs plus its own open changes) and which rows the others hold locked, and after every claim it
checks the claim-order bound of docs/guarantees.md ("Claim order"):

- a claim takes only jobs its session sees as due PENDING and no other session holds;
- a claim that returns fewer than it asked for leaves no such job behind;
- a due job it passes over while taking one that sorts after it (priority, run_after, seq) must
  have become claimable less than one second ago: by its due time, the commit of its enqueue
  or release, or the rollback of a transaction that held it.

After every step the committed table (status and attempts of every job, read by a fourth
session) must equal the model's, and at the end every job still PENDING is claimed exactly once.
Draws never depend on what the model holds: an index is taken modulo the list (see
``test_model.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

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

from tests.sqlhelp import FROZEN, freeze, one_row

Conn = psycopg.Connection[Any]

SCALE = float(os.environ.get("PYJOBQ_TEST_SCALE", "1"))
PENDING, RUNNING, DONE, CANCELLED = 1, 2, 3, 5
SESSIONS = 3
PICK = st.integers(0, 1023)
SESSION = st.integers(0, SESSIONS - 1)
BACKLOG = 30
# What a rule does with the session's transaction after its call.
THEN = st.sampled_from(["keep open", "keep open", "keep open", "commit", "commit", "roll back"])
# How long a chain of claims resumed from a front may pass over a job (docs/guarantees.md).
FRONT_LIFETIME = timedelta(seconds=1)


@dataclass
class Job:
    """One job as the model knows it. ``status`` is the committed one (None: the enqueue has not
    committed), ``since`` the last time anything could have made it newly claimable, and
    ``claims`` the claims of it that committed (its ``attempts``)."""

    job_id: UUID
    priority: int
    run_after: datetime
    seq: int
    status: int | None
    since: datetime
    claims: int = 0

    @property
    def order(self) -> tuple[int, datetime, int]:
        return (self.priority, self.run_after, self.seq)


@dataclass
class Hold:
    attempt: int
    token: UUID


@dataclass
class Session:
    """A connection and what its open transaction has changed, as it sees it."""

    conn: Conn
    worker_id: str
    in_tx: bool = False
    changes: dict[UUID, int] = field(default_factory=dict)
    enqueued: set[UUID] = field(default_factory=set)
    claimed: list[UUID] = field(default_factory=list)
    held: dict[UUID, Hold] = field(default_factory=dict)
    held_at_begin: dict[UUID, Hold] = field(default_factory=dict)


class SessionsMachine(RuleBasedStateMachine):
    def __init__(self, observer: Conn, sessions: list[Conn]) -> None:
        super().__init__()
        self.observer = observer
        self.sessions = [Session(c, f"w{i}") for i, c in enumerate(sessions)]
        self.now = FROZEN
        self.jobs: dict[UUID, Job] = {}

    # -- what a session sees -------------------------------------------------

    def status_seen_by(self, s: Session, job: Job) -> int | None:
        if job.job_id in s.changes:
            return s.changes[job.job_id]
        return job.status

    def locked_by_others(self, s: Session) -> set[UUID]:
        return {j for other in self.sessions if other is not s for j in other.changes}

    def claimable(self, s: Session) -> list[Job]:
        """Due jobs ``s`` sees PENDING that no other open transaction holds, in claim order."""
        locked = self.locked_by_others(s)
        return sorted(
            (
                j
                for j in self.jobs.values()
                if self.status_seen_by(s, j) == PENDING
                and j.run_after <= self.now
                and j.job_id not in locked
            ),
            key=lambda j: j.order,
        )

    def begin(self, s: Session) -> None:
        if not s.in_tx:
            s.conn.execute("begin")
            s.in_tx = True
            s.held_at_begin = dict(s.held)

    def end(self, s: Session, commit: bool) -> None:
        if not s.in_tx:
            return
        s.conn.execute("commit" if commit else "rollback")
        for job_id, status in s.changes.items():
            job = self.jobs[job_id]
            if not commit:
                if job_id in s.enqueued:
                    del self.jobs[job_id]
                else:
                    job.since = self.now  # unlocked: claimable again for the others
                continue
            if status == PENDING:
                job.since = self.now  # enqueue or release now visible to all
            job.status = status
        if commit:
            for job_id in s.claimed:
                self.jobs[job_id].claims += 1
        else:
            s.held = s.held_at_begin
            # The rollback also undid the clock set inside the transaction.
            freeze(s.conn, self.now)
        s.in_tx = False
        s.changes = {}
        s.enqueued = set()
        s.claimed = []

    def then(self, s: Session, then: str) -> None:
        if then != "keep open":
            self.end(s, commit=then == "commit")

    # -- rules ---------------------------------------------------------------

    @initialize()
    def clean_database(self) -> None:
        self.observer.execute("truncate pyjobq.job, pyjobq.job_history")
        for s in self.sessions:
            # The clock goes back to FROZEN: fronts assume a clock that does not go back.
            s.conn.execute("reset pyjobq.claim_front")
            freeze(s.conn, FROZEN)
        self.now = FROZEN
        # A backlog, so that a claim resumed from a front can fill its batch after it.
        self.enqueue(at=0, count=BACKLOG, priority=1, delay=0.0, then="commit")

    def teardown(self) -> None:
        for s in self.sessions:
            if s.in_tx:
                s.conn.execute("rollback")
                s.in_tx = False

    @rule(seconds=st.sampled_from([0.25, 0.5, 1.0, 1.5]))
    def advance_clock(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
        for s in self.sessions:
            freeze(s.conn, self.now)

    @rule(
        at=SESSION,
        count=st.integers(1, 12),
        priority=st.integers(0, 2),
        delay=st.sampled_from([0.0, 0.0, 0.0, 0.0, 0.5, 1.5, -1.0]),
        then=THEN,
    )
    def enqueue(self, at: int, count: int, priority: int, delay: float, then: str) -> None:
        s = self.sessions[at]
        self.begin(s)
        run_after = self.now + timedelta(seconds=delay)
        rows = s.conn.execute(
            "select job_id from pyjobq.job_enqueue_many(1, array_fill('{}'::jsonb, array[%s]),"
            " p_priority => %s, p_run_after => %s) order by ord",
            (count, priority, run_after),
        ).fetchall()
        # A statement does not see the rows of the function it calls: the seqs come after.
        ids = [r[0] for r in rows]
        seqs = dict(
            s.conn.execute("select job_id, seq from pyjobq.job_all where job_id = any (%s)", (ids,))
        )
        assert len(seqs) == count
        for job_id, seq in seqs.items():
            self.jobs[job_id] = Job(job_id, priority, run_after, seq, None, self.now)
            s.changes[job_id] = PENDING
            s.enqueued.add(job_id)
        self.then(s, then)

    @rule(at=SESSION, limit=st.integers(1, 3), then=THEN)
    def claim(self, at: int, limit: int, then: str) -> None:
        s = self.sessions[at]
        self.begin(s)
        could = self.claimable(s)
        rows = s.conn.execute(
            "select job_id, attempt, lease_token from pyjobq.job_claim(%s, %s, 3600, array[1])",
            (s.worker_id, limit),
        ).fetchall()
        got = [job_id for job_id, _, _ in rows]
        by_id = {j.job_id: j for j in could}
        assert set(got) <= set(by_id), "a claim took a job its session could not claim"
        orders = [by_id[j].order for j in got]
        assert orders == sorted(orders), "claimed jobs come back in claim order"
        passed = [j for j in could if j.job_id not in set(got)]
        if len(got) < limit:
            assert not passed, "a claim that could not fill its batch left a claimable job"
        if got:
            last = max(orders)
            for job in passed:
                if job.order < last:
                    waited = self.now - max(job.since, job.run_after)
                    assert waited < FRONT_LIFETIME, (
                        f"{job} passed over after {waited} while a later job was claimed"
                    )
        for job_id, attempt, token in rows:
            assert attempt == self.jobs[job_id].claims + s.claimed.count(job_id) + 1
            s.claimed.append(job_id)
            s.changes[job_id] = RUNNING
            s.held[job_id] = Hold(attempt, token)
        self.then(s, then)

    def held_job(self, s: Session, index: int) -> tuple[UUID, Hold] | None:
        held = sorted(s.held.items(), key=lambda item: self.jobs[item[0]].seq)
        return held[index % len(held)] if held else None

    @rule(at=SESSION, index=PICK, then=THEN)
    def complete(self, at: int, index: int, then: str) -> None:
        s = self.sessions[at]
        picked = self.held_job(s, index)
        if picked is None:
            return
        job_id, hold = picked
        self.begin(s)
        s.conn.execute(
            "select pyjobq.job_complete(%s, %s, %s, null, %s)",
            (job_id, s.worker_id, hold.attempt, hold.token),
        )
        s.changes[job_id] = DONE
        del s.held[job_id]
        self.then(s, then)

    @rule(at=SESSION, index=PICK, then=THEN)
    def release(self, at: int, index: int, then: str) -> None:
        s = self.sessions[at]
        picked = self.held_job(s, index)
        if picked is None:
            return
        job_id, hold = picked
        self.begin(s)
        s.conn.execute(
            "select pyjobq.job_release(%s, %s, %s, %s)",
            (job_id, s.worker_id, hold.attempt, hold.token),
        )
        s.changes[job_id] = PENDING
        self.jobs[job_id].since = self.now
        del s.held[job_id]
        self.then(s, then)

    @rule(at=SESSION, index=PICK, then=THEN)
    def cancel(self, at: int, index: int, then: str) -> None:
        """Cancel a PENDING job nobody else holds (a held row would make the cancel wait)."""
        s = self.sessions[at]
        locked = self.locked_by_others(s)
        pending = [
            j
            for j in sorted(self.jobs.values(), key=lambda j: j.seq)
            if self.status_seen_by(s, j) == PENDING and j.job_id not in locked
        ]
        if not pending:
            return
        job = pending[index % len(pending)]
        self.begin(s)
        (outcome,) = one_row(
            s.conn, "select outcome from pyjobq.job_cancel(array[%s::uuid])", (job.job_id,)
        )
        assert outcome == "cancelled"
        s.changes[job.job_id] = CANCELLED
        self.then(s, then)

    @rule(at=SESSION, commit=st.booleans())
    def finish_transaction(self, at: int, commit: bool) -> None:
        self.end(self.sessions[at], commit)

    # -- invariants ----------------------------------------------------------

    @invariant()
    def committed_table_matches(self) -> None:
        got = {
            job_id: (status, attempts)
            for job_id, status, attempts in self.observer.execute(
                "select job_id, status, attempts from pyjobq.job_all"
            )
        }
        want = {j.job_id: (j.status, j.claims) for j in self.jobs.values() if j.status is not None}
        assert got == want

    @invariant()
    def one_holder_per_job(self) -> None:
        holders = [j for s in self.sessions for j in s.held]
        assert len(holders) == len(set(holders))

    def drain(self) -> None:
        """Commit everything, let a second pass, and claim until empty: every PENDING job once."""
        for s in self.sessions:
            self.end(s, commit=True)
        self.advance_clock(1.5)
        s = self.sessions[0]
        pending = {j.job_id for j in self.jobs.values() if j.status == PENDING}
        (got,) = one_row(
            s.conn,
            "select coalesce(array_agg(job_id), '{}') from pyjobq.job_claim('drain', 1000, 60)",
        )
        assert sorted(got) == sorted(pending)


@pytest.mark.slow
def test_sessions_keep_the_claim_order_bound(conn: Conn, make_conn: Callable[[], Conn]) -> None:
    # No session's statement ever waits long on another's lock: a model mistake fails fast.
    sessions = [make_conn() for _ in range(SESSIONS)]
    for c in sessions:
        c.execute("set lock_timeout = '2s'")

    class Machine(SessionsMachine):
        def __init__(self) -> None:
            super().__init__(conn, sessions)

        def teardown(self) -> None:
            try:
                self.drain()
            finally:
                super().teardown()

    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=int(80 * SCALE),
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


def machine(conn: Conn, make_conn: Callable[[], Conn]) -> SessionsMachine:
    m = SessionsMachine(conn, [make_conn() for _ in range(SESSIONS)])
    m.clean_database()
    return m


def test_a_job_a_rolled_back_claim_leaves_behind_a_front_waits_less_than_a_second(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    """The interleaving the bound is about, spelt out: session 0 holds the first two jobs while
    session 1 claims past them; the rollback leaves them behind session 1's front."""
    m = machine(conn, make_conn)
    m.claim(at=0, limit=2, then="keep open")
    m.claim(at=1, limit=1, then="commit")
    m.finish_transaction(at=0, commit=False)
    m.advance_clock(0.5)
    behind = sorted(m.claimable(m.sessions[1]), key=lambda j: j.order)[:2]
    m.claim(at=1, limit=1, then="commit")  # resumed: passes both (checked < 1 s)
    assert all(m.status_seen_by(m.sessions[1], j) == PENDING for j in behind)
    m.advance_clock(0.5)
    m.claim(at=1, limit=2, then="commit")  # a second after the head scan: from the head again
    assert all(j.status == RUNNING for j in behind)


def test_a_job_whose_enqueue_commits_late_waits_less_than_a_second(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    """Session 0's job takes its seq before session 2's, but commits after session 2 claimed
    past that position."""
    m = machine(conn, make_conn)
    m.claim(at=2, limit=BACKLOG, then="commit")
    m.enqueue(at=0, count=1, priority=0, delay=0.0, then="keep open")
    (late,) = m.sessions[0].enqueued
    m.enqueue(at=1, count=6, priority=0, delay=0.0, then="commit")
    m.claim(at=2, limit=1, then="commit")
    m.finish_transaction(at=0, commit=True)
    m.advance_clock(0.75)
    m.claim(at=2, limit=1, then="commit")  # resumed: passes the late job
    assert m.jobs[late].status == PENDING
    m.advance_clock(0.25)
    m.claim(at=2, limit=1, then="commit")
    assert m.jobs[late].status == RUNNING
