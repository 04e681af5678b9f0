"""A retry policy per job type, in SQL: max_attempts, backoff and timeout for every client."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from pyjobq import ClaimedJob, InvalidArgument, JobQueue, JobType
from pyjobq.worker import Worker
from tests.sqlhelp import FROZEN, freeze, one, one_row, raises_sqlstate
from tests.workerhelp import running, statuses, wait_for

Conn = psycopg.Connection[Any]


def fail_once(conn: Conn, at: timedelta) -> Any:
    """Claim the one due job at FROZEN + ``at`` and fail it; its new run_after."""
    freeze(conn, FROZEN + at)
    job_id, attempt = one_row(conn, "select job_id, attempt from pyjobq.job_claim('w', 1)")
    return one(
        conn, "select run_after from pyjobq.job_fail(%s, 'w', %s, 'boom')", (job_id, attempt)
    )


def test_a_types_backoff_and_max_attempts_seen_from_psql(
    conn: Conn, login_role: Callable[..., str]
) -> None:
    with psycopg.connect(login_role("pyjobq_admin"), autocommit=True) as admin:
        admin.execute(
            "select pyjobq.job_type_set_policy(1, p_max_attempts => 4,"
            " p_backoff_base_seconds => 10, p_backoff_cap_seconds => 20, p_backoff_jitter => 0)"
        )
    freeze(conn, FROZEN)
    conn.execute("select pyjobq.job_enqueue(1, '{}')")
    assert one(conn, "select max_attempts from pyjobq.job_all") == 4  # the type's, not 3
    # 10 s, then doubled to 20, then held at the cap: exact, with no jitter.
    assert fail_once(conn, timedelta(0)) == FROZEN + timedelta(seconds=10)
    assert fail_once(conn, timedelta(seconds=10)) == FROZEN + timedelta(seconds=30)
    assert fail_once(conn, timedelta(seconds=30)) == FROZEN + timedelta(seconds=50)
    # The reaper retries by the same policy.
    freeze(conn, FROZEN + timedelta(seconds=50))
    conn.execute("select pyjobq.job_claim('w', 1, 1)")
    freeze(conn, FROZEN + timedelta(seconds=60))
    assert one(conn, "select status from pyjobq.job_reap()") == 4  # the fourth try was the last
    # An enqueue's own max_attempts still wins; another type keeps the defaults.
    conn.execute("select pyjobq.job_enqueue(1, '{}', p_max_attempts => 2)")
    conn.execute("select pyjobq.job_enqueue(2, '{}')")
    assert conn.execute(
        "select job_type, max_attempts from pyjobq.job_all where status = 1 order by job_type"
    ).fetchall() == [(1, 2), (2, 3)]
    policies = {p.job_type: p for p in JobQueue(conn).type_policies()}
    assert (policies[1].backoff_base_seconds, policies[1].backoff_cap_seconds) == (10, 20)
    assert (policies[2].max_attempts, policies[2].backoff_jitter, policies[2].timeout_seconds) == (
        3, 0.25, 3600,
    )  # fmt: skip


def test_a_bad_policy_is_refused_naming_the_argument_and_changes_nothing(
    conn: Conn, login_role: Callable[..., str]
) -> None:
    before = JobQueue(conn).type_policies()
    for call, state in [
        ("select pyjobq.job_type_set_policy(1, p_max_attempts => 0)", "22023"),
        ("select pyjobq.job_type_set_policy(1, p_backoff_base_seconds => 0)", "22023"),
        ("select pyjobq.job_type_set_policy(1, p_backoff_base_seconds => 'NaN')", "22023"),
        ("select pyjobq.job_type_set_policy(1, p_backoff_base_seconds => 30,"
         " p_backoff_cap_seconds => 20)", "22023"),
        ("select pyjobq.job_type_set_policy(1, p_backoff_jitter => 1.5)", "22023"),
        ("select pyjobq.job_type_set_policy(1, p_timeout_seconds => -1)", "22023"),
        ("select pyjobq.job_type_set_policy(999)", "22023"),
    ]:  # fmt: skip
        with raises_sqlstate(state):
            conn.execute(call)
    with psycopg.connect(login_role("pyjobq_producer"), autocommit=True) as producer:
        with raises_sqlstate("42501"):  # setting a policy is an admin's act
            producer.execute("select pyjobq.job_type_set_policy(1, p_max_attempts => 9)")
        assert [p.job_type for p in JobQueue(producer).type_policies()] == [1, 2]
    with pytest.raises(InvalidArgument):
        JobQueue(conn).type_set_policy("SEARCH", backoff_jitter=-0.1)
    assert JobQueue(conn).type_policies() == before


def test_a_worker_applies_its_types_timeout(dsn: str, conn: Conn) -> None:
    release = threading.Event()

    def hangs(job: ClaimedJob) -> None:
        release.wait(60)

    q = JobQueue(conn)
    q.type_set_policy("SEARCH", max_attempts=1, timeout_seconds=0.2)
    q.enqueue(JobType.SEARCH)
    worker = Worker(dsn, {JobType.SEARCH: hangs})  # no job_timeout of its own
    try:
        with running(worker) as r:
            wait_for(lambda: statuses(conn) == {4: 1}, "the hung job DEAD at its type's timeout")
            metrics = r.stop()
    finally:
        release.set()
    assert metrics.timed_out == 1
    assert "did not finish within 0.2s" in one(conn, "select last_error from pyjobq.job_all")


def test_a_lease_never_reaches_past_the_attempts_deadline(conn: Conn) -> None:
    """Without it, a hung handler's lease was renewed for as long as its worker lived, and the
    job was never retried anywhere. Now the claim and every renewal stop at the claim + the
    type's timeout_seconds (3600 s unless set), and the reaper takes the job back after it."""
    freeze(conn, FROZEN)
    q = JobQueue(conn)
    assert {p.timeout_seconds for p in q.type_policies()} == {3600}
    q.type_set_policy(JobType.SEARCH, timeout_seconds=30)
    job = q.enqueue(JobType.SEARCH, {}).job_id
    (claimed,) = q.claim("w1", lease_seconds=300)
    assert claimed.lease_until == FROZEN + timedelta(seconds=30)
    freeze(conn, FROZEN + timedelta(seconds=20))
    renew = (job, "w1", 1, 600, claimed.lease_token)
    assert q.renew_lease(*renew) == FROZEN + timedelta(seconds=30)
    freeze(conn, FROZEN + timedelta(seconds=31))
    with raises_sqlstate("JQ001"):
        conn.execute("select pyjobq.job_renew_lease(%s, %s, %s, %s, %s)", renew)
    (reaped,) = q.reap()
    assert (reaped.job_id, reaped.status) == (job, 1)
