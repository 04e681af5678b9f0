"""Reads from a streaming replica (docs/scaling.md): every function of the SQL API that only
reads answers on a hot standby exactly as on its primary, but job_throughput and job_workers,
which read an unlogged table; the dashboard's pages are served from one; what writes is refused
there with 25006 and changes nothing."""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any, NamedTuple
from uuid import UUID

import psycopg
import pytest

from pyjobq import JobQueue
from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import migrate
from tests.faults.failover import SETTINGS, Primary
from tests.webhelp import dashboard, status_of
from tests.workerhelp import wait_for

pytestmark = pytest.mark.slow

DBNAME = "replicated"

# Every function of the SQL API that only reads, called as a reporting client would.
READS = {
    "schema_version": "select pyjobq.schema_version()",
    "job_types": "select * from pyjobq.job_types() order by 1",
    "job_type_policies": "select * from pyjobq.job_type_policies() order by 1",
    "job_type_limits": "select * from pyjobq.job_type_limits() order by 1",
    "job_type_grants": "select * from pyjobq.job_type_grants() order by 1, 2",
    "job_type_code": "select pyjobq.job_type_code('SEARCH')",
    "job_counts": "select * from pyjobq.job_counts() order by 1, 3",
    "job_list": "select * from pyjobq.job_list()",
    "job_get": "select * from pyjobq.job_get(%(job)s)",
    "job_dependencies": "select * from pyjobq.job_dependencies(%(child)s) order by 1",
    "job_batch_get": "select * from pyjobq.job_batch_get(%(batch)s)",
    "job_next_due": "select pyjobq.job_next_due(null)",
    "job_settings": "select * from pyjobq.job_settings()",
    "job_schedules": "select * from pyjobq.job_schedules() order by 1",
    "job_audit": "select * from pyjobq.job_audit()",
}


def replayed(primary: LocalPostgres, standby: LocalPostgres) -> None:
    """Wait until the standby has replayed everything the primary has written so far."""
    with psycopg.connect(primary.dsn(), autocommit=True) as conn:
        row = conn.execute("select pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    with psycopg.connect(standby.dsn(), autocommit=True) as conn:
        wait_for(
            lambda: (
                conn.execute("select pg_last_wal_replay_lsn() >= %s::pg_lsn", (row[0],)).fetchone()
                == (True,)
            ),
            "the standby to replay the primary's WAL",
        )


def a_queue_in_every_state(dsn: str) -> dict[str, UUID]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        q = JobQueue(conn)
        done, dead, running, parent = (q.enqueue("SEARCH", {"n": n}).job_id for n in range(4))
        claimed = {j.job_id: j for j in q.claim("w1", 10)}
        q.complete_many("w1", [done], [1], lease_tokens=[claimed[done].lease_token])
        q.fail(dead, "w1", 1, "broken", dead_letter=True, lease_token=claimed[dead].lease_token)
        child = q.enqueue("OUTBOX", {}, depends_on=[parent]).job_id
        with q.batch() as batch:
            q.enqueue("OUTBOX", {"in": "batch"}, batch_id=batch)
        q.schedule_set("nightly", "0 3 * * *", "SEARCH")
        q.type_set_limits("OUTBOX", max_running=2)
        q.cancel([q.enqueue("SEARCH", {"to": "cancel"}).job_id])  # a line in the audit log
    return {"job": running, "child": child, "batch": batch}


class Replica(NamedTuple):
    primary: LocalPostgres
    standby: LocalPostgres
    ids: dict[str, UUID]  # a_queue_in_every_state's


@pytest.fixture(scope="module")
def replica() -> Iterator[Replica]:
    """A primary and its hot standby, streaming asynchronously, with the schema and a queue in
    every state that the standby has replayed."""
    with ExitStack() as stack:
        primary = Primary(settings=SETTINGS)
        stack.enter_context(primary)
        standby = stack.enter_context(primary.standby(SETTINGS))
        with psycopg.connect(primary.dsn(), autocommit=True) as conn:
            conn.execute(f"create database {DBNAME}")
        migrate(primary.dsn(DBNAME))
        ids = a_queue_in_every_state(primary.dsn(DBNAME))
        replayed(primary, standby)
        yield Replica(primary, standby, ids)


def test_every_read_answers_on_the_standby_as_on_the_primary(replica: Replica) -> None:
    primary, standby, ids = replica
    with (
        psycopg.connect(primary.dsn(DBNAME), autocommit=True) as on_primary,
        psycopg.connect(standby.dsn(DBNAME), autocommit=True) as on_standby,
    ):
        assert on_standby.execute("select pg_is_in_recovery()").fetchone() == (True,)
        # One clock for both: ages and windows are read against it (the owner's fake_now).
        for conn in (on_primary, on_standby):
            conn.execute("select set_config('pyjobq.fake_now', %s, false)", ("2030-01-01 00:00Z",))
        for name, query in READS.items():
            there = on_standby.execute(query, ids).fetchall()
            assert there == on_primary.execute(query, ids).fetchall(), name
            assert there or name == "job_type_grants", name
        # The per-minute counts are unlogged (they cost no WAL per job), so no standby has them.
        for query in (
            "select * from pyjobq.job_throughput()",
            "select * from pyjobq.job_workers()",
        ):
            with pytest.raises(psycopg.errors.FeatureNotSupported):
                on_standby.execute(query)
        # What writes is refused, and a reporting client learns it by its SQLSTATE.
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            on_standby.execute("select * from pyjobq.job_claim('w2', 1)")


def test_the_dashboard_reads_from_the_standby(replica: Replica) -> None:
    primary, standby, ids = replica
    with dashboard(standby.dsn(DBNAME)) as base:
        for page in ("/", "/jobs", f"/jobs/{ids['job']}", "/schedules", "/audit", "/metrics"):
            assert status_of(base + page) == 200, page
        with urllib.request.urlopen(f"{base}/jobs/{ids['child']}") as answer:
            assert "WAITING" in answer.read().decode()  # the child's page, graph and all
        # It offers no action there, and refuses one asked for, as a browser of this
        # dashboard would ask (its cookie and form token); the job stays as it was.
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        with browser.open(f"{base}/jobs/{ids['child']}") as answer:
            page = answer.read().decode()
        assert "read-only: a standby" in page
        assert "/cancel" not in page
        token = re.search(r'<meta name="csrf" content="([^"]+)">', page)
        assert token is not None
        form = urllib.parse.urlencode({"csrf": token[1]}).encode()
        with pytest.raises(urllib.error.HTTPError) as refused:
            browser.open(f"{base}/jobs/{ids['child']}/cancel", form)
        assert refused.value.code == 403
        assert "job_cancel is not allowed here" in refused.value.read().decode()
    with psycopg.connect(primary.dsn(DBNAME)) as conn:
        row: Any = conn.execute(
            "select status from pyjobq.job_all where job_id = %s", (ids["child"],)
        ).fetchone()
    assert row == (6,)
