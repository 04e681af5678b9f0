"""Tasks: a function, its job type and the type's policy declared in one place, over the SQL API.

::

    tasks = Tasks()

    @tasks.task("SEND_EMAIL", max_attempts=5, timeout_seconds=30)
    def send_email(to: str, subject: str) -> None:
        ...

    tasks.install(conn)            # job_type_allocate (or _register) + job_type_set_policy
    send_email.enqueue(conn, "ada@example.com", subject="hi")  # job_enqueue, in conn's transaction
    send_email.options(delay=timedelta(minutes=5), dedupe_key="ada").enqueue(conn, "ada@...")
    Worker(dsn, tasks.handlers()).run()            # each job calls send_email(**payload)

A task declared by name alone gets its code from the database when it is installed
(``job_type_allocate``: the name's code, or a free one from 1000 on); ``task(100, "SEND_EMAIL")``
names the code itself. A task's arguments are checked against the function's signature when it
is enqueued, and stored as the job's payload (by name, so they must be JSON values); the worker
calls the function with them. Everything else is the SQL API's: the type, its policy, the
enqueue and the retries.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Generic, ParamSpec, TypedDict, TypeVar, Unpack
from uuid import UUID

import psycopg

from pyjobq.aio import AsyncJobQueue
from pyjobq.params import OnDuplicate, Payload
from pyjobq.queue import JobQueue
from pyjobq.rows import ClaimedJob, Enqueued
from pyjobq.worker import Handler, Handlers

P = ParamSpec("P")
R = TypeVar("R")


class EnqueueOptions(TypedDict, total=False):
    """What one enqueue of a task may say besides its arguments: :meth:`JobQueue.enqueue`'s
    options, and ``delay``, a ``run_after`` from now on the database's clock."""

    priority: int
    run_after: datetime | timedelta
    delay: timedelta
    dedupe_key: str
    max_attempts: int
    unique_for: timedelta
    concurrency_key: str
    metadata: Payload
    depends_on: Sequence[UUID]
    on_parent_failure: str
    batch_id: UUID
    on_duplicate: OnDuplicate


@dataclass(frozen=True)
class Task(Generic[P, R]):
    """A function declared as the handler of job type ``name`` (code ``code``, or ``None`` until
    the database allocates it), with its policy and the options its enqueues pass."""

    function: Callable[P, R]
    code: int | None
    name: str
    policy: dict[str, Any] = field(default_factory=dict)
    enqueue_options: EnqueueOptions = field(default_factory=lambda: EnqueueOptions())
    # The code a task declared by name has in the database, once asked: shared by its copies.
    _codes: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function here and now, as a plain call."""
        return self.function(*args, **kwargs)

    def payload(self, *args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
        """The arguments by name, checked against the function's signature (``TypeError``)."""
        bound = inspect.signature(self.function).bind(*args, **kwargs)
        return dict(bound.arguments)

    def options(self, **options: Unpack[EnqueueOptions]) -> Task[P, R]:
        """This task with ``options`` for its enqueues (over those it has): a dedupe key, a
        delay, a priority, dependencies... ``task.options(delay=timedelta(minutes=5))
        .enqueue(conn, ...)``, as Celery's ``apply_async(countdown=...)``."""
        if "delay" in options and "run_after" in options:
            raise TypeError("give run_after or delay, not both")
        return replace(self, enqueue_options=EnqueueOptions(**self.enqueue_options, **options))

    def _enqueue_args(self) -> dict[str, Any]:
        """The options as :meth:`JobQueue.enqueue` takes them (``delay`` is a ``run_after``)."""
        options: dict[str, Any] = dict(self.enqueue_options)
        if "delay" in options:
            options["run_after"] = options.pop("delay")
        return options

    def enqueue(
        self,
        conn: psycopg.Connection[Any] | JobQueue,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> Enqueued:
        """``job_enqueue`` of a job of this task's type with its options, on ``conn`` and in its
        transaction."""
        queue = conn if isinstance(conn, JobQueue) else JobQueue(conn)
        code = self.code or self._codes.get(self.name) or queue.type_code(self.name)
        self._codes[self.name] = code
        return queue.enqueue(code, self.payload(*args, **kwargs), **self._enqueue_args())

    async def enqueue_async(
        self,
        conn: psycopg.AsyncConnection[Any] | AsyncJobQueue,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> Enqueued:
        """:meth:`enqueue` on an asyncio connection."""
        queue = conn if isinstance(conn, AsyncJobQueue) else AsyncJobQueue(conn)
        code = self.code or self._codes.get(self.name) or await queue.type_code(self.name)
        self._codes[self.name] = code
        return await queue.enqueue(code, self.payload(*args, **kwargs), **self._enqueue_args())

    def enqueue_at(
        self,
        conn: psycopg.Connection[Any] | JobQueue,
        run_after: datetime,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> Enqueued:
        """:meth:`enqueue`, not to run before ``run_after``."""
        return self.options(run_after=run_after).enqueue(conn, *args, **kwargs)

    def handler(self) -> Handler:
        """The worker's handler: the function called with the job's payload as its arguments;
        a result that is a mapping is stored, anything else is not."""
        function: Callable[..., Any] = self.function

        if inspect.iscoroutinefunction(function):

            async def run_async(job: ClaimedJob) -> Mapping[str, Any] | None:
                result = await function(**job.payload)
                return result if isinstance(result, Mapping) else None

            return run_async

        return TaskHandler(function)


@dataclass(frozen=True)
class TaskHandler:
    """A sync task's handler: its function called with the job's payload as arguments. It
    pickles as where the task is declared (module and name), so that it can run in a child
    process (:func:`pyjobq.worker.in_process`)."""

    function: Callable[..., Any]

    def __call__(self, job: ClaimedJob) -> Mapping[str, Any] | None:
        result = self.function(**job.payload)
        return result if isinstance(result, Mapping) else None

    def __reduce__(self) -> tuple[Any, ...]:
        module, name = self.function.__module__, self.function.__qualname__
        if "<locals>" in name:
            raise pickle.PicklingError(f"{module}.{name} is not importable: declared in a function")
        return (declared_handler, (module, name))


def declared_handler(module: str, name: str) -> TaskHandler:
    """The handler of the task (or function) ``name`` of ``module``, imported: what a
    :class:`TaskHandler` is unpickled as."""
    value = pkgutil.resolve_name(f"{module}:{name}")
    return TaskHandler(value.function if isinstance(value, Task) else value)


class Tasks:
    """A registry of tasks: what the application installs, enqueues and runs."""

    def __init__(self) -> None:
        self._tasks: dict[str, Task[Any, Any]] = {}

    def task(
        self,
        code_or_name: int | str,
        name: str | None = None,
        *,
        priority: int | None = None,
        max_attempts: int | None = None,
        backoff_base_seconds: float | None = None,
        backoff_cap_seconds: float | None = None,
        backoff_jitter: float | None = None,
        timeout_seconds: float | None = None,
    ) -> Callable[[Callable[P, R]], Task[P, R]]:
        """Declare the decorated function the handler of the job type named ``name``, with code
        ``code`` (``task(100, "SEND_EMAIL")``), or by name alone (``task("SEND_EMAIL")``: the
        database allocates its code at :meth:`install`). The policy arguments are
        ``job_type_set_policy``'s, set by :meth:`install`; ``priority`` is every enqueue's
        default (:meth:`Task.options` overrides it)."""
        if isinstance(code_or_name, str):
            if name is not None:
                raise TypeError("a task declared by name takes no second name")
            code, name = None, code_or_name
        elif name is None:
            raise TypeError("a task declared by code needs its name: task(100, 'SEND_EMAIL')")
        else:
            code = code_or_name
        policy = {
            "max_attempts": max_attempts,
            "backoff_base_seconds": backoff_base_seconds,
            "backoff_cap_seconds": backoff_cap_seconds,
            "backoff_jitter": backoff_jitter,
            "timeout_seconds": timeout_seconds,
        }
        options = EnqueueOptions() if priority is None else EnqueueOptions(priority=priority)

        def declare(function: Callable[P, R]) -> Task[P, R]:
            return self.add(Task(function, code, name, policy, options))

        return declare

    def add(self, task: Task[P, R]) -> Task[P, R]:
        """Register ``task`` (declared here or by another registry); ``ValueError`` when another
        task has its name or its code."""
        if self._tasks.get(task.name) is task:
            return task
        codes = {t.code for t in self._tasks.values()} - {None}
        if task.name in self._tasks or task.code in codes:
            raise ValueError(f"job type {task.code or ''} ({task.name}) is declared twice")
        self._tasks[task.name] = task
        return task

    def install(self, conn: psycopg.Connection[Any]) -> None:
        """Register every task's job type and set its policy: ``job_type_register`` for a task
        with a code, ``job_type_allocate`` for one declared by name (both idempotent, and safe
        when two deploys install at once), then ``job_type_set_policy``; where the application
        migrates, as an admin."""
        queue = JobQueue(conn)
        for declared in self._tasks.values():
            if declared.code is None:
                code = queue.type_allocate(declared.name).job_type
            else:
                code = queue.type_register(declared.code, declared.name).job_type
            queue.type_set_policy(code, **declared.policy)

    def handlers(self) -> Handlers:
        """The worker's handler table: each task's job type (its code, or its name when the
        database allocates the code) to its handler, with the policy it was declared with: the
        worker refuses to start while the database has another (the tasks were not
        installed)."""
        tasks = {t.name if t.code is None else t.code: t for t in self._tasks.values()}
        return Handlers(
            {key: t.handler() for key, t in tasks.items()},
            {key: t.policy for key, t in tasks.items()},
        )


def discover(package: str) -> Tasks:
    """The tasks declared in ``package`` and each of its modules, imported here: what
    ``pyjobq worker PACKAGE`` runs (Celery's ``autodiscover_tasks``). Every :class:`Task` a
    module holds is found, whichever registry declared it; two of one name are an error."""
    found = Tasks()
    root = importlib.import_module(package)
    modules = [root]
    for info in pkgutil.walk_packages(getattr(root, "__path__", []), prefix=f"{package}."):
        modules.append(importlib.import_module(info.name))
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, Task):
                found.add(value)
    return found
