#!/usr/bin/env python3
"""Write the synchronous binding, pyjobq/queue.py, from the asyncio one, pyjobq/aio.py.

The two bindings are the same code but for ``async``/``await`` and psycopg's Async classes, so
only the asyncio one is written by hand. ``--check`` exits 1 when queue.py is not what this
script writes (tests/test_binding.py runs it that way).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from generated import write_or_check

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "pyjobq" / "aio.py"
TARGET = ROOT / "pyjobq" / "queue.py"

HEADER = '''\
# Generated from pyjobq/aio.py by scripts/async_to_sync.py: edit that file, then run this script.
"""``JobQueue``: the typed synchronous binding of the pyjobq SQL functions."""
'''

# Whole words of the asyncio binding and what they are in the synchronous one.
WORDS = {
    "AsyncJobQueue": "JobQueue",
    "AsyncConnectionPool": "ConnectionPool",
    "AsyncConnection": "Connection",
    "AsyncCursor": "Cursor",
    "AsyncRowFactory": "RowFactory",
    "AsyncIterator": "Iterator",
    "asynccontextmanager": "contextmanager",
}
KEYWORDS = re.compile(r"\basync (?=def |with |for )|\bawait ")
MODULE_DOCSTRING = re.compile(r'\A"""(?:.|\n)*?"""\n')


def generate(source: str) -> str:
    """The synchronous module for the asyncio module ``source``, formatted like the project."""
    text = MODULE_DOCSTRING.sub(HEADER, source, count=1)
    text = KEYWORDS.sub("", text)
    for word, replacement in WORDS.items():
        text = re.sub(rf"\b{word}\b", replacement, text)
    formatted = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", str(TARGET), "-"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return formatted.stdout


def main() -> int:
    return write_or_check(__doc__.splitlines()[0], TARGET, generate(SOURCE.read_text()), __file__)


if __name__ == "__main__":
    sys.exit(main())
