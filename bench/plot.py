"""Draw the benchmark figures of bench/run.py result files as PNGs.

Needs matplotlib, a benchmark-only dependency installed in bench/.venv-peers:

    bench/.venv-peers/bin/python bench/plot.py bench/results/peers-*.json --out docs/img

Writes, from whichever result file holds the data (the latest one wins):
throughput.png (drain and bulk enqueue per system, with the ceilings),
latency.png (pickup latency distribution per system), claimcost.png
(claim(10) + complete_many against backlog size) and sustained.png (pickup
latency and dead tuples over a sustained run).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

# matplotlib is in bench/.venv-peers only, not in the .venv the type check runs in.
import matplotlib  # type: ignore[import-not-found]

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # type: ignore[import-not-found]

SUBJECT = "#c0392b"
PEER = "#7f8c8d"
CEILING = "#2c3e50"


def load(paths: list[Path]) -> list[dict[str, Any]]:
    """Every figure of every file, later files overriding earlier ones."""
    merged: dict[tuple[str, str, str], dict[str, Any]] = {}
    for path in sorted(paths):
        data = json.loads(path.read_text())
        for f in data["figures"]:
            merged[(f["scenario"], f["system"], f["metric"])] = f
    return list(merged.values())


def colour(system: str) -> str:
    if system.startswith("pyjobq"):
        return SUBJECT
    return CEILING if system == "ceiling" else PEER


def bars(ax: Any, figures: list[dict[str, Any]], title: str) -> None:
    figures = sorted(figures, key=lambda f: f["value"])
    labels = [
        f["system"]
        + (" (COPY)" if "COPY" in f["metric"] else "")
        + (" (plain insert)" if "plain table" in f["metric"] else "")
        for f in figures
    ]
    ax.barh(labels, [f["value"] for f in figures], color=[colour(f["system"]) for f in figures])
    for i, f in enumerate(figures):
        ax.text(f["value"], i, f" {f['value']:,.0f}", va="center", fontsize=8)
    ax.set_title(title)
    ax.set_xlabel(figures[0]["unit"] if figures else "")
    ax.margins(x=0.2)


def throughput(figures: list[dict[str, Any]], out: Path) -> None:
    drains = sorted({f["scenario"] for f in figures if f["scenario"].startswith("drain W=")})
    main = "drain W=8" if "drain W=8" in drains else next(iter(drains), "")
    drain = [f for f in figures if f["scenario"] == main]
    pinned = [f for f in figures if f["scenario"].startswith("drain pinned W=")]
    readers = [f for f in figures if f["scenario"].startswith("drain pinned+")]
    enqueue = [f for f in figures if f["scenario"] == "enqueue"]
    panels = [(drain, "drain (no-op jobs)"), (pinned, "drain, xmin pinned")]
    panels.append((readers, "drain, xmin pinned + RR readers"))
    panels.append((enqueue, "bulk enqueue"))
    panels = [(p, t) for p, t in panels if p]
    if not panels:
        return
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.6 * len(panels)))
    for ax, (group, title) in zip(axes if len(panels) > 1 else [axes], panels, strict=True):
        scenario = group[0]["scenario"]
        bars(ax, group, f"{title}, {scenario}" if scenario != "enqueue" else title)
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=110)
    plt.close(fig)


def latency(figures: list[dict[str, Any]], out: Path) -> None:
    series = [
        (f["system"], f["detail"]["latencies_ms"])
        for f in figures
        if f["scenario"] == "latency p50" and f.get("detail", {}).get("latencies_ms")
    ]
    if not series:
        return
    series.sort(key=lambda s: sorted(s[1])[len(s[1]) // 2])
    fig, ax = plt.subplots(figsize=(8, 3.2))
    ax.boxplot([s[1] for s in series], orientation="horizontal", whis=(1, 99), showfliers=False)
    ax.set_yticks(range(1, len(series) + 1), [s[0] for s in series])
    ax.set_xscale("log")
    ax.set_xlabel("pickup latency, ms (log; box = p25..p75, whiskers = p1..p99)")
    ax.set_title("pickup latency: enqueue committed -> handler started")
    fig.tight_layout()
    fig.savefig(out / "latency.png", dpi=110)
    plt.close(fig)


def claimcost(figures: list[dict[str, Any]], out: Path) -> None:
    group = [f for f in figures if f["scenario"] == "claim cost" and f["unit"] == "ms"]
    if not group:
        return
    fig, ax = plt.subplots(figsize=(8, 2.4))
    labels = [f["metric"].split(", ", 1)[1] for f in group]
    ax.barh(labels, [f["value"] for f in group], color=SUBJECT)
    for i, f in enumerate(group):
        d = f["detail"]
        ax.text(
            f["value"],
            i,
            f" p50 {f['value']:.2f} ms, p99 {d['cycle_p99_ms']:.2f} ms,"
            f" table {d['table_mb']:,.0f} MB",
            va="center",
            fontsize=8,
        )
    ax.set_xlabel("claim(10) + complete_many, one client, ms (p50)")
    ax.set_title("claim cost against backlog size")
    ax.margins(x=0.9)
    fig.tight_layout()
    fig.savefig(out / "claimcost.png", dpi=110)
    plt.close(fig)


def sustained(figures: list[dict[str, Any]], out: Path) -> None:
    runs = [
        f
        for f in figures
        if f["scenario"].startswith("sustained") and f.get("detail", {}).get("samples")
    ]
    if not runs:
        return
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 3.2 * len(runs)), squeeze=False)
    for ax, f in zip(axes[:, 0], runs, strict=True):
        samples = f["detail"]["samples"]
        t = [s["t_s"] for s in samples]
        ax.plot(t, [s["p50_ms"] for s in samples], label="pickup p50 (ms)", color=SUBJECT)
        ax.plot(t, [s["p99_ms"] for s in samples], label="pickup p99 (ms)", color=SUBJECT, ls="--")
        ax.set_xlabel("seconds")
        ax.set_ylabel("ms")
        ax2 = ax.twinx()
        ax2.plot(t, [s["n_dead_tup"] for s in samples], label="n_dead_tup", color=PEER)
        ax2.set_ylabel("dead tuples in pyjobq.job")
        lines = ax.get_legend_handles_labels()
        lines2 = ax2.get_legend_handles_labels()
        ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper left", fontsize=8)
        ax.set_title(f"pyjobq sustained: {f['metric'].split(', ', 1)[1]}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "sustained.png", dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("results", nargs="+", type=Path)
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    figures = load(args.results)
    throughput(figures, args.out)
    latency(figures, args.out)
    claimcost(figures, args.out)
    sustained(figures, args.out)


if __name__ == "__main__":
    main()
