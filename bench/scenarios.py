"""The scenarios, each run on every system: one function per scenario in SCENARIOS.

A scenario takes the run's context and one system and returns its figures
(none when the system's driver lacks what the scenario needs). Every run of a
scenario gets a fresh database; bench/README.md says what each one measures.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from cluster import db_name
from context import Context
from figures import Figure
from horizon import PinnedHorizon
from systems import DriverError, System, call_driver

Scenario = Callable[[Context, System], list[Figure]]


def setup_system(ctx: Context, system: System, dbname: str) -> None:
    """Install the system's schema; its first answer (version, settings) goes to the report."""
    answer = call_driver(ctx.cluster, system, dbname, "setup")
    ctx.info.setdefault(system.name, answer)


def load_backlog(ctx: Context, system: System, dbname: str, jobs: int) -> None:
    """``jobs`` pending no-op jobs, statistics and a clean WAL: the start of every drain."""
    setup_system(ctx, system, dbname)
    call_driver(ctx.cluster, system, dbname, "enqueue", jobs)
    ctx.cluster.settle(dbname, analyze=True)


def check_drained(system: System, answer: dict[str, Any], what: str) -> None:
    """A drain's figure counts only if the system's own tables show every job done."""
    if not answer.get("verified", {}).get("ok"):
        raise DriverError(f"{system.name} {what} did not finish every job: {answer}")


def scenario_enqueue(ctx: Context, system: System) -> list[Figure]:
    """All N jobs in one call, then in calls of each chunk size asked for."""
    n = ctx.options.enqueue_jobs
    figures = []
    for chunk in [n, *ctx.options.enqueue_chunks]:
        with ctx.cluster.fresh_database(db_name(system.name, f"enqueue{chunk}")) as db:
            setup_system(ctx, system, db)
            ctx.cluster.settle(db)
            got = call_driver(ctx.cluster, system, db, "enqueue", n, chunk)
        figures.append(
            Figure(
                scenario="enqueue" if chunk == n else f"enqueue chunk={chunk}",
                system=system.name,
                metric=f"bulk enqueue N={n}" + ("" if chunk == n else f", {chunk} a call"),
                unit="jobs/s",
                value=n / got["seconds"],
                better="higher",
                detail=got,
            )
        )
    return figures


def scenario_drain(ctx: Context, system: System) -> list[Figure]:
    n = ctx.options.jobs
    figures = []
    for sleep_ms, w in itertools.product(ctx.options.drain_sleep_ms, ctx.options.workers):
        # "drain W=8" for no-op jobs (the name the targets and plots read), "drain 5ms W=8" else.
        name = f"drain W={w}" if not sleep_ms else f"drain {sleep_ms}ms W={w}"
        with ctx.cluster.fresh_database(db_name(system.name, name)) as db:
            load_backlog(ctx, system, db, n)
            with ctx.cluster.wal_window(db) as wal:
                got = call_driver(ctx.cluster, system, db, "drain", n, w, sleep_ms)
        check_drained(system, got, "drain")
        figures += [
            Figure(
                scenario=name,
                system=system.name,
                metric=f"drain N={n} W={w}"
                + (f", handlers sleep {sleep_ms} ms" if sleep_ms else ""),
                unit="jobs/s",
                value=n / got["seconds"],
                better="higher",
                detail=got,
            ),
            Figure(
                scenario=f"WAL per job, {name}",
                system=system.name,
                metric=f"WAL bytes per job N={n} W={w}",
                unit="B/job",
                value=wal["bytes"] / n,
                better="lower",
                detail=wal,
            ),
        ]
    return figures


def scenario_latency(ctx: Context, system: System) -> list[Figure]:
    k, w = ctx.options.latency_probes, ctx.options.latency_workers
    with ctx.cluster.fresh_database(db_name(system.name, "latency")) as db:
        setup_system(ctx, system, db)
        ctx.cluster.settle(db)
        got = call_driver(ctx.cluster, system, db, "latency", k, w, ctx.options.latency_spacing_ms)
    if got.get("lost"):
        raise DriverError(f"{system.name} lost {got['lost']} latency probes: {got}")
    return [
        Figure(
            scenario=f"latency {p}",
            system=system.name,
            metric=f"pickup {p} K={k} W={w}, one every {ctx.options.latency_spacing_ms} ms",
            unit="ms",
            value=got[f"{p}_ms"],
            better="lower",
            detail=got,
        )
        for p in ("p50", "p99")
    ]


def scenario_pinned(ctx: Context, system: System) -> list[Figure]:
    """The drain with the xmin horizon pinned: by the idle snapshot alone, then with readers.

    The readers loop without pause, so on a small machine they also take CPU
    from the drain; the first figure isolates what the pin does to the queue.
    """
    if system.table is None:
        return []
    n, w, r = ctx.options.jobs, ctx.options.workers[-1], ctx.options.pinned_readers
    figures = []
    for readers in sorted({0, r}):
        with ctx.cluster.fresh_database(db_name(system.name, "pinned")) as db:
            load_backlog(ctx, system, db, n)
            with PinnedHorizon(ctx.cluster, db, system.table, readers) as pin:
                got = call_driver(ctx.cluster, system, db, "drain", n, w)
                got["reader_scans"] = pin.scans
        check_drained(system, got, "pinned drain")
        scenario, metric = f"drain pinned W={w}", f"drain N={n} W={w}, xmin pinned"
        if readers:
            scenario = f"drain pinned+readers W={w}"
            metric += f" + {readers} RR readers"
        figures.append(
            Figure(
                scenario=scenario,
                system=system.name,
                metric=metric,
                unit="jobs/s",
                value=n / got["seconds"],
                better="higher",
                detail=got,
            )
        )
    return figures


def scenario_claimcost(ctx: Context, system: System) -> list[Figure]:
    """claim(10) + complete_many at a small backlog, then at the big one, and their ratio."""
    if "claimcost" not in system.extras:
        return []
    k = ctx.options.claimcost_cycles
    figures = []
    for pending, done in ((1000, 0), (ctx.options.backlog_pending, ctx.options.backlog_done)):
        with ctx.cluster.fresh_database(db_name(system.name, "claimcost")) as db:
            setup_system(ctx, system, db)
            got = call_driver(ctx.cluster, system, db, "claimcost", k, pending, done)
        figures.append(
            Figure(
                scenario="claim cost",
                system=system.name,
                metric=f"claim(10) + complete_many p50, {pending:,} pending / {done:,} done",
                unit="ms",
                value=got["cycle_p50_ms"],
                better="lower",
                detail=got,
            )
        )
    small, big = figures
    figures.append(
        Figure(
            scenario="claim cost",
            system=system.name,
            metric="p50 at the big backlog / p50 at 1,000 pending",
            unit="x",
            value=big.value / small.value,
            better="lower",
        )
    )
    return figures


def scenario_sustained(ctx: Context, system: System) -> list[Figure]:
    """Producer = consumer for a while, once per ``--sustained-naptimes`` value.

    ``autovacuum_naptime`` is how often autovacuum visits a database at all, so it
    bounds dead tuples more than any per-table threshold can; it is set with
    ALTER SYSTEM for this scenario only and reset afterwards.
    """
    if "sustained" not in system.extras:
        return []
    secs, rate = ctx.options.sustained_seconds, ctx.options.sustained_rate
    w = ctx.options.workers[-1]
    figures = []
    for naptime in ctx.options.sustained_naptimes.split(","):
        with ctx.cluster.fresh_database(db_name(system.name, "sustained")) as db:
            setup_system(ctx, system, db)
            ctx.cluster.settle(db)
            with ctx.cluster.server_setting("autovacuum_naptime", naptime):
                got = call_driver(ctx.cluster, system, db, "sustained", secs, rate, w)
        scenario = f"sustained, naptime {naptime}"
        label = f"{rate} jobs/s for {secs:g} s, W={w}, autovacuum_naptime {naptime}"
        figures += [
            Figure(
                scenario=scenario,
                system=system.name,
                metric=f"pickup p50, {label}",
                unit="ms",
                value=got["p50_ms"],
                better="lower",
                detail=got,
            ),
            Figure(
                scenario=scenario,
                system=system.name,
                metric=f"pickup p99, {label}",
                unit="ms",
                value=got["p99_ms"],
                better="lower",
            ),
            Figure(
                scenario=scenario,
                system=system.name,
                metric="pickup p99, second half / whole run",
                unit="x",
                value=(got["second_half_p99_ms"] or 0) / got["p99_ms"],
                better="lower",
            ),
            Figure(
                scenario=scenario,
                system=system.name,
                metric="max n_dead_tup sampled",
                unit="rows",
                value=got["max_dead_tup"],
                better="lower",
            ),
        ]
    return figures


SCENARIOS: dict[str, Scenario] = {
    "enqueue": scenario_enqueue,
    "drain": scenario_drain,
    "latency": scenario_latency,
    "pinned": scenario_pinned,
    "claimcost": scenario_claimcost,
    "sustained": scenario_sustained,
}
