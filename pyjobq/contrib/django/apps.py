"""The Django application that provides the ``pyjobq`` management command."""

from __future__ import annotations

from django.apps import AppConfig


class PyjobqConfig(AppConfig):
    name = "pyjobq.contrib.django"
    label = "pyjobq"
    verbose_name = "pyjobq"
