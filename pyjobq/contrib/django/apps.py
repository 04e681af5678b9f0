"""The Django application that provides the ``pyjobq`` management command, installs the schema
with ``manage.py migrate``, and registers the job types named in ``settings.PYJOBQ_JOB_TYPES``
and the queues of the pyjobq backends of ``settings.TASKS`` (Django 6, or the django-tasks
backport), with their policies."""

from __future__ import annotations

from importlib.util import find_spec
from typing import Any

import django
from django.apps import AppConfig
from django.db.models.signals import post_migrate


class PyjobqConfig(AppConfig):
    name = "pyjobq.contrib.django"
    label = "pyjobq"
    verbose_name = "pyjobq"

    def ready(self) -> None:
        post_migrate.connect(register_job_types, sender=self)
        if django.VERSION >= (6,) or find_spec("django_tasks") is not None:
            post_migrate.connect(install_task_queues, sender=self)


def register_job_types(sender: AppConfig, using: str, **kwargs: Any) -> None:
    """After every ``manage.py migrate`` of a database (the test runner's included), register
    ``settings.PYJOBQ_JOB_TYPES`` (code: name) there; those already registered are left as
    they are, so adding a type to the setting is all it takes."""
    from django.conf import settings

    job_types = getattr(settings, "PYJOBQ_JOB_TYPES", None)
    if not job_types:
        return
    import psycopg

    from pyjobq.contrib.django import conninfo
    from pyjobq.migrate import register_types

    with psycopg.connect(conninfo(using), autocommit=True) as conn:
        register_types(conn, job_types)


def install_task_queues(sender: AppConfig, using: str, **kwargs: Any) -> None:
    """After every ``manage.py migrate`` of a database, allocate the job type of each queue of
    the pyjobq backends of ``settings.TASKS`` that use it, and set the queue's policy."""
    from pyjobq.contrib.django.tasks import install

    install(using)
