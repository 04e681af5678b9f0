"""Enqueue inside a SQLAlchemy 2 transaction (``postgresql+psycopg`` dialect, sync or asyncio).

``job_queue(session)`` returns a :class:`~pyjobq.queue.JobQueue` on the psycopg connection
that holds the session's transaction, so the ``pyjobq.job_enqueue`` it runs commits or rolls
back with the session::

    with Session(engine) as session, session.begin():
        order = Order(total=42)
        session.add(order)
        session.flush()  # the order's id, for the job's payload
        job_queue(session).enqueue(JobType.OUTBOX, {"order_id": order.id})

The statement goes to the driver connection directly, past SQLAlchemy's unit of work: flush
the objects a payload refers to first, as above.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg
from sqlalchemy import Connection, Dialect
from sqlalchemy.orm import Session, scoped_session

from pyjobq.aio import AsyncJobQueue
from pyjobq.queue import JobQueue

if TYPE_CHECKING:
    # SQLAlchemy's asyncio support needs greenlet (the sqlalchemy[asyncio] extra), which a
    # synchronous application may not have: imported only where it is used.
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session


def job_queue(bind: Session | scoped_session[Any] | Connection) -> JobQueue:
    """A :class:`~pyjobq.queue.JobQueue` inside the transaction of ``bind``.

    A :class:`~sqlalchemy.orm.Session` (or a ``scoped_session``, such as Flask-SQLAlchemy's
    ``db.session``) begins its transaction if it has none yet, as any statement it runs
    would; the calls commit nothing, the session's commit does.
    """
    connection = bind if isinstance(bind, Connection) else bind.connection()
    _check_dialect(connection.dialect)
    driver = connection.connection.driver_connection
    if not isinstance(driver, psycopg.Connection):
        raise TypeError(_WRONG_DRIVER.format(driver=type(driver).__name__))
    return JobQueue(driver)


async def async_job_queue(
    bind: AsyncSession | async_scoped_session[Any] | AsyncConnection,
) -> AsyncJobQueue:
    """An :class:`~pyjobq.aio.AsyncJobQueue` inside the transaction of ``bind``, the
    asyncio twin of :func:`job_queue` (``create_async_engine("postgresql+psycopg://…")``)."""
    from sqlalchemy.ext.asyncio import AsyncConnection

    connection = bind if isinstance(bind, AsyncConnection) else await bind.connection()
    _check_dialect(connection.dialect)
    raw = await connection.get_raw_connection()
    driver = raw.driver_connection
    if not isinstance(driver, psycopg.AsyncConnection):
        raise TypeError(_WRONG_DRIVER.format(driver=type(driver).__name__))
    return AsyncJobQueue(driver)


_WRONG_DRIVER = (
    "pyjobq needs the engine's psycopg 3 connection, got {driver}: create the engine with"
    " a postgresql+psycopg:// URL"
)


def _check_dialect(dialect: Dialect) -> None:
    if dialect.name != "postgresql" or dialect.driver != "psycopg":
        raise TypeError(_WRONG_DRIVER.format(driver=f"{dialect.name}+{dialect.driver}"))
