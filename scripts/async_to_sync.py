#!/usr/bin/env python3
"""Write the synchronous binding, pyjobq/queue*.py, from the asyncio one, pyjobq/aio*.py.

The two bindings are the same code but for ``async``/``await`` and psycopg's Async classes, so
only the asyncio one is written by hand: ``aio.py`` (the job calls), ``aio_admin.py`` (set-up and
administration), ``aio_batches.py`` (batches), ``aio_enqueue.py`` (adding and changing jobs) and
``aio_calls.py`` (how a call runs), each to its ``queue`` twin. ``--check`` exits 1 when a twin
is not what this script writes (tests/test_binding.py runs it that way).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from generated import write_or_check_all

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pyjobq"
# Each asyncio module, its synchronous twin, and what the twin's docstring says.
MODULES = {
    "aio.py": (
        "queue.py",
        "``JobQueue``: the typed synchronous binding of the pyjobq SQL functions.",
    ),
    "aio_admin.py": (
        "queue_admin.py",
        "``QueueAdmin``: the synchronous binding of the set-up and administration functions.",
    ),
    "aio_calls.py": (
        "queue_calls.py",
        "``Calls``: how the synchronous binding runs one SQL function call.",
    ),
    "aio_batches.py": (
        "queue_batches.py",
        "``Batches``: the synchronous binding of the batch functions.",
    ),
    "aio_enqueue.py": (
        "queue_enqueue.py",
        "``Enqueue``: the synchronous binding of the calls that add jobs and change pending ones.",
    ),
}

# Whole words of the asyncio binding and what they are in the synchronous one.
WORDS = {
    "AsyncJobQueue": "JobQueue",
    "AsyncQueueAdmin": "QueueAdmin",
    "AsyncCalls": "Calls",
    "AsyncBatches": "Batches",
    "AsyncEnqueue": "Enqueue",
    "aio_admin": "queue_admin",
    "aio_batches": "queue_batches",
    "aio_enqueue": "queue_enqueue",
    "aio_calls": "queue_calls",
    "AsyncConnectionPool": "ConnectionPool",
    "AsyncConnection": "Connection",
    "AsyncCursor": "Cursor",
    "AsyncRowFactory": "RowFactory",
    "AsyncIterator": "Iterator",
    "asynccontextmanager": "contextmanager",
}
KEYWORDS = re.compile(r"\basync (?=def |with |for )|\bawait ")
MODULE_DOCSTRING = re.compile(r'\A"""(?:.|\n)*?"""\n')


def generate(source: str, name: str = "aio.py") -> str:
    """The synchronous twin of the asyncio module ``source`` (file ``name``), formatted like the
    project."""
    target, docstring = MODULES[name]
    header = (
        f"# Generated from pyjobq/{name} by scripts/async_to_sync.py: edit that file instead.\n"
        f'"""{docstring}"""\n'
    )
    text = KEYWORDS.sub("", MODULE_DOCSTRING.sub("", source, count=1))
    for word, replacement in WORDS.items():
        text = re.sub(rf"\b{word}\b", replacement, text)
    text = header + text
    # The renamed imports sort elsewhere: sort them, then format.
    for ruff in (["check", "--select", "I", "--fix", "--quiet"], ["format"]):
        text = subprocess.run(
            [sys.executable, "-m", "ruff", *ruff, "--stdin-filename", str(PACKAGE / target), "-"],
            input=text,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
    return text


def main() -> int:
    texts = {
        PACKAGE / target: generate((PACKAGE / name).read_text(), name)
        for name, (target, _) in MODULES.items()
    }
    return write_or_check_all(__doc__.splitlines()[0], texts, __file__)


if __name__ == "__main__":
    sys.exit(main())
