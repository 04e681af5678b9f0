"""pyjobq.contrib.django: the enqueue joins ``transaction.atomic()``; ``manage.py pyjobq``
migrates and runs a worker on the database of the settings."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest

pytest.importorskip("django", reason="the django extra is not installed")

import django
from django.conf import settings
from django.db import connection, connections, transaction

from pyjobq import SCHEMA_VERSION, JobQueue, JobStatus, JobType
from pyjobq.contrib.django import conninfo, job_queue
from tests.djangoapp.settings import databases
from tests.sqlhelp import one
from tests.workerhelp import wait_for

Connection = psycopg.Connection[tuple[Any, ...]]
ROOT = Path(__file__).resolve().parent.parent


class Declined(Exception):
    pass


@pytest.fixture
def django_db(dsn: str, conn: Connection) -> Iterator[Connection]:
    """Django configured in this process on the test's database (every test's database has
    the same name, so the settings made for the first one serve them all)."""
    if not settings.configured:
        settings.configure(
            SECRET_KEY="tests-only",
            USE_TZ=True,
            INSTALLED_APPS=["pyjobq.contrib.django"],
            DATABASES=databases(dsn),
        )
        django.setup()
    assert settings.DATABASES["default"]["NAME"] == conn.info.dbname
    conn.execute("create table signup (email text primary key)")
    yield conn
    connections.close_all()


def jobs_for(conn: Connection, email: str) -> int:
    query = "select count(*) from pyjobq.job_all where payload->>'email' = %s"
    return int(one(conn, query, (email,)))


def sign_up(email: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("insert into signup values (%s)", [email])
    job_queue().enqueue(JobType.OUTBOX, {"email": email})


def test_a_committed_atomic_block_leaves_its_row_and_exactly_one_job(
    django_db: Connection,
) -> None:
    with transaction.atomic():
        sign_up("ada@example.com")
        assert jobs_for(django_db, "ada@example.com") == 0
    assert one(django_db, "select count(*) from signup") == 1
    assert jobs_for(django_db, "ada@example.com") == 1


def test_a_rolled_back_atomic_block_leaves_neither_row_nor_job(django_db: Connection) -> None:
    def declined(email: str) -> None:
        with transaction.atomic():  # a transaction, or a savepoint inside one
            sign_up(email)
            raise Declined

    with pytest.raises(Declined):
        declined("bob@example.com")
    with transaction.atomic():
        job_queue().enqueue(JobType.OUTBOX, {"email": "cy@example.com"})
        with pytest.raises(Declined):
            declined("dee@example.com")
    assert one(django_db, "select count(*) from signup") == 0
    assert jobs_for(django_db, "bob@example.com") == 0
    assert jobs_for(django_db, "cy@example.com") == 1
    assert jobs_for(django_db, "dee@example.com") == 0


def test_rows_read_through_django_connection_keep_their_types(django_db: Connection) -> None:
    # Django loads jsonb as text and binds parameters client-side on its connection: the
    # binding's own rows must not change with it.
    with transaction.atomic():
        job_id = job_queue().enqueue(JobType.OUTBOX, {"email": "eve@example.com"}).job_id
    through_django, directly = job_queue().get(job_id), JobQueue(django_db).get(job_id)
    assert through_django is not None
    assert through_django == directly
    assert through_django.payload == {"email": "eve@example.com"}
    # wait() reads its row in text format, where Django's jsonb loader would apply.
    JobQueue(django_db).cancel([job_id])
    waited = job_queue().wait(job_id, timeout=30)
    assert waited is not None
    assert waited.payload == {"email": "eve@example.com"}


def test_conninfo_carries_the_settings_options(django_db: Connection) -> None:
    with psycopg.connect(conninfo(), autocommit=True) as other:
        assert other.info.dbname == django_db.info.dbname


def manage(dsn: str, *args: str, **popen: Any) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYJOBQ_TEST_DSN": dsn,
        "DJANGO_SETTINGS_MODULE": "tests.djangoapp.settings",
    }
    command = [sys.executable, "-m", "django", *args]
    return subprocess.Popen(command, cwd=ROOT, env=env, text=True, **popen)


def finished(run: subprocess.Popen[str]) -> str:
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, out + err
    return out + err


@pytest.fixture
def empty_database(pg_server: Any, conn: Connection) -> Iterator[str]:
    """The conninfo of a database without the pyjobq schema."""
    conn.execute("create database django_empty")
    yield pg_server.dsn("django_empty")
    conn.execute("drop database django_empty with (force)")


def test_django_migrate_installs_the_schema_through_the_apps_migration(
    empty_database: str,
) -> None:
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    assert "Applying pyjobq.0001_pyjobq_schema... OK" in finished(
        manage(empty_database, "migrate", **pipes)
    )
    with psycopg.connect(empty_database) as other:
        assert one(other, "select pyjobq.schema_version()") == SCHEMA_VERSION
    # The same database again: nothing to do, for Django or for pyjobq.
    assert "No migrations to apply" in finished(manage(empty_database, "migrate", **pipes))
    said = finished(manage(empty_database, "pyjobq", "migrate", **pipes))
    assert "up to date, nothing applied" in said


def test_djangos_test_runner_gives_its_test_database_the_schema(
    empty_database: str, conn: Connection
) -> None:
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    run = manage(empty_database, "test", "tests.djangoapp.outbox_case", "--noinput", **pipes)
    assert "Ran 2 tests" in finished(run)
    # The runner dropped its test database when it was done.
    assert one(conn, "select count(*) from pg_database where datname = 'test_django_empty'") == 0


def test_manage_py_pyjobq_migrate_installs_the_schema(empty_database: str) -> None:
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    said = finished(manage(empty_database, "pyjobq", "migrate", **pipes))
    assert f"pyjobq schema version {SCHEMA_VERSION}" in said
    with psycopg.connect(empty_database) as other:
        assert one(other, "select pyjobq.schema_version()") == SCHEMA_VERSION


def test_manage_py_worker_runs_django_handlers_and_stops_on_sigterm(
    dsn: str, django_db: Connection, tmp_path: Path
) -> None:
    django_db.execute("create table delivered (email text primary key)")
    with transaction.atomic():
        job_queue().enqueue(JobType.OUTBOX, {"email": "fay@example.com"})
    log = (tmp_path / "worker.log").open("w")
    command = ["pyjobq", "worker", "tests.djangoapp.handlers:HANDLERS"]
    worker = manage(dsn, *command, stdout=log, stderr=log)
    try:
        wait_for(
            lambda: one(django_db, "select count(*) from pyjobq.job_all where status = 3") == 1,
            "the Django worker to finish the job",
        )
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 0, (tmp_path / "worker.log").read_text()
    finally:
        worker.kill()
    assert one(django_db, "select array_agg(email) from delivered") == ["fay@example.com"]


def test_a_broken_connection_costs_a_django_handler_one_try_not_every_job_after(
    dsn: str, django_db: Connection, tmp_path: Path
) -> None:
    django_db.execute("create table delivered (email text primary key)")
    queue = JobQueue(django_db)
    first = queue.enqueue(JobType.OUTBOX, {"email": "gil@example.com"}).job_id
    log = (tmp_path / "worker.log").open("w")
    command = ["pyjobq", "worker", "tests.djangoapp.handlers:HANDLERS", "--concurrency", "1"]
    worker = manage(dsn, *command, stdout=log, stderr=log)
    try:
        wait_for(lambda: status(django_db, first) == JobStatus.DONE, "the first job")
        # Every other session ends, the handler thread's Django connection among them, as
        # when the database restarts.
        django_db.execute(
            "select pg_terminate_backend(pid) from pg_stat_activity"
            " where datname = current_database() and pid <> pg_backend_pid()"
        )
        second = queue.enqueue(JobType.OUTBOX, {"email": "hal@example.com"}).job_id
        third = queue.enqueue(JobType.OUTBOX, {"email": "ida@example.com"}).job_id
        wait_for(
            lambda: {status(django_db, second), status(django_db, third)} <= ENDED,
            "the jobs after the break to end",
        )
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 0, (tmp_path / "worker.log").read_text()
    finally:
        worker.kill()
    assert (status(django_db, second), status(django_db, third)) == (JobStatus.DONE,) * 2
    delivered = one(django_db, "select array_agg(email order by email) from delivered")
    assert delivered == ["gil@example.com", "hal@example.com", "ida@example.com"]


ENDED = {JobStatus.DONE, JobStatus.DEAD}


def status(conn: Connection, job_id: UUID) -> JobStatus:
    return JobStatus(one(conn, "select status from pyjobq.job_all where job_id = %s", (job_id,)))
