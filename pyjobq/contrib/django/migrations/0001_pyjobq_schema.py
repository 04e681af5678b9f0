"""Install or upgrade the pyjobq schema when ``manage.py migrate`` runs, on every database it
migrates: the application's, and the test databases Django's test runner creates.

The schema is pyjobq's own, migrated by :func:`pyjobq.migrate` on a connection of its own (the
same as ``manage.py pyjobq migrate``); a pyjobq release whose schema changes ships another of
these steps. Reversing it does nothing: it never drops a queue and its jobs.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import migrations


def install(apps: Any, schema_editor: Any) -> None:
    from pyjobq.contrib.django import conninfo
    from pyjobq.migrate import migrate

    migrate(conninfo(schema_editor.connection.alias))


class Migration(migrations.Migration):
    # pyjobq.migrate() commits on its own connection; nothing here runs in Django's.
    atomic = False
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []
    operations: ClassVar[list[Any]] = [
        migrations.RunPython(install, migrations.RunPython.noop, elidable=False)
    ]
