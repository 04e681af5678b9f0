"""Tasks: registration, argument checking, the policy reaching SQL, and a worker running them."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from pyjobq import JobQueue
from pyjobq.tasks import Tasks
from pyjobq.worker import Worker
from tests.sqlhelp import one
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
