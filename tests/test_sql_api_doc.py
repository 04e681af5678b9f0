"""docs/sql-api.md matches the installed functions, and its examples print what the doc shows.

The reference is checked against the live catalog: every public function has a section with
its exact argument list (defaults included) and result as ``pg_get_function_arguments`` and
``pg_get_function_result`` print them, its ``COMMENT ON`` text, and a table row per parameter
and result column. The examples are run as one psql session; their output must equal the
``text`` block after each ``sql`` block, job ids aside (random uuids are numbered in order of
appearance on both sides). After an intended change, rewrite the output blocks with
``PYJOBQ_REGEN_DOC=1 .venv/bin/pytest tests/test_sql_api_doc.py`` and review the diff.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from pyjobq.localpg import LocalPostgres
from tests.sqlhelp import granted_functions, mask, one

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "sql-api.md"
SQL_FILE = ROOT / "sql" / "pyjobq.sql"
REGENERATE = os.environ.get("PYJOBQ_REGEN_DOC") == "1"

BLOCK_END = "@@@ end of example @@@"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Function:
    name: str
    arguments: str
    result: str
    comment: str
    argument_names: list[str]
    result_columns: list[str]


def public_functions(conn: psycopg.Connection) -> dict[str, Function]:
    rows = conn.execute(
        """
        select p.proname,
               pg_get_function_arguments(p.oid),
               pg_get_function_result(p.oid),
               coalesce(obj_description(p.oid, 'pg_proc'), ''),
               coalesce(array(select a.name
                                from unnest(p.proargnames, coalesce(p.proargmodes, '{}'))
                                     with ordinality as a(name, mode, i)
                               where a.mode is distinct from 't'
                               order by a.i), '{}'),
               coalesce(array(select a.name
                                from unnest(p.proargnames, p.proargmodes)
                                     with ordinality as a(name, mode, i)
                               where a.mode = 't'
                               order by a.i), '{}')
          from pg_proc p
          join pg_namespace n on n.oid = p.pronamespace
         where n.nspname = 'pyjobq'
           and p.proname !~ '^_'
         order by 1
        """
    ).fetchall()
    names = [row[0] for row in rows]
    assert len(names) == len(set(names)), f"overloaded public functions: {names}"
    return {row[0]: Function(*row) for row in rows}


def sections(doc: str) -> dict[str, str]:
    """Text of each '### `name`' section, up to the next heading."""
    parts = re.split(r"^(#{1,3} .*)$", doc, flags=re.MULTILINE)
    found: dict[str, str] = {}
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        match = re.fullmatch(r"### `(\w+)`", heading)
        if match:
            found[match.group(1)] = body
    return found


def examples(doc: str) -> list[tuple[re.Match[str], re.Match[str] | None]]:
    """Each sql block with the text block that directly follows it, if any."""
    fences = list(FENCE.finditer(doc))
    pairs: list[tuple[re.Match[str], re.Match[str] | None]] = []
    for i, fence in enumerate(fences):
        if fence.group(1) != "sql":
            continue
        following = fences[i + 1] if i + 1 < len(fences) else None
        if (
            following is not None
            and following.group(1) == "text"
            and doc[fence.end() : following.start()].strip() == ""
        ):
            pairs.append((fence, following))
        else:
            pairs.append((fence, None))
    return pairs


@pytest.fixture
def doc() -> str:
    return DOC.read_text()


def test_every_public_function_is_documented(conn: psycopg.Connection, doc: str) -> None:
    assert set(sections(doc)) == set(public_functions(conn))


def test_signatures_and_comments_match_the_catalog(conn: psycopg.Connection, doc: str) -> None:
    documented = sections(doc)
    for name, function in public_functions(conn).items():
        body = documented[name]
        signature = f"pyjobq.{name}({function.arguments})\nreturns {function.result}\n"
        assert signature in body, f"{name}: signature should read\n{signature}"
        assert function.comment, f"{name} has no COMMENT ON FUNCTION"
        assert f"\n> {function.comment}\n" in body, (
            f"{name}: comment should read\n{function.comment}"
        )
        for argument in function.argument_names:
            assert f"| `{argument}`" in body, f"{name}: no parameter row for {argument}"
        for column in function.result_columns:
            assert f"| `{column}`" in body, f"{name}: no result row for {column}"
        calls = [m.group(2) for m in FENCE.finditer(body) if m.group(1) == "sql"]
        assert any(name in sql for sql in calls), f"{name}: no example calls it"


def test_every_sqlstate_raised_is_in_the_error_table(doc: str) -> None:
    raised = set(re.findall(r"'(JQ\d{3}|22\d{3})'", SQL_FILE.read_text()))
    table = doc.split("## Errors", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(\w{5})`", table, flags=re.MULTILINE))
    assert raised <= listed
    assert {code for code in listed if code.startswith("JQ")} <= raised


def test_examples_print_what_the_doc_shows(pg_server: LocalPostgres, dsn: str, doc: str) -> None:
    pairs = examples(doc)
    script = "".join(sql.group(2) + f"\\echo '{BLOCK_END}'\n" for sql, _ in pairs)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")} | {"LC_ALL": "C"}
    result = subprocess.run(
        [pg_server.bindir / "psql", "-X", "-q", "-d", dsn],
        input=script,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout
    outputs = result.stdout.split(BLOCK_END + "\n")
    assert outputs[-1] == "", result.stdout
    outputs = outputs[:-1]
    assert len(outputs) == len(pairs)

    if REGENERATE:
        rewritten, position = [], 0
        for (sql, text), output in zip(pairs, outputs, strict=True):
            rewritten.append(doc[position : sql.end()])
            position = sql.end() if text is None else text.end()
            if output:
                rewritten.append(f"\n```text\n{output}```\n")
        rewritten.append(doc[position:])
        DOC.write_text("".join(rewritten))
        doc = DOC.read_text()
        pairs = examples(doc)

    for (sql, _), output in zip(pairs, outputs, strict=True):
        # Errors only where the example means one (and then prints its SQLSTATE).
        expected_errors = sql.group(2).count(r"\echo :LAST_ERROR_SQLSTATE")
        assert output.count("ERROR:") == expected_errors, f"{sql.group(2)}\n{output}"
        assert r"\gset" not in output, f"{sql.group(2)}\n{output}"

    for (sql, text), output in zip(pairs, outputs, strict=True):
        shown = "" if text is None else text.group(2)
        assert mask(shown) == mask(output), (
            f"example output differs from the doc for:\n{sql.group(2)}\n"
            f"doc shows:\n{shown}\npsql printed:\n{output}"
        )


def test_the_role_table_is_what_grant_roles_grants(conn: psycopg.Connection, doc: str) -> None:
    """Each group role's row lists exactly the public functions the installed schema lets it
    execute."""
    table = re.search(r"\| group role +\| may execute +\|\n\|[-|]+\|\n((?:\|.*\|\n)+)", doc)
    assert table is not None, "the role table of grant_roles"
    documented = {
        row.split("|")[1].strip(" `"): set(re.findall(r"`(\w+)`", row.split("|")[2]))
        for row in table.group(1).splitlines()
    }
    assert documented == granted_functions(conn)


def test_status_ranges_are_the_functions_own(conn: psycopg.Connection, doc: str) -> None:
    """Every status column or argument documented as a range spans the codes _status_name
    names (CANCELLED, 5, was once left out)."""
    last = one(
        conn,
        "select max(s) from generate_series(1, 100) s where pyjobq._status_name(s) is not null",
    )
    ranges = re.findall(r"^\| `p?_?status` .*\| (\d+) \.\. (\d+) ", doc, flags=re.MULTILINE)
    assert len(ranges) >= 3, ranges
    assert {(int(low), int(high)) for low, high in ranges} == {(1, last)}
