"""How the bindings send Python values as parameters of the SQL functions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar
from uuid import UUID

from psycopg.types.json import Jsonb

T = TypeVar("T")

Payload = Mapping[str, Any]


def jsonb(value: Payload | Jsonb | None) -> Jsonb | None:
    """Wrap a JSON object for a ``jsonb`` parameter; ``None`` stays SQL null, and a value
    already wrapped (e.g. by :func:`pyjobq.storable.encode_result`) is sent as it is."""
    return value if value is None or isinstance(value, Jsonb) else Jsonb(value)


def jsonb_array(values: Sequence[Payload | Jsonb | None] | None) -> list[Jsonb | None] | None:
    """Wrap JSON objects for a ``jsonb[]`` parameter; ``None`` stays SQL null."""
    return None if values is None else [jsonb(v) for v in values]


def jsonb_document(values: Sequence[Payload]) -> Jsonb:
    """JSON objects as one ``jsonb`` array document (see ``statements.ENQUEUE_MANY``)."""
    return Jsonb(list(values))


def due(
    run_after: datetime | timedelta | None,
) -> tuple[timedelta | None, timedelta | None, datetime | None]:
    """The parameters of ``statements.DUE``: a delay (counted from the database's clock, not
    this machine's), or a time, or neither (due now)."""
    if isinstance(run_after, timedelta):
        return run_after, run_after, None
    return None, None, run_after


def optional_list(values: Sequence[T] | None) -> list[T] | None:
    """A sequence as the list psycopg sends as an SQL array; ``None`` stays SQL null."""
    return None if values is None else list(values)


Parents = Sequence[UUID | int]

# What an enqueue does with the active job holding its dedupe key (job_enqueue's p_on_duplicate).
OnDuplicate = Literal["keep", "replace", "debounce"]


def parents_document(depends_on: Sequence[Parents | None] | None) -> Jsonb | None:
    """Each row's parents for ``job_enqueue_many``'s ``p_depends_on`` as one ``jsonb`` array
    document: a job id as its text, an earlier row of the call as its 1-based position."""
    if depends_on is None:
        return None
    return Jsonb(
        [
            None if row is None else [p if isinstance(p, int) else str(p) for p in row]
            for row in depends_on
        ]
    )
