"""``AsyncCalls``: how the asyncio binding runs one SQL function call, on a connection or a
pool, and job types given by name.

The base of :class:`pyjobq.aio.AsyncJobQueue`; ``scripts/async_to_sync.py`` writes the
synchronous ``pyjobq/queue_calls.py`` from it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal, LiteralString, TypeVar

import psycopg
from psycopg import sql
from psycopg.pq import Format
from psycopg.rows import AsyncRowFactory, class_row, scalar_row
from psycopg.types.json import JsonbBinaryLoader, JsonbLoader
from psycopg_pool import AsyncConnectionPool

from pyjobq import statements
from pyjobq.errors import translated

T = TypeVar("T")

_JSONB_OID = psycopg.adapters.types["jsonb"].oid


def own_cursor(
    conn: psycopg.AsyncConnection[Any], rows: AsyncRowFactory[T]
) -> psycopg.AsyncCursor[T]:
    """A cursor of the binding's own on ``conn``: server-side parameters and psycopg's JSON
    loaders, whatever cursor class and loaders the application gave the connection (Django's
    binds parameters in the client and loads jsonb as text)."""
    cur = psycopg.AsyncCursor(conn, row_factory=rows)
    # Registered only on a connection whose loaders differ: registering copies the cursor's
    # loader table, and this runs for every claim and completion of a worker.
    loaders = cur.adapters
    if (
        loaders.get_loader(_JSONB_OID, Format.TEXT) is not JsonbLoader
        or loaders.get_loader(_JSONB_OID, Format.BINARY) is not JsonbBinaryLoader
    ):
        loaders.register_loader("jsonb", JsonbLoader)
        loaders.register_loader("jsonb", JsonbBinaryLoader)
    return cur


async def heard(conn: psycopg.AsyncConnection[Any], payload: str, deadline: float) -> bool:
    """Whether a notification carrying ``payload`` reaches ``conn`` (listening) before
    ``deadline``, a ``time.monotonic()`` instant."""
    while (left := deadline - time.monotonic()) > 0:
        async for note in conn.notifies(timeout=left):
            if note.payload == payload:
                return True
    return False


class AsyncCalls:
    """One statement per call, on the connection or pool given; see AsyncJobQueue."""

    def __init__(self, source: psycopg.AsyncConnection[Any] | AsyncConnectionPool) -> None:
        self._source = source
        # Job type codes by name, as job_type_code answered: a registered type keeps its code.
        self._codes: dict[str, int] = {}

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        if isinstance(self._source, AsyncConnectionPool):
            async with self._source.connection() as conn:
                yield conn
        else:
            yield self._source

    @asynccontextmanager
    async def _listening(
        self, channel: Literal["pyjobq_done", "pyjobq_batch"], caller: str
    ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A connection that LISTENs on ``channel`` for the block, in autocommit: inside a
        transaction a LISTEN hears nothing until the commit, so an idle one only (``caller``
        names the method in the error); the connection's own mode is restored after."""
        async with self._connection() as conn:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                raise ValueError(f"{caller}() needs a connection outside a transaction")
            autocommit = conn.autocommit
            await conn.set_autocommit(True)
            try:
                await conn.execute(sql.SQL("listen {}").format(sql.Identifier(channel)))
                yield conn
            finally:
                await conn.execute(sql.SQL("unlisten {}").format(sql.Identifier(channel)))
                await conn.set_autocommit(autocommit)

    async def _rows(self, row: type[T], query: LiteralString, params: Sequence[Any]) -> list[T]:
        # Binary results: a uuid is 16 bytes to copy, not 36 characters to parse, and
        # enqueue_many returns one per job.
        async with (
            translated(),
            self._connection() as conn,
            own_cursor(conn, class_row(row)) as cur,
        ):
            await cur.execute(query, params, binary=True)
            return await cur.fetchall()

    async def _one(self, row: type[T], query: LiteralString, params: Sequence[Any]) -> T:
        rows = await self._rows(row, query, params)
        return rows[0]

    async def _column(self, query: LiteralString, params: Sequence[Any]) -> list[Any]:
        async with (
            translated(),
            self._connection() as conn,
            own_cursor(conn, scalar_row) as cur,
        ):
            await cur.execute(query, params)
            return await cur.fetchall()

    async def _scalar(self, query: LiteralString, params: Sequence[Any]) -> Any:
        values = await self._column(query, params)
        return values[0]

    async def type_code(self, name: str) -> int:
        """``job_type_code``: the code of the job type registered as ``name`` (or the one name
        equal to it ignoring case); :class:`~pyjobq.errors.InvalidArgument` when none is."""
        code: int = await self._scalar(statements.TYPE_CODE, (name,))
        return code

    async def _code(self, job_type: int | str | None) -> int | None:
        """A job type given by code or by name, as its code. A name is asked of the database once
        per queue object: a registered type keeps its code."""
        if not isinstance(job_type, str):
            return job_type
        code = self._codes.get(job_type)
        if code is None:
            code = self._codes[job_type] = await self.type_code(job_type)
        return code

    async def _type_codes(self, job_types: Sequence[int | str] | None) -> list[int | None] | None:
        """Job types given by code or by name, as codes (``None``: every type)."""
        return None if job_types is None else [await self._code(t) for t in job_types]
