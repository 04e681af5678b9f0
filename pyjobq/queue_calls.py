# Generated from pyjobq/aio_calls.py by scripts/async_to_sync.py: edit that file instead.
"""``Calls``: how the synchronous binding runs one SQL function call."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal, LiteralString, TypeVar

import psycopg
from psycopg import sql
from psycopg.pq import Format
from psycopg.rows import RowFactory, class_row, scalar_row
from psycopg.types.json import JsonbBinaryLoader, JsonbLoader
from psycopg_pool import ConnectionPool

from pyjobq import statements
from pyjobq.errors import translated

T = TypeVar("T")

_JSONB_OID = psycopg.adapters.types["jsonb"].oid


def own_cursor(conn: psycopg.Connection[Any], rows: RowFactory[T]) -> psycopg.Cursor[T]:
    """A cursor of the binding's own on ``conn``: server-side parameters and psycopg's JSON
    loaders, whatever cursor class and loaders the application gave the connection (Django's
    binds parameters in the client and loads jsonb as text)."""
    cur = psycopg.Cursor(conn, row_factory=rows)
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


def heard(conn: psycopg.Connection[Any], payload: str, deadline: float) -> bool:
    """Whether a notification carrying ``payload`` reaches ``conn`` (listening) before
    ``deadline``, a ``time.monotonic()`` instant."""
    while (left := deadline - time.monotonic()) > 0:
        for note in conn.notifies(timeout=left):
            if note.payload == payload:
                return True
    return False


class Calls:
    """One statement per call, on the connection or pool given; see JobQueue."""

    def __init__(self, source: psycopg.Connection[Any] | ConnectionPool) -> None:
        self._source = source
        # Job type codes by name, as job_type_code answered: a registered type keeps its code.
        self._codes: dict[str, int] = {}

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        if isinstance(self._source, ConnectionPool):
            with self._source.connection() as conn:
                yield conn
        else:
            yield self._source

    @contextmanager
    def _listening(
        self, channel: Literal["pyjobq_done", "pyjobq_batch"], caller: str
    ) -> Iterator[psycopg.Connection[Any]]:
        """A connection that LISTENs on ``channel`` for the block, in autocommit: inside a
        transaction a LISTEN hears nothing until the commit, so an idle one only (``caller``
        names the method in the error); the connection's own mode is restored after."""
        with self._connection() as conn:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                raise ValueError(f"{caller}() needs a connection outside a transaction")
            autocommit = conn.autocommit
            conn.set_autocommit(True)
            try:
                conn.execute(sql.SQL("listen {}").format(sql.Identifier(channel)))
                yield conn
            finally:
                conn.execute(sql.SQL("unlisten {}").format(sql.Identifier(channel)))
                conn.set_autocommit(autocommit)

    def _rows(self, row: type[T], query: LiteralString, params: Sequence[Any]) -> list[T]:
        # Binary results: a uuid is 16 bytes to copy, not 36 characters to parse, and
        # enqueue_many returns one per job.
        with (
            translated(),
            self._connection() as conn,
            own_cursor(conn, class_row(row)) as cur,
        ):
            cur.execute(query, params, binary=True)
            return cur.fetchall()

    def _one(self, row: type[T], query: LiteralString, params: Sequence[Any]) -> T:
        rows = self._rows(row, query, params)
        return rows[0]

    def _column(self, query: LiteralString, params: Sequence[Any]) -> list[Any]:
        with (
            translated(),
            self._connection() as conn,
            own_cursor(conn, scalar_row) as cur,
        ):
            cur.execute(query, params)
            return cur.fetchall()

    def _scalar(self, query: LiteralString, params: Sequence[Any]) -> Any:
        values = self._column(query, params)
        return values[0]

    def type_code(self, name: str) -> int:
        """``job_type_code``: the code of the job type registered as ``name`` (or the one name
        equal to it ignoring case); :class:`~pyjobq.errors.InvalidArgument` when none is."""
        code: int = self._scalar(statements.TYPE_CODE, (name,))
        return code

    def _code(self, job_type: int | str | None) -> int | None:
        """A job type given by code or by name, as its code. A name is asked of the database once
        per queue object: a registered type keeps its code."""
        if not isinstance(job_type, str):
            return job_type
        code = self._codes.get(job_type)
        if code is None:
            code = self._codes[job_type] = self.type_code(job_type)
        return code

    def _type_codes(self, job_types: Sequence[int | str] | None) -> list[int | None] | None:
        """Job types given by code or by name, as codes (``None``: every type)."""
        return None if job_types is None else [self._code(t) for t in job_types]
