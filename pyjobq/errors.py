"""Exceptions raised by pyjobq, one class per SQLSTATE the SQL functions raise."""

from __future__ import annotations

from types import TracebackType

import psycopg


class PyjobqError(Exception):
    """Base class of every error a pyjobq function reports.

    The class attribute ``sqlstate`` is the code a class stands for; on an instance it is
    the code PostgreSQL returned, and ``hint`` its HINT, when any. The original
    :class:`psycopg.Error` is kept as ``__cause__``.
    """

    sqlstate: str | None = None

    def __init__(
        self, message: str, *, sqlstate: str | None = None, hint: str | None = None
    ) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.hint = hint


class InvalidArgument(PyjobqError, ValueError):
    """An argument is null, out of range or malformed (class 22), or too big (class 54).

    Nothing was changed.
    """


class LockTimeout(PyjobqError):
    """55P03: the row stayed locked by another transaction past the function's lock_timeout (5 s).

    Nothing was changed; retrying later is safe.
    """

    sqlstate = "55P03"


class ServerTooOld(PyjobqError):
    """The PostgreSQL server is older than :data:`pyjobq.migrate.MIN_SERVER_VERSION`."""


class SchemaTooNew(PyjobqError):
    """The database's pyjobq schema is newer than this package knows: upgrade the package.

    Raised by the worker and the command line before they touch the queue, since an older
    binding may not follow what the newer functions expect.
    """


class JobStateError(PyjobqError):
    """The job is not in a state that allows the transition (SQLSTATE class JQ)."""


class LeaseLost(JobStateError):
    """JQ001: the caller no longer holds this attempt of the job.

    Its lease expired and the job was reaped or claimed again; the caller's
    result must be dropped.
    """

    sqlstate = "JQ001"


class JobNotFound(JobStateError, LookupError):
    """JQ002: no job has this id (never existed, or pruned)."""

    sqlstate = "JQ002"


class JobAlreadyFinished(JobStateError):
    """JQ003: the caller's own attempt already completed or failed the job."""

    sqlstate = "JQ003"


class JobCancelled(JobStateError):
    """JQ005: the job was cancelled (``job_cancel``): nothing the attempt does is recorded."""

    sqlstate = "JQ005"


class BatchClosed(JobStateError):
    """JQ006: the batch is closed (``job_batch_close``): no job joins it any more."""

    sqlstate = "JQ006"


class JobTypeConflict(JobStateError):
    """JQ004: the job type code or name is already registered to another."""

    sqlstate = "JQ004"


class IsolationNotSupported(PyjobqError):
    """JQ007: the call needs READ COMMITTED and the transaction runs at REPEATABLE READ or
    SERIALIZABLE (``job_claim`` of a type with a concurrency limit): claim in a transaction of
    its own, or at READ COMMITTED."""

    sqlstate = "JQ007"


_BY_SQLSTATE: dict[str, type[PyjobqError]] = {
    cls.sqlstate: cls
    for cls in (
        LeaseLost,
        JobNotFound,
        JobAlreadyFinished,
        JobTypeConflict,
        JobCancelled,
        BatchClosed,
        IsolationNotSupported,
        LockTimeout,
    )
    if cls.sqlstate is not None
}


def translate(error: psycopg.Error) -> PyjobqError | None:
    """The pyjobq exception for ``error``, or None when it is none of pyjobq's.

    Argument errors (class 22) and values beyond PostgreSQL's limits (class 54, e.g. JSON
    nested too deep) become :class:`InvalidArgument`, the JQ codes their own classes and
    55P03 :class:`LockTimeout`; anything else (a lost connection, a missing privilege) is
    left to psycopg's own classes.
    """
    sqlstate = error.sqlstate
    if sqlstate is None:
        return None
    cls = _BY_SQLSTATE.get(sqlstate)
    if cls is None and sqlstate.startswith(("22", "54")):
        cls = InvalidArgument
    if cls is None and sqlstate.startswith("JQ"):
        cls = JobStateError
    if cls is None:
        return None
    diag = error.diag
    return cls(diag.message_primary or str(error), sqlstate=sqlstate, hint=diag.message_hint)


class translated:  # a lower-case name: it reads like contextlib.suppress()
    """A block whose psycopg errors come out as pyjobq's exception (the psycopg error as its
    ``__cause__``) when they are pyjobq's, and unchanged otherwise; ``with`` or ``async with``."""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if isinstance(error, psycopg.Error):
            ours = translate(error)
            if ours is not None:
                raise ours from error

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.__exit__(kind, error, traceback)
