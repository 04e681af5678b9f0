"""``WorkerConfig``: every setting of a worker, its default and its range, stated once."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any


def _setting(
    default: Any,
    help: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    flag: tuple[str, ...] = (),
    off_help: str | None = None,
) -> Any:
    """A field of WorkerConfig: its default, what it means, its range and its flags on the
    command line (none: not there; for a setting on by default, the flag turning it off and
    ``off_help`` what that does)."""
    return field(
        default=default,
        metadata={
            "help": help,
            "low": low,
            "high": high,
            "low_open": low_open,
            "flag": flag,
            "off_help": off_help,
        },
    )


@dataclass(frozen=True)
class WorkerConfig:
    """How a :class:`~pyjobq.worker.Worker` runs. Frozen and checked when made: a value out of
    its range raises ``ValueError`` naming the setting and the range. ``pyjobq worker`` builds
    one from its options (the same names, their defaults and ranges read from here)."""

    concurrency: int = _setting(
        8, "handlers running at once (threads for sync handlers)", low=1, high=1000,
        flag=("-c", "--concurrency"),
    )  # fmt: skip
    prefetch: int | None = _setting(
        None, "claimed jobs waiting for a free slot (default: follows job duration)",
        low=0, high=10000, flag=("--prefetch",),
    )  # fmt: skip
    lease_seconds: int = _setting(
        60, "seconds a claim holds a job before the reaper may take it back", low=1,
        high=86400, flag=("--lease",),
    )  # fmt: skip
    job_timeout: float | None = _setting(
        None, "seconds a handler may run before its attempt fails; its type's deadline "
        "(job_type_set_policy, 3600 s from the claim by default) applies too", low=0,
        low_open=True,
        flag=("--job-timeout",),
    )  # fmt: skip
    poll_interval: float = _setting(
        5.0, "seconds between claims when idle and not woken", low=0.01, flag=("--poll-interval",)
    )
    reap_interval: float = _setting(
        30.0, "most seconds after a lease expires before job_reap takes it back (a random part)",
        low=0.1, flag=("--reap-interval",),
    )  # fmt: skip
    schedule_interval: float = _setting(
        5.0, "most seconds after a tick is due before job_schedule_tick fires it (a random part)",
        low=0.1, flag=("--schedule-interval",),
    )  # fmt: skip
    schedules: bool = _setting(
        True, "tick the schedules (job_schedule_tick) so periodic jobs fire",
        flag=("--no-schedules",),
        off_help="leave the schedules to other workers or to pg_cron",
    )  # fmt: skip
    shutdown_timeout: float = _setting(
        30.0, "seconds running jobs get to finish on SIGTERM", low=0, flag=("--shutdown-timeout",)
    )
    listen: bool = _setting(
        True, "LISTEN for new jobs on a connection of its own", flag=("--no-listen",),
        off_help="poll only, no LISTEN (e.g. PgBouncer transaction mode)",
    )  # fmt: skip
    listen_dsn: str | None = _setting(
        None, "LISTEN on this server directly (when --dsn goes through PgBouncer in "
        "transaction mode)", flag=("--listen-dsn",),
    )  # fmt: skip
    prepared_statements: bool = _setting(
        True, "server-side prepared statements on the connections it opens",
        flag=("--no-prepare",),
        off_help="no server-side prepared statements (PgBouncer < 1.21 in transaction mode)",
    )  # fmt: skip
    max_lingering_threads: int | None = _setting(
        None, "threads a sync handler past job_timeout may keep while a new thread takes its "
        "place (default: concurrency)", low=0, high=1000, flag=("--max-lingering-threads",),
    )  # fmt: skip
    processes: bool = _setting(
        False, "run the sync handlers in child processes: CPU-bound Python off the worker's "
        "GIL, and a handler past its deadline killed (pyjobq.worker.in_process)",
        flag=("--processes",),
    )  # fmt: skip
    max_jobs_per_child: int | None = _setting(
        None, "jobs a child process runs before a new one takes its place (with --processes)",
        low=1, high=1_000_000, flag=("--max-jobs-per-child",),
    )  # fmt: skip
    child_memory_mb: int | None = _setting(
        None, "address space of a child process, in MiB: past it an allocation raises "
        "MemoryError (with --processes)", low=32, high=1_048_576, flag=("--child-memory-mb",),
    )  # fmt: skip
    flush_delay: float = _setting(
        0.01, "seconds a finished job may wait for others to complete with it", low=0
    )
    flush_batch: int = _setting(500, "jobs per job_finish_many call", low=1, high=10000)
    prefetch_lease_fraction: float = _setting(
        0.25, "share of the lease a prefetched job may wait before it is given back",
        low=0, high=1, low_open=True,
    )  # fmt: skip
    worker_id: str | None = _setting(
        None, "the worker's id in the queue (default: host:pid:random)", flag=("--worker-id",)
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            low, high, low_open = f.metadata["low"], f.metadata["high"], f.metadata["low_open"]
            if value is None or (low is None and high is None):
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{f.name} must be a number, not {value!r}")
            below = low is not None and (value <= low if low_open else value < low)
            above = high is not None and value > high
            if below or above or math.isnan(value):
                raise ValueError(f"{f.name} must be {describe_range(f.name)}, not {value!r}")
        if not self.processes and (self.max_jobs_per_child or self.child_memory_mb):
            raise ValueError("max_jobs_per_child and child_memory_mb apply with processes only")
        if self.worker_id is not None and not 0 < len(self.worker_id.strip()) <= 80:
            raise ValueError("worker_id must be a non-blank text of 1 to 80 characters")

    def command_line(self) -> list[str]:
        """The ``pyjobq worker`` options that make this config: one per setting that differs
        from its default. ``ValueError`` for a setting the command line does not have."""
        args: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value == f.default:
                continue
            flags = f.metadata["flag"]
            if not flags:
                raise ValueError(f"{f.name} has no pyjobq worker option")
            args += [flags[-1]] if isinstance(value, bool) else [flags[-1], str(value)]
        return args


def describe_range(name: str) -> str:
    """The range of setting ``name`` in words, as errors and the CLI's help say it."""
    meta = next(f.metadata for f in fields(WorkerConfig) if f.name == name)
    low, high = meta["low"], meta["high"]
    if high is None:
        return f"{'greater than' if meta['low_open'] else 'at least'} {low}"
    if meta["low_open"]:
        return f"greater than {low} and at most {high}"
    return f"between {low} and {high}"
