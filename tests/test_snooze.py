"""Snoozes (job_finish_many's outcome snoozed): PENDING again after the delay, the try given
back and counted apart, nothing held while asleep, the steps kept, and each type's bound."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from pyjobq import ClaimedJob, InvalidArgument, JobQueue, JobStatus
from pyjobq.params import Payload
from pyjobq.worker import Snooze, Worker, job_context
from tests.sqlhelp import freeze, one, one_row, raises_sqlstate, table_snapshot
from tests.workerhelp import running, wait_for

Conn = psycopg.Connection[Any]

NOW = datetime(2030, 1, 1, 9, tzinfo=UTC)


def snooze(q: JobQueue, job: ClaimedJob, seconds: float | None, worker: str = "w1") -> Any:
    (row,) = q.finish_many(
        worker, [job.job_id], [job.attempt], ["snoozed"], None, None, [seconds], [job.lease_token]
    )
    return row


def state(conn: Conn, job_id: Any) -> tuple[Any, ...]:
    return one_row(
        conn,
        "select status, attempts, attempts_refunded, snoozes, run_after, worker_id, lease_until,"
        " last_error from pyjobq.job where job_id = %s",
        (job_id,),
    )


def test_a_snooze_sleeps_its_delay_holding_nothing_and_spends_no_try(conn: Conn) -> None:
    freeze(conn, NOW)
    q = JobQueue(conn)
    job_id = q.enqueue(1, {}, max_attempts=1).job_id
    (job,) = q.claim("w1", limit=1)
    q.step_save(job.job_id, "w1", job.attempt, "fetched", {"rows": 3}, job.lease_token)
    row = snooze(q, job, 600)
    assert (row.status, row.run_after) == (JobStatus.PENDING, NOW + timedelta(minutes=10))
    assert state(conn, job_id) == (1, 1, 1, 1, NOW + timedelta(minutes=10), None, None, None)
    assert q.claim("w1", limit=1) == []  # asleep
    freeze(conn, NOW + timedelta(minutes=10))
    (woken,) = q.claim("w2", limit=1)
    # The next attempt, its one try intact, its steps where they were.
    assert (woken.attempt, woken.max_attempts) == (2, 1)
    steps = q.steps(woken.job_id, "w2", woken.attempt, woken.lease_token)
    assert [(s.name, s.result, s.attempt) for s in steps] == [("fetched", {"rows": 3}, 1)]
    assert snooze(q, woken, None, "w2").status is JobStatus.PENDING  # no delay: due now
    (again,) = q.claim("w3", limit=1)
    q.fail(again.job_id, "w3", again.attempt, "a real failure", None, False, again.lease_token)
    # One real failure spends the one try: DEAD, after two snoozes.
    assert one_row(
        conn, "select status, last_error from pyjobq.job_all where job_id = %s", (job_id,)
    ) == (4, "a real failure")
    # The finish counts see the failure only, not the snoozes.
    assert [(t.completed, t.retried, t.dead) for t in q.throughput()] == [(0, 0, 1)]


def test_a_snooze_keeps_the_last_error(conn: Conn) -> None:
    q = JobQueue(conn)
    job_id = q.enqueue(1, {}).job_id
    (job,) = q.claim("w1", limit=1)
    q.fail(job.job_id, "w1", job.attempt, "upstream down", 0, False, job.lease_token)
    (job,) = q.claim("w1", limit=1)
    snooze(q, job, 0)
    assert state(conn, job_id)[1:4] == (2, 1, 1)
    assert state(conn, job_id)[-1] == "upstream down"


def test_the_snooze_past_the_types_bound_makes_the_job_dead(conn: Conn) -> None:
    q = JobQueue(conn)
    q.type_set_snoozes(1, 2)
    assert [p.max_snoozes for p in q.type_policies()] == [2, 1000]
    job_id = q.enqueue(1, {}).job_id
    for _ in range(2):
        (job,) = q.claim("w1", limit=1)
        assert snooze(q, job, 0).status is JobStatus.PENDING
    (job,) = q.claim("w1", limit=1)
    assert snooze(q, job, 0).status is JobStatus.DEAD
    status, error = one_row(
        conn, "select status, last_error from pyjobq.job_all where job_id = %s", (job_id,)
    )
    assert status == 4
    assert error.startswith("snoozed 2 times, the most its type allows")
    # A redrive gives it a fresh count.
    assert q.redrive([job_id]) == [job_id]
    (job,) = q.claim("w1", limit=1)
    assert snooze(q, job, 0).status is JobStatus.PENDING


def test_snoozes_and_other_outcomes_end_together_in_one_call(conn: Conn) -> None:
    q = JobQueue(conn)
    q.type_set_snoozes(1, 0)  # type 1 may not snooze at all
    ids = [q.enqueue(t, {}).job_id for t in (1, 2, 2)]
    held = sorted(q.claim("w1", limit=3), key=lambda j: ids.index(j.job_id))
    rows = q.finish_many(
        "w1",
        [j.job_id for j in held],
        [j.attempt for j in held],
        ["snoozed", "snoozed", "done"],
        None,
        None,
        [5, 5, None],
        [j.lease_token for j in held],
    )
    assert [r.status for r in rows] == [JobStatus.DEAD, JobStatus.PENDING, JobStatus.DONE]


def test_bad_snoozes_and_bounds_are_refused_and_change_nothing(
    conn: Conn, login_role: Callable[..., str]
) -> None:
    q = JobQueue(conn)
    q.enqueue(1, {})
    (job,) = q.claim("w1", limit=1)
    before = (table_snapshot(conn), q.type_policies())
    for delay in (-1, 31_536_001):
        with pytest.raises(InvalidArgument, match=r"p_retry_delays_seconds\[1\]"):
            snooze(q, job, delay)
    for call, sqlstate in [
        ("select pyjobq.job_type_set_snoozes(1, -1)", "22023"),
        ("select pyjobq.job_type_set_snoozes(1, 10001)", "22023"),
        ("select pyjobq.job_type_set_snoozes(1, null)", "22004"),
        ("select pyjobq.job_type_set_snoozes(999, 5)", "22023"),
    ]:
        with raises_sqlstate(sqlstate):
            conn.execute(call)
    for role in ("pyjobq_producer", "pyjobq_worker", "pyjobq_observer"):
        with (
            psycopg.connect(login_role(role), autocommit=True) as other,
            raises_sqlstate("42501"),  # how long a type may sleep is an admin's choice
        ):
            other.execute("select pyjobq.job_type_set_snoozes(1, 5)")
    assert (table_snapshot(conn), q.type_policies()) == before
    with pytest.raises(ValueError, match="a snooze lasts 0 to"):
        Snooze(-1)


def test_a_worker_s_handler_snoozes_and_resumes_from_its_steps(dsn: str, conn: Conn) -> None:
    runs: list[int] = []

    async def handler(job: ClaimedJob) -> Payload:
        ctx = job_context()

        def run_first() -> int:
            runs.append(job.attempt)
            return job.attempt

        first = await ctx.step("first", run_first)
        if job.attempt < 3:
            ctx.snooze(0)
        return {"first_ran_in": first, "ended_in": job.attempt}

    job_id = JobQueue(conn).enqueue(1, {}, max_attempts=1).job_id
    with running(Worker(dsn, {1: handler}, concurrency=1)) as r:
        wait_for(
            lambda: (
                one(conn, "select status from pyjobq.job_all where job_id = %s", (job_id,)) == 3
            ),
            "the job to end",
        )
        metrics = r.stop()
    result = one(conn, "select result from pyjobq.job_all where job_id = %s", (job_id,))
    assert result == {"first_ran_in": 1, "ended_in": 3}
    assert runs == [1]
    assert (metrics.snoozed, metrics.completed, metrics.failed) == (2, 1, 0)


def test_a_long_snooze_leaves_the_job_pending_with_no_worker(dsn: str, conn: Conn) -> None:
    async def handler(job: ClaimedJob) -> Payload:
        raise Snooze(3600)

    job_id = JobQueue(conn).enqueue(1, {}).job_id
    with running(Worker(dsn, {1: handler}, concurrency=1)) as r:
        wait_for(
            lambda: one(conn, "select snoozes from pyjobq.job where job_id = %s", (job_id,)) == 1,
            "the snooze",
        )
        metrics = r.stop()
    status, worker, lease, asleep_for = one_row(
        conn,
        "select status, worker_id, lease_until, run_after - updated_at from pyjobq.job"
        " where job_id = %s",
        (job_id,),
    )
    assert (status, worker, lease, asleep_for) == (1, None, None, timedelta(hours=1))
    assert (metrics.snoozed, metrics.failed) == (1, 0)
