"""What a run prints and keeps: the markdown tables, and the result file bench/plot.py reads.

Every figure is shown with its ratio to the raw-SQL ceiling and to the best
peer of the same scenario, then the performance targets, each as a ratio
measured within the run: ratios hold on a noisy shared machine where absolute
figures do not.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from context import Options
from figures import Figure
from systems import CEILING, Role

SystemInfo = Mapping[str, Mapping[str, Any]]


def ratio(a: float, b: float | None) -> str:
    return f"{a / b:.2f}" if b else "-"


def report(figures: list[Figure], info: SystemInfo, roles: Mapping[str, Role]) -> str:
    """The figures table, the targets table and each system's settings, in markdown."""
    lines = [
        "| scenario | system | version | figure | value | x ceiling | x best peer |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for scenario in dict.fromkeys(f.scenario for f in figures):
        group = [f for f in figures if f.scenario == scenario]
        ceiling = next((f.value for f in group if f.system == CEILING), None)
        peers = [f.value for f in group if roles.get(f.system) == "peer"]
        best = (max(peers) if group[0].better == "higher" else min(peers)) if peers else None
        for f in group:
            version = info.get(f.system, {}).get(
                "version", "PostgreSQL" if f.system == CEILING else ""
            )
            value = (
                f"{f.value:.2f} {f.unit}" if f.unit in ("ms", "x") else f"{f.value:,.0f} {f.unit}"
            )
            spread = (
                f" ({min(f.samples):,.0f}..{max(f.samples):,.0f})"
                if len(f.samples) > 1 and f.unit not in ("ms", "x")
                else ""
            )
            lines.append(
                f"| {scenario} | {f.system} | {version} | {f.metric} | {value}{spread} "
                f"| {ratio(f.value, ceiling) if f.system != CEILING else ''} "
                f"| {ratio(f.value, best) if roles.get(f.system) != 'ceiling' else ''} |"
            )
    lines += wal_records(figures)
    lines += targets(figures, roles)
    lines += ["", "| system | settings |", "|---|---|"]
    for name, answer in info.items():
        settings = "; ".join(f"{k}={v}" for k, v in answer.get("settings", {}).items())
        lines.append(f"| {name} | {settings} |")
    return "\n".join(lines)


# The WAL records a queue's hot path writes, per job, as the breakdown table shows them.
WAL_RECORDS = ("Heap/INSERT", "Heap/UPDATE", "Heap/HOT_UPDATE", "Heap/LOCK", "Heap/DELETE",
               "Btree/INSERT_LEAF")  # fmt: skip


def wal_records(figures: list[Figure]) -> list[str]:
    """Each drain's WAL per job broken down: the records above (each system's own counts per
    job), full-page images, and the dead tuples it left per job."""
    wal = [f for f in figures if f.scenario.startswith("WAL per job")]
    if not wal:
        return []
    lines = [
        "",
        "| drain | system | B/job | "
        + " | ".join(WAL_RECORDS)
        + " | FPI B/job | dead tuples/job |",
        "|---|---|---:|" + "---:|" * (len(WAL_RECORDS) + 2),
    ]
    for f in wal:
        jobs = int(f.metric.split("N=")[1].split()[0])
        records = f.detail["records"]
        counts = [records.get(name, {}).get("count", 0) / jobs for name in WAL_RECORDS]
        fpi = sum(r["fpi_bytes"] for r in records.values()) / jobs
        lines.append(
            f"| {f.scenario.removeprefix('WAL per job, ')} | {f.system} | {f.value:,.0f} | "
            + " | ".join(f"{c:.2f}" for c in counts)
            + f" | {fpi:,.0f} | {f.detail['dead_tuples'] / jobs:.2f} |"
        )
    return lines


class Lookup:
    """Figures found by scenario and system, as the targets read them."""

    def __init__(self, figures: Sequence[Figure], roles: Mapping[str, Role]) -> None:
        self.figures, self.roles = figures, roles

    def value(self, scenario: str, system: str, metric_start: str = "") -> float | None:
        for f in self.figures:
            if f.scenario == scenario and f.system == system and f.metric.startswith(metric_start):
                return f.value
        return None

    def best_peer(self, scenario: str) -> float | None:
        """The best peer figure of ``scenario``: the highest throughput, the lowest latency
        or cost, as the scenario's figures say is better."""
        got = [
            f for f in self.figures if f.scenario == scenario and self.roles.get(f.system) == "peer"
        ]
        if not got:
            return None
        values = [f.value for f in got]
        return max(values) if got[0].better == "higher" else min(values)

    def scenarios(self, prefix: str) -> list[str]:
        """Every scenario named ``prefix``..., in the run's order."""
        return list(
            dict.fromkeys(f.scenario for f in self.figures if f.scenario.startswith(prefix))
        )

    def scenario(self, prefix: str) -> str:
        """The first scenario named ``prefix``..., e.g. the drain of the first W given."""
        return next(iter(self.scenarios(prefix)), "")


def div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


@dataclass(frozen=True, kw_only=True)
class Target:
    """One performance target: ``measure`` gives a subject system's figure for it."""

    name: str
    goal: str
    measure: Callable[[str], float | None]
    unit: str = "x"

    def shown(self, system: str) -> str:
        got = self.measure(system)
        return "-" if got is None else f"{got:.2f} {self.unit}"


def targets(figures: list[Figure], roles: Mapping[str, Role]) -> list[str]:
    """The performance targets, each as a ratio measured within this run."""
    subjects = [s for s, r in roles.items() if r == "subject"]
    if not subjects:
        return []
    run = Lookup(figures, roles)
    drain = run.scenario("drain W=")
    pinned = run.scenario("drain pinned W=")
    readers = run.scenario("drain pinned+")

    def against_best(scenario: str, goal: str) -> Target:
        return Target(
            name=f"{scenario} / best peer",
            goal=goal,
            measure=lambda s: div(run.value(scenario, s), run.best_peer(scenario)),
        )

    # Round 3's goals: ratios to the best peer of the same run, at every size asked for.
    rows = [
        *(against_best(d, "≥ 3") for d in run.scenarios("drain W=")),
        *(against_best(d, "≥ 3") for d in run.scenarios("drain ") if "ms W=" in d),
        *(against_best(e, "≥ 2") for e in run.scenarios("enqueue")),
        Target(
            name="bulk enqueue / COPY into pyjobq.job",
            goal="≥ 0.5",
            measure=lambda s: div(run.value("enqueue", s), run.value("enqueue", CEILING, "COPY")),
        ),
        against_best("latency p50", "≤ 0.7"),
        against_best("latency p99", "≤ 0.7"),
        *(against_best(w, "≤ 1") for w in run.scenarios("WAL per job")),
        Target(
            name="claim cost, big backlog / 1k pending",
            goal="≤ 1.2",
            measure=lambda s: run.value("claim cost", s, "p50 at the big"),
        ),
        Target(
            name="drain pinned xmin / clean drain",
            goal="≥ 0.8",
            measure=lambda s: div(run.value(pinned, s), run.value(drain, s)),
        ),
        Target(
            name="drain pinned xmin + RR readers / clean drain",
            goal="≥ 0.8",
            measure=lambda s: div(run.value(readers, s), run.value(drain, s)),
        ),
    ]
    rows += [
        sustained_target(run, scenario)
        for scenario in dict.fromkeys(
            f.scenario for f in figures if f.scenario.startswith("sustained")
        )
    ]
    lines = [
        "",
        "| target | goal | " + " | ".join(subjects) + " |",
        "|---|---|" + "---:|" * len(subjects),
    ]
    for target in rows:
        shown = " | ".join(target.shown(s) for s in subjects)
        lines.append(f"| {target.name} | {target.goal} | {shown} |")
    return lines


def sustained_target(run: Lookup, scenario: str) -> Target:
    """Pickup latency must not creep up as dead tuples accumulate over one sustained run."""
    return Target(
        name=f"{scenario}: pickup p99, second half / whole",
        goal="≈ 1",
        measure=lambda s: run.value(scenario, s, "pickup p99, second half"),
    )


def write_results(
    path: Path,
    *,
    created_at: str,
    wall_seconds: float,
    options: Options,
    server: Mapping[str, Any],
    info: SystemInfo,
    figures: list[Figure],
    runs: list[list[Figure]],
) -> None:
    """Every sample, the server and each system's settings: what bench/plot.py draws from."""
    path.write_text(
        json.dumps(
            {
                "created_at": created_at,
                "wall_seconds": round(wall_seconds, 1),
                "args": options.as_json(),
                "machine": {
                    "cpus": os.cpu_count(),
                    "platform": platform.platform(),
                    "python": platform.python_version(),
                },
                "server": server,
                "systems": info,
                "figures": [asdict(f) for f in figures],
                "runs": [[asdict(f) for f in run] for run in runs],
            },
            indent=2,
        )
    )
