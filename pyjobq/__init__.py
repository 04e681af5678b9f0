"""pyjobq: a PostgreSQL job queue whose API is SQL functions; this is their Python binding."""

from pyjobq.errors import (
    InvalidArgument,
    JobAlreadyFinished,
    JobNotFound,
    JobStateError,
    JobTypeConflict,
    LeaseLost,
    LockTimeout,
    PyjobqError,
    SchemaTooNew,
)
from pyjobq.migrate import SCHEMA_VERSION, migrate
from pyjobq.queue import JobQueue
from pyjobq.rows import (
    ClaimedJob,
    Completion,
    CountRow,
    Enqueued,
    FailOutcome,
    JobInfo,
    JobStatus,
    JobType,
    JobTypeInfo,
    ReapedJob,
    RegisteredType,
    Release,
    Renewal,
)

__all__ = [
    "SCHEMA_VERSION",
    "ClaimedJob",
    "Completion",
    "CountRow",
    "Enqueued",
    "FailOutcome",
    "InvalidArgument",
    "JobAlreadyFinished",
    "JobInfo",
    "JobNotFound",
    "JobQueue",
    "JobStateError",
    "JobStatus",
    "JobType",
    "JobTypeConflict",
    "JobTypeInfo",
    "LeaseLost",
    "LockTimeout",
    "PyjobqError",
    "ReapedJob",
    "RegisteredType",
    "Release",
    "Renewal",
    "SchemaTooNew",
    "migrate",
]
