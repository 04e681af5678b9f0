"""Checkpointed steps in SQL (job_step_save, job_steps): only the attempt that holds a job
records and reads its steps, a step is recorded once whatever races, later attempts read what
earlier ones recorded, and the steps go with their job when it is pruned."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from psycopg import sql

from pyjobq import (
    ClaimedJob,
    InvalidArgument,
    JobAlreadyFinished,
    JobCancelled,
    JobNotFound,
    JobQueue,
    LeaseLost,
)
from tests.sqlhelp import freeze, one, one_row, raises_sqlstate, run_threads, wait_for_lock_wait

Conn = psycopg.Connection[Any]

SAVE = "select saved, result, attempt from pyjobq.job_step_save(%s, %s, %s, %s, %s, %s)"


def claimed(conn: Conn, worker: str = "w1", job_type: int = 1) -> ClaimedJob:
    q = JobQueue(conn)
    q.enqueue(job_type, {})
    (job,) = q.claim(worker, job_types=[job_type], limit=1)
    return job


def save(q: JobQueue, job: ClaimedJob, name: str, result: Any, worker: str = "w1") -> Any:
    return q.step_save(job.job_id, worker, job.attempt, name, result, job.lease_token)


def recorded(q: JobQueue, job: ClaimedJob, worker: str = "w1") -> dict[str, tuple[Any, int]]:
    rows = q.steps(job.job_id, worker, job.attempt, job.lease_token)
    return {s.name: (s.result, s.attempt) for s in rows}


def reclaim(conn: Conn, job: ClaimedJob, worker: str) -> ClaimedJob:
    """Arrange what a lost lease leads to: the holder's lease runs out, the reaper retries the
    job, and ``worker`` claims its next attempt."""
    conn.execute("update pyjobq.job set lease_until = now() - interval '1 second'")
    conn.execute("select pyjobq.job_reap()")
    conn.execute("update pyjobq.job set run_after = now() where job_id = %s", (job.job_id,))
    (again,) = JobQueue(conn).claim(worker, limit=1)
    assert (again.job_id, again.attempt) == (job.job_id, job.attempt + 1)
    return again


def test_a_holder_records_steps_and_a_later_attempt_reads_them(conn: Conn) -> None:
    q = JobQueue(conn)
    job = claimed(conn)
    assert recorded(q, job) == {}
    first = save(q, job, "charge", {"charge": "ch_1"})
    assert (first.saved, first.result, first.attempt) == (True, {"charge": "ch_1"}, 1)
    # Recorded once: a second save of the same step keeps the first result.
    again = save(q, job, "charge", {"charge": "ch_2"})
    assert (again.saved, again.result, again.attempt) == (False, {"charge": "ch_1"}, 1)
    assert again.saved_at == first.saved_at
    save(q, job, "count", 7)  # any JSON value
    save(q, job, "nothing", None)
    q.fail(job.job_id, "w1", job.attempt, "boom", 0, False, job.lease_token)
    (second,) = q.claim("w2", limit=1)
    assert second.attempt == 2
    assert recorded(q, second, "w2") == {
        "charge": ({"charge": "ch_1"}, 1),
        "count": (7, 1),
        "nothing": (None, 1),
    }
    assert save(q, second, "ship", [1, 2], "w2").attempt == 2


def test_only_the_holder_records_or_reads_steps(conn: Conn) -> None:
    q = JobQueue(conn)
    job = claimed(conn)
    save(q, job, "a", 1)
    other = job.job_id, "w1", job.attempt
    for call in (
        lambda: q.step_save(*other, "b", 2, lease_token=claimed(conn, "w9").lease_token),
        lambda: q.step_save(job.job_id, "w2", job.attempt, "b", 2, job.lease_token),
        lambda: q.step_save(job.job_id, "w1", job.attempt + 1, "b", 2, job.lease_token),
        lambda: q.steps(job.job_id, "w2", job.attempt, job.lease_token),
    ):
        with pytest.raises(LeaseLost):
            call()
    later = reclaim(conn, job, "w2")
    with pytest.raises(LeaseLost):  # the reaped attempt is fenced out
        save(q, job, "b", 2)
    q.complete(later.job_id, "w2", later.attempt, None, later.lease_token)
    with pytest.raises(JobAlreadyFinished):
        save(q, later, "b", 2, "w2")
    cancelled = claimed(conn)
    q.cancel([cancelled.job_id])
    with pytest.raises(JobCancelled):
        save(q, cancelled, "b", 2)
    with pytest.raises(JobNotFound):
        q.step_save(UUID(int=1), "w1", 1, "b", 2, job.lease_token)
    assert one(conn, "select count(*) from pyjobq.job_step") == 1


def test_bad_arguments_are_refused_and_record_nothing(conn: Conn) -> None:
    job = claimed(conn)
    held = (job.job_id, "w1", job.attempt)
    big = {"text": "x" * (1024 * 1024 + 1)}
    for args, state in [
        ((*held, None, "{}", job.lease_token), "22004"),
        ((*held, " ", "{}", job.lease_token), "22023"),
        ((*held, "x" * 201, "{}", job.lease_token), "22023"),
        ((*held, "big", psycopg.types.json.Jsonb(big), job.lease_token), "22023"),
        ((None, "w1", job.attempt, "a", "{}", job.lease_token), "22004"),
        ((job.job_id, "w1", 0, "a", "{}", job.lease_token), "22023"),
        ((job.job_id, "", job.attempt, "a", "{}", job.lease_token), "22023"),
    ]:
        with raises_sqlstate(state):
            conn.execute(SAVE, args)
    with pytest.raises(InvalidArgument):
        JobQueue(conn).step_save(*held, "", 1, job.lease_token)
    assert one(conn, "select count(*) from pyjobq.job_step") == 0


def test_a_step_saved_with_its_writes_happens_once_when_two_attempts_race(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    """Attempt 1 records the step in the transaction of its writes; its lease is lost before
    it commits and attempt 2 runs the step too: attempt 2's record waits for attempt 1's
    transaction, then finds the step recorded, and attempt 2 rolls its writes back."""
    conn.execute("create table effects (attempt int not null)")
    job = claimed(conn)
    first, second = make_conn(), make_conn()
    for c in (first, second):
        c.autocommit = False
    first.execute("insert into effects values (1)")
    row = first.execute(SAVE, (job.job_id, "w1", 1, "ship", '{"by": 1}', job.lease_token))
    assert row.fetchone() == (True, {"by": 1}, 1)
    later = reclaim(conn, job, "w2")
    outcome: list[Any] = []

    def attempt_two() -> None:
        second.execute("insert into effects values (2)")
        args = (job.job_id, "w2", later.attempt, "ship", '{"by": 2}', later.lease_token)
        saved, result, attempt = one_row(second, SAVE, args)
        if saved:
            second.commit()
        else:
            second.rollback()  # the step was recorded by another run: undo this one's writes
        outcome.append((saved, result, attempt))

    racer = threading.Thread(target=attempt_two)
    racer.start()
    wait_for_lock_wait(conn, second, "attempt 2's record to wait for attempt 1's")
    first.commit()
    racer.join()
    assert outcome == [(False, {"by": 1}, 1)]
    assert conn.execute("select attempt from effects").fetchall() == [(1,)]


def test_a_step_is_recorded_once_whatever_the_concurrent_saves(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    """Eight sessions save the same steps of one held job at once, each in the transaction of
    its own write, committing when it recorded the step and rolling back when it did not:
    each step's write is there once, by the session whose result was recorded."""
    conn.execute("create table effects (step text not null, session int not null)")
    job = claimed(conn)
    sessions = [make_conn() for _ in range(8)]
    steps = [f"step-{n}" for n in range(40)]

    def run(session: int) -> None:
        c = sessions[session]
        for step in steps:
            with c.transaction():
                c.execute("insert into effects values (%s, %s)", (step, session))
                args = (job.job_id, "w1", 1, step, str(session), job.lease_token)
                saved, _, _ = one_row(c, SAVE, args)
                if not saved:
                    raise psycopg.Rollback()

    run_threads([partial(run, n) for n in range(8)])
    effects = conn.execute("select step, session from effects order by step").fetchall()
    stored = conn.execute("select name, result::int from pyjobq.job_step order by name").fetchall()
    assert effects == stored
    assert len(stored) == len(steps)


def test_steps_go_with_their_job_when_it_is_pruned(conn: Conn) -> None:
    q = JobQueue(conn)
    ended = claimed(conn)
    save(q, ended, "a", 1)
    q.complete(ended.job_id, "w1", ended.attempt, None, ended.lease_token)
    active = claimed(conn)
    save(q, active, "a", 1)
    # An hour on, both are older than the cutoff; only the one that ended goes.
    freeze(conn, datetime.now(UTC) + timedelta(hours=1))
    assert q.prune(older_than=timedelta(minutes=1)) == 1
    assert conn.execute("select job_id from pyjobq.job_step").fetchall() == [(active.job_id,)]


def test_a_worker_role_records_steps_of_its_types_only(
    conn: Conn, login_role: Callable[..., str]
) -> None:
    q = JobQueue(conn)
    q.type_register(11, "TEAM_B")
    name, keeper = f"team_b_{uuid4().hex[:8]}", f"team_c_{uuid4().hex[:8]}"
    teams = [sql.Identifier(name), sql.Identifier(keeper)]
    for team in teams:
        conn.execute(sql.SQL("create role {} nologin").format(team))
    try:
        # Team C keeps a grant on the type, so that it stays restricted when B's goes.
        assert q.type_grant(11, name, "work")
        assert q.type_grant(11, keeper, "work")
        q.enqueue(11, {})
        with psycopg.connect(login_role("pyjobq_worker", name), autocommit=True) as worker:
            w = JobQueue(worker)
            (job,) = w.claim("wb", job_types=[11], limit=1)
            assert w.step_save(job.job_id, "wb", job.attempt, "a", 1, job.lease_token).saved
            # The grant revoked under a running job: its steps are refused from then on.
            assert q.type_revoke(11, name, "work")
            with raises_sqlstate("42501"):
                worker.execute(SAVE, (job.job_id, "wb", job.attempt, "b", "2", job.lease_token))
            with raises_sqlstate("42501"):
                worker.execute(
                    "select * from pyjobq.job_steps(%s, 'wb', %s, %s)",
                    (job.job_id, job.attempt, job.lease_token),
                )
        for role in ("pyjobq_producer", "pyjobq_observer"):
            with (
                psycopg.connect(login_role(role), autocommit=True) as other,
                raises_sqlstate("42501"),
            ):
                other.execute(SAVE, (job.job_id, "wb", job.attempt, "c", "3", job.lease_token))
    finally:
        for team in teams:
            conn.execute(sql.SQL("drop owned by {}").format(team))
            conn.execute(sql.SQL("drop role {}").format(team))
    assert one(conn, "select count(*) from pyjobq.job_step") == 1
