"""The SQL conformance suite: SQL scenarios run by psql and node-postgres, diffed with goldens.

Each ``tests/conformance/sql/NN_name.sql`` runs against a fresh database into which
``sql/pyjobq.sql`` was installed with ``psql -1``; what ``psql -X -a -q`` prints for it
(statements echoed, results, ``ERROR:  <sqlstate>``) must equal
``tests/conformance/expected/NN_name.out`` byte for byte. The Node.js runner
(``tests/conformance/node/run-scenario.js``) sends the same statements through the
``pg`` package and must print the same text.

To regenerate the goldens after an intended change, run
``PYJOBQ_REGEN_GOLDEN=1 .venv/bin/pytest tests/test_conformance.py`` and review the diff.
"""

from __future__ import annotations

import difflib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pyjobq.localpg import LocalPostgres

ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE = ROOT / "tests" / "conformance"
SCENARIOS = sorted((CONFORMANCE / "sql").glob("*.sql"))
NODE_DIR = CONFORMANCE / "node"
REGENERATE = os.environ.get("PYJOBQ_REGEN_GOLDEN") == "1"


def client_env(server: LocalPostgres, dbname: str) -> dict[str, str]:
    """Environment for psql and node: libpq variables only, no user psqlrc, C messages."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(
        PGHOST=server.host,
        PGPORT=str(server.port),
        PGUSER=server.user,
        PGDATABASE=dbname,
        LC_ALL="C",
    )
    return env


def install(server: LocalPostgres, dbname: str) -> None:
    """A fresh database with pyjobq installed from the canonical SQL file, as an operator would."""
    with psycopg.connect(server.dsn("postgres"), autocommit=True) as admin:
        admin.execute(sql.SQL("drop database if exists {}").format(sql.Identifier(dbname)))
        admin.execute(sql.SQL("create database {}").format(sql.Identifier(dbname)))
    subprocess.run(
        [
            server.bindir / "psql",
            "-X",
            "-q",
            "-1",
            "-v",
            "ON_ERROR_STOP=1",
            "-f",
            ROOT / "sql" / "pyjobq.sql",
        ],
        env=client_env(server, dbname),
        check=True,
        capture_output=True,
        text=True,
    )


@pytest.fixture
def scenario_db(pg_server: LocalPostgres, request: pytest.FixtureRequest) -> Iterator[str]:
    dbname = "conformance_" + request.node.callspec.id.replace("-", "_").lower()
    install(pg_server, dbname)
    yield dbname
    with psycopg.connect(pg_server.dsn("postgres"), autocommit=True) as admin:
        admin.execute(sql.SQL("drop database if exists {}").format(sql.Identifier(dbname)))


def compare(script: Path, actual: str, client: str) -> None:
    golden = CONFORMANCE / "expected" / (script.stem + ".out")
    if REGENERATE and client == "psql":
        golden.write_text(actual)
    assert golden.exists(), f"no golden {golden}; create it with PYJOBQ_REGEN_GOLDEN=1"
    expected = golden.read_text()
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                actual.splitlines(keepends=True),
                fromfile=str(golden.relative_to(ROOT)),
                tofile=f"{client} output",
            )
        )
        pytest.fail(f"{client} output of {script.name} differs from its golden:\n{diff}")


def test_every_scenario_has_a_golden() -> None:
    goldens = {p.stem for p in (CONFORMANCE / "expected").glob("*.out")}
    assert SCENARIOS, "no scenarios found"
    assert goldens == {p.stem for p in SCENARIOS}


@pytest.mark.parametrize("script", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_psql(pg_server: LocalPostgres, scenario_db: str, script: Path) -> None:
    # pg_regress style: the script on stdin, so errors carry no file:line prefix;
    # stderr merged into stdout in the order psql writes them.
    with script.open() as stdin:
        result = subprocess.run(
            [pg_server.bindir / "psql", "-X", "-a", "-q"],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=client_env(pg_server, scenario_db),
            text=True,
            check=False,
        )
    assert result.returncode == 0, result.stdout
    compare(script, result.stdout, "psql")


@pytest.mark.parametrize("script", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_node_pg(pg_server: LocalPostgres, scenario_db: str, script: Path, node: str) -> None:
    result = subprocess.run(
        [node, NODE_DIR / "run-scenario.js", script],
        capture_output=True,
        env=client_env(pg_server, scenario_db),
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    compare(script, result.stdout, "node-postgres")
