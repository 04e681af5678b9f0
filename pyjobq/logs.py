"""Log formats of ``pyjobq worker`` and ``pyjobq dashboard``: lines for people, JSON objects
for machines.

The worker logs through the ``pyjobq.worker`` logger and puts what a line is about in
record attributes (``worker_id``, and for a job ``job_id``, ``job_type``, ``attempt``, for a
failure ``error``); both formats print them, so every job event names its job. The
dashboard's ``pyjobq.dashboard`` logger uses the same names for an action (``job_id``, and
``action``, ``jobs``, ``role``, ``actor``, ``filter``), and its pages the same words; its
"find" box takes a job id, or a whole log line that names one, to the job's page.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

# Record attributes the worker sets, in the order the text format prints them.
FIELDS = (
    "job_id",
    "job_type",
    "attempt",
    "error",
    "workers",
    "job_types",
    "concurrency",
    "action",
    "jobs",
    "role",
    "actor",
    "filter",
    "older_than",
)


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in FIELDS if hasattr(record, name)}


class TextFormatter(logging.Formatter):
    """``time LEVEL logger [worker_id] message key=value ...``, one line per event (a
    traceback, when there is one, follows on its own lines)."""

    def __init__(self) -> None:
        super().__init__(
            "%(asctime)s %(levelname)s %(name)s [%(worker_id)s] %(message)s",
            defaults={"worker_id": "-"},
        )

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        head, sep, tail = line.partition("\n")
        pairs = " ".join(f"{k}={_compact(v)}" for k, v in _fields(record).items())
        return f"{head} {pairs}{sep}{tail}" if pairs else line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the worker's fields and, for
    an exception, its traceback as ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if hasattr(record, "worker_id"):
            entry["worker_id"] = record.worker_id
        entry.update(_fields(record))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def _compact(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if not text or any(c.isspace() or c == '"' for c in text) else text


def configure(level: str, fmt: str) -> None:
    """Send every log record at ``level`` or above to stderr in ``fmt`` ("text" or "json")."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
