"""The one throwaway PostgreSQL every system runs on, and its fresh databases.

Every system and scenario run gets a database of its own on the same server, so
that no run sees another's tables, statistics or dead tuples, while all of them
share one set of server settings.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, LiteralString

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

if TYPE_CHECKING:
    # Imported at run time by run.py, once the checkout is on sys.path.
    from pyjobq.localpg import LocalPostgres

# libpq's environment variable for each conninfo key a driver needs.
LIBPQ_ENV = {
    "host": "PGHOST",
    "port": "PGPORT",
    "user": "PGUSER",
    "password": "PGPASSWORD",
    "dbname": "PGDATABASE",
}

# Reported with every result file whatever their source: they decide most figures.
REPORTED_SETTINGS = (
    "shared_buffers",
    "synchronous_commit",
    "fsync",
    "max_connections",
    "wal_level",
    "autovacuum",
    "work_mem",
    "checkpoint_timeout",
    "max_wal_size",
)


def one(conn: psycopg.Connection[Any], query: LiteralString, params: Any = None) -> Any:
    """The first column of the one row ``query`` returns."""
    row = conn.execute(query, params).fetchone()
    if row is None:
        raise RuntimeError(f"no row from {query!r}")
    return row[0]


def db_name(system: str, scenario: str) -> str:
    """The database of one system's scenario run: readable in pg_stat_* and server logs."""
    return "bench_" + re.sub(r"[^a-z0-9]+", "_", f"{system}_{scenario}".lower())


class Cluster:
    """The server every system runs on, and its fresh databases."""

    def __init__(self, server: LocalPostgres) -> None:
        self.server = server

    def dsn(self, dbname: str) -> str:
        return self.server.dsn(dbname)

    def program(self, name: str) -> Path:
        """A client program (pgbench) of the server's own version."""
        return Path(self.server.bindir) / name

    def conninfo(self, dbname: str) -> dict[str, str]:
        info = conninfo_to_dict(self.dsn(dbname))
        return {k: str(v) for k, v in info.items() if v is not None}

    def connect(self, dbname: str) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn(dbname), autocommit=True)

    def libpq_env(self, dbname: str) -> dict[str, str]:
        """This process's environment with only the database's PG* variables.

        Drivers in any language find their database there; PG* variables of the
        caller's own would point them elsewhere, so they are dropped.
        """
        info = self.conninfo(dbname)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update({LIBPQ_ENV[k]: v for k, v in info.items() if k in LIBPQ_ENV})
        return env

    @contextmanager
    def fresh_database(self, name: str) -> Iterator[str]:
        """An empty database ``name`` (dropped first if a failed run left it), dropped after."""
        self._drop(name)
        with self.connect("postgres") as conn:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
        try:
            yield name
        finally:
            self._drop(name)

    def _drop(self, name: str) -> None:
        with self.connect("postgres") as conn:
            conn.execute(
                sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name))
            )

    @contextmanager
    def server_setting(self, name: str, value: str) -> Iterator[None]:
        """``name = value`` for the whole server (ALTER SYSTEM and a reload), reset after."""

        def alter(statement: sql.Composed) -> None:
            with self.connect("postgres") as admin:
                admin.execute(statement)
                admin.execute("select pg_reload_conf()")

        alter(sql.SQL("alter system set {} = {}").format(sql.Identifier(name), sql.Literal(value)))
        try:
            yield
        finally:
            alter(sql.SQL("alter system reset {}").format(sql.Identifier(name)))

    def settle(self, dbname: str, *, analyze: bool = False) -> None:
        """Put every system in the same state before a timed phase."""
        with self.connect(dbname) as conn:
            if analyze:
                conn.execute("analyze")
            conn.execute("checkpoint")

    @contextmanager
    def wal_window(self, dbname: str) -> Iterator[dict[str, Any]]:
        """What the block writes to the WAL, filled into the dict it yields once it ends: bytes,
        records by type (``pg_walinspect``: count, bytes, of which full-page images) and the
        dead tuples it left in ``dbname``'s tables. The WAL is the server's: one system runs at
        a time, so it is that system's."""
        # The flushed position, at both ends: pg_walinspect reads no further.
        flushed = "select pg_current_wal_flush_lsn()::text"
        with self.connect("postgres") as conn:
            conn.execute("create extension if not exists pg_walinspect")
            start = str(one(conn, flushed))
        found: dict[str, Any] = {}
        yield found
        with self.connect("postgres") as conn:
            end = str(one(conn, flushed))
            found["bytes"] = float(one(conn, "select pg_wal_lsn_diff(%s, %s)", (end, start)))
            found["records"] = {
                name: {"count": count, "bytes": record + fpi, "fpi_bytes": fpi}
                for name, count, record, fpi in conn.execute(
                    'select "resource_manager/record_type", count, record_size, fpi_size'
                    " from pg_get_wal_stats(%s, %s, true) where count > 0 order by count desc",
                    (start, end),
                )
            }
        with self.connect(dbname) as conn:
            dead = "select coalesce(sum(n_dead_tup), 0) from pg_stat_user_tables"
            found["dead_tuples"] = int(one(conn, dead))

    def describe(self) -> dict[str, Any]:
        """The server's version, and every setting that is not a default or is reported anyway."""
        with self.connect("postgres") as conn:
            version = conn.execute("select version()").fetchone()
            rows = conn.execute(
                "select name, setting, unit from pg_settings"
                " where source not in ('default', 'override') or name = any(%s)"
                " order by name",
                (list(REPORTED_SETTINGS),),
            ).fetchall()
        return {
            "version": version[0] if version else None,
            "settings": {name: f"{setting}{unit or ''}" for name, setting, unit in rows},
        }
