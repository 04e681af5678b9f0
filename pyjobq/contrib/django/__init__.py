"""Enqueue inside a Django transaction, and run pyjobq's commands with Django's database.

Add ``"pyjobq.contrib.django"`` to ``INSTALLED_APPS``: ``manage.py migrate`` then installs and
upgrades the pyjobq schema (test databases included), and the ``pyjobq`` management command
runs any ``pyjobq`` subcommand on the database of ``settings.DATABASES`` (``manage.py pyjobq
worker myapp.jobs:HANDLERS``). Enqueue with :func:`job_queue` inside
:func:`django.db.transaction.atomic`::

    with transaction.atomic():
        signup = Signup.objects.create(email=email)
        job_queue().enqueue(JobType.OUTBOX, {"signup_id": signup.pk})

Django 4.2 or newer on psycopg 3: the binding runs on Django's own psycopg connection, so
the job commits or rolls back with the model's rows. Outside ``atomic()`` Django's
connection autocommits, and so does the enqueue.
"""

from __future__ import annotations

import inspect
import pickle
from dataclasses import dataclass
from typing import Any, cast

import django
import psycopg
from django.apps import apps
from django.db import DEFAULT_DB_ALIAS, close_old_connections, connections
from psycopg.conninfo import make_conninfo

from pyjobq.params import Payload
from pyjobq.queue import JobQueue
from pyjobq.rows import ClaimedJob
from pyjobq.worker import Handler, SyncHandler


def job_queue(using: str = DEFAULT_DB_ALIAS) -> JobQueue:
    """A :class:`~pyjobq.queue.JobQueue` on the connection of database ``using``, inside
    whatever transaction ``atomic()`` has open on it."""
    wrapper = connections[using]
    _check_backend(using, wrapper.vendor)
    wrapper.ensure_connection()
    driver = wrapper.connection
    if not isinstance(driver, psycopg.Connection):
        raise TypeError(
            f"pyjobq needs psycopg 3 under Django's database {using!r}, got"
            f" {type(driver).__module__}: install psycopg (Django prefers it to psycopg2)"
        )
    return JobQueue(driver)


# Connection parameters Django adds for its own cursors and adapters, not libpq's.
_DJANGO_ONLY = frozenset({"context", "cursor_factory", "prepare_threshold"})


def conninfo(using: str = DEFAULT_DB_ALIAS) -> str:
    """The libpq conninfo of database ``using``, from ``settings.DATABASES`` (``OPTIONS``
    included), for the connections pyjobq opens itself (a worker's pool, migrations)."""
    wrapper = connections[using]
    _check_backend(using, wrapper.vendor)
    params: dict[str, Any] = wrapper.get_connection_params()
    return make_conninfo(**{k: v for k, v in params.items() if k not in _DJANGO_ONLY})


def _check_backend(using: str, vendor: str) -> None:
    if vendor != "postgresql":
        raise TypeError(f"pyjobq needs PostgreSQL; Django's database {using!r} is {vendor}")


def django_handler(handler: Handler) -> Handler:
    """``handler`` with its thread's Django connections looked after as around a request:
    ``close_old_connections()`` before and after each job. ``CONN_MAX_AGE`` and
    ``CONN_HEALTH_CHECKS`` then apply between jobs, and a connection a database restart broke
    costs the job that found it one try, instead of failing every job the thread runs after.

    ``manage.py pyjobq worker`` wraps every synchronous handler in it; wrap yours when you
    build a :class:`~pyjobq.worker.Worker` yourself. An ``async def`` handler is returned as
    it is: it reaches the ORM through ``sync_to_async``, which looks after its own thread.
    """
    if inspect.iscoroutinefunction(handler):
        return handler
    return DjangoHandler(cast(SyncHandler, handler))


@dataclass(frozen=True)
class DjangoHandler:
    """A sync handler run as :func:`django_handler` says. It can run in a child process of the
    worker (``manage.py pyjobq worker --processes``): the child sets Django up
    (``django.setup()``, with the worker's ``DJANGO_SETTINGS_MODULE``) before it unpickles the
    handler, which imports the handler's module (a task's too), which may import models."""

    handler: SyncHandler

    def __call__(self, job: ClaimedJob) -> Payload | None:
        close_old_connections()
        try:
            return self.handler(job)
        finally:
            close_old_connections()

    def __reduce__(self) -> tuple[Any, ...]:
        # Its handler travels pickled inside, so that the child unpickles it (importing its
        # module, which may import models) only once Django is set up.
        return (_set_up_with, (pickle.dumps(self.handler),))


def _set_up_with(handler: bytes) -> DjangoHandler:
    """In a child process: Django set up, then the handler unpickled."""
    if not apps.ready:
        django.setup()
    return DjangoHandler(pickle.loads(handler))
