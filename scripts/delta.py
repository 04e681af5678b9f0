#!/usr/bin/env python3
"""Print the functions named, as sql/pyjobq.sql defines them, for a delta migration to carry.

    scripts/delta.py job_enqueue _pending_from ...

Each comes out as ``create or replace function`` followed by its ``comment on function``, in
the order given (a SQL-language body is checked when it is created, so name what it calls
first). A migration carries these, the new or changed objects beside them, and nothing else
(a new function is not PUBLIC's: end with ``revoke all on all functions in schema pyjobq from
public``, as the install does); tests/test_migrations.py proves the result equals a fresh
install of sql/pyjobq.sql.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = (ROOT / "sql" / "pyjobq.sql").read_text()


def definition(name: str) -> str:
    """``create or replace`` of function ``name`` and its comment, from the canonical schema."""
    start = SCHEMA.find(f"create function pyjobq.{name}(")
    if start < 0:
        raise SystemExit(f"delta: no function pyjobq.{name} in sql/pyjobq.sql")
    dollar = SCHEMA.find("\nas $$", start)
    atomic = SCHEMA.find("\nbegin atomic\n", start)
    if atomic >= 0 and (dollar < 0 or atomic < dollar):  # a body in standard SQL
        end = SCHEMA.index("\nend;\n", atomic) + len("\nend;\n")
    else:
        end = SCHEMA.index("$$;\n", dollar) + len("$$;\n")
    comment = SCHEMA.index(f"comment on function pyjobq.{name}(", end)
    comment_end = SCHEMA.index("';\n", comment) + len("';\n")
    created = SCHEMA[start:end].replace("create function", "create or replace function", 1)
    return f"{created}\n{SCHEMA[comment:comment_end]}"


def main() -> None:
    print("\n".join(definition(name) for name in sys.argv[1:]))


if __name__ == "__main__":
    main()
