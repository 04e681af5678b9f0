"""The command line shared by the scripts that write a generated file: write it, or --check it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def write_or_check(description: str, target: Path, text: str, remedy: str) -> int:
    """Write ``text`` to ``target``; with ``--check``, write nothing and return 1 when ``target``
    differs from it, saying so and what to run (``remedy``)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    if parser.parse_args().check:
        if target.read_text() != text:
            print(f"{target} is out of date: run {remedy}", file=sys.stderr)
            return 1
        return 0
    target.write_text(text)
    return 0
