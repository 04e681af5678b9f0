"""A filtered set of jobs, as the jobs page and the bulk actions take it from a URL or a form."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from urllib.parse import urlencode
from uuid import UUID

from pyjobq.aio import AsyncJobQueue
from pyjobq.rows import JobStatus, JobSummary

FIELDS = ("type", "status", "dedupe_key", "created_after", "created_before", "error", "batch")


class BadFilter(ValueError):
    """A filter field that does not parse; the message names it."""


def _uuid(name: str, value: str) -> UUID:
    try:
        return UUID(value)
    except ValueError:
        raise BadFilter(f"{name} must be an id like {UUID(int=0)}, not {value!r}") from None


def _time(name: str, value: str) -> datetime:
    """An ISO time; one without an offset (as a datetime-local field sends) is UTC."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise BadFilter(f"{name} must be a time like 2030-01-31T09:00, not {value!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _status(value: str) -> JobStatus:
    """A status by code (1 to 6) or name (PENDING, DEAD, ...: any case)."""
    named = JobStatus.__members__.get(value.upper())
    if named is not None:
        return named
    if value.isdigit() and int(value) in JobStatus._value2member_map_:
        return JobStatus(int(value))
    names = ", ".join(JobStatus.__members__)
    raise BadFilter(f"status must be 1 to {max(JobStatus)} or a name ({names}), not {value!r}")


def _type(value: str, type_codes: Mapping[str, int]) -> int:
    """A job type by code or by its registered name."""
    if value in type_codes:
        return type_codes[value]
    try:
        return int(value)
    except ValueError:
        names = ", ".join(sorted(type_codes)) or "none registered"
        raise BadFilter(f"type must be a code or a type's name ({names}), not {value!r}") from None


@dataclass(frozen=True)
class JobFilter:
    """The arguments of ``job_list`` a person filters by; None is "any"."""

    type: int | None = None
    status: JobStatus | None = None
    dedupe_key: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    error: str | None = None
    batch: UUID | None = None

    @classmethod
    def parse(cls, values: Mapping[str, str], type_codes: Mapping[str, int]) -> JobFilter:
        """From query or form fields; empty fields are "any". A type is its code or its name
        (``type_codes``, the registered types), a status its code or its name (any case)."""
        given = {name: values[name].strip() for name in FIELDS if values.get(name, "").strip()}
        return cls(
            type=_type(given["type"], type_codes) if "type" in given else None,
            status=_status(given["status"]) if "status" in given else None,
            dedupe_key=given.get("dedupe_key"),
            created_after=_time("created_after", given["created_after"])
            if "created_after" in given
            else None,
            created_before=_time("created_before", given["created_before"])
            if "created_before" in given
            else None,
            error=given.get("error"),
            batch=_uuid("batch", given["batch"]) if "batch" in given else None,
        )

    def fields(self) -> dict[str, str]:
        """The filter as form fields, empty ones left out."""
        out: dict[str, str] = {}
        for field in fields(self):
            value = getattr(self, field.name)
            if value is None:
                continue
            if isinstance(value, datetime):
                out[field.name] = value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M")
            elif isinstance(value, JobStatus):
                out[field.name] = str(int(value))
            else:
                out[field.name] = str(value)
        return out

    def describe(self) -> str:
        """The filter in words, for a person to check before an action runs."""
        words = [f"{name.replace('_', ' ')} {value}" for name, value in self.fields().items()]
        if self.status is not None:
            words[list(self.fields()).index("status")] = f"status {self.status.name}"
        return ", ".join(words) or "every job"

    def query(self, **extra: str) -> str:
        """The filter (and ``extra``) as a URL query string."""
        return urlencode({**self.fields(), **extra})

    async def list_jobs(
        self,
        queue: AsyncJobQueue,
        *,
        after: UUID | None = None,
        limit: int | None = None,
        oldest_first: bool | None = None,
    ) -> list[JobSummary]:
        """``job_list`` of this filter: one keyset page."""
        return await queue.list_jobs(
            job_type=self.type,
            status=self.status,
            dedupe_key=self.dedupe_key,
            created_after=self.created_after,
            created_before=self.created_before,
            oldest_first=oldest_first,
            after=after,
            limit=limit,
            error=self.error,
            batch_id=self.batch,
        )
