"""``python -m tests.faults [--scale N] [scenario ...]``: run the fault scenarios on throwaway
servers and print their figures (what scripts/faults runs)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import Any

import psycopg

from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import migrate
from tests.faults import failover, mixed, scenarios
from tests.faults.harness import assert_sound

# The same throwaway settings as the test suite's server; the crash gets a durable server.
FAST = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}

RUNS: dict[str, Callable[[LocalPostgres, str, float], dict[str, Any]]] = {
    "crash": lambda s, dsn, k: scenarios.server_crash(dsn, lambda: s.restart("immediate"), k),
    "kills": lambda s, dsn, k: scenarios.backend_kills(dsn, k),
    "exhaustion": lambda s, dsn, k: scenarios.connection_exhaustion(dsn, k),
    "xmin": lambda s, dsn, k: scenarios.pinned_horizon(dsn, k),
    "overload": lambda s, dsn, k: scenarios.overload(dsn, k),
    "features": lambda s, dsn, k: mixed.features_under_backend_kills(dsn, k),
}
# The verdict of each scenario of RUNS: assert_sound's, or more.
CHECKS: dict[str, Callable[[dict[str, Any]], None]] = {"features": mixed.assert_held}

Figures = scenarios.Figures

# Scenarios that start their own servers (a primary and its standby), each with its verdict: an
# asynchronous standby may lose acknowledged commits, which is a figure to report, not a failure.
OWN_SERVERS: dict[str, tuple[Callable[[float], Figures], Callable[[Figures], None]]] = {
    "failover": (lambda k: failover.failover(True, k), failover.assert_no_loss),
    "failover-async": (lambda k: failover.failover(False, k), failover.assert_recovered),
}


def on_throwaway_server(name: str, scale: float) -> Figures:
    settings = {"max_connections": "60"} if name == "crash" else FAST
    with LocalPostgres(settings=settings) as server:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute("create database faults")
        dsn = server.dsn("faults")
        migrate(dsn)
        return RUNS[name](server, dsn, scale)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0, help="workload multiplier")
    parser.add_argument(
        "scenario", nargs="*", choices=[[], *RUNS, *OWN_SERVERS], help="default: all"
    )
    args = parser.parse_args()
    # Faults make the worker and the pools log every reconnect: keep the figures readable.
    logging.basicConfig(level=logging.ERROR)
    for name in ("pyjobq", "psycopg"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    failed = 0
    for name in args.scenario or [*RUNS, *OWN_SERVERS]:
        if name in OWN_SERVERS:
            run, check = OWN_SERVERS[name]
            figures = run(args.scale)
        else:
            figures = on_throwaway_server(name, args.scale)
            check = CHECKS.get(name, assert_sound)
        verdict = "ok"
        try:
            check(figures)
        except AssertionError:
            verdict = "FAILED"
            failed += 1
        print(f"{name}: {verdict}")
        for key, value in figures.items():
            print(f"  {key}: {value}")
        sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
