"""A backend of Django's task framework (``django.tasks``, Django 6; on Django 4.2 to 5.2, the
``django-tasks`` backport, ``django_tasks`` in ``INSTALLED_APPS``) on pyjobq.

::

    TASKS = {
        "default": {
            "BACKEND": "pyjobq.contrib.django.tasks.PyjobqBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"QUEUE_POLICIES": {"emails": {"max_attempts": 5, "timeout_seconds": 30}}},
        }
    }

Each queue is a job type of that name: ``manage.py migrate`` allocates its code
(``job_type_allocate``) and sets its policy (``job_type_set_policy``), and
``manage.py pyjobq worker pyjobq.contrib.django.tasks:handlers`` runs the tasks of every queue,
refusing to start while a queue's policy in the database is not the one in the settings.
``Task.enqueue`` is a ``job_enqueue`` on Django's own connection to ``OPTIONS["DATABASE"]``
(``default``), inside whatever ``transaction.atomic()`` block is open: the job commits or rolls
back with the rows it is about, so Django's ``transaction.on_commit`` is not needed around it.
A result's id is the job's id; ``get_result`` reads it back with ``job_get`` and
``job_attempts``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any
from uuid import UUID

from django.utils import timezone
from django.utils.module_loading import import_string

try:  # Django 6
    from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
    from django.tasks.exceptions import InvalidTaskBackend, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
except ImportError:  # Django 4.2 to 5.2: the django-tasks backport, two names apart
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

from pyjobq.contrib.django import job_queue
from pyjobq.params import Payload
from pyjobq.rows import Attempt, ClaimedJob, JobInfo, JobStatus
from pyjobq.worker import Handlers

# A queue's policy in OPTIONS["QUEUE_POLICIES"]: job_type_set_policy's arguments.
POLICY_KEYS = frozenset(
    {"max_attempts", "backoff_base_seconds", "backoff_cap_seconds", "backoff_jitter",
     "timeout_seconds"}
)  # fmt: skip

# What a job's status is as a task's.
STATUSES = {
    JobStatus.PENDING: TaskResultStatus.READY,
    JobStatus.WAITING: TaskResultStatus.READY,
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.DONE: TaskResultStatus.SUCCESSFUL,
    JobStatus.DEAD: TaskResultStatus.FAILED,
    JobStatus.CANCELLED: TaskResultStatus.FAILED,
}


def queue_priority(priority: int) -> int:
    """Django's priority (-100..100, higher first, 0 by default) as pyjobq's (0..32767, lower
    first, 100 by default): 100 less it, so Django's default is pyjobq's and 100 is 0."""
    return 100 - priority


class PyjobqBackend(BaseTaskBackend):
    """Django's tasks as pyjobq jobs: one job type per queue, named as the queue."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.database: str = self.options.get("DATABASE", "default")
        policies: Mapping[str, Mapping[str, Any]] = self.options.get("QUEUE_POLICIES", {})
        for queue, policy in policies.items():
            unknown = set(policy) - POLICY_KEYS
            if queue not in self.queues or unknown:
                raise InvalidTaskBackend(
                    f"TASKS[{alias!r}]['OPTIONS']['QUEUE_POLICIES'][{queue!r}]: "
                    + (f"no such queue in QUEUES {sorted(self.queues)}" if queue not in self.queues
                       else f"{sorted(unknown)} are not policy keys ({sorted(POLICY_KEYS)})")
                )  # fmt: skip
        self.policies = {queue: dict(policies.get(queue, {})) for queue in self.queues}

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """``job_enqueue`` of a job of the task's queue, in the caller's transaction on
        ``OPTIONS["DATABASE"]``. The arguments must be JSON (``TypeError`` enqueues nothing)."""
        self.validate_task(task)
        result = TaskResult(
            task=task, id="", status=TaskResultStatus.READY, enqueued_at=None, started_at=None,
            finished_at=None, last_attempted_at=None, args=args, kwargs=kwargs,
            backend=self.alias, errors=[], worker_ids=[],
        )  # fmt: skip
        payload = {"task": task.module_path, "args": result.args, "kwargs": result.kwargs}
        row = job_queue(self.database).enqueue(
            task.queue_name, payload, queue_priority(task.priority), task.run_after
        )
        result = replace(result, id=str(row.job_id), enqueued_at=timezone.now())
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        """The task's result as its job is now (``job_get``, ``job_attempts``): READY while
        PENDING or WAITING, RUNNING, SUCCESSFUL when DONE with its return value, FAILED when
        DEAD or CANCELLED; an error per attempt that raised."""
        try:
            job_id = UUID(result_id)
        except ValueError:
            raise TaskResultDoesNotExist(result_id) from None
        queue = job_queue(self.database)
        job = queue.get(job_id)
        if job is None or "task" not in job.payload:
            raise TaskResultDoesNotExist(result_id)
        return task_result(job, queue.attempts(job_id), self.alias)


def task_result(job: JobInfo, attempts: list[Attempt], backend: str) -> TaskResult:
    """A job of a task as Django's result of it."""
    task: Task = import_string(job.payload["task"])
    started = [a.started_at for a in attempts if a.started_at is not None]
    status = STATUSES[job.status]
    result = TaskResult(
        task=task,
        id=str(job.job_id),
        status=status,
        enqueued_at=job.created_at,
        started_at=min(started, default=None),
        finished_at=job.finished_at,
        last_attempted_at=max(started, default=None),
        args=job.payload["args"],
        kwargs=job.payload["kwargs"],
        backend=backend,
        errors=[error(a.error) for a in attempts if a.error],
        worker_ids=[a.worker_id for a in attempts if a.worker_id],
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", (job.result or {}).get("value"))
    return result


def error(text: str) -> TaskError:
    """An attempt's error (the worker's traceback) as Django's: the exception's class path is
    the module-qualified name its last line begins with (``builtins`` for a builtin)."""
    last = text.rstrip().splitlines()[-1] if text.strip() else ""
    name = last.split(":", 1)[0].strip()
    return TaskError(
        exception_class_path=name if "." in name else f"builtins.{name or 'Exception'}",
        traceback=text,
    )


def run_task(job: ClaimedJob) -> Payload:
    """The handler of every queue: import the task the job names and call it with its
    arguments (and its context, for a task that takes it); the return value, which must be
    JSON, is stored as ``{"value": ...}``."""
    task: Task = import_string(job.payload["task"])
    args, kwargs = job.payload["args"], job.payload["kwargs"]
    now = timezone.now()
    result = TaskResult(
        task=task, id=str(job.job_id), status=TaskResultStatus.RUNNING,
        enqueued_at=job.created_at, started_at=now, finished_at=None, last_attempted_at=now,
        args=args, kwargs=kwargs, backend=task.backend, errors=[],
        worker_ids=[f"attempt {n}" for n in range(1, job.attempt + 1)],
    )  # fmt: skip
    task_started.send(PyjobqBackend, task_result=result)
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
        stored = {"value": normalize_json(value)}
    except BaseException:
        object.__setattr__(result, "status", TaskResultStatus.FAILED)
        task_finished.send(PyjobqBackend, task_result=result)
        raise
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", timezone.now())
    task_finished.send(PyjobqBackend, task_result=result)
    return stored


def backends() -> list[PyjobqBackend]:
    """The pyjobq backends of ``settings.TASKS``."""
    return [b for b in task_backends.all() if isinstance(b, PyjobqBackend)]


def handlers() -> Handlers:
    """The worker's handler table: every queue of every pyjobq backend, by job type name, with
    the policy the settings give it (the worker refuses to start while the database's differs:
    run ``manage.py migrate``)."""
    queues = {q: b.policies[q] for b in backends() for q in b.queues}
    return Handlers(dict.fromkeys(queues, run_task), queues)


def install(using: str) -> None:
    """Register every queue's job type and set its policy on database ``using``
    (``job_type_allocate``, ``job_type_set_policy``): what ``manage.py migrate`` does."""
    for backend in backends():
        if backend.database != using:
            continue
        queue = job_queue(using)
        for name, policy in backend.policies.items():
            code = queue.type_allocate(name).job_type
            queue.type_set_policy(code, **policy)


__all__ = ["PyjobqBackend", "handlers", "install", "queue_priority", "run_task"]
