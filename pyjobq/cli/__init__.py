"""The ``pyjobq`` command: migrate, enqueue, run workers, inspect and operate a queue.

One module per kind of command (``produce``, ``work``, ``inspection``, ``operations``,
``schedules``, ``batches``, ``limits``, ``dashboard``), each
adding its commands to the group in ``group``; ``common`` holds what they share.
"""

from pyjobq.cli import (
    batches,
    dashboard,
    inspection,
    limits,
    operations,
    produce,
    schedules,
    work,
)
from pyjobq.cli.group import main

__all__ = [
    "batches",
    "dashboard",
    "inspection",
    "limits",
    "main",
    "operations",
    "produce",
    "schedules",
    "work",
]
