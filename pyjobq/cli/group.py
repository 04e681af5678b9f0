"""The ``pyjobq`` command group, to which each module of this package adds its commands."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="pyjobq")
def main() -> None:
    """pyjobq: a job queue that lives inside PostgreSQL.

    Every command talks to the database given by --dsn, $PYJOBQ_DSN or $DATABASE_URL.
    """
