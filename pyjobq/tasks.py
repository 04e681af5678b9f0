"""Tasks: a function, its job type and the type's policy declared in one place, over the SQL API.

::

    tasks = Tasks()

    @tasks.task(100, "SEND_EMAIL", max_attempts=5, timeout_seconds=30)
    def send_email(to: str, subject: str) -> None:
        ...

    tasks.install(conn)                            # job_type_register + job_type_set_policy
    send_email.enqueue(conn, "ada@example.com", subject="hi")  # job_enqueue, in conn's transaction
    Worker(dsn, tasks.handlers()).run()            # each job calls send_email(**payload)

A task's arguments are checked against the function's signature when it is enqueued, and stored
as the job's payload (by name, so they must be JSON values); the worker calls the function with
them. Everything else is the SQL API's: the type, its policy, the enqueue and the retries.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, ParamSpec, TypeVar

import psycopg

from pyjobq.aio import AsyncJobQueue
from pyjobq.queue import JobQueue
from pyjobq.rows import ClaimedJob, Enqueued
from pyjobq.worker import Handler

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Task(Generic[P, R]):
    """A function declared as the handler of job type ``code`` (``name``), with its policy."""

    function: Callable[P, R]
    code: int
    name: str
    policy: dict[str, Any] = field(default_factory=dict)
    priority: int | None = None

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function here and now, as a plain call."""
        return self.function(*args, **kwargs)

    def payload(self, *args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
        """The arguments by name, checked against the function's signature (``TypeError``)."""
        bound = inspect.signature(self.function).bind(*args, **kwargs)
        return dict(bound.arguments)

    def enqueue(
        self,
        conn: psycopg.Connection[Any] | JobQueue,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> Enqueued:
        """``job_enqueue`` of a job of this task's type, on ``conn`` and in its transaction."""
        queue = conn if isinstance(conn, JobQueue) else JobQueue(conn)
        return queue.enqueue(self.code, self.payload(*args, **kwargs), self.priority)

    async def enqueue_async(
        self,
        conn: psycopg.AsyncConnection[Any] | AsyncJobQueue,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> Enqueued:
        """:meth:`enqueue` on an asyncio connection."""
        queue = conn if isinstance(conn, AsyncJobQueue) else AsyncJobQueue(conn)
        return await queue.enqueue(self.code, self.payload(*args, **kwargs), self.priority)

    def enqueue_at(
        self,
        conn: psycopg.Connection[Any] | JobQueue,
        run_after: datetime,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> Enqueued:
        """:meth:`enqueue`, not to run before ``run_after``."""
        queue = conn if isinstance(conn, JobQueue) else JobQueue(conn)
        payload = self.payload(*args, **kwargs)
        return queue.enqueue(self.code, payload, self.priority, run_after)

    def handler(self) -> Handler:
        """The worker's handler: the function called with the job's payload as its arguments;
        a result that is a mapping is stored, anything else is not."""
        function: Callable[..., Any] = self.function

        if inspect.iscoroutinefunction(function):

            async def run_async(job: ClaimedJob) -> Mapping[str, Any] | None:
                result = await function(**job.payload)
                return result if isinstance(result, Mapping) else None

            return run_async

        def run(job: ClaimedJob) -> Mapping[str, Any] | None:
            result = function(**job.payload)
            return result if isinstance(result, Mapping) else None

        return run


class Tasks:
    """A registry of tasks: what the application installs, enqueues and runs."""

    def __init__(self) -> None:
        self._tasks: dict[int, Task[Any, Any]] = {}

    def task(
        self,
        code: int,
        name: str,
        *,
        priority: int | None = None,
        max_attempts: int | None = None,
        backoff_base_seconds: float | None = None,
        backoff_cap_seconds: float | None = None,
        backoff_jitter: float | None = None,
        timeout_seconds: float | None = None,
    ) -> Callable[[Callable[P, R]], Task[P, R]]:
        """Declare the decorated function the handler of job type ``code`` named ``name``; the
        policy arguments are ``job_type_set_policy``'s, set by :meth:`install`."""
        policy = {
            "max_attempts": max_attempts,
            "backoff_base_seconds": backoff_base_seconds,
            "backoff_cap_seconds": backoff_cap_seconds,
            "backoff_jitter": backoff_jitter,
            "timeout_seconds": timeout_seconds,
        }

        def declare(function: Callable[P, R]) -> Task[P, R]:
            taken = self._tasks.get(code)
            if taken is not None or name in {t.name for t in self._tasks.values()}:
                raise ValueError(f"job type {code} ({name}) is declared twice")
            declared = Task(function, code, name, policy, priority)
            self._tasks[code] = declared
            return declared

        return declare

    def install(self, conn: psycopg.Connection[Any]) -> None:
        """Register every task's job type and set its policy (``job_type_register``, which is
        idempotent, and ``job_type_set_policy``): where the application migrates, as an admin."""
        queue = JobQueue(conn)
        for declared in self._tasks.values():
            queue.type_register(declared.code, declared.name)
            queue.type_set_policy(declared.code, **declared.policy)

    def handlers(self) -> dict[int, Handler]:
        """The worker's handler table: each task's job type code to its handler."""
        return {code: declared.handler() for code, declared in self._tasks.items()}
