"""Each step since the last release against the calls of a client under way when it commits.

A call that started before a step committed runs the body it found: a step that holds the lock
of job or job_type keeps it waiting inside that body, and once the step commits, the body's
statements are planned again against the new catalog. So each function a step drops must leave
one its old callers' calls still reach, with the columns they read: a producer of an earlier
release enqueues through the migration (docs/upgrading.md), and so do its workers' claims and
completions."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import LiteralString

import psycopg
import pytest
from yoyo import read_migrations

from pyjobq.migrate import migrations_dir
from tests.sqlhelp import lock_waits
from tests.test_migrations import apply_until, released_pins
from tests.workerhelp import wait_for

# The calls of a client as the first release made them: its signatures, the columns it read.
IN_FLIGHT: dict[str, LiteralString] = {
    "enqueue": "select job_id, created from pyjobq.job_enqueue(1, '{}'::jsonb)",
    "enqueue_many": (
        "select job_id, created from pyjobq.job_enqueue_many(1, array['{}'::jsonb],"
        " null::text[], null::int, null::timestamptz, null::int) order by ord"
    ),
    "claim": "select job_id, attempt from pyjobq.job_claim('old-w1', 1, 60)",
    "reap": "select count(*) from pyjobq.job_reap(100)",
}


def unreleased() -> list[Path]:
    """The steps after the last one released (migrations/released.txt)."""
    last = max(name for _, _, name in released_pins())
    return [p for p in sorted(migrations_dir().glob("00*.sql")) if p.name > last]


def test_each_unreleased_step_lets_the_calls_under_way_finish(
    new_database: Callable[[], str],
) -> None:
    steps = unreleased()
    if not steps:
        pytest.skip("every step is released")
    target = new_database()
    first = [m.id for m in read_migrations(str(migrations_dir()))].index(steps[0].stem)
    apply_until(target, read_migrations(str(migrations_dir()))[first].id)
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute(
            "select pyjobq.job_enqueue_many(1, array(select '{}'::jsonb"
            " from generate_series(1, %s)))",
            (len(steps),),
        )
    for step in steps:
        failed = applied_under_calls(target, step)
        assert not failed, f"{step.name} broke calls under way: {failed}"


def applied_under_calls(target: str, step: Path) -> dict[str, BaseException]:
    """Applies ``step`` while each call of IN_FLIGHT waits inside its body for the locks the
    step holds; what the calls raised, by name."""
    failed: dict[str, BaseException] = {}

    def call(name: str, query: LiteralString) -> None:
        try:
            with psycopg.connect(target, autocommit=True) as client:
                client.execute(query).fetchall()
        except BaseException as exc:  # returned to the test
            failed[name] = exc

    with psycopg.connect(target) as migrator:
        # The locks of a step that changes a hot table, taken before any call starts.
        migrator.execute("lock table pyjobq.job_type, pyjobq.job in access exclusive mode")
        threads = [threading.Thread(target=call, args=item) for item in IN_FLIGHT.items()]
        for thread in threads:
            thread.start()
        with psycopg.connect(target, autocommit=True) as observer:
            wait_for(
                lambda: lock_waits(observer) >= len(threads),
                f"{step.name}: the calls to wait",
                patience=30,
            )
        migrator.execute(step.read_text())
        migrator.commit()
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive(), f"{step.name}: a call never returned"
    return failed
