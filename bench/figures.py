"""The measured numbers a run produces, and how repeated runs are merged.

A Figure is built with keywords only: a scenario makes several that differ in
one or two fields, and named fields keep a unit from landing in a metric.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal


@dataclass(kw_only=True)
class Figure:
    """One measured number of one system in one scenario.

    ``detail`` is the driver's (or pgbench's) whole answer, kept for the result
    file and the plots; ``samples`` are the values of repeated runs, set when
    they are merged.
    """

    scenario: str
    system: str
    metric: str
    unit: str
    value: float
    better: Literal["higher", "lower"]
    samples: list[float] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)


def median_figures(runs: Sequence[list[Figure]]) -> list[Figure]:
    """Merge repeated runs: same (scenario, system, metric) -> median value.

    Runs rotate over the systems, so a slow moment of the shared machine lands
    on one sample of each figure rather than on all samples of one system.
    The first run's detail is kept.
    """
    merged: dict[tuple[str, str, str], Figure] = {}
    for figures in runs:
        for f in figures:
            key = (f.scenario, f.system, f.metric)
            if key not in merged:
                merged[key] = replace(f, samples=[])
            merged[key].samples.append(f.value)
    for f in merged.values():
        f.value = statistics.median(f.samples)
    return list(merged.values())
