"""``manage.py pyjobq COMMAND …``: the ``pyjobq`` command line on Django's database."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import DEFAULT_DB_ALIAS

from pyjobq.cli import main
from pyjobq.contrib.django import conninfo, django_handler

# The demo runs on a throwaway server unless given --dsn: it never defaults to the
# application's database.
_NOT_ON_DJANGO_DATABASE = frozenset({"demo"})


class Command(BaseCommand):
    help = (
        "Run a pyjobq command (migrate, worker, counts, jobs, …) on a database of"
        " settings.DATABASES; `manage.py pyjobq` alone lists them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--database",
            default=DEFAULT_DB_ALIAS,
            help="the settings.DATABASES alias to use [default: default]",
        )
        parser.add_argument("pyjobq_args", nargs=argparse.REMAINDER, metavar="COMMAND …")

    def handle(self, *args: Any, database: str, pyjobq_args: list[str], **options: Any) -> None:
        """Run ``pyjobq`` with ``--dsn`` defaulting to the database's conninfo; exits with
        the ``pyjobq`` command's own status."""
        dsn = conninfo(database)
        defaults = {
            name: {"dsn": dsn}
            for name, command in main.commands.items()
            if name not in _NOT_ON_DJANGO_DATABASE
            and any(param.name == "dsn" for param in command.params)
        }
        main.main(
            args=pyjobq_args or ["--help"],
            prog_name="manage.py pyjobq",
            default_map=defaults,
            obj=django_handler,  # the worker wraps each handler in it
        )
