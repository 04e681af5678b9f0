"""One throwaway server per run; each test gets a fresh database cloned from a migrated template."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from hypothesis import Phase, settings
from psycopg import sql
from psycopg.conninfo import make_conninfo

from pyjobq.localpg import LocalPostgres, which_server
from pyjobq.migrate import migrate

# Hypothesis keeps no example database. Its default, .hypothesis/ in the working directory, made
# an example saved by one run replay in every later run of the checkout, against whatever the
# code had become. Each run explores afresh; a failure prints the blob that replays it exactly
# (@reproduce_failure). It is reported as found: shrinking replays a machine of 40 steps
# against the database hundreds of times, which can outlast the test's timeout, and then the
# timeout is all the run shows. PYJOBQ_SHRINK=1 shrinks it (with -o timeout=0).
settings.register_profile(
    "pyjobq",
    database=None,
    print_blob=True,
    phases=[p for p in Phase if p is not Phase.shrink or os.environ.get("PYJOBQ_SHRINK") == "1"],
)
settings.load_profile("pyjobq")

# Durability is worthless for a server that is deleted after the run.
SERVER_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}

Connection = psycopg.Connection[tuple[Any, ...]]

# The modules whose tests run workers, processes or other servers, drive Node.js or Hypothesis,
# or build databases by migration: marked slow as a whole, so that `-m "not slow"` is the SQL
# API and the binding (about a minute on 2 cores, most of it cloning a database per test).
# Tests elsewhere that wait or load carry the mark themselves.
SLOW_MODULES = {
    "test_cli",
    "test_concurrency",
    "test_conformance",
    "test_contrib_django",
    "test_cross_client",
    "test_fastapi_example",
    "test_faults",
    "test_fuzz",
    "test_migrations",
    "test_model",
    "test_pgbouncer",
    "test_races",
    "test_wheel",
    "test_worker",
    "test_worker_poison",
    "test_worker_process",
}


def pytest_report_header() -> str:
    """Which server the run uses (PYJOBQ_PG and PYJOBQ_PG_BINDIR choose, pyjobq.localpg)."""
    return which_server()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.stem in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


def server_parent() -> str | None:
    """Where the session's server keeps its data: ``$PYJOBQ_TEST_SERVER_DIR`` (scripts/test
    makes it on /dev/shm and removes it however the run ends), else /dev/shm, else the
    temporary directory. Every test clones a database, which copies the template's files:
    0.03 s on tmpfs, up to 0.3 s on this machine's disk, for each of some 560 tests."""
    given = os.environ.get("PYJOBQ_TEST_SERVER_DIR")
    if given:
        return given
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


@pytest.fixture(scope="session")
def pg_server() -> Iterator[LocalPostgres]:
    """The session's server; tests use .bindir for psql/pg_dump and .restart() for crashes."""
    with tempfile.TemporaryDirectory(prefix="pyjobq-pg-", dir=server_parent()) as base:
        os.chmod(base, 0o755)  # the server may run as the postgres OS user (we are root)
        with LocalPostgres(Path(base) / "server", settings=SERVER_SETTINGS) as server:
            yield server


# Each test's database, cloned from the template and dropped after the test.
TEST_DATABASE = "pyjobq_test"
TEMPLATE = "pyjobq_template"


@pytest.fixture(scope="session")
def pg_template(pg_server: LocalPostgres) -> str:
    """The name of the migrated template database, created once per run (the server, and it
    with it, is deleted at the end of the run)."""
    with psycopg.connect(pg_server.dsn(), autocommit=True) as admin:
        admin.execute(sql.SQL("create database {}").format(sql.Identifier(TEMPLATE)))
    migrate(pg_server.dsn(TEMPLATE))
    return TEMPLATE


@pytest.fixture
def pg_database(pg_server: LocalPostgres, pg_template: str) -> Iterator[Connection]:
    """A connection to the test's own database, cloned from the migrated template and
    dropped afterwards. FILE_COPY (PostgreSQL 15) clones a database this small in about
    half the time of the default WAL_LOG, and every test starts with one."""
    name = sql.Identifier(TEST_DATABASE)
    template = sql.Identifier(pg_template)
    with psycopg.connect(pg_server.dsn(), autocommit=True) as admin:
        strategy = sql.SQL(" strategy = file_copy" if admin.info.server_version >= 150000 else "")
        admin.execute(sql.SQL("create database {} template {}").format(name, template) + strategy)
    try:
        with psycopg.connect(pg_server.dsn(TEST_DATABASE)) as connection:
            yield connection
    finally:
        with psycopg.connect(pg_server.dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("drop database {} with (force)").format(name))


@pytest.fixture
def dsn(pg_server: LocalPostgres, pg_database: Connection) -> str:
    """libpq conninfo of this test's fresh, migrated database."""
    return pg_server.dsn(pg_database.info.dbname)


@pytest.fixture
def conn(pg_database: Connection) -> Connection:
    """An autocommit connection to this test's database."""
    pg_database.autocommit = True
    return pg_database


@pytest.fixture
def make_conn(dsn: str) -> Iterator[Callable[[], Connection]]:
    """Open extra autocommit connections to this test's database; all closed afterwards."""
    opened: list[Connection] = []

    def connect() -> Connection:
        connection = psycopg.connect(dsn, autocommit=True)
        opened.append(connection)
        return connection

    yield connect
    for connection in opened:
        connection.close()


@pytest.fixture
def login_role(conn: Connection, dsn: str) -> Iterator[Callable[..., str]]:
    """Create fresh LOGIN roles, members of the given group roles, and return the conninfo of
    this test's database as each; the roles are dropped afterwards (privileges granted or
    revoked on functions go with the test's database)."""
    created: list[sql.Identifier] = []

    def create(*groups: str) -> str:
        name = f"app_{uuid4().hex[:12]}"
        created.append(sql.Identifier(name))
        conn.execute(sql.SQL("create role {} login").format(created[-1]))
        for group in groups:
            conn.execute(sql.SQL("grant {} to {}").format(sql.Identifier(group), created[-1]))
        return make_conninfo(dsn, user=name)

    yield create
    for name in created:
        conn.execute(sql.SQL("drop owned by {}").format(name))
        conn.execute(sql.SQL("drop role {}").format(name))


@pytest.fixture(scope="session")
def node() -> str:
    """The node executable, with the Node.js test clients' packages (scripts/setup-node)."""
    executable = shutil.which("node")
    if executable is None:
        pytest.skip("node is not installed")
    setup = subprocess.run(
        [Path(__file__).resolve().parent.parent / "scripts" / "setup-node"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert setup.returncode == 0, f"scripts/setup-node failed:\n{setup.stdout}{setup.stderr}"
    return executable


@pytest.fixture
def new_database(pg_server: LocalPostgres) -> Iterator[Callable[[], str]]:
    """Create empty databases (no pyjobq schema) and return their conninfo; dropped afterwards."""
    names: list[str] = []

    def create() -> str:
        name = f"pyjobq_empty_{len(names)}"
        with psycopg.connect(pg_server.dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
        names.append(name)
        return pg_server.dsn(name)

    yield create
    with psycopg.connect(pg_server.dsn(), autocommit=True) as admin:
        for name in names:
            admin.execute(sql.SQL("drop database {} with (force)").format(sql.Identifier(name)))
