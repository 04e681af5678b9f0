"""Waits and signals (job_event_wait, job_signal): a waiting job sleeps holding nothing until its
signal or its timeout, a signal sent before the wait is not lost, a signal is delivered once,
and only callers with the grant send one."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from psycopg import sql

from pyjobq import (
    ClaimedJob,
    InvalidArgument,
    JobAlreadyFinished,
    JobNotFound,
    JobQueue,
    LeaseLost,
)
from pyjobq.params import Payload
from pyjobq.worker import WaitTimedOut, Worker, job_context, sync_job_context
from tests.sqlhelp import freeze, one, one_row, raises_sqlstate, table_snapshot, wait_for_lock_wait
from tests.workerhelp import running, wait_for

Conn = psycopg.Connection[Any]

NOW = datetime(2030, 1, 1, 9, tzinfo=UTC)
WAIT = "select outcome, payload from pyjobq.job_event_wait(%s, %s, %s, %s, %s, %s)"


def held(q: JobQueue, worker: str = "w1") -> ClaimedJob:
    (job,) = q.claim(worker, limit=1)
    return job


def wait(
    q: JobQueue, job: ClaimedJob, name: str, timeout: float | None = 60, worker: str = "w1"
) -> Any:
    return q.event_wait(job.job_id, worker, job.attempt, name, timeout, job.lease_token)


def job_state(conn: Conn, job_id: UUID) -> tuple[Any, ...]:
    return one_row(
        conn,
        "select status, attempts, attempts_refunded, run_after, worker_id from pyjobq.job_all"
        " where job_id = %s",
        (job_id,),
    )


def test_a_waiting_job_sleeps_until_its_signal_and_reads_the_payload(conn: Conn) -> None:
    freeze(conn, NOW)
    q = JobQueue(conn)
    job_id = q.enqueue(1, {}, max_attempts=1).job_id
    job = held(q)
    asleep = wait(q, job, "approval", 3600)
    assert (asleep.outcome, asleep.wait_until) == ("waiting", NOW + timedelta(hours=1))
    # The attempt has ended: PENDING until the timeout, its try given back, no worker.
    assert job_state(conn, job_id) == (1, 1, 1, NOW + timedelta(hours=1), None)
    with pytest.raises(LeaseLost):
        q.complete(job.job_id, "w1", job.attempt, None, job.lease_token)
    freeze(conn, NOW + timedelta(minutes=5))
    assert q.claim("w1", limit=1) == []
    assert q.signal(job_id, "approval", {"by": "ana"})
    assert job_state(conn, job_id)[3] == NOW + timedelta(minutes=5)  # due now
    woken = held(q, "w2")
    assert (woken.attempt, woken.max_attempts) == (2, 1)
    again = wait(q, woken, "approval", worker="w2")
    assert (again.outcome, again.payload) == ("signalled", {"by": "ana"})
    q.complete(woken.job_id, "w2", woken.attempt, {"approved": True}, woken.lease_token)
    assert job_state(conn, job_id)[0] == 3


def test_a_signal_sent_before_the_wait_is_read_at_once(conn: Conn) -> None:
    q = JobQueue(conn)
    job_id = q.enqueue(1, {}).job_id
    assert q.signal(job_id, "go", [1, 2])  # still PENDING
    job = held(q)
    got = wait(q, job, "go")
    assert (got.outcome, got.payload) == ("signalled", [1, 2])
    assert job_state(conn, job_id)[0] == 2  # the attempt goes on


def test_a_wait_times_out_from_its_first_call(conn: Conn) -> None:
    freeze(conn, NOW)
    q = JobQueue(conn)
    job_id = q.enqueue(1, {}).job_id
    assert wait(q, held(q), "reply", 60).outcome == "waiting"
    freeze(conn, NOW + timedelta(seconds=60))
    job = held(q)
    # A later wait for the name keeps the first one's timeout.
    late = wait(q, job, "reply", 3600)
    assert (late.outcome, late.payload, late.wait_until) == (
        "timed_out",
        None,
        NOW + timedelta(seconds=60),
    )
    # A signal after the timeout is kept, and no longer wakes anything.
    assert q.signal(job_id, "reply", "late")
    assert job_state(conn, job_id)[0] == 2


def test_a_signal_is_delivered_once(conn: Conn) -> None:
    q = JobQueue(conn)
    job_id = q.enqueue(1, {}).job_id
    assert q.signal(job_id, "go", "first")
    assert not q.signal(job_id, "go", "second")
    assert wait(q, held(q), "go").payload == "first"


def test_signals_to_jobs_that_cannot_take_them_are_refused(conn: Conn) -> None:
    q = JobQueue(conn)
    with pytest.raises(JobNotFound):
        q.signal(UUID(int=7), "go")
    job_id = q.enqueue(1, {}).job_id
    job = held(q)
    q.complete(job.job_id, "w1", job.attempt, None, job.lease_token)
    with pytest.raises(JobAlreadyFinished):
        q.signal(job_id, "go")
    before = table_snapshot(conn)
    for args, sqlstate in [
        ((None, "go"), "22004"),
        ((job_id, None), "22004"),
        ((job_id, " "), "22023"),
        ((job_id, "x" * 201), "22023"),
    ]:
        with raises_sqlstate(sqlstate):
            conn.execute("select pyjobq.job_signal(%s, %s)", args)
    assert table_snapshot(conn) == before
    assert one(conn, "select count(*) from pyjobq.job_event") == 0


def test_bad_waits_are_refused_and_end_nothing(conn: Conn) -> None:
    q = JobQueue(conn)
    q.enqueue(1, {})
    job = held(q)
    args = (job.job_id, "w1", job.attempt)
    for name, timeout, sqlstate in [
        (None, 60, "22004"),
        ("", 60, "22023"),
        ("x" * 201, 60, "22023"),
        ("go", 0, "22023"),
        ("go", -1, "22023"),
        ("go", 31_536_001, "22023"),
        ("go", float("nan"), "22023"),
    ]:
        with raises_sqlstate(sqlstate):
            conn.execute(WAIT, (*args, name, timeout, job.lease_token))
    with pytest.raises(InvalidArgument):
        q.event_wait(*args, "go", 0, job.lease_token)
    with pytest.raises(LeaseLost):
        q.event_wait(job.job_id, "w2", job.attempt, "go", 60, job.lease_token)
    assert job_state(conn, job.job_id)[0] == 2
    assert one(conn, "select count(*) from pyjobq.job_event") == 0


def test_who_may_signal_and_wait(conn: Conn, login_role: Callable[..., str]) -> None:
    q = JobQueue(conn)
    q.type_register(11, "TEAM_B")
    name = f"team_b_{uuid4().hex[:8]}"
    team = sql.Identifier(name)
    conn.execute(sql.SQL("create role {} nologin").format(team))
    try:
        assert q.type_grant(11, name, "enqueue")
        job_id = q.enqueue(11, {}).job_id
        with (
            psycopg.connect(login_role("pyjobq_producer"), autocommit=True) as outsider,
            raises_sqlstate("42501"),  # may enqueue type 1, not type 11
        ):
            outsider.execute("select pyjobq.job_signal(%s, 'go')", (job_id,))
        for role in ("pyjobq_worker", "pyjobq_observer"):
            with (
                psycopg.connect(login_role(role), autocommit=True) as other,
                raises_sqlstate("42501"),
            ):
                other.execute("select pyjobq.job_signal(%s, 'go')", (job_id,))
        with psycopg.connect(login_role("pyjobq_producer", name), autocommit=True) as member:
            assert JobQueue(member).signal(job_id, "go", {"ok": 1})
        with (
            psycopg.connect(login_role("pyjobq_producer"), autocommit=True) as producer,
            raises_sqlstate("42501"),  # waiting is a holder's call
        ):
            producer.execute(WAIT, (job_id, "w1", 1, "go", 60, uuid4()))
    finally:
        conn.execute(sql.SQL("drop owned by {}").format(team))
        conn.execute(sql.SQL("drop role {}").format(team))


def test_a_signal_in_flight_holds_the_wait_until_it_commits(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    q = JobQueue(conn)
    job_id = q.enqueue(1, {}).job_id
    job = held(q)
    sender, waiter = make_conn(), make_conn()
    sender.autocommit = False
    assert one(sender, "select pyjobq.job_signal(%s, 'go', '\"now\"')", (job_id,))
    got: list[Any] = []
    thread = threading.Thread(
        target=lambda: got.append(
            one_row(waiter, WAIT, (job_id, "w1", job.attempt, "go", 60, job.lease_token))
        )
    )
    thread.start()
    wait_for_lock_wait(conn, waiter, "the wait to wait for the signal's commit")
    sender.commit()
    thread.join()
    assert got == [("signalled", "now")]


def test_a_wait_in_flight_is_woken_by_a_signal_that_follows_it(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    q = JobQueue(conn)
    job_id = q.enqueue(1, {}).job_id
    job = held(q)
    waiter, sender = make_conn(), make_conn()
    waiter.autocommit = False
    args = (job_id, "w1", job.attempt, "go", 3600, job.lease_token)
    assert one_row(waiter, WAIT, args)[0] == "waiting"
    sent: list[Any] = []
    thread = threading.Thread(
        target=lambda: sent.append(one(sender, "select pyjobq.job_signal(%s, 'go')", (job_id,)))
    )
    thread.start()
    wait_for_lock_wait(conn, sender, "the signal to wait for the wait's commit")
    waiter.commit()
    thread.join()
    assert sent == [True]
    # Woken: due at the signal's time, not at the timeout.
    timeout = one(conn, "select wait_until from pyjobq.job_event where job_id = %s", (job_id,))
    assert job_state(conn, job_id)[3] < timeout


def test_a_handler_waits_for_an_approval_sent_from_the_command_line(dsn: str, conn: Conn) -> None:
    prepared: list[int] = []

    async def handler(job: ClaimedJob) -> Payload:
        ctx = job_context()

        def prepare() -> str:
            prepared.append(job.attempt)
            return "draft-1"

        draft = await ctx.step("prepare", prepare)
        approval = await ctx.wait_for("approval", timeout=3600)
        return {"draft": draft, "approval": approval, "attempt": job.attempt}

    job_id = JobQueue(conn).enqueue(1, {}, max_attempts=1).job_id
    with running(Worker(dsn, {1: handler}, concurrency=1)) as r:
        wait_for(
            lambda: one(conn, "select count(*) from pyjobq.job_event where wait_until is not null"),
            "the job to wait",
        )
        assert job_state(conn, job_id)[0] == 1  # asleep, holding nothing
        env = {k: v for k, v in os.environ.items() if k not in ("PYJOBQ_DSN", "DATABASE_URL")}
        sent = subprocess.run(
            [sys.executable, "-m", "pyjobq", "signal", str(job_id), "approval",
             "--payload", '{"by": "ana"}', "--dsn", dsn],
            capture_output=True, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip
        assert (sent.returncode, sent.stdout) == (0, f"{job_id} approval sent\n"), sent.stderr
        wait_for(lambda: job_state(conn, job_id)[0] == 3, "the job to end")
        metrics = r.stop()
    result = one(conn, "select result from pyjobq.job_all where job_id = %s", (job_id,))
    assert result == {"draft": "draft-1", "approval": {"by": "ana"}, "attempt": 2}
    assert prepared == [1]
    assert (metrics.waiting, metrics.completed, metrics.failed) == (1, 1, 0)
    again = subprocess.run(
        [sys.executable, "-m", "pyjobq", "signal", str(job_id), "approval", "--dsn", dsn],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert again.returncode == 1  # the job has ended


def test_a_sync_handler_s_wait_times_out(dsn: str, conn: Conn) -> None:
    def handler(job: ClaimedJob) -> Payload:
        try:
            return {"reply": sync_job_context().wait_for("reply", timeout=0.2)}
        except WaitTimedOut:
            return {"reply": None, "attempt": job.attempt}

    job_id = JobQueue(conn).enqueue(1, {}).job_id
    with running(Worker(dsn, {1: handler}, concurrency=1, poll_interval=0.1)):
        wait_for(lambda: job_state(conn, job_id)[0] == 3, "the job to end")
    result = one(conn, "select result from pyjobq.job_all where job_id = %s", (job_id,))
    assert result == {"reply": None, "attempt": 2}


def test_durable_sleeps_are_passed_once_over_and_a_signal_ends_one_early(
    dsn: str, conn: Conn
) -> None:
    """``ctx.sleep`` and ``ctx.sleep_until`` end the attempt and put the job to sleep; the
    attempt that wakes passes them (the steps before them recorded) and goes on. A sleep is a
    wait that nothing signals: ``job_signal`` of its name wakes it early."""
    ran: list[str] = []

    async def handler(job: ClaimedJob) -> Payload:
        ctx = job_context()
        await ctx.step("a", ran.append, "a")
        await ctx.sleep("cool-off", 0.2)
        await ctx.step("b", ran.append, "b")
        await ctx.sleep_until("later", datetime.now(UTC) + timedelta(seconds=0.2))
        await ctx.step("c", ran.append, "c")
        return {"attempt": job.attempt}

    def napper(job: ClaimedJob) -> Payload:
        ctx = sync_job_context()
        with pytest.raises(InvalidArgument, match="aware"):
            ctx.sleep_until("naive", datetime(2030, 1, 1))
        ctx.sleep("nap", 3600)
        return {"attempt": job.attempt}

    q = JobQueue(conn)
    slept = q.enqueue(1, {}, max_attempts=1).job_id
    napping = q.enqueue(2, {}, max_attempts=1).job_id
    with running(Worker(dsn, {1: handler, 2: napper}, concurrency=2, poll_interval=0.1)):
        wait_for(
            lambda: one(
                conn, "select count(*) from pyjobq.job_event where job_id = %s", (napping,)
            ),
            "the nap to start",
        )
        assert q.signal(napping, "nap")
        wait_for(lambda: job_state(conn, napping)[0] == 3, "the nap to end early")
        wait_for(lambda: job_state(conn, slept)[0] == 3, "both sleeps to pass")
    results = dict(conn.execute("select job_id, result from pyjobq.job_all").fetchall())
    assert results == {slept: {"attempt": 3}, napping: {"attempt": 2}}
    assert ran == ["a", "b", "c"]


def test_people_watching_read_a_job_s_events_and_steps(
    conn: Conn, login_role: Callable[..., str]
) -> None:
    """``job_event_list`` tells each event's state (waiting, signalled, timed out, sent before a
    wait) and ``job_step_list`` the steps with who recorded them, for whoever may observe the
    job's type: a producer without the type's observe privilege, or a worker, is refused."""
    freeze(conn, NOW)
    q = JobQueue(conn)
    job_id = q.enqueue(1, {}).job_id
    job = held(q)
    q.step_save(job.job_id, "w1", job.attempt, "draft", {"v": 1}, job.lease_token)
    assert wait(q, job, "reply", 60).outcome == "waiting"
    freeze(conn, NOW + timedelta(seconds=60))
    job = held(q)
    assert wait(q, job, "approval", 3600).outcome == "waiting"
    assert q.signal(job_id, "approval", {"by": "ana"})
    assert q.signal(job_id, "later", 7)
    events = [(e.name, e.state, e.wait_until, e.payload) for e in q.event_list(job_id)]
    assert events == [
        ("approval", "signalled", NOW + timedelta(seconds=3660), {"by": "ana"}),
        ("later", "sent", None, 7),
        ("reply", "timed_out", NOW + timedelta(seconds=60), None),
    ]
    job = held(q)
    assert wait(q, job, "never", 10).outcome == "waiting"
    assert [e.state for e in q.event_list(job_id) if e.name == "never"] == ["waiting"]
    steps = [(s.name, s.attempt, s.worker_id, s.result) for s in q.step_list(job_id)]
    assert steps == [("draft", 1, "w1", {"v": 1})]
    assert q.event_list(uuid4()) == []
    with raises_sqlstate("22004"):
        conn.execute("select * from pyjobq.job_step_list(null)")
    name = f"watchers_{uuid4().hex[:8]}"
    conn.execute(sql.SQL("create role {} nologin").format(sql.Identifier(name)))
    try:
        assert q.type_grant(1, name, "observe")
        for read in ("job_event_list", "job_step_list"):
            statement = sql.SQL("select count(*) from pyjobq.{}(%s)").format(sql.Identifier(read))
            for role in ("pyjobq_producer", "pyjobq_worker"):
                with (
                    psycopg.connect(login_role(role), autocommit=True) as other,
                    raises_sqlstate("42501"),
                ):
                    other.execute(statement, (job_id,))
            with psycopg.connect(login_role("pyjobq_producer", name), autocommit=True) as member:
                counted = member.execute(statement, (job_id,)).fetchone()
                assert counted == ({"job_event_list": 4}.get(read, 1),)
    finally:
        conn.execute(sql.SQL("drop owned by {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("drop role {}").format(sql.Identifier(name)))
