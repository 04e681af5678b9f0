"""The README's psql session runs as the role it shows, and prints what the README shows."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import psycopg

from pyjobq.localpg import LocalPostgres
from tests.sqlhelp import UUID, mask

README = Path(__file__).resolve().parent.parent / "README.md"
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
