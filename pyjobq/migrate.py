"""Apply pyjobq's shipped schema migrations to a database, using yoyo."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata, resources
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from yoyo import get_backend, read_migrations

from pyjobq.errors import SchemaTooNew, ServerTooOld

# The oldest PostgreSQL pyjobq supports: the suite runs on 15 and 18 (.ci/run), and 13 and 14
# are past their end of life. (The schema itself uses nothing newer than 13 has.)
MIN_SERVER_VERSION = 150000

# How long a migrator waits for another one to finish before giving up (yoyo's lock).
LOCK_TIMEOUT_SECONDS = 60

# The schema of everything pyjobq installs, yoyo's bookkeeping included (_yoyo_migration,
# _yoyo_log, _yoyo_version, yoyo_lock): nothing goes to public, and DROP SCHEMA removes it all.
SCHEMA = "pyjobq"

# Serialises the creation of the schema by concurrent first migrators: an advisory lock key
# ("pyjobq" in ASCII), held to the end of one short transaction.
SCHEMA_LOCK_KEY = 0x70796A6F6271

BOOKKEEPING_COMMENTS = {
    "_yoyo_migration": "yoyo-migrations: the pyjobq migrations applied (or adopted) here",
    "_yoyo_log": "yoyo-migrations: when each pyjobq migration was applied, marked or rolled back",
    "_yoyo_version": "yoyo-migrations: the version of these bookkeeping tables",
    "yoyo_lock": "yoyo-migrations: held by a migrator while it runs, so one applies at a time",
}


def migrations_dir() -> Path:
    """Return the directory of yoyo migration files: the installed copy, else the checkout's."""
    shipped = resources.files("pyjobq") / "migrations"
    if isinstance(shipped, Path) and shipped.is_dir():
        return shipped
    checkout = Path(__file__).resolve().parent.parent / "migrations"
    if checkout.is_dir():
        return checkout
    raise RuntimeError(f"pyjobq migrations not found in {shipped} nor in {checkout}")


def check_schema_version(version: int) -> str | None:
    """Refuse a database schema newer than :data:`SCHEMA_VERSION` (:class:`SchemaTooNew`);
    return a warning for an older one, ``None`` when they match."""
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"the database has pyjobq schema {version}, newer than the {SCHEMA_VERSION} "
            f"this pyjobq {_package_version()} knows",
            hint="Upgrade the pyjobq package of this process before running it.",
        )
    if version < SCHEMA_VERSION:
        return (
            f"the database has pyjobq schema {version}, older than the {SCHEMA_VERSION} "
            "this package was written for: run `pyjobq migrate`"
        )
    return None


def check_server_version(server_version: int) -> None:
    """Refuse a server older than :data:`MIN_SERVER_VERSION` (``server_version_num``)."""
    if server_version < MIN_SERVER_VERSION:
        # From 10 on the major version is one number; before, two (9.6 is 90600).
        major = (
            str(server_version // 10000)
            if server_version >= 100000
            else f"{server_version // 10000}.{server_version // 100 % 100}"
        )
        raise ServerTooOld(
            f"pyjobq needs PostgreSQL {MIN_SERVER_VERSION // 10000} or newer;"
            f" this server is PostgreSQL {major}",
            hint="Upgrade the server, or install pyjobq on a newer one.",
        )


def _package_version() -> str:
    try:
        return metadata.version("pyjobq")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def shipped_migrations() -> list[str]:
    """Return the ids of the shipped migrations (their file stems), in the order they apply."""
    return sorted(
        path.stem
        for path in migrations_dir().glob("*.sql")
        if not path.name.endswith(".rollback.sql")
    )


# The schema version this binding was written for: the number of shipped migrations, which is
# what ``schema_version()`` says after the last of them (the migration test holds the two equal,
# and migrate() adopts a schema installed with psql by it).
SCHEMA_VERSION = len(shipped_migrations())


def yoyo_url(dsn: str) -> str:
    """Turn a libpq conninfo string or postgresql:// URL into the yoyo database URL that
    :func:`migrate` uses: yoyo's bookkeeping tables in the schema ``pyjobq``.

    Every parameter goes into the query string, which yoyo passes to psycopg.connect()
    unchanged, so nothing is lost to URL quoting (yoyo does not unquote the path). yoyo takes
    ``schema`` out of it and sets its connection's ``search_path`` to that schema.
    """
    return "postgresql+psycopg:///?" + urlencode({**conninfo_to_dict(dsn), "schema": SCHEMA})


@dataclass(frozen=True, slots=True)
class Migrated:
    """What :func:`migrate` did: the steps it ran, the steps it found installed without its
    bookkeeping (by psql, or by yoyo's own command line) and recorded as applied, and the job
    types it registered (those already registered are not listed)."""

    applied: list[str]
    adopted: list[str]
    registered: list[str] = field(default_factory=list)


def migrate(dsn: str, job_types: Mapping[int, str] | None = None) -> Migrated:
    """Bring the database at ``dsn`` up to the latest pyjobq schema, then register the
    application's ``job_types`` (code: name; already registered: nothing to do, a code or name
    taken by another: :class:`~pyjobq.errors.JobTypeConflict`). Returns the ids of the steps
    applied (none when it was up to date), of those adopted, and the names registered.

    Concurrent callers are serialised by yoyo's lock (a row in ``pyjobq.yoyo_lock``), so
    only one of them applies each migration. yoyo's bookkeeping lives in the schema
    ``pyjobq``, which this creates first when it is missing. A schema installed without
    yoyo (``psql -f``, as the README allows) is adopted: the steps up to its
    ``schema_version()`` are recorded as applied, and only the later ones run. A server
    older than :data:`MIN_SERVER_VERSION` is refused (:class:`~pyjobq.errors.ServerTooOld`)
    before anything is written.
    """
    # One connection of our own beside yoyo's, idle (autocommit) while yoyo migrates.
    with psycopg.connect(dsn, autocommit=True) as conn:
        check_server_version(conn.info.server_version)
        create_schema(conn)
        migrations = read_migrations(str(migrations_dir()))
        with get_backend(yoyo_url(dsn)) as backend, backend.lock(LOCK_TIMEOUT_SECONDS):
            pending = backend.to_apply(migrations)
            installed = installed_version(conn) if len(pending) == len(migrations) else 0
            adopted = pending[:installed]
            if adopted:
                backend.mark_migrations(adopted)
                pending = backend.to_apply(migrations)
            backend.apply_migrations(pending)
        comment_bookkeeping(conn)
        registered = register_types(conn, job_types or {})
    return Migrated(
        applied=[m.id for m in pending], adopted=[m.id for m in adopted], registered=registered
    )


def register_types(conn: psycopg.Connection[Any], job_types: Mapping[int, str]) -> list[str]:
    """``job_type_register`` each code and name, in code order; returns the names that were
    not registered before. Idempotent: run it wherever the application migrates."""
    from pyjobq.queue import JobQueue

    queue = JobQueue(conn)
    rows = [queue.type_register(code, name) for code, name in sorted(job_types.items())]
    return [row.name for row in rows if row.created]


def create_schema(conn: psycopg.Connection[Any]) -> None:
    """Create the schema ``pyjobq`` unless it exists, for yoyo's tables to go in; migration
    0001 creates it only if missing. Checked first, because CREATE SCHEMA IF NOT EXISTS
    still needs the CREATE privilege on the database."""
    with conn.transaction():
        conn.execute("select pg_advisory_xact_lock(%s)", (SCHEMA_LOCK_KEY,))
        exists = conn.execute("select to_regnamespace(%s) is not null", (SCHEMA,)).fetchone()
        if not (exists and exists[0]):
            conn.execute(sql.SQL("create schema {}").format(sql.Identifier(SCHEMA)))


def comment_bookkeeping(conn: psycopg.Connection[Any]) -> None:
    """Say on yoyo's tables what they are, for whoever lists the schema's tables (those of
    them this yoyo release has)."""
    for table, comment in BOOKKEEPING_COMMENTS.items():
        name = sql.Identifier(SCHEMA, table)
        found = conn.execute("select to_regclass(%s) is not null", (name.as_string(conn),))
        if found.fetchone() == (True,):
            statement = sql.SQL("comment on table {} is {}").format(name, sql.Literal(comment))
            conn.execute(statement)


def installed_version(conn: psycopg.Connection[Any]) -> int:
    """``pyjobq.schema_version()`` of the database, 0 when it has no pyjobq schema."""
    row = conn.execute("select to_regproc('pyjobq.schema_version') is not null").fetchone()
    if not (row and row[0]):
        return 0
    version = conn.execute("select pyjobq.schema_version()").fetchone()
    return int(version[0]) if version else 0
