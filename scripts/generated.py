"""The command line shared by the scripts that write a generated file: write it, or --check it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def write_or_check(description: str, target: Path, text: str, remedy: str) -> int:
    """Write ``text`` to ``target``; with ``--check``, write nothing and return 1 when ``target``
    differs from it, saying so and what to run (``remedy``)."""
    return write_or_check_all(description, {target: text}, remedy)


def write_or_check_all(description: str, texts: dict[Path, str], remedy: str) -> int:
    """``write_or_check`` for several files at once: each target and its text."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    check = parser.parse_args().check
    stale = [t for t, text in texts.items() if not t.exists() or t.read_text() != text]
    if check:
        for target in stale:
            print(f"{target} is out of date: run {remedy}", file=sys.stderr)
        return 1 if stale else 0
    for target in stale:
        target.write_text(texts[target])
    return 0
