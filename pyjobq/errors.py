"""Exceptions raised by pyjobq, one class per SQLSTATE the SQL functions raise."""

from __future__ import annotations

import psycopg


class PyjobqError(Exception):
    """Base class of every error a pyjobq function reports.

    ``sqlstate`` is the code PostgreSQL returned and ``hint`` its HINT, when any;
    the original :class:`psycopg.Error` is kept as ``__cause__``.
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


class JobNotFound(JobStateError, LookupError):
    """JQ002: no job has this id (never existed, or pruned)."""


class JobAlreadyFinished(JobStateError):
    """JQ003: the caller's own attempt already completed or failed the job."""


class JobTypeConflict(JobStateError):
    """JQ004: the job type code or name is already registered to another."""


_BY_SQLSTATE: dict[str, type[PyjobqError]] = {
    "JQ001": LeaseLost,
    "JQ002": JobNotFound,
    "JQ003": JobAlreadyFinished,
    "JQ004": JobTypeConflict,
    "55P03": LockTimeout,
}


def translate(error: psycopg.Error) -> Exception:
    """Return the pyjobq exception for ``error``, or ``error`` itself when it is none of ours.

    Use as ``raise translate(e) from e``: argument errors (class 22) and values
    beyond PostgreSQL's limits (class 54, e.g. JSON nested too deep) become
    :class:`InvalidArgument`, the JQ codes their own classes.
    """
    sqlstate = error.sqlstate
    if sqlstate is None:
        return error
    cls = _BY_SQLSTATE.get(sqlstate)
    if cls is None and sqlstate.startswith(("22", "54")):
        cls = InvalidArgument
    if cls is None and sqlstate.startswith("JQ"):
        cls = JobStateError
    if cls is None:
        return error
    diag = error.diag
    return cls(diag.message_primary or str(error), sqlstate=sqlstate, hint=diag.message_hint)
