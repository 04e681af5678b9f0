"""The overview's charts, drawn as inline SVG on the server: nothing to load, nothing to build."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from markupsafe import Markup, escape

from pyjobq.rows import MinuteCount

WIDTH = 720
HEIGHT = 140
AXIS = 18


@dataclass(frozen=True)
class Minute:
    """The jobs that left RUNNING in one minute, all types together."""

    start: datetime
    completed: int
    failed: int


def minutes(rows: list[MinuteCount], now: datetime, span: int = 60) -> list[Minute]:
    """One entry per minute of the last ``span`` (the current one last), zero where none."""
    completed: dict[datetime, int] = defaultdict(int)
    failed: dict[datetime, int] = defaultdict(int)
    for row in rows:
        completed[row.minute] += row.completed
        failed[row.minute] += row.retried + row.dead
    last = now.replace(second=0, microsecond=0)
    starts = [last - timedelta(minutes=span - 1 - i) for i in range(span)]
    return [Minute(s, completed[s], failed[s]) for s in starts]


def throughput_svg(series: list[Minute]) -> Markup:
    """Stacked bars per minute: completed below, failed (retried or dead) above."""
    top = max((m.completed + m.failed for m in series), default=0) or 1
    bar = WIDTH / len(series)
    scale = (HEIGHT - AXIS) / top
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="jobs finished per minute, last {len(series)} minutes">'
    ]
    for i, m in enumerate(series):
        x = i * bar
        ok_h = m.completed * scale
        bad_h = m.failed * scale
        label = escape(f"{m.start:%H:%M} UTC: {m.completed} completed, {m.failed} failed")
        parts.append(f"<g><title>{label}</title>")
        base = HEIGHT - AXIS
        if ok_h:
            parts.append(
                f'<rect class="ok" x="{x:.1f}" y="{base - ok_h:.1f}" '
                f'width="{bar - 1:.1f}" height="{ok_h:.1f}"/>'
            )
        if bad_h:
            parts.append(
                f'<rect class="bad" x="{x:.1f}" y="{base - ok_h - bad_h:.1f}" '
                f'width="{bar - 1:.1f}" height="{bad_h:.1f}"/>'
            )
        parts.append("</g>")
    parts.append(f'<text x="0" y="{HEIGHT - 4}">{series[0].start:%H:%M}</text>')
    parts.append(
        f'<text x="{WIDTH}" y="{HEIGHT - 4}" text-anchor="end">{series[-1].start:%H:%M} UTC</text>'
    )
    parts.append(f'<text x="4" y="12">{top} a minute</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def failure_rate(series: list[Minute]) -> float | None:
    """Failed attempts over all finished attempts in the series; None when there were none."""
    failed = sum(m.failed for m in series)
    total = failed + sum(m.completed for m in series)
    return failed / total if total else None
