"""What the worker stores for a job: results checked and encoded one by one, error text made safe.

A worker completes finished jobs in batches (``job_complete_many``). One result that
PostgreSQL would refuse must not take its batch down with it, so each result is encoded
here as soon as its handler returns, and one that cannot be stored fails its own attempt.
"""

from __future__ import annotations

import json
import re
from typing import Any

from psycopg.types.json import Jsonb

# A result larger than this, encoded as JSON, is not stored: the job goes DEAD instead.
# Results live in the queue's own table, which every claim and vacuum walks past.
MAX_RESULT_BYTES = 1024 * 1024

# job_fail keeps at most this many characters of an error (``left(p_error, 10000)``).
MAX_ERROR_CHARS = 10_000

# ``\u0000`` in JSON text that is not itself an escaped backslash followed by "u0000":
# jsonb refuses it (22P05), though Python's json module writes it for a NUL character.
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


class UnstorableResult(ValueError):
    """A handler returned a value that cannot be the job's ``jsonb`` result; says why."""


def _as_encoded(text: Any) -> str:
    return str(text)


def encode_result(value: object) -> Jsonb | None:
    """Encode a handler's return value as ``job_complete_many`` will send it.

    ``None`` stays SQL null. Anything else must be JSON without NaN or Infinity, with no NUL
    character and no unpaired surrogate in any string, and at most ``MAX_RESULT_BYTES`` long
    once encoded; otherwise :class:`UnstorableResult` says which rule it broke.
    """
    if value is None:
        return None
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as e:
        raise UnstorableResult(f"result is not JSON: {e}") from None
    if _ESCAPED_NUL.search(text):
        raise UnstorableResult("result holds a NUL character (\\u0000), which jsonb cannot store")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise UnstorableResult(f"result is not valid Unicode: {e.reason}") from None
    if size > MAX_RESULT_BYTES:
        raise UnstorableResult(
            f"result is {size} bytes of JSON, more than the {MAX_RESULT_BYTES} a job may keep"
        )
    return Jsonb(text, dumps=_as_encoded)


def storable_text(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``text`` as a ``text`` column can take it: NUL characters and unpaired surrogates
    replaced, and at most ``limit`` characters, keeping its start and its end."""
    text = text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")
    if len(text) <= limit:
        return text
    marker = f"\n[... {len(text) - limit} characters cut ...]\n"
    keep = limit - len(marker)
    return text[: keep // 2] + marker + text[len(text) - (keep - keep // 2) :]
