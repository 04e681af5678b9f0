"""Benchmark pyjobq's peers, and the raw-SQL ceiling, on one throwaway PostgreSQL.

One LocalPostgres (pyjobq.localpg) with default settings serves every system;
each system gets a fresh database per scenario run. Systems are programs that
follow the contract in bench/peers/contract.py and are listed in SYSTEMS
(bench/systems.py): to add one, write its driver and add one entry. The
ceiling is pgbench running bench/ceiling/*.sql on the same cluster.

    bench/setup
    .venv/bin/python bench/run.py                  # N=20000, W=8
    .venv/bin/python bench/run.py --workers 1,8,32 --enqueue-jobs 200000
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from ceilings import CEILINGS
from cluster import Cluster
from context import Context, Options
from figures import Figure, median_figures
from report import report, write_results
from scenarios import SCENARIOS
from systems import BENCH, CEILING, ROOT, SYSTEMS, Role


def int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse_args(argv: Sequence[str] | None) -> Options:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--jobs", type=int, default=20_000, help="N for the drain scenario (default 20000)"
    )
    p.add_argument(
        "--enqueue-jobs", type=int, default=20_000, help="N for bulk enqueue (e.g. 200000)"
    )
    p.add_argument(
        "--enqueue-chunks",
        type=int_list,
        default=[],
        help="also bulk enqueue in calls of each many jobs, e.g. 100,1000",
    )
    p.add_argument("--workers", type=int_list, default=[8], help="W values for drain, e.g. 1,8,32")
    p.add_argument(
        "--drain-sleep-ms",
        type=int_list,
        default=[0],
        help="each drain's handlers sleep this long, e.g. 0,5 (0: no-op jobs)",
    )
    p.add_argument("--latency-probes", type=int, default=200, help="K single enqueues")
    p.add_argument(
        "--latency-spacing-ms", type=int, default=10, help="how far apart the probes go in"
    )
    p.add_argument("--latency-workers", type=int, default=8, help="W of the idle workers")
    p.add_argument(
        "--ceiling-seconds", type=int, default=10, help="duration of the UPDATE-by-pk run"
    )
    p.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help=f"subset of {','.join(SCENARIOS)}"
    )
    p.add_argument(
        "--systems",
        default=",".join([s.name for s in SYSTEMS] + [CEILING]),
        help="subset of systems",
    )
    p.add_argument(
        "--pinned-readers", type=int, default=4, help="REPEATABLE READ readers in 'pinned'"
    )
    p.add_argument(
        "--backlog-pending", type=int, default=1_000_000, help="pending rows for the big claim cost"
    )
    p.add_argument(
        "--backlog-done", type=int, default=5_000_000, help="DONE rows for the big claim cost"
    )
    p.add_argument("--claimcost-cycles", type=int, default=1000, help="claims timed per size")
    p.add_argument("--sustained-seconds", type=float, default=60, help="duration of 'sustained'")
    p.add_argument(
        "--sustained-rate", type=int, default=1000, help="jobs/s enqueued in 'sustained'"
    )
    p.add_argument(
        "--sustained-naptimes",
        default="1min,10s",
        help="autovacuum_naptime values, one 'sustained' run each",
    )
    p.add_argument("--repeat", type=int, default=1, help="runs per figure; the median is reported")
    p.add_argument(
        "--base-dir", default=None, help="LocalPostgres base directory (default: temporary)"
    )
    p.add_argument("--results", type=Path, default=BENCH / "results", help="where the JSON goes")
    return Options(**vars(p.parse_args(argv)))


def progress(rep: int, options: Options, scenario: str, system: str) -> None:
    print(f"[{rep + 1}/{options.repeat}] {scenario}: {system}", file=sys.stderr, flush=True)


def run_once(ctx: Context, rep: int, scenarios: list[str], wanted: set[str]) -> list[Figure]:
    """Every scenario on the ceiling (where it has one), then on each system in turn."""
    figures: list[Figure] = []
    for scenario in scenarios:
        if CEILING in wanted and scenario in CEILINGS:
            progress(rep, ctx.options, scenario, CEILING)
            figures += CEILINGS[scenario](ctx)
        for system in SYSTEMS:
            if system.name in wanted:
                progress(rep, ctx.options, scenario, system.name)
                figures += SCENARIOS[scenario](ctx, system)
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from pyjobq.localpg import LocalPostgres

    wanted = set(options.systems.split(","))
    scenarios = [s for s in options.scenarios.split(",") if s]
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenarios: {unknown}")
    roles: dict[str, Role] = {s.name: s.role for s in SYSTEMS if s.name in wanted}
    roles[CEILING] = "ceiling"

    server = LocalPostgres(base_dir=Path(options.base_dir) if options.base_dir else None)
    server.start()
    started = time.perf_counter()
    try:
        ctx = Context(cluster=Cluster(server), options=options)
        runs = [run_once(ctx, rep, scenarios, wanted) for rep in range(options.repeat)]
        merged = median_figures(runs)
        server_info = ctx.cluster.describe()
    finally:
        server.stop()

    print(report(merged, ctx.info, roles))
    options.results.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = options.results / f"peers-{stamp}.json"
    write_results(
        out,
        created_at=stamp,
        wall_seconds=time.perf_counter() - started,
        options=options,
        server=server_info,
        info=ctx.info,
        figures=merged,
        runs=runs,
    )
    print(
        f"\nresults: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
