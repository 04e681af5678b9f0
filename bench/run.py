"""Benchmark pyjobq's peers, and the raw-SQL ceiling, on one throwaway PostgreSQL.

One LocalPostgres (pyjobq.localpg) with default settings serves every system;
each system gets a fresh database per scenario run. Systems are programs that
follow the contract in bench/peers/contract.py and are listed in SYSTEMS: to
add one, write its driver and add one entry. The ceiling is pgbench running
bench/ceiling/*.sql on the same cluster.

    bench/setup
    .venv/bin/python bench/run.py                  # N=20000, W=8
    .venv/bin/python bench/run.py --workers 1,8,32 --enqueue-jobs 200000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PEERS_PYTHON = BENCH / ".venv-peers" / "bin" / "python"
DRIVER_TIMEOUT_S = 900
CEILING = "ceiling"


@dataclass(frozen=True)
class System:
    """A queue benchmarked through a driver that follows bench/peers/contract.py.

    ``role`` is "peer" for the systems pyjobq is compared with ("best peer" is
    taken over these) and "subject" for pyjobq itself.
    """

    name: str
    argv: tuple[str, ...]
    role: Literal["peer", "subject"] = "peer"
    # The system's job table, read by the pinned-horizon scenario's readers.
    table: str | None = None
    # Environment added to the driver's (e.g. to pick a mode of one driver).
    env: tuple[tuple[str, str], ...] = ()
    # Driver commands beyond the common contract (claimcost, sustained).
    extras: frozenset[str] = frozenset()


PYJOBQ_DRIVER = (sys.executable, str(BENCH / "peers" / "pyjobq_drv.py"))

SYSTEMS: tuple[System, ...] = (
    System(
        "procrastinate",
        (str(PEERS_PYTHON), str(BENCH / "peers" / "procrastinate_drv.py")),
        table="procrastinate_jobs",
    ),
    System(
        "pgqueuer", (str(PEERS_PYTHON), str(BENCH / "peers" / "pgqueuer_drv.py")), table="pgqueuer"
    ),
    System(
        "graphile-worker",
        ("node", str(BENCH / "peers" / "graphile.mjs")),
        table="graphile_worker._private_jobs",
    ),
    System("pg-boss", ("node", str(BENCH / "peers" / "pgboss.mjs")), table="pgboss.job"),
    # pyjobq as shipped: pyjobq.worker.Worker(concurrency=W), its defaults.
    System(
        "pyjobq",
        PYJOBQ_DRIVER,
        role="subject",
        table="pyjobq.job",
        extras=frozenset({"claimcost", "sustained"}),
    ),
    # pyjobq as shipped, with claim fronts off in every session (pyjobq.claim_front_off):
    # what the front buys the pinned drain, in the same run.
    System(
        "pyjobq-nofront",
        PYJOBQ_DRIVER,
        role="subject",
        table="pyjobq.job",
        env=(("PGOPTIONS", "-c pyjobq.claim_front_off=on"),),
    ),
    # The same SQL without the Worker: W connections, claim(50) + complete_many.
    System(
        "pyjobq-loop",
        PYJOBQ_DRIVER,
        role="subject",
        table="pyjobq.job",
        env=(("PYJOBQ_DRAIN", "loop"),),
    ),
)


@dataclass
class Figure:
    """One measured number of one system in one scenario."""

    scenario: str
    system: str
    metric: str
    unit: str
    value: float
    better: Literal["higher", "lower"]
    samples: list[float] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)


class DriverError(RuntimeError):
    pass


class Cluster:
    """The one server every system runs on, and its fresh databases."""

    def __init__(self, server: Any) -> None:
        self.server = server

    def conninfo(self, dbname: str) -> dict[str, str]:
        info = conninfo_to_dict(self.server.dsn(dbname))
        return {k: str(v) for k, v in info.items() if v is not None}

    def connect(self, dbname: str) -> psycopg.Connection[Any]:
        return psycopg.connect(self.server.dsn(dbname), autocommit=True)

    def libpq_env(self, dbname: str) -> dict[str, str]:
        info = self.conninfo(dbname)
        names = {
            "host": "PGHOST",
            "port": "PGPORT",
            "user": "PGUSER",
            "password": "PGPASSWORD",
            "dbname": "PGDATABASE",
        }
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update({names[k]: v for k, v in info.items() if k in names})
        return env

    @contextmanager
    def fresh_database(self, name: str) -> Iterator[str]:
        with self.connect("postgres") as conn:
            conn.execute(
                sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name))
            )
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
        try:
            yield name
        finally:
            with self.connect("postgres") as conn:
                conn.execute(
                    sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name))
                )

    @contextmanager
    def server_setting(self, name: str, value: str) -> Iterator[None]:
        """``name = value`` for the whole server (ALTER SYSTEM and a reload), reset after."""

        def alter(statement: sql.Composable) -> None:
            with self.connect("postgres") as admin:
                admin.execute(statement)
                admin.execute("select pg_reload_conf()")

        alter(sql.SQL("alter system set {} = {}").format(sql.Identifier(name), sql.Literal(value)))
        try:
            yield
        finally:
            alter(sql.SQL("alter system reset {}").format(sql.Identifier(name)))

    def settle(self, dbname: str, analyze: bool = False) -> None:
        """Put every system in the same state before a timed phase."""
        with self.connect(dbname) as conn:
            if analyze:
                conn.execute("analyze")
            conn.execute("checkpoint")

    def describe(self) -> dict[str, Any]:
        with self.connect("postgres") as conn:
            version = conn.execute("select version()").fetchone()
            rows = conn.execute(
                "select name, setting, unit from pg_settings"
                " where source not in ('default', 'override')"
                " or name in ('shared_buffers', 'synchronous_commit', 'fsync', 'max_connections',"
                " 'wal_level', 'autovacuum', 'work_mem', 'checkpoint_timeout', 'max_wal_size')"
                " order by name"
            ).fetchall()
        return {
            "version": version[0] if version else None,
            "settings": {name: f"{setting}{unit or ''}" for name, setting, unit in rows},
        }


def call_driver(cluster: Cluster, system: System, dbname: str, *args: object) -> dict[str, Any]:
    argv = [*system.argv, *(str(a) for a in args)]
    proc = subprocess.run(
        argv,
        env={**cluster.libpq_env(dbname), **dict(system.env)},
        capture_output=True,
        text=True,
        timeout=DRIVER_TIMEOUT_S,
        cwd=BENCH,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise DriverError(
            f"{system.name} {' '.join(map(str, args))} exited {proc.returncode}:\n"
            + proc.stderr[-3000:]
        )
    result: dict[str, Any] = json.loads(lines[-1])
    return result


# --- scenarios ---------------------------------------------------------------
#
# A scenario takes the run's context and one system and returns its figures
# (none when the system's driver lacks what the scenario needs).


@dataclass
class Context:
    cluster: Cluster
    args: argparse.Namespace
    info: dict[str, dict[str, Any]] = field(default_factory=dict)  # system -> setup answer


def db_name(system: str, scenario: str) -> str:
    return "bench_" + re.sub(r"[^a-z0-9]+", "_", f"{system}_{scenario}".lower())


def setup_system(ctx: Context, system: System, dbname: str) -> None:
    answer = call_driver(ctx.cluster, system, dbname, "setup")
    ctx.info.setdefault(system.name, answer)


def scenario_enqueue(ctx: Context, system: System) -> list[Figure]:
    n = ctx.args.enqueue_jobs
    with ctx.cluster.fresh_database(db_name(system.name, "enqueue")) as db:
        setup_system(ctx, system, db)
        ctx.cluster.settle(db)
        got = call_driver(ctx.cluster, system, db, "enqueue", n)
    return [
        Figure(
            "enqueue",
            system.name,
            f"bulk enqueue N={n}",
            "jobs/s",
            n / got["seconds"],
            "higher",
            detail=got,
        )
    ]


def scenario_drain(ctx: Context, system: System) -> list[Figure]:
    n = ctx.args.jobs
    figures = []
    for w in ctx.args.workers:
        with ctx.cluster.fresh_database(db_name(system.name, f"drain{w}")) as db:
            setup_system(ctx, system, db)
            call_driver(ctx.cluster, system, db, "enqueue", n)
            ctx.cluster.settle(db, analyze=True)
            got = call_driver(ctx.cluster, system, db, "drain", n, w)
        if not got.get("verified", {}).get("ok"):
            raise DriverError(f"{system.name} drain did not finish every job: {got}")
        figures.append(
            Figure(
                f"drain W={w}",
                system.name,
                f"drain N={n} W={w}",
                "jobs/s",
                n / got["seconds"],
                "higher",
                detail=got,
            )
        )
    return figures


def scenario_latency(ctx: Context, system: System) -> list[Figure]:
    k, w = ctx.args.latency_probes, ctx.args.latency_workers
    with ctx.cluster.fresh_database(db_name(system.name, "latency")) as db:
        setup_system(ctx, system, db)
        ctx.cluster.settle(db)
        got = call_driver(ctx.cluster, system, db, "latency", k, w)
    if got.get("lost"):
        raise DriverError(f"{system.name} lost {got['lost']} latency probes: {got}")
    return [
        Figure(
            "latency p50",
            system.name,
            f"pickup p50 K={k} W={w}",
            "ms",
            got["p50_ms"],
            "lower",
            detail=got,
        ),
        Figure(
            "latency p99",
            system.name,
            f"pickup p99 K={k} W={w}",
            "ms",
            got["p99_ms"],
            "lower",
            detail=got,
        ),
    ]


class Pin:
    """Another session's snapshot held open, plus REPEATABLE READ readers scanning the table.

    The idle transaction pins the xmin horizon of the database: no row version
    that any queue writes from then on can be removed, by vacuum or by index
    scans marking entries dead, until it ends.
    """

    def __init__(self, cluster: Cluster, dbname: str, table: str, readers: int) -> None:
        self.cluster, self.dbname, self.table, self.readers = cluster, dbname, table, readers
        self.stop = threading.Event()
        self.scans = 0
        self.threads: list[threading.Thread] = []
        self.pin: psycopg.Connection[Any] | None = None

    def __enter__(self) -> Pin:
        table = sql.SQL(".").join(sql.Identifier(p) for p in self.table.split("."))
        self.pin = psycopg.connect(self.cluster.server.dsn(self.dbname))
        self.pin.execute("begin isolation level repeatable read")
        self.pin.execute(sql.SQL("select 1 from {} limit 1").format(table))
        for _ in range(self.readers):
            t = threading.Thread(target=self._read, args=(table,), daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def _read(self, table: sql.Composable) -> None:
        with psycopg.connect(self.cluster.server.dsn(self.dbname)) as conn:
            while not self.stop.is_set():
                with conn.transaction():
                    conn.execute("set transaction isolation level repeatable read")
                    conn.execute(sql.SQL("select count(*) from {}").format(table))
                self.scans += 1

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)
        if self.pin is not None:
            self.pin.close()


def scenario_pinned(ctx: Context, system: System) -> list[Figure]:
    """The drain with the xmin horizon pinned: by the idle snapshot alone, then with readers.

    The readers loop without pause, so on a small machine they also take CPU
    from the drain; the first figure isolates what the pin does to the queue.
    """
    if system.table is None:
        return []
    n, w, r = ctx.args.jobs, ctx.args.workers[-1], ctx.args.pinned_readers
    figures = []
    for readers in sorted({0, r}):
        with ctx.cluster.fresh_database(db_name(system.name, "pinned")) as db:
            setup_system(ctx, system, db)
            call_driver(ctx.cluster, system, db, "enqueue", n)
            ctx.cluster.settle(db, analyze=True)
            with Pin(ctx.cluster, db, system.table, readers) as pin:
                got = call_driver(ctx.cluster, system, db, "drain", n, w)
                got["reader_scans"] = pin.scans
        if not got.get("verified", {}).get("ok"):
            raise DriverError(f"{system.name} pinned drain did not finish every job: {got}")
        scenario, label = f"drain pinned W={w}", f"drain N={n} W={w}, xmin pinned"
        if readers:
            scenario = f"drain pinned+readers W={w}"
            label += f" + {readers} RR readers"
        figures.append(
            Figure(scenario, system.name, label, "jobs/s", n / got["seconds"], "higher", detail=got)
        )
    return figures


def scenario_claimcost(ctx: Context, system: System) -> list[Figure]:
    if "claimcost" not in system.extras:
        return []
    k = ctx.args.claimcost_cycles
    sizes = [(1000, 0), (ctx.args.backlog_pending, ctx.args.backlog_done)]
    figures = []
    for pending, done in sizes:
        label = f"{pending:,} pending / {done:,} done"
        with ctx.cluster.fresh_database(db_name(system.name, "claimcost")) as db:
            setup_system(ctx, system, db)
            got = call_driver(ctx.cluster, system, db, "claimcost", k, pending, done)
        figures.append(
            Figure(
                "claim cost",
                system.name,
                f"claim(10) + complete_many p50, {label}",
                "ms",
                got["cycle_p50_ms"],
                "lower",
                detail=got,
            )
        )
    small, big = figures
    figures.append(
        Figure(
            "claim cost",
            system.name,
            "p50 at the big backlog / p50 at 1,000 pending",
            "x",
            big.value / small.value,
            "lower",
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
    secs, rate, w = ctx.args.sustained_seconds, ctx.args.sustained_rate, ctx.args.workers[-1]
    figures = []
    for naptime in ctx.args.sustained_naptimes.split(","):
        with ctx.cluster.fresh_database(db_name(system.name, "sustained")) as db:
            setup_system(ctx, system, db)
            ctx.cluster.settle(db)
            with ctx.cluster.server_setting("autovacuum_naptime", naptime):
                got = call_driver(ctx.cluster, system, db, "sustained", secs, rate, w)
        scenario = f"sustained, naptime {naptime}"
        label = f"{rate} jobs/s for {secs:g} s, W={w}, autovacuum_naptime {naptime}"
        figures += [
            Figure(
                scenario,
                system.name,
                f"pickup p50, {label}",
                "ms",
                got["p50_ms"],
                "lower",
                detail=got,
            ),
            Figure(scenario, system.name, f"pickup p99, {label}", "ms", got["p99_ms"], "lower"),
            Figure(
                scenario,
                system.name,
                "pickup p99, second half / whole run",
                "x",
                (got["second_half_p99_ms"] or 0) / got["p99_ms"],
                "lower",
            ),
            Figure(
                scenario,
                system.name,
                "max n_dead_tup sampled",
                "rows",
                got["max_dead_tup"],
                "lower",
            ),
        ]
    return figures


SCENARIOS: dict[str, Callable[[Context, System], list[Figure]]] = {
    "enqueue": scenario_enqueue,
    "drain": scenario_drain,
    "latency": scenario_latency,
    "pinned": scenario_pinned,
    "claimcost": scenario_claimcost,
    "sustained": scenario_sustained,
}


# --- the raw-SQL ceiling -------------------------------------------------------


def pgbench(ctx: Context, dbname: str, script: str, clients: int, *extra: str) -> dict[str, float]:
    info = ctx.cluster.conninfo(dbname)
    argv = [
        str(Path(ctx.cluster.server.bindir) / "pgbench"),
        "-n",
        "-M",
        "prepared",
        "-c",
        str(clients),
        "-j",
        str(min(clients, os.cpu_count() or 1)),
        "-f",
        str(BENCH / "ceiling" / script),
        *extra,
        "-h",
        info.get("host", ""),
        "-p",
        info.get("port", "5432"),
        "-U",
        info.get("user", ""),
        dbname,
    ]
    env = {**os.environ, **({"PGPASSWORD": info["password"]} if "password" in info else {})}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=DRIVER_TIMEOUT_S)
    if proc.returncode != 0:
        raise DriverError(
            f"pgbench {script} exited {proc.returncode}:\n"
            + proc.stdout[-2000:]
            + proc.stderr[-2000:]
        )
    tps = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", proc.stdout)
    done = re.search(r"number of transactions actually processed: (\d+)", proc.stdout)
    if not tps or not done:
        raise DriverError(f"cannot read pgbench output:\n{proc.stdout}")
    return {"tps": float(tps.group(1)), "transactions": float(done.group(1))}


def ceiling_enqueue(ctx: Context) -> list[Figure]:
    return [ceiling_copy(ctx), ceiling_insert(ctx)]


def ceiling_copy(ctx: Context) -> Figure:
    """COPY N rows into pyjobq.job itself: its indexes, defaults and checks, no function."""
    from pyjobq.migrate import migrate

    n = ctx.args.enqueue_jobs
    with ctx.cluster.fresh_database(db_name(CEILING, "copy")) as db:
        migrate(ctx.cluster.server.dsn(db))
        ctx.cluster.settle(db)
        data = (
            b"1\t{}\t2000-01-01 00:00:00+00\t2000-01-01 00:00:00+00\t2000-01-01 00:00:00+00\n" * n
        )
        with ctx.cluster.connect(db) as conn:
            started = time.perf_counter()
            with (
                conn.cursor() as cur,
                cur.copy(
                    "copy pyjobq.job (job_type, payload, run_after, created_at, updated_at)"
                    " from stdin"
                ) as copy,
            ):
                copy.write(data)
            seconds = time.perf_counter() - started
    return Figure(
        "enqueue",
        CEILING,
        f"COPY N={n} rows into pyjobq.job",
        "jobs/s",
        n / seconds,
        "higher",
        detail={"seconds": seconds},
    )


def ceiling_insert(ctx: Context) -> Figure:
    n = ctx.args.enqueue_jobs
    with ctx.cluster.fresh_database(db_name(CEILING, "enqueue")) as db:
        with ctx.cluster.connect(db) as conn:
            conn.execute((BENCH / "ceiling" / "schema.sql").read_text())
        ctx.cluster.settle(db)
        with ctx.cluster.connect(db) as conn:
            started = time.perf_counter()
            conn.execute(
                "insert into ceiling_job (payload) select '{}' from generate_series(1, %s)", (n,)
            )
            seconds = time.perf_counter() - started
    return Figure(
        "enqueue",
        CEILING,
        f"insert N={n} rows into a plain table, one statement",
        "jobs/s",
        n / seconds,
        "higher",
        detail={"seconds": seconds},
    )


def ceiling_drain(ctx: Context) -> list[Figure]:
    n, figures = ctx.args.jobs, []
    for w in ctx.args.workers:
        with ctx.cluster.fresh_database(db_name(CEILING, f"drain{w}")) as db:
            with ctx.cluster.connect(db) as conn:
                conn.execute((BENCH / "ceiling" / "schema.sql").read_text())
                conn.execute("insert into ceiling_counter (id) select generate_series(1, %s)", (n,))
                conn.execute(
                    "insert into ceiling_job (payload) select '{}' from generate_series(1, %s)",
                    (n,),
                )
            ctx.cluster.settle(db, analyze=True)
            upd = pgbench(
                ctx,
                db,
                "update_by_pk.sql",
                w,
                "-T",
                str(ctx.args.ceiling_seconds),
                "-D",
                f"rows={n}",
            )
            ctx.cluster.settle(db)
            per_client = n // w
            started = time.perf_counter()
            cyc = pgbench(ctx, db, "claim_complete.sql", w, "-t", str(per_client))
            wall = time.perf_counter() - started
            with ctx.cluster.connect(db) as conn:
                row = conn.execute(
                    "select count(*) filter (where state = 'done') from ceiling_job"
                ).fetchone()
            done = int(row[0]) if row else 0
            if done != per_client * w:
                raise DriverError(
                    f"ceiling claim/complete finished {done} of {per_client * w} jobs"
                )
        figures.append(
            Figure(
                f"drain W={w}",
                CEILING,
                f"SKIP LOCKED claim-1 + complete, N={done} W={w}",
                "jobs/s",
                cyc["tps"],
                "higher",
                detail={**cyc, "wall_s": wall, "done": done},
            )
        )
        figures.append(
            Figure(
                f"update-by-pk W={w}",
                CEILING,
                f"UPDATE by primary key, {ctx.args.ceiling_seconds}s W={w}",
                "tps",
                upd["tps"],
                "higher",
                detail=upd,
            )
        )
    return figures


CEILINGS: dict[str, Callable[[Context], list[Figure]]] = {
    "enqueue": ceiling_enqueue,
    "drain": ceiling_drain,
}


# --- report ------------------------------------------------------------------------


def median_figures(runs: Sequence[list[Figure]]) -> list[Figure]:
    """Merge repeated runs: same (scenario, system, metric) -> median value."""
    merged: dict[tuple[str, str, str], Figure] = {}
    for figures in runs:
        for f in figures:
            key = (f.scenario, f.system, f.metric)
            if key not in merged:
                merged[key] = Figure(
                    f.scenario, f.system, f.metric, f.unit, f.value, f.better, detail=f.detail
                )
            merged[key].samples.append(f.value)
    for f in merged.values():
        f.value = statistics.median(f.samples)
    return list(merged.values())


def ratio(a: float, b: float | None) -> str:
    return f"{a / b:.2f}" if b else "-"


def report(figures: list[Figure], ctx: Context, roles: dict[str, str]) -> str:
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
            version = ctx.info.get(f.system, {}).get(
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
    lines += targets(figures, roles)
    lines += ["", "| system | settings |", "|---|---|"]
    for name, answer in ctx.info.items():
        settings = "; ".join(f"{k}={v}" for k, v in answer.get("settings", {}).items())
        lines.append(f"| {name} | {settings} |")
    return "\n".join(lines)


def targets(figures: list[Figure], roles: dict[str, str]) -> list[str]:
    """The performance targets, each as a ratio measured within this run."""

    def value(scenario: str, system: str, metric_start: str = "") -> float | None:
        for f in figures:
            if f.scenario == scenario and f.system == system and f.metric.startswith(metric_start):
                return f.value
        return None

    def best(scenario: str, metric_start: str = "") -> float | None:
        got = [
            f.value
            for f in figures
            if f.scenario == scenario
            and roles.get(f.system) == "peer"
            and f.metric.startswith(metric_start)
        ]
        return max(got) if got else None

    def fmt(x: float | None, unit: str = "x") -> str:
        return "-" if x is None else f"{x:.2f}{' ' + unit if unit else ''}"

    def div(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    subjects = [s for s, r in roles.items() if r == "subject"]
    if not subjects:
        return []
    drain = next((f.scenario for f in figures if f.scenario.startswith("drain W=")), "")
    pinned = next((f.scenario for f in figures if f.scenario.startswith("drain pinned W=")), "")
    readers = next((f.scenario for f in figures if f.scenario.startswith("drain pinned+")), "")
    rows = [
        ("drain / best peer", "≥ 2", lambda s: fmt(div(value(drain, s), best(drain)))),
        (
            "bulk enqueue / best peer",
            "≥ 2",
            lambda s: fmt(div(value("enqueue", s), best("enqueue"))),
        ),
        (
            "bulk enqueue / COPY into pyjobq.job",
            "≥ 0.5",
            lambda s: fmt(div(value("enqueue", s), value("enqueue", CEILING, "COPY"))),
        ),
        ("pickup p50", "≤ 2 ms", lambda s: fmt(value("latency p50", s), "ms")),
        ("pickup p99", "≤ 10 ms", lambda s: fmt(value("latency p99", s), "ms")),
        (
            "claim cost, big backlog / 1k pending",
            "≤ 1.2",
            lambda s: fmt(value("claim cost", s, "p50 at the big")),
        ),
        (
            "drain pinned xmin / clean drain",
            "≥ 0.8",
            lambda s: fmt(div(value(pinned, s), value(drain, s))),
        ),
        (
            "drain pinned xmin + RR readers / clean drain",
            "≥ 0.8",
            lambda s: fmt(div(value(readers, s), value(drain, s))),
        ),
    ]
    for scenario in dict.fromkeys(
        f.scenario for f in figures if f.scenario.startswith("sustained")
    ):
        rows.append(
            (
                f"{scenario}: pickup p99, second half / whole",
                "≈ 1",
                lambda s, sc=scenario: fmt(value(sc, s, "pickup p99, second half")),
            )
        )
    lines = [
        "",
        "| target | goal | " + " | ".join(subjects) + " |",
        "|---|---|" + "---:|" * len(subjects),
    ]
    for name, goal, get in rows:
        lines.append(f"| {name} | {goal} | " + " | ".join(get(s) for s in subjects) + " |")
    return lines


# --- main --------------------------------------------------------------------------


def int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--jobs", type=int, default=20_000, help="N for the drain scenario (default 20000)"
    )
    p.add_argument(
        "--enqueue-jobs", type=int, default=20_000, help="N for bulk enqueue (e.g. 200000)"
    )
    p.add_argument("--workers", type=int_list, default=[8], help="W values for drain, e.g. 1,8,32")
    p.add_argument(
        "--latency-probes", type=int, default=200, help="K single enqueues, ~20 ms apart"
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
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from pyjobq.localpg import LocalPostgres

    wanted = set(args.systems.split(","))
    systems = [s for s in SYSTEMS if s.name in wanted]
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenarios: {unknown}")
    roles = {s.name: s.role for s in systems} | {CEILING: "ceiling"}

    server = LocalPostgres(base_dir=Path(args.base_dir) if args.base_dir else None)
    server.start()
    started = time.perf_counter()
    try:
        ctx = Context(Cluster(server), args)
        runs: list[list[Figure]] = []
        for rep in range(args.repeat):
            figures: list[Figure] = []
            for scenario in scenarios:
                if CEILING in wanted and scenario in CEILINGS:
                    print(
                        f"[{rep + 1}/{args.repeat}] {scenario}: ceiling",
                        file=sys.stderr,
                        flush=True,
                    )
                    figures += CEILINGS[scenario](ctx)
                for system in systems:
                    print(
                        f"[{rep + 1}/{args.repeat}] {scenario}: {system.name}",
                        file=sys.stderr,
                        flush=True,
                    )
                    figures += SCENARIOS[scenario](ctx, system)
            runs.append(figures)
        merged = median_figures(runs)
        server_info = ctx.cluster.describe()
    finally:
        server.stop()

    table = report(merged, ctx, roles)
    print(table)
    args.results.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.results / f"peers-{stamp}.json"
    out.write_text(
        json.dumps(
            {
                "created_at": stamp,
                "wall_seconds": round(time.perf_counter() - started, 1),
                "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                "machine": {
                    "cpus": os.cpu_count(),
                    "platform": platform.platform(),
                    "python": platform.python_version(),
                },
                "server": server_info,
                "systems": ctx.info,
                "figures": [asdict(f) for f in merged],
                "runs": [[asdict(f) for f in run] for run in runs],
            },
            indent=2,
        )
    )
    print(
        f"\nresults: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
