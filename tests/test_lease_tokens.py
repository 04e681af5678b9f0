"""Lease tokens: only the claimer can act for a claim, as real LOGIN roles of one worker group."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest

from pyjobq import ClaimedJob, JobQueue, JobType
from pyjobq.worker import Retry, Worker
from tests.sqlhelp import one, one_row, table_snapshot
from tests.workerhelp import prepare, running, statuses, wait_for

Conn = psycopg.Connection[Any]

# Each transition of a holder, as (job_id, worker_id, attempt, token) → SQL; token may be null.
SINGLE_CALLS = [
    "select pyjobq.job_complete(%s, %s, %s, p_lease_token => %s)",
    "select * from pyjobq.job_fail(%s, %s, %s, 'forged', p_lease_token => %s)",
    "select pyjobq.job_renew_lease(%s, %s, %s, 86400, p_lease_token => %s)",
    "select pyjobq.job_release(%s, %s, %s, p_lease_token => %s)",
]
# The batch forms, as (worker_id, job_ids, attempts, tokens) → one boolean per job.
MANY_CALLS = [
    "select completed from pyjobq.job_complete_many(%s, %s, %s, p_lease_tokens => %s)",
    "select renewed from pyjobq.job_renew_lease_many(%s, %s, %s, 86400, p_lease_tokens => %s)",
    "select released from pyjobq.job_release_many(%s, %s, %s, p_lease_tokens => %s)",
]


@pytest.fixture
def session(login_role: Callable[..., str]) -> Iterator[Callable[..., Conn]]:
    opened: list[Conn] = []

    def connect(*groups: str) -> Conn:
        opened.append(psycopg.connect(login_role(*groups), autocommit=True))
        return opened[-1]

    yield connect
    for c in opened:
        c.close()


def sqlstate_of(conn: Conn, query: str, params: tuple[Any, ...]) -> str | None:
    try:
        conn.execute(query, params)
    except psycopg.Error as e:
        return e.sqlstate
    return None


def test_a_co_worker_that_reads_the_holders_id_and_attempt_cannot_act_for_it(
    conn: Conn, session: Callable[..., Conn]
) -> None:
    """job_get shows a producer the holder's worker id and attempt. Before lease tokens they
    were the whole fencing token: a co-worker in the worker group that also produces could
    complete the job with a forged result."""
    job = one(conn, "select job_id from pyjobq.job_enqueue(1, '{}')")
    holder = session("pyjobq_worker")
    co_worker = session("pyjobq_worker", "pyjobq_producer")
    claimed = holder.execute(
        "select job_id, lease_token from pyjobq.job_claim('holder-7f3a', 1)"
    ).fetchall()
    assert len(claimed) == 1
    worker_id, attempt = one_row(
        co_worker, "select worker_id, attempts from pyjobq.job_get(%s)", (job,)
    )
    assert (worker_id, attempt) == ("holder-7f3a", 1)
    before = table_snapshot(conn)
    for call in SINGLE_CALLS:
        # Without a token: the install requires one. With a guessed one: not held.
        assert sqlstate_of(co_worker, call, (job, worker_id, attempt, None)) == "22004", call
        guess = uuid4()
        assert sqlstate_of(co_worker, call, (job, worker_id, attempt, guess)) == "JQ001", call
    for call in MANY_CALLS:
        params = (worker_id, [job], [attempt], [uuid4()])
        assert co_worker.execute(call, params).fetchall() == [(False,)], call
        assert sqlstate_of(co_worker, call, (worker_id, [job], [attempt], None)) == "22004"
    assert table_snapshot(conn) == before
    # The holder's own token works.
    token = claimed[0][-1]
    holder.execute(SINGLE_CALLS[0], (job, "holder-7f3a", 1, token))
    assert one(conn, "select status from pyjobq.job_all where job_id = %s", (job,)) == 3


def test_the_token_is_the_claims_alone_and_new_at_every_claim(conn: Conn) -> None:
    q = JobQueue(conn)
    job_id = q.enqueue(JobType.SEARCH, {}).job_id
    first = q.claim("w1", lease_seconds=60)[0]
    assert UUID(str(first.lease_token)).version == 4
    # Nothing but the claim shows it: not job_get, job_list, job_counts, nor any error.
    shown = [
        conn.execute("select * from pyjobq.job_get(%s)", (job_id,)).fetchall(),
        conn.execute("select * from pyjobq.job_list()").fetchall(),
        conn.execute("select * from pyjobq.job_counts()").fetchall(),
    ]
    with pytest.raises(psycopg.Error) as refused:
        conn.execute(SINGLE_CALLS[0], (job_id, "w1", 1, uuid4()))
    diag = refused.value.diag
    told = [diag.message_primary, diag.message_detail, diag.message_hint]
    assert str(first.lease_token) not in repr(shown) + repr(told)
    # Expired and reaped, then claimed again by a worker of the same id: a new token, and the
    # old one is worth nothing even with the new attempt number.
    conn.execute("update pyjobq.job set lease_until = now() - interval '1 second'")
    assert len(q.reap()) == 1
    conn.execute("update pyjobq.job set run_after = now()")
    second = q.claim("w1")[0]
    assert second.lease_token != first.lease_token
    with pytest.raises(psycopg.Error) as stale:
        conn.execute(SINGLE_CALLS[0], (job_id, "w1", second.attempt, first.lease_token))
    assert stale.value.sqlstate == "JQ001"
    q.complete(job_id, "w1", second.attempt, lease_token=second.lease_token)


def test_an_upgraded_install_accepts_calls_without_the_token_until_an_admin_says_no(
    conn: Conn, session: Callable[..., Conn]
) -> None:
    worker, admin = session("pyjobq_worker"), session("pyjobq_admin")
    settings = (
        "select require_lease_token from pyjobq.job_settings_set(p_require_lease_token => %s)"
    )
    assert sqlstate_of(worker, settings, (False,)) == "42501"
    assert one(admin, "select require_lease_token from pyjobq.job_settings()") is True
    # As an install upgraded from before tokens is: calls written for it work unchanged.
    assert one(admin, settings, (False,)) is False
    a, b = (one(conn, "select job_id from pyjobq.job_enqueue(1, '{}')") for _ in range(2))
    worker.execute("select pyjobq.job_claim('old-client', 2)")
    worker.execute("select pyjobq.job_complete(%s, 'old-client', 1)", (a,))
    assert one(admin, settings, (True,)) is True
    assert sqlstate_of(worker, "select pyjobq.job_complete(%s, 'old-client', 1)", (b,)) == "22004"
    # A batch with a token missing for one of its jobs is refused whole.
    token = one(conn, "select lease_token from pyjobq.job_all where job_id = %s", (b,))
    mixed = (
        "select * from pyjobq.job_complete_many('old-client', %s, '{1, 1}', p_lease_tokens => %s)"
    )
    assert sqlstate_of(worker, mixed, ([b, a], [token, None])) == "22004"
    # The schema owner could read the token anyway: it is never asked for one.
    conn.execute("select pyjobq.job_complete(%s, 'old-client', 1)", (b,))


def test_a_batchs_tokens_are_one_per_job(conn: Conn) -> None:
    one(conn, "select job_id from pyjobq.job_enqueue(1, '{}')")
    (job, token) = one_row(conn, "select job_id, lease_token from pyjobq.job_claim('w1')")
    for call in MANY_CALLS:
        with pytest.raises(psycopg.errors.InvalidParameterValue) as refused:
            conn.execute(call, ("w1", [job], [1], [token, token]))
        assert "p_lease_tokens" in str(refused.value.diag.message_primary)


def test_a_worker_passes_its_tokens_where_the_install_requires_them(
    dsn: str, conn: Conn, login_role: Callable[..., str]
) -> None:
    """Claim, heartbeat, complete, fail and release, each carrying the claim's token, as a role
    that is not the schema owner."""
    prepare(conn)
    assert JobQueue(conn).settings().require_lease_token
    JobQueue(conn).enqueue_many(JobType.SEARCH, [{"n": n} for n in range(12)])
    holding = threading.Event()
    go_on = threading.Event()

    def handler(job: ClaimedJob) -> dict[str, int]:
        if job.payload["n"] == 0 and job.attempt == 1:
            raise Retry(delay_seconds=0)
        if job.payload["n"] == 1:
            holding.set()
            go_on.wait(60)  # the one runner, held across heartbeats; the others wait claimed
        return {"n": job.payload["n"]}

    worker = Worker(
        login_role("pyjobq_worker"),
        {JobType.SEARCH: handler},
        concurrency=1,
        prefetch=4,
        lease_seconds=3,
    )
    with running(worker) as r:
        wait_for(holding.is_set, "the slow job to start")
        wait_for(lambda: worker.metrics.renewed >= 2, "two heartbeats with tokens")
        r.worker.stop()  # unstarted jobs in the buffer go back with job_release_many
        go_on.set()
        metrics = r.stop()
    assert metrics.failed == 1
    assert metrics.released > 0
    assert metrics.lease_lost == 0
    done = statuses(conn).get(3, 0)
    assert done == metrics.completed
    assert statuses(conn).get(1, 0) == 12 - done
