"""pyjobq.contrib.sqlalchemy: an enqueue joins the SQLAlchemy transaction it is given."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest

pytest.importorskip("sqlalchemy", reason="the sqlalchemy extra is not installed")

from sqlalchemy import URL, Engine, String, create_engine, text
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    Session,
    mapped_column,
    scoped_session,
    sessionmaker,
)

from pyjobq import JobType
from pyjobq.contrib.sqlalchemy import async_job_queue, job_queue
from tests.sqlhelp import one

Connection = psycopg.Connection[tuple[Any, ...]]
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "python" / "sqlalchemy_outbox.py"


class Base(DeclarativeBase):
    pass


class Signup(Base):
    __tablename__ = "signup"

    email: Mapped[str] = mapped_column(String, primary_key=True)


class Declined(Exception):
    pass


def url(dsn: str, driver: str = "postgresql+psycopg") -> URL:
    params = {k: str(v) for k, v in psycopg.conninfo.conninfo_to_dict(dsn).items()}
    user, database = params.pop("user", None), params.pop("dbname", None)
    return URL.create(driver, username=user, database=database, query=params)


@pytest.fixture
def engine(dsn: str) -> Any:
    engine = create_engine(url(dsn))
    Base.metadata.create_all(engine)
    yield engine
    engine.dispose()


def jobs_for(conn: Connection, email: str) -> int:
    query = "select count(*) from pyjobq.job_all where payload->>'email' = %s"
    return int(one(conn, query, (email,)))


def signups(conn: Connection, email: str) -> int:
    return int(one(conn, "select count(*) from signup where email = %s", (email,)))


def sign_up(session: Session, email: str) -> UUID:
    session.add(Signup(email=email))
    session.flush()
    return job_queue(session).enqueue(JobType.OUTBOX, {"email": email}).job_id


def test_a_committed_session_leaves_its_row_and_exactly_one_job(
    engine: Engine, conn: Connection
) -> None:
    with Session(engine) as session, session.begin():
        job_id = sign_up(session, "ada@example.com")
        # Not visible outside the transaction before it commits.
        assert jobs_for(conn, "ada@example.com") == 0
    assert signups(conn, "ada@example.com") == 1
    assert jobs_for(conn, "ada@example.com") == 1
    assert one(conn, "select status from pyjobq.job_all where job_id = %s", (job_id,)) == 1


def test_a_rolled_back_session_leaves_neither_row_nor_job(engine: Engine, conn: Connection) -> None:
    def declined(email: str) -> None:
        with Session(engine) as session, session.begin():
            sign_up(session, email)
            raise Declined

    with pytest.raises(Declined):
        declined("bob@example.com")
    with Session(engine) as session:
        sign_up(session, "eve@example.com")
        session.rollback()
    for email in ("bob@example.com", "eve@example.com"):
        assert signups(conn, email) == 0
        assert jobs_for(conn, email) == 0


def test_a_scoped_session_carries_the_job_like_a_session(engine: Engine, conn: Connection) -> None:
    # Flask-SQLAlchemy's db.session is one of these.
    scoped = scoped_session(sessionmaker(engine))
    sign_up(scoped(), "flo@example.com")
    scoped.commit()
    scoped.add(Signup(email="gus@example.com"))
    job_queue(scoped).enqueue(JobType.OUTBOX, {"email": "gus@example.com"})
    scoped.rollback()
    scoped.remove()
    assert (signups(conn, "flo@example.com"), jobs_for(conn, "flo@example.com")) == (1, 1)
    assert (signups(conn, "gus@example.com"), jobs_for(conn, "gus@example.com")) == (0, 0)


def test_a_core_connection_transaction_carries_the_job(engine: Engine, conn: Connection) -> None:
    with engine.begin() as connection:
        connection.execute(text("insert into signup values ('cy@example.com')"))
        job_queue(connection).enqueue(JobType.OUTBOX, {"email": "cy@example.com"})
    with engine.connect() as connection:
        job_queue(connection).enqueue(JobType.OUTBOX, {"email": "dee@example.com"})
        connection.rollback()
    assert jobs_for(conn, "cy@example.com") == 1
    assert jobs_for(conn, "dee@example.com") == 0


def test_the_asyncio_session_commits_or_rolls_back_the_job(dsn: str, conn: Connection) -> None:
    pytest.importorskip("greenlet", reason="SQLAlchemy's asyncio support needs greenlet")
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    engine = create_async_engine(url(dsn))

    async def declined() -> None:
        async with AsyncSession(engine) as session, session.begin():
            session.add(Signup(email="ben@example.com"))
            queue = await async_job_queue(session)
            await queue.enqueue(JobType.OUTBOX, {"email": "ben@example.com"})
            raise Declined

    async def scenario() -> None:
        async with engine.begin() as connection:
            await connection.run_sync(Base.metadata.create_all)
        async with AsyncSession(engine) as session, session.begin():
            session.add(Signup(email="ann@example.com"))
            queue = await async_job_queue(session)
            await queue.enqueue(JobType.OUTBOX, {"email": "ann@example.com"})
        with pytest.raises(Declined):
            await declined()
        await engine.dispose()

    asyncio.run(scenario())
    assert (signups(conn, "ann@example.com"), jobs_for(conn, "ann@example.com")) == (1, 1)
    assert (signups(conn, "ben@example.com"), jobs_for(conn, "ben@example.com")) == (0, 0)


def test_another_driver_is_refused_by_name(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'app.db'}")
    with engine.connect() as connection, pytest.raises(TypeError, match=r"sqlite\+pysqlite"):
        job_queue(connection)


def test_the_worked_example_keeps_the_committed_order_and_its_job_only(
    dsn: str, conn: Connection
) -> None:
    run = subprocess.run(
        [sys.executable, str(EXAMPLE), dsn], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert "second order failed: payment declined" in run.stdout
    assert one(conn, "select array_agg(email) from shop_order") == ["ada@example.com"]
    keys = one(conn, "select array_agg(dedupe_key) from pyjobq.job_all where job_type = 2")
    assert keys == ["order-confirmation:1"]


def test_a_session_enqueues_by_the_job_types_name(engine: Engine, conn: Connection) -> None:
    with Session(engine) as session, session.begin():
        session.add(Signup(email="bo@example.com"))
        session.flush()
        job_id = job_queue(session).enqueue("OUTBOX", {"email": "bo@example.com"}).job_id
    assert one(conn, "select job_type from pyjobq.job_all where job_id = %s", (job_id,)) == 2
