"""Where the pg_cron extension is installed, the database ticks the schedules itself with the
one-liner of docs/sql-api.md ("Schedules"). Skipped where the server has no pg_cron (Debian:
``apt-get install postgresql-15-cron``; ``./scripts/setup`` installs it when it can)."""

from __future__ import annotations

import psycopg
import pytest

from pyjobq import JobQueue
from pyjobq.localpg import LocalPostgres, find_bindir
from pyjobq.migrate import migrate
from tests.workerhelp import wait_for

# The documented one-liner, word for word.
TICK_EVERY_MINUTE = (
    "select cron.schedule('pyjobq-tick', '* * * * *',"
    " 'select count(*) from pyjobq.job_schedule_tick()')"
)


def has_pg_cron() -> bool:
    return (find_bindir().parent / "lib" / "pg_cron.so").is_file()


@pytest.mark.slow
@pytest.mark.skipif(not has_pg_cron(), reason="the server has no pg_cron extension")
def test_pg_cron_ticks_the_schedules() -> None:
    """A schedule whose first tick is due (its ticks counted from a minute back) and pg_cron
    running the one-liner every minute: at pg_cron's next minute, the tick's job is enqueued,
    once. pg_cron runs jobs at whole minutes, so this waits for the next one (at most 60 s)."""
    settings = {
        "shared_preload_libraries": "pg_cron",
        "cron.database_name": "postgres",
        "cron.use_background_workers": "on",
        "max_worker_processes": "16",
    }
    with LocalPostgres(settings=settings) as server:
        dsn = server.dsn()
        migrate(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("create extension pg_cron")
            q = JobQueue(conn)
            row = conn.execute("select now() - interval '1 minute'").fetchone()
            assert row is not None
            q.schedule_set("report", "* * * * *", 1, {"by": "pg_cron"}, grace_seconds=180,
                           start_at=row[0])  # fmt: skip
            conn.execute(TICK_EVERY_MINUTE)

            def fired() -> int:
                return sum(s.fired for s in q.schedules())

            wait_for(fired, "pg_cron to tick the schedules", patience=90)
            jobs = conn.execute("select job_type, payload from pyjobq.job_all").fetchall()
            assert jobs[0] == (1, {"by": "pg_cron"})
            assert len(jobs) == fired()
            # Every tick pg_cron ran succeeded.
            failed = conn.execute(
                "select count(*) from cron.job_run_details where status = 'failed'"
            ).fetchone()
            assert failed == (0,)
