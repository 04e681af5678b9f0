"""The README's psql session runs as the role it shows, and prints what the README shows."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import psycopg

from pyjobq.localpg import LocalPostgres
from tests.sqlhelp import UUID, granted_functions, mask

README = Path(__file__).resolve().parent.parent / "README.md"
SQL = README.parent / "sql" / "pyjobq.sql"
PROMPT = "app=> "


def session() -> tuple[list[str], list[str]]:
    """The statements of the README's psql session and what it shows after each."""
    text = README.read_text()
    block = re.search(r"A session in psql.*?```text\n(.*?)```", text, flags=re.DOTALL)
    assert block is not None, "the README's psql session"
    statements: list[str] = []
    shown: list[str] = []
    for line in block.group(1).splitlines(keepends=True):
        if line.startswith(PROMPT):
            statements.append(line.removeprefix(PROMPT))
            shown.append("")
        else:
            shown[-1] += line
    return statements, shown


def test_the_readmes_psql_session_runs_as_the_app_role(
    pg_server: LocalPostgres, conn: psycopg.Connection, login_role: Callable[..., str]
) -> None:
    statements, shown = session()
    # The README's job id and lease token, in order of appearance; each statement runs with the
    # ids this session's calls returned in their place (the schema owner reads them in between:
    # psql could not show the claim and keep its token too).
    readme_job, readme_token = dict.fromkeys(UUID.findall("".join(shown)))
    app = login_role("pyjobq_producer", "pyjobq_worker")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")} | {
        "LC_ALL": "C",
        "PGOPTIONS": "-c search_path=public,pyjobq",
    }
    actual: dict[str, str] = {}
    for statement, expected in zip(statements, shown, strict=True):
        for readme_value, value in actual.items():
            statement = statement.replace(readme_value, value)
        result = subprocess.run(
            [pg_server.bindir / "psql", "-X", "-q", "-P", "footer=off",
             "-v", "SHOW_CONTEXT=never", "-d", app],
            input=statement,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            text=True,
            check=False,
        )  # fmt: skip
        assert mask(result.stdout) == mask(expected), (
            f"{statement}README shows:\n{expected}psql:\n{result.stdout}"
        )
        job = conn.execute("select job_id, lease_token from pyjobq.job_all").fetchone()
        if job is not None:
            actual[readme_job] = str(job[0])
            if job[1] is not None:
                actual[readme_token] = str(job[1])


GROUPS = ("pyjobq_producer", "pyjobq_worker", "pyjobq_observer", "pyjobq_admin")
ROLES_TABLE = re.compile(
    r"\| group role \| may execute \|\n.*?\nEvery group may also call .*?\.\n", re.DOTALL
)


def roles_table(granted: dict[str, set[str]]) -> str:
    """The README's table of what each group role may execute, from the catalog's grants: a
    row a group with the functions not every group may call, then those, each list in the order
    of sql/pyjobq.sql."""
    order = re.findall(r"^create function pyjobq\.(\w+)\(", SQL.read_text(), flags=re.MULTILINE)
    everyone = set.intersection(*(granted[g] for g in GROUPS))

    def listed(functions: set[str]) -> str:
        return ", ".join(f"`{f}`" for f in sorted(functions, key=order.index))

    rows = "".join(f"| `{g}` | {listed(granted[g] - everyone)} |\n" for g in GROUPS)
    return (
        f"| group role | may execute |\n|---|---|\n{rows}\n"
        f"Every group may also call {listed(everyone)}.\n"
    )


def test_the_readmes_roles_table_is_what_the_installed_schema_grants(
    conn: psycopg.Connection,
) -> None:
    """PYJOBQ_REGEN_DOC=1 rewrites the table from the catalog."""
    text = README.read_text()
    shown = ROLES_TABLE.search(text)
    assert shown is not None, "the README's roles table"
    table = roles_table(granted_functions(conn))
    if os.environ.get("PYJOBQ_REGEN_DOC") == "1":
        README.write_text(text.replace(shown.group(0), table))
    else:
        assert shown.group(0) == table
