"""The tree keeps its shape: the installable SQL is its chapters, and no room outgrows itself."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Files written by a script from others: their size is that of their sources.
GENERATED = {ROOT / "sql" / "pyjobq.sql"} | {
    ROOT / "pyjobq" / name for name in ("queue.py", "queue_admin.py", "queue_calls.py")
}
MAX_LINES = 600


def test_the_installable_sql_is_its_chapters() -> None:
    script = ROOT / "scripts" / "build_sql.py"
    checked = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stderr


def test_a_stale_installable_sql_is_caught(tmp_path: Path) -> None:
    """The check above can fail: a chapter changed without a rebuild is reported."""
    copy = tmp_path / "tree"
    for room in ("scripts", "sql"):
        shutil.copytree(ROOT / room, copy / room)
    chapter = max((copy / "sql").glob("[0-9][0-9]_*.sql"))  # a real chapter, whichever is last
    chapter.write_text(chapter.read_text() + "-- a change nobody rebuilt\n")
    checked = subprocess.run(
        [sys.executable, str(copy / "scripts" / "build_sql.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 1
    assert checked.stderr.startswith(f"{copy / 'sql' / 'pyjobq.sql'} is out of date: run ")


@pytest.mark.parametrize("room", ["pyjobq", "sql"])
def test_no_file_outgrows_its_room(room: str) -> None:
    big = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / room).rglob("*"))
        if path.suffix in (".py", ".sql")
        and path not in GENERATED
        and (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not big, f"over {MAX_LINES} lines: split by concern"


MAX_FUNCTION_LINES = 120
FUNCTION = re.compile(r"^create function (pyjobq\.\w+)\(.*?(?=^comment on function )", re.M | re.S)


def long_functions(schema: str) -> dict[str, int]:
    """The functions of ``schema`` longer than MAX_FUNCTION_LINES, each from its ``create
    function`` to the end of its body (its comment follows), with their length."""
    lengths = {m.group(1): len(m.group(0).rstrip().splitlines()) for m in FUNCTION.finditer(schema)}
    return {name: lines for name, lines in lengths.items() if lines > MAX_FUNCTION_LINES}


def test_no_sql_function_outgrows_one_concern() -> None:
    schema = (ROOT / "sql" / "pyjobq.sql").read_text()
    assert len(FUNCTION.findall(schema)) == schema.count("\ncreate function pyjobq.")
    assert long_functions(schema) == {}, "split by concern"
    body = "--\n" * MAX_FUNCTION_LINES
    grown = (
        f"create function pyjobq.grown()\nas $$\n{body}$$;\n\ncomment on function pyjobq.grown()"
    )
    assert long_functions(grown) == {"pyjobq.grown": MAX_FUNCTION_LINES + 3}
