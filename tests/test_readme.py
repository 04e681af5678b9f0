"""The README's psql session runs as the role it shows, and prints what the README shows."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from pyjobq.localpg import LocalPostgres
from tests.test_sql_api_doc import mask

README = Path(__file__).resolve().parent.parent / "README.md"
PROMPT = "app=> "
BLOCK_END = "-- end of statement --"


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
    pg_server: LocalPostgres, login_role: Callable[..., str]
) -> None:
    statements, shown = session()
    example = re.search(
        r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "".join(shown)
    )
    assert example is not None
    script = ""
    for n, statement in enumerate(statements):
        # The README's job id is the one its first enqueue returned; here, the one this one did.
        script += statement.replace(f"'{example.group(0)}'", ":'job'")
        if n == 1:
            script += "select job_id as job from job_list(p_limit => 1) \\gset\n"
        script += f"\\echo '{BLOCK_END}'\n"
    app = login_role("pyjobq_producer", "pyjobq_worker")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")} | {"LC_ALL": "C"}
    result = subprocess.run(
        [
            pg_server.bindir / "psql",
            "-X",
            "-q",
            "-P",
            "footer=off",
            "-v",
            "SHOW_CONTEXT=never",
            "-d",
            app,
        ],
        input=script,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        text=True,
        check=False,
    )
    printed = result.stdout.split(BLOCK_END + "\n")[:-1]
    assert len(printed) == len(statements), result.stdout
    for statement, expected, output in zip(statements, shown, printed, strict=True):
        assert mask(output) == mask(expected), (
            f"{statement}README shows:\n{expected}psql:\n{output}"
        )
