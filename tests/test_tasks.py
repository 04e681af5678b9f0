"""Tasks: registration, argument checking, the policy reaching SQL, and a worker running them."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from pyjobq import JobQueue
from pyjobq.tasks import Tasks
from pyjobq.worker import Worker
from tests.sqlhelp import FROZEN, freeze, one, run_threads
from tests.workerhelp import running, statuses, wait_for

Conn = psycopg.Connection[Any]

tasks = Tasks()


@tasks.task(100, "SEND_EMAIL", max_attempts=5, backoff_base_seconds=30, timeout_seconds=60)
def send_email(to: str, subject: str = "hello") -> dict[str, str]:
    return {"sent_to": to, "subject": subject}


@tasks.task(101, "SHIP_ORDER", priority=10)
async def ship_order(order: int) -> None:
    await asyncio.sleep(0)


def test_install_registers_the_types_and_their_policies(conn: Conn) -> None:
    tasks.install(conn)
    tasks.install(conn)  # idempotent: where the application migrates, every time
    policies = {p.name: p for p in JobQueue(conn).type_policies()}
    email, ship = policies["SEND_EMAIL"], policies["SHIP_ORDER"]
    assert (email.job_type, email.max_attempts, email.backoff_base_seconds) == (100, 5, 30)
    assert email.timeout_seconds == 60
    assert (ship.job_type, ship.max_attempts, ship.timeout_seconds) == (101, 3, 3600)


def test_enqueue_checks_the_arguments_and_stores_them_by_name(conn: Conn) -> None:
    tasks.install(conn)
    with conn.transaction():
        job = send_email.enqueue(conn, "ada@example.com", subject="hi")
    row = conn.execute(
        "select job_type, payload, max_attempts from pyjobq.job_all where job_id = %s",
        (job.job_id,),
    ).fetchone()
    assert row == (100, {"to": "ada@example.com", "subject": "hi"}, 5)
    with pytest.raises(TypeError):
        send_email.enqueue(conn, "ada@example.com", "hi", "one too many")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        send_email.enqueue(conn, subject="no recipient")  # type: ignore[call-arg]
    assert one(conn, "select count(*) from pyjobq.job_all") == 1  # nothing for the refused calls
    assert send_email("bo@example.com") == {"sent_to": "bo@example.com", "subject": "hello"}


def test_enqueue_async_on_an_asyncio_connection(dsn: str, conn: Conn) -> None:
    tasks.install(conn)

    async def scenario() -> Any:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            return await ship_order.enqueue_async(aconn, order=7)

    job = asyncio.run(scenario())
    row = conn.execute(
        "select job_type, priority, payload from pyjobq.job_all where job_id = %s", (job.job_id,)
    ).fetchone()
    assert row == (101, 10, {"order": 7})


def test_a_worker_runs_the_tasks_with_their_arguments(dsn: str, conn: Conn) -> None:
    tasks.install(conn)
    send_email.enqueue(conn, "ada@example.com")
    ship_order.enqueue(conn, 7)
    with running(Worker(dsn, tasks.handlers())) as r:
        wait_for(lambda: statuses(conn) == {3: 2}, "both tasks DONE")
        r.stop()
    results = conn.execute(
        "select job_type, result from pyjobq.job_all order by job_type"
    ).fetchall()
    assert results == [(100, {"sent_to": "ada@example.com", "subject": "hello"}), (101, None)]


def test_a_type_is_declared_once() -> None:
    again = Tasks()
    again.task(7, "ONE")(send_email.function)
    with pytest.raises(ValueError, match="declared twice"):
        again.task(7, "OTHER")(send_email.function)
    with pytest.raises(ValueError, match="declared twice"):
        again.task(8, "ONE")(send_email.function)
    with pytest.raises(ValueError, match="declared twice"):
        again.task("ONE")(send_email.function)
    with pytest.raises(TypeError, match="needs its name"):
        again.task(9)(send_email.function)


named = Tasks()


@named.task("RESIZE_IMAGE", max_attempts=4)
def resize(path: str, width: int = 800) -> dict[str, Any]:
    return {"resized": path, "width": width}


@named.task("NOTIFY")
def notify(user: int) -> None:
    pass


def test_a_task_declared_by_name_gets_its_code_from_the_database(dsn: str, conn: Conn) -> None:
    """install allocates each name a code from 1000 on, the same one every time; the enqueue
    and the worker find the type by its name."""
    named.install(conn)
    named.install(conn)
    codes = dict(conn.execute("select name, job_type from pyjobq.job_type where job_type >= 1000"))
    assert codes == {"RESIZE_IMAGE": 1000, "NOTIFY": 1001}
    policy = {p.name: p for p in JobQueue(conn).type_policies()}["RESIZE_IMAGE"]
    assert policy.max_attempts == 4
    resize.enqueue(conn, "a.png")
    notify.options(delay=timedelta(hours=1)).enqueue(conn, 7)  # not due: the worker leaves it
    with running(Worker(dsn, named.handlers())) as r:
        wait_for(lambda: statuses(conn) == {3: 1, 1: 1}, "the resize DONE")
        r.stop()
    assert one(conn, "select result from pyjobq.job_all where job_type = 1000") == {
        "resized": "a.png",
        "width": 800,
    }


def test_options_give_one_enqueue_its_key_delay_priority_and_parents(conn: Conn) -> None:
    freeze(conn, FROZEN)
    tasks.install(conn)
    first = send_email.options(dedupe_key="ada", priority=3).enqueue(conn, "ada@example.com")
    again = send_email.options(dedupe_key="ada", on_duplicate="replace").enqueue(
        conn, "ada@example.com", subject="newer"
    )
    assert (again.job_id, again.replaced) == (first.job_id, True)
    later = ship_order.options(delay=timedelta(minutes=5), depends_on=[first.job_id]).enqueue(
        conn, 8
    )
    rows = conn.execute(
        "select job_id, priority, run_after, status, payload from pyjobq.job_all order by seq"
    ).fetchall()
    assert rows == [
        (first.job_id, 100, FROZEN, 1, {"to": "ada@example.com", "subject": "newer"}),
        (later.job_id, 10, FROZEN + timedelta(minutes=5), 6, {"order": 8}),
    ]  # replace gave the job this enqueue's priority, the task's default; ship_order keeps its 10
    assert send_email.enqueue_options == {}  # options made copies
    with pytest.raises(TypeError, match="run_after or delay"):
        send_email.options(delay=timedelta(1), run_after=FROZEN)


def test_deploys_allocating_at_once_agree_on_every_code(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    """Eight sessions allocate the same twelve names at once, each in its own order: every name
    gets one code, no two names share one, and every session was told the same codes."""
    names = [f"TYPE_{i}" for i in range(12)]
    barrier = threading.Barrier(8)
    told: list[dict[str, int]] = []

    def deploy(seed: int) -> Callable[[], None]:
        def run() -> None:
            q = JobQueue(make_conn())
            mine = random.Random(seed).sample(names, len(names))
            barrier.wait()
            told.append({n: q.type_allocate(n).job_type for n in mine})

        return run

    run_threads([deploy(seed) for seed in range(8)])
    codes = dict(conn.execute("select name, job_type from pyjobq.job_type where job_type >= 1000"))
    assert sorted(codes.values()) == list(range(1000, 1012))
    assert all(t == codes for t in told)
    created = conn.execute("select count(*) from pyjobq.job_type where name like 'TYPE_%'")
    assert created.fetchone() == (12,)


def test_a_worker_will_not_start_with_a_policy_that_never_reached_the_database(
    dsn: str, conn: Conn
) -> None:
    """Declared with max_attempts=5 and never installed, a task would run under the policy the
    database has: the worker names the difference and starts nothing."""
    tasks.install(conn)
    JobQueue(conn).type_set_policy(100, max_attempts=3, timeout_seconds=60)
    with pytest.raises(ValueError, match="job type 100 did not reach the database") as refused:
        Worker(dsn, tasks.handlers()).run()
    assert "max_attempts is 3 there, 5 declared" in str(refused.value)
    assert "backoff_base_seconds is 2.0 there, 30 declared" in str(refused.value)
    tasks.install(conn)
    with running(Worker(dsn, tasks.handlers())) as r:
        r.stop()
