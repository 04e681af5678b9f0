"""docs/from-celery.md's examples run, in order and in one namespace, as the page says: ``conn``
an autocommit connection of an admin to a migrated database, ``dsn`` its conninfo, and
examples/python on ``sys.path`` (the ``shop_tasks`` package)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "from-celery.md"
EXAMPLES = ROOT / "examples" / "python"


def examples() -> list[str]:
    """The page's ``python`` blocks, in order."""
    return re.findall(r"^```python\n(.*?)^```\n", PAGE.read_text(), flags=re.MULTILINE | re.DOTALL)


def test_every_example_of_the_page_runs(
    dsn: str, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    namespace: dict[str, Any] = {"conn": conn, "dsn": dsn}
    blocks = examples()
    assert len(blocks) >= 10
    for number, block in enumerate(blocks, 1):
        try:
            exec(compile(block, f"{PAGE.name} example {number}", "exec"), namespace)
        except Exception as e:
            raise AssertionError(f"example {number} of {PAGE.name} fails:\n{block}") from e
    for name in [m for m in sys.modules if m == "shop_tasks" or m.startswith("shop_tasks.")]:
        monkeypatch.delitem(sys.modules, name)
