"""Apply pyjobq's shipped schema migrations to a database, using yoyo."""

from __future__ import annotations

from importlib import metadata, resources
from pathlib import Path
from urllib.parse import urlencode

from psycopg.conninfo import conninfo_to_dict
from yoyo import get_backend, read_migrations

from pyjobq.errors import SchemaTooNew

# The schema version this binding was written for: ``schema_version()`` after the last
# shipped migration, and the number of migrations.
SCHEMA_VERSION = 2

# How long a migrator waits for another one to finish before giving up (yoyo's lock).
LOCK_TIMEOUT_SECONDS = 60


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


def yoyo_url(dsn: str) -> str:
    """Turn a libpq conninfo string or postgresql:// URL into a yoyo database URL.

    Every parameter goes into the query string, which yoyo passes to psycopg.connect()
    unchanged, so nothing is lost to URL quoting (yoyo does not unquote the path).
    """
    return "postgresql+psycopg:///?" + urlencode(conninfo_to_dict(dsn))


def migrate(dsn: str) -> None:
    """Bring the database at ``dsn`` up to the latest pyjobq schema; a no-op when it is.

    Concurrent callers are serialised by yoyo's lock (a row in ``yoyo_lock``), so only
    one of them applies each migration.
    """
    migrations = read_migrations(str(migrations_dir()))
    with get_backend(yoyo_url(dsn)) as backend, backend.lock(LOCK_TIMEOUT_SECONDS):
        backend.apply_migrations(backend.to_apply(migrations))
