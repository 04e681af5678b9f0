"""Sync handlers in child processes: CPU-bound Python off the worker's GIL, deadlines that kill.

A sync handler runs in a thread of the worker's process: CPU-bound Python holds the GIL the
worker's own loop needs, and a handler that hangs cannot be stopped (its thread lingers past
its deadline). :func:`in_process` runs one in a child process instead, per job type::

    handlers = {"RESIZE": in_process(resize, memory_mb=512, max_jobs_per_child=100)}

or the worker's setting ``processes`` (``pyjobq worker --processes``) runs all its sync
handlers so. Children are started on demand (``forkserver``: none of the worker's threads or
connections is copied), one per job running at once, and reused; a child is replaced after
``max_jobs_per_child`` jobs (Celery's ``max_tasks_per_child``) and its address space is capped
at ``memory_mb`` (past it, the handler's allocation raises ``MemoryError``, which fails the
job, and the child is replaced). To the worker the wrapper is an ``async def`` handler, so all
that stops an async handler stops the child: at the job's deadline (its type's
``timeout_seconds``, or ``job_timeout``), on ``job_cancel`` and at a hard stop the child is
killed (SIGKILL), the attempt fails as any past its deadline does (retried while tries are
left) and the next job gets a new child. The lease, the fencing of the outcome and the metrics
are the worker's, as for any handler. The handler and the job go to the child by pickle, so
the handler must be importable (a module-level function); what it returns or raises comes
back the same way (``Retry``, ``DeadLetter`` and ``Snooze`` keep their meaning), with the
child's traceback as the exception's cause. A handler in a child has no job context
(``sync_job_context``): it cannot renew, report progress or wait for an event.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import multiprocessing.forkserver
import os
import pickle
import resource
import signal
import threading
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, cast

from pyjobq.metrics import WorkerMetrics
from pyjobq.params import Payload
from pyjobq.rows import ClaimedJob
from pyjobq.worker.config import WorkerConfig
from pyjobq.worker.running import Handler, SyncHandler, is_async


class ChildDied(RuntimeError):
    """The child running a handler ended without answering: killed from outside, by the
    kernel's OOM killer, or by the handler itself (``os._exit``, a crash in C code)."""


class ChildError(RuntimeError):
    """What a handler in a child raised or returned could not come back as itself (it does not
    pickle), or the handler could not be loaded there."""


class RemoteTraceback(Exception):
    """The traceback of a handler's exception in its child: the ``__cause__`` of the exception
    raised again in the worker, so that the job's error says where it came from."""

    def __str__(self) -> str:
        return f"\n{self.args[0]}"


def _answer(message: bytes) -> bytes:
    """In a child: run the (handler, job) of ``message``; what came of it, pickled."""
    try:
        handler, job = pickle.loads(message)
        answer: tuple[Any, ...] = (True, handler(job))
    except BaseException as e:  # the job's outcome, whatever the handler raised
        if not isinstance(e, Exception | SystemExit):  # KeyboardInterrupt, GeneratorExit...
            e = ChildError(f"the handler raised {type(e).__name__}" + (f": {e}" if str(e) else ""))
        answer = (False, e, "".join(traceback.format_exception(e)))
    try:
        return pickle.dumps(answer)
    except Exception as e:  # a result or an exception that does not pickle
        kind, where = ("result", "") if answer[0] else ("exception", answer[2])
        error = ChildError(f"the handler's {kind} cannot come back from its process: {e}")
        return pickle.dumps((False, error, where))


def _orphaned() -> None:
    """In a child: exit once the worker that started it is gone (killed with SIGKILL, say),
    instead of running on unseen. (Its parent process is the fork server, which lives on while
    it does: the worker's end of a pipe tells instead.)"""
    parent = multiprocessing.parent_process()
    if parent is not None:
        parent.join()
    os._exit(1)


def _serve(conn: Connection, memory_mb: int | None) -> None:
    """A child's loop: answer each (handler, job) it is sent, until the worker closes the pipe."""
    # Ctrl-C reaches the terminal's whole process group: the worker drains, and kills what
    # still runs when it must. (SIGTERM keeps its default: multiprocessing ends daemonic
    # children with it at exit.)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_orphaned, daemon=True).start()
    if memory_mb is not None:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    while True:
        try:
            message = conn.recv_bytes()
        except EOFError:
            return
        conn.send_bytes(_answer(message))


@dataclass(eq=False)
class _Child:
    process: BaseProcess
    conn: Connection
    jobs: int = 0

    def end(self) -> None:
        """Kill it (idle or not, nothing of it is kept) and reap it."""
        self.process.kill()
        self.process.join(5)
        self.conn.close()


# What the fork server imports before it forks a child: pyjobq and psycopg, imported once, so
# that a child starts in milliseconds. Not the handlers' modules: an application's may need
# setting up first (Django's import models), and one that raised would end the fork server. A
# child imports its handler's module when its first job comes.
_PRELOAD = [__name__]


def _context() -> multiprocessing.context.ForkServerContext:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)  # before the server starts, else unused
    return context


def _start_server() -> None:
    _context()
    multiprocessing.forkserver.ensure_running()


class ProcessPool:
    """Child processes for sync handlers, started on demand and reused (:func:`in_process`)."""

    def __init__(self, memory_mb: int | None = None, max_jobs_per_child: int | None = None):
        # Checked as the worker's settings child_memory_mb and max_jobs_per_child are: a value
        # out of their range is a ValueError that names the setting and the range.
        WorkerConfig(
            processes=True, child_memory_mb=memory_mb, max_jobs_per_child=max_jobs_per_child
        )
        self.memory_mb = memory_mb
        self.max_jobs_per_child = max_jobs_per_child
        self._idle: list[_Child] = []
        # The worker running the pool's handlers counts its children in its metrics.
        self.metrics = WorkerMetrics()

    async def start(self) -> None:
        """Start the fork server the children come from, pyjobq imported in it: the worker
        does, before its first claim, so that no job's deadline pays for it."""
        await asyncio.to_thread(_start_server)

    def _spawn(self) -> _Child:
        context = _context()
        parent, child = context.Pipe()
        process = context.Process(
            target=_serve, args=(child, self.memory_mb), name="pyjobq-handler", daemon=True
        )
        process.start()
        child.close()
        return _Child(process, parent)

    async def _child(self) -> _Child:
        """An idle child that is still alive, or a new one."""
        while self._idle:
            child = self._idle.pop()
            if child.process.is_alive():
                return child
            child.end()
        self.metrics.children_started += 1
        return await asyncio.to_thread(self._spawn)

    async def run(self, handler: SyncHandler, job: ClaimedJob) -> Payload | None:
        """``handler(job)`` in a child; the child is killed if this await is cancelled."""
        message = pickle.dumps((handler, job))
        child = await self._child()
        try:
            child.conn.send_bytes(message)
            await _readable(child.conn)
            answer = child.conn.recv_bytes()
        except (EOFError, OSError):
            child.end()
            code = child.process.exitcode
            raise ChildDied(f"the process running the handler ended (exit code {code})") from None
        except BaseException:  # a deadline, a cancel, a hard stop: the child goes with it
            self.metrics.children_killed += 1
            child.end()
            raise
        child.jobs += 1
        try:
            ok, value, *tb = pickle.loads(answer)
        except Exception as e:
            ok, value, tb = False, ChildError(f"the handler's answer cannot be read: {e}"), []
        if isinstance(value, MemoryError) or child.jobs == self.max_jobs_per_child:
            child.end()
        else:
            self._idle.append(child)
        if ok:
            result: Payload | None = value
            return result
        if tb and tb[0]:
            value.__cause__ = RemoteTraceback(tb[0].rstrip())
        raise value

    def close(self) -> None:
        """End the idle children (the worker does, when it stops)."""
        while self._idle:
            self._idle.pop().end()


async def _readable(conn: Connection) -> None:
    """Until ``conn`` has something to read (or its other end closed), without a thread."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def readable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(conn.fileno(), readable)
    try:
        await ready
    finally:
        loop.remove_reader(conn.fileno())


class InProcess:
    """A sync handler run in a child process of a :class:`ProcessPool` (:func:`in_process`):
    an ``async def`` handler to the worker."""

    def __init__(self, handler: SyncHandler, pool: ProcessPool) -> None:
        if is_async(handler):
            raise ValueError(f"{handler!r} is async: only a sync handler runs in a process")
        try:
            pickle.dumps(handler)
        except Exception as e:
            raise ValueError(
                f"{handler!r} cannot run in a process: it is sent there by pickle, so it must "
                f"be importable, a module-level function ({e})"
            ) from e
        self.handler = handler
        self.pool = pool

    async def __call__(self, job: ClaimedJob) -> Payload | None:
        return await self.pool.run(self.handler, job)

    def __repr__(self) -> str:
        return f"in_process({self.handler!r})"


def in_process(
    handler: SyncHandler,
    *,
    memory_mb: int | None = None,
    max_jobs_per_child: int | None = None,
    pool: ProcessPool | None = None,
) -> InProcess:
    """``handler`` run in a child process: killed at the job's deadline (the attempt fails and
    is retried), its address space capped at ``memory_mb``, replaced after
    ``max_jobs_per_child`` jobs (both in the ranges of the worker's ``child_memory_mb`` and
    ``max_jobs_per_child``, whose names a ``ValueError`` gives). Handlers given one ``pool``
    share its children (and its settings: give those to the pool)."""
    if pool is not None and (memory_mb is not None or max_jobs_per_child is not None):
        raise ValueError("give memory_mb and max_jobs_per_child to the pool, not beside it")
    return InProcess(handler, pool or ProcessPool(memory_mb, max_jobs_per_child))


def in_processes(handlers: Mapping[Any, Handler], config: WorkerConfig) -> dict[Any, Handler]:
    """The worker's handler table: with its setting ``processes``, each sync handler not
    already in a process runs in one of one pool of children."""
    if not config.processes:
        return dict(handlers.items())
    pool = ProcessPool(config.child_memory_mb, config.max_jobs_per_child)
    return {
        key: h if is_async(h) else InProcess(cast(SyncHandler, h), pool)
        for key, h in handlers.items()
    }
