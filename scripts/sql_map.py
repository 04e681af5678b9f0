#!/usr/bin/env python3
"""Print the structure of the schema's functions: which write job rows, and what each call of
the API reaches.

    scripts/sql_map.py [SCHEMA.sql] [--calls job_claim job_complete ...]

Reads sql/pyjobq.sql (or SCHEMA.sql, e.g. ``git show REV:sql/pyjobq.sql > old.sql``) as text.
It prints, for each of ``pyjobq.job``'s writes (a row inserted, a status set, a row deleted),
the functions whose bodies make it; and, for each function named with ``--calls`` (by default
the ways into and out of RUNNING), the tree of pyjobq functions its body calls, each function
once. Two runs, before and after a change, show how the work is shared.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WAYS = [
    "job_claim",
    "job_complete",
    "job_complete_many",
    "job_fail",
    "job_fail_many",
    "job_finish_many",
    "job_release",
    "job_release_many",
    "job_reap",
    "job_cancel",
]
HEAD = re.compile(r"^create (?:or replace )?function pyjobq\.(\w+)\(", re.M)
CALL = re.compile(r"\bpyjobq\.(\w+)\s*\(")
WRITES = {
    "insert a job row": re.compile(r"insert into pyjobq\.job\b(?!_)"),
    "set a job's status": re.compile(
        r"update pyjobq\.job\b(?!_)[^;]*?\bset\b[^;]*?\bstatus\s*=", re.S
    ),
    "delete a job row": re.compile(r"delete from pyjobq\.job\b(?!_)"),
}


def functions(schema: str) -> dict[str, str]:
    """Each function's name and body (overloads share a name: their bodies are joined)."""
    heads = list(HEAD.finditer(schema))
    bodies: dict[str, str] = {}
    for head, after in zip(heads, [*heads[1:], None], strict=True):
        end = after.start() if after else len(schema)
        text = schema[head.end() : end]
        text = text.split("\ncomment on function", 1)[0]
        # What a function calls is in its code, not in its messages and comments.
        text = re.sub(r"--[^\n]*|'(?:[^']|'')*'", "", text)
        bodies[head.group(1)] = bodies.get(head.group(1), "") + text
    return bodies


def tree(name: str, bodies: dict[str, str], seen: set[str], depth: int, out: list[str]) -> None:
    """``name`` and, below it, the pyjobq functions it calls that no line above showed."""
    mark = " (above)" if name in seen else ""
    out.append(f"{'  ' * depth}{name}{mark}")
    if mark:
        return
    seen.add(name)
    called = CALL.findall(bodies.get(name, ""))
    for callee in dict.fromkeys(c for c in called if c in bodies and c != name):
        tree(callee, bodies, seen, depth + 1, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("schema", nargs="?", default=str(ROOT / "sql" / "pyjobq.sql"))
    parser.add_argument("--calls", nargs="*", default=WAYS, help="API functions to draw")
    args = parser.parse_args()
    bodies = functions(Path(args.schema).read_text())
    print(f"{len(bodies)} functions")
    for what, pattern in WRITES.items():
        writers = sorted(n for n, body in bodies.items() if pattern.search(body))
        print(f"{what}: {len(writers)}: {', '.join(writers)}")
    for name in args.calls:
        if name not in bodies:
            print(f"\n{name}: not in this schema")
            continue
        out: list[str] = []
        tree(name, bodies, set(), 0, out)
        print()
        print("\n".join(out))


if __name__ == "__main__":
    main()
