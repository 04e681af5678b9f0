"""Faults under a real workload: the queue loses nothing, runs no attempt twice, recovers alone.

Each scenario (tests/faults/scenarios.py and failover.py, also run by scripts/faults to print
its figures) drives Workers with a handler that records every (job_id, attempt) it runs, breaks
something mid-run and waits for the queue to drain by itself. The verdict, for every scenario:
every acknowledged job is in the table and DONE or DEAD, every DONE job's final attempt ran, and
no attempt ran twice. Worker crashes (SIGKILL) are covered in tests/test_worker*.py.

Bounded by default; ``PYJOBQ_TEST_SCALE=10`` runs ten times the load.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import migrate
from tests.faults import failover, mixed, scenarios
from tests.faults.harness import assert_sound

SCALE = float(os.environ.get("PYJOBQ_TEST_SCALE", "1"))

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def durable_server() -> Iterator[LocalPostgres]:
    """A server of its own with PostgreSQL's default durability (the session's runs with fsync
    and synchronous_commit off, where an acknowledged commit may legitimately vanish in a crash)."""
    with LocalPostgres(settings={"max_connections": "60"}) as server:
        migrate(server.dsn())
        yield server


def report(figures: dict[str, Any]) -> None:
    print()
    for key, value in figures.items():
        print(f"  {key}: {value}")


def test_server_crash_mid_run(durable_server: LocalPostgres) -> None:
    figures = scenarios.server_crash(
        durable_server.dsn(), lambda: durable_server.restart("immediate"), SCALE
    )
    report(figures)
    assert_sound(figures)
    # Committed work survives crash recovery: every job DONE before the crash is still DONE.
    assert figures["done_before_crash_kept"] == figures["done_before_crash"] > 0


def test_backends_terminated_repeatedly(dsn: str) -> None:
    figures = scenarios.backend_kills(dsn, SCALE)
    report(figures)
    assert_sound(figures)
    assert figures["backends_killed"] > 0


def test_connection_slots_exhausted(dsn: str) -> None:
    figures = scenarios.connection_exhaustion(dsn, SCALE)
    report(figures)
    assert_sound(figures)
    # New sessions were refused with a connection error, and the pooled producer timed out
    # with PoolTimeout instead of hanging.
    assert figures["new_connection_error"] == "OperationalError"
    assert figures["producer_pool_error"] == "PoolTimeout"


def test_pinned_xmin_and_repeatable_read_readers(dsn: str) -> None:
    figures = scenarios.pinned_horizon(dsn, SCALE)
    report(figures)
    assert_sound(figures)
    assert figures["snapshot_unchanged"]
    assert figures["reader_inconsistencies"] == 0
    assert figures["reader_errors"] == []


def test_sustained_overload_then_recovery(dsn: str) -> None:
    figures = scenarios.overload(dsn, SCALE)
    report(figures)
    assert_sound(figures)
    assert figures["backlog_at_peak"] > 0, "the producer outpaced the worker"
    assert figures["backlog_after"] == 0
    assert figures["oldest_due_seconds_after"] == 0


def test_failover_to_a_synchronous_standby() -> None:
    """The primary killed mid-drain and its synchronous standby promoted: producer and workers
    on one multi-host DSN (target_session_attrs=read-write) carry on against the new primary."""
    figures = failover.failover(synchronous=True, scale=SCALE)
    report(figures)
    # assert_sound, and judged from outside the database (which failed over with its records):
    # no acknowledged completion lost or repeated. And the fault really happened: the primary
    # died mid-drain, the standby was promoted, served the probe batch and took the producer's
    # enqueues (failover.assert_failed_over).
    failover.assert_no_loss(figures)


def test_limits_rates_schedules_dependencies_and_batches_under_terminated_backends(
    dsn: str,
) -> None:
    figures = mixed.features_under_backend_kills(dsn, SCALE)
    report(figures)
    mixed.assert_held(figures)
    assert figures["backends_killed"] > 0
