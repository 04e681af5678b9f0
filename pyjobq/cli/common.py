"""What every command shares: the database, errors as one line and an exit code, parsing."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, NoReturn, TypeVar

import click
import psycopg

from pyjobq.errors import InvalidArgument, PyjobqError
from pyjobq.migrate import check_schema_version
from pyjobq.queue import JobQueue

F = TypeVar("F", bound=Callable[..., Any])

DSN_ENV = ("PYJOBQ_DSN", "DATABASE_URL")

# Exit codes: 1 for an error the database reported, 2 for bad usage (click's own), 3 when
# the database cannot be reached.
EXIT_ERROR = 1
EXIT_UNREACHABLE = 3


def fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    click.secho(f"pyjobq: {message}", err=True, fg="red")
    sys.exit(code)


def resolve_dsn(dsn: str | None) -> str:
    for value in (dsn, *(os.environ.get(name) for name in DSN_ENV)):
        if value:
            return value
    fail("no database given: pass --dsn or set PYJOBQ_DSN or DATABASE_URL", 2)


def describe(error: BaseException) -> tuple[str, int]:
    """A one-paragraph message and exit code for an error reaching or using the database."""
    if isinstance(error, PyjobqError):
        hint = f"\nhint: {error.hint}" if error.hint else ""
        return f"{error}{hint}", EXIT_ERROR
    if isinstance(error, psycopg.errors.UndefinedFunction | psycopg.errors.InvalidSchemaName):
        return "this database has no pyjobq schema: run `pyjobq migrate` first", EXIT_ERROR
    if isinstance(error, psycopg.OperationalError):
        lines = str(error).strip().splitlines() or [type(error).__name__]
        return f"cannot use the database: {lines[0]}", EXIT_UNREACHABLE
    if isinstance(error, psycopg.Error):
        return f"database error: {str(error).strip()}", EXIT_ERROR
    return str(error), EXIT_ERROR


@contextmanager
def reporting() -> Iterator[None]:
    """Turn database and pyjobq errors into a message and an exit code, never a traceback."""
    try:
        yield
    except (PyjobqError, psycopg.Error) as e:
        message, code = describe(e)
        fail(message, code)


@contextmanager
def queue(dsn: str | None) -> Iterator[JobQueue]:
    """A JobQueue on one autocommit connection to the resolved DSN, once its schema version
    is known to suit this package (newer: refused; older: a warning)."""
    with reporting(), psycopg.connect(resolve_dsn(dsn), autocommit=True, connect_timeout=10) as c:
        q = JobQueue(c)
        warning = check_schema_version(q.schema_version())
        if warning:
            click.secho(f"pyjobq: warning: {warning}", err=True, fg="yellow")
        yield q


def log_options(f: F) -> F:
    """--log-level and --log-format, as the worker and the dashboard take them."""
    f = click.option(
        "--log-format",
        default="text",
        show_default=True,
        type=click.Choice(["text", "json"]),
        help="text lines for people, one JSON object per line for machines",
    )(f)
    return click.option(
        "--log-level",
        default="INFO",
        show_default=True,
        type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False),
    )(f)


def dsn_option(f: F) -> F:
    return click.option(
        "--dsn",
        metavar="DSN",
        help="libpq conninfo or postgresql:// URL [default: $PYJOBQ_DSN, else $DATABASE_URL]",
    )(f)


def parse_json_object(text: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise click.BadParameter(f"{where} is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise click.BadParameter(f"{where} must be a JSON object, e.g. '{{\"id\": 1}}'")
    return value


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)?\s*$")
_UNIT = {None: 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    match = _DURATION.match(text)
    if not match:
        raise click.BadParameter(f"{text!r} is not a duration such as 90s, 30m, 12h or 7d")
    return timedelta(seconds=float(match.group(1)) * _UNIT[match.group(2)])


def resolve_type(q: JobQueue, value: str) -> int:
    """A job type given as its code or its registered name (``job_type_code``: the name as
    registered, else the one name that matches it ignoring case)."""
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        return q.type_code(value)
    except InvalidArgument:
        known = ", ".join(f"{t.job_type}={t.name}" for t in q.types())
        fail(f"no job type is named {value!r} (registered: {known})", 2)
