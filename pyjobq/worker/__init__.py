"""``Worker``: runs handlers for claimed jobs: batched, with heartbeats, wake-ups and a clean drain.

Architecture: one asyncio event loop per process drives everything through
:class:`~pyjobq.aio.AsyncJobQueue`. ``async def`` handlers run on that loop;
plain functions run in a thread pool of ``concurrency`` threads, or in child processes
(``processes``: :func:`in_process`). Each duty is a module of
this package, and :class:`Worker` (``runtime``) wires them together from one
:class:`WorkerConfig` (``config``); what they share is in ``state``:

* the claimer (``claiming``) takes up to the free capacity (``concurrency`` + ``prefetch`` less
  the running and prefetched jobs) in one ``job_claim`` and waits for a NOTIFY,
  free room or the poll interval; it also waits while finished jobs pile up
  unsent, since their rows stay RUNNING until completed;
* runners (``running``) start prefetched jobs; a job that waited more than a fraction of its
  lease in the prefetch buffer is released instead;
* the completer (``completing``) sends the outcomes of finished jobs, completed and failed
  together, with ``job_finish_many`` a few milliseconds after the first of a batch
  finished, or at once when half the capacity waits for it, with up to two calls in
  flight (one runs while the next batch fills);
* the heartbeat (``leases``) renews the lease of every running job well before it ends; a
  lease found lost marks the job so its result is dropped, never completed;
* the listener (``claiming``) LISTENs on ``pyjobq_job`` on a dedicated connection (optional);
* the reaper (``leases``) calls ``job_reap`` once a lease has expired, and the ticker
  (``schedules``, unless ``schedules`` is off) calls ``job_schedule_tick`` once a tick is due,
  as ``job_next_chores`` in the claims' statement says (``alarms``), each a random part of
  ``reap_interval`` or ``schedule_interval`` after: an idle worker with nothing to reap or
  tick sends its claims only.

A handler may use its job's context (``context``: :func:`job_context`, :func:`sync_job_context`)
to record checkpointed steps that a later attempt reuses.

A handler's failure, lost lease or cancel is recorded by ``outcomes``; a stop is carried out
by ``shutdown``. Every statement goes through one wrapper that counts round trips. No job and
no database error stops the worker, only :meth:`Worker.stop` (or a signal) does:

* whatever a handler returns or raises decides the outcome of its own job only.
  Its result is encoded as soon as it returns (:mod:`pyjobq.storable`); one that
  cannot be stored fails the attempt for good (DEAD) with the reason as its
  error, and error text is made storable rather than refused;
* a lost connection, a lock wait past ``lock_timeout`` (55P03), a serialization
  failure, a deadlock, a cancelled statement, an administrator's shutdown or a
  full server (the ``OperationalError`` family) are retried with capped,
  jittered backoff while the heartbeat keeps the leases;
* a batch of completions that PostgreSQL refuses as data (class 22 or 54) is
  sent again one job at a time, so that only the job at fault fails;
* any other error (a privilege revoked, a function missing) is logged and the
  call retried with backoff: it is not a job's fault, so no job is failed for it.
"""

from pyjobq.worker.config import WorkerConfig
from pyjobq.worker.context import JobContext, SyncJobContext, job_context, sync_job_context
from pyjobq.worker.handlers import Handlers
from pyjobq.worker.outcomes import (
    DeadLetter,
    Retry,
    Snooze,
    WaitTimedOut,
    error_text,
    is_cancelled,
)
from pyjobq.worker.processes import ChildDied, ChildError, ProcessPool, in_process
from pyjobq.worker.running import AsyncHandler, Handler, SyncHandler
from pyjobq.worker.runtime import Worker, make_worker_id

__all__ = [
    "AsyncHandler",
    "ChildDied",
    "ChildError",
    "DeadLetter",
    "Handler",
    "Handlers",
    "JobContext",
    "ProcessPool",
    "Retry",
    "Snooze",
    "SyncHandler",
    "SyncJobContext",
    "WaitTimedOut",
    "Worker",
    "WorkerConfig",
    "error_text",
    "in_process",
    "is_cancelled",
    "job_context",
    "make_worker_id",
    "sync_job_context",
]
