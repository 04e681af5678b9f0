"""Handlers for ``manage.py pyjobq worker tests.djangoapp.handlers:HANDLERS``: each writes
through Django's own connection, as an application's handler would with its models."""

from __future__ import annotations

from django.db import connection

from pyjobq.params import Payload
from pyjobq.rows import ClaimedJob


def deliver(job: ClaimedJob) -> Payload:
    # Autocommit, as most ORM calls run: no atomic() block whose failure drops the connection.
    with connection.cursor() as cursor:
        cursor.execute("insert into delivered values (%s)", [job.payload["email"]])
    return {"delivered": job.payload["email"]}


HANDLERS = {2: deliver}
