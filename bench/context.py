"""What every scenario and ceiling run is given: the server, the options, and what it learnt."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cluster import Cluster


@dataclass(frozen=True, kw_only=True)
class Options:
    """The command line of bench/run.py, typed; field names are its options' names.

    Lists given as comma-separated text (scenarios, systems, naptimes) stay text,
    as typed, so that the result file records the command line as it was.
    """

    jobs: int
    enqueue_jobs: int
    enqueue_chunks: list[int]
    workers: list[int]
    drain_sleep_ms: list[int]
    latency_probes: int
    latency_spacing_ms: int
    latency_workers: int
    ceiling_seconds: int
    scenarios: str
    systems: str
    pinned_readers: int
    backlog_pending: int
    backlog_done: int
    claimcost_cycles: int
    sustained_seconds: float
    sustained_rate: int
    sustained_naptimes: str
    repeat: int
    base_dir: str | None
    results: Path

    def as_json(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}


@dataclass
class Context:
    """One benchmark run's shared state.

    ``info`` holds each system's answer to ``setup`` (its version and settings),
    the first one it gave, for the report and the result file.
    """

    cluster: Cluster
    options: Options
    info: dict[str, dict[str, Any]] = field(default_factory=dict)
