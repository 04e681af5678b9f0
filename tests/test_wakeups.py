"""Wake-ups: a change that makes a job PENDING notifies only while a worker is marked asleep
(job_worker_idle), and a worker falling asleep misses nothing a producer committed unannounced.

A NOTIFY serializes the commits of every notifying transaction, so producers skip it while
no worker sleeps. What is heard is read up to a sentinel NOTIFY sent after the producer's
commit: notifications arrive in commit order, so whatever the producer sent comes first."""

from __future__ import annotations

import functools
from typing import Any

import psycopg
import pytest

from pyjobq import JobQueue, JobType
from pyjobq.worker import Worker
from tests.sqlhelp import enqueue, one, run_threads
from tests.workerhelp import PATIENCE, prepare, running, statuses, wait_for

Conn = psycopg.Connection[Any]

SENTINEL = "sentinel"


def heard(listener: Conn, poke: Conn) -> list[str]:
    """The payloads on pyjobq_job that ``listener`` hears before a sentinel sent now."""
    poke.execute(f"notify pyjobq_job, '{SENTINEL}'")
    payloads: list[str] = []
    for notify in listener.notifies(timeout=PATIENCE):
        if notify.payload == SENTINEL:
            return payloads
        payloads.append(notify.payload)
    raise AssertionError(f"no sentinel within {PATIENCE} s; heard {payloads}")


def listening(connect: Any) -> Conn:
    listener: Conn = connect()
    listener.execute("listen pyjobq_job")
    return listener


def test_an_enqueue_notifies_only_while_a_worker_is_marked_asleep(
    conn: Conn, make_conn: Any
) -> None:
    listener = listening(make_conn)
    enqueue(conn)
    assert heard(listener, conn) == []
    # Twice marked is one mark: one job_worker_busy ends it.
    assert one(listener, "select pyjobq.job_worker_idle()") is True
    assert one(listener, "select pyjobq.job_worker_idle()") is True
    enqueue(conn)
    conn.execute("select pyjobq.job_enqueue_many(2, array['{}', '{}']::jsonb[])")
    assert heard(listener, conn) == ["1", "2"]
    listener.execute("select pyjobq.job_worker_busy()")
    enqueue(conn)
    assert heard(listener, conn) == []
    # A session's mark ends with it.
    listener.execute("select pyjobq.job_worker_idle()")
    enqueue(conn)
    assert heard(listener, conn) == ["1"]
    listener.close()
    other = listening(make_conn)
    enqueue(conn)
    assert heard(other, conn) == []


def test_a_worker_falling_asleep_waits_for_the_producer_that_looked_before_its_mark(
    conn: Conn, make_conn: Any
) -> None:
    listener = listening(make_conn)
    producer, later = make_conn(), make_conn()
    with producer.transaction():
        early = enqueue(producer)  # no worker asleep: it will not notify, and holds the fence
        assert one(listener, "select pyjobq.job_worker_idle()") is False
        with later.transaction():
            enqueue(later)  # looks after the mark: notifies
        assert heard(listener, conn) == ["1"]
        assert one(listener, "select pyjobq.job_worker_idle()") is False
    assert heard(listener, conn) == []  # the early producer sent nothing
    # Its commit released the fence: the claim after the mark finds its job.
    assert one(listener, "select pyjobq.job_worker_idle()") is True
    claimed = {row[0] for row in conn.execute("select job_id from pyjobq.job_claim('w1', 10)")}
    assert early in claimed
    assert len(claimed) == 2


def test_a_rolled_back_enqueue_releases_the_fence(conn: Conn, make_conn: Any) -> None:
    listener = listening(make_conn)
    producer = make_conn()
    producer.execute("begin")
    enqueue(producer)
    assert one(listener, "select pyjobq.job_worker_idle()") is False
    producer.execute("rollback")
    assert one(listener, "select pyjobq.job_worker_idle()") is True


# Each way a session that may take advisory locks (any role may) can hold the two keys.
HOSTILE_LOCKS = [
    "select pg_advisory_lock(1887005297, -1)",  # the mark, exclusively
    "select pg_advisory_lock_shared(1887005297, -1)",  # the mark, as if asleep forever
    "select pg_advisory_lock(1887005297, -2)",  # the fence, exclusively
    "select pg_advisory_lock_shared(1887005297, -2)",  # the fence, as if a producer never ended
]


@pytest.mark.parametrize("lock", HOSTILE_LOCKS)
def test_no_role_holding_the_wake_up_locks_silences_an_enqueue(
    conn: Conn, login_role: Any, lock: str
) -> None:
    with (
        psycopg.connect(login_role(), autocommit=True) as hostile,
        psycopg.connect(login_role("pyjobq_worker"), autocommit=True) as worker,
        psycopg.connect(login_role("pyjobq_producer"), autocommit=True) as producer,
    ):
        hostile.execute(lock)
        worker.execute("listen pyjobq_job")
        worker.execute("select pyjobq.job_worker_idle()")
        for _ in range(3):
            enqueue(producer)
        assert heard(worker, conn) == ["1", "1", "1"]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            producer.execute("select pyjobq.job_worker_idle()")


def done(conn: Conn, job: Any) -> bool:
    return bool(one(conn, "select status = 3 from pyjobq.job_all where job_id = %s", (job,)))


def test_a_worker_that_sleeps_between_single_jobs_misses_no_wake_up(
    dsn: str, conn: Conn, make_conn: Any
) -> None:
    """Producers enqueue one job a transaction and each waits for its job to end before the
    next, so the worker, one job a claim and no poll, falls asleep and wakes again for every
    job while the others' transactions run: a wake-up lost is a job never started."""
    prepare(conn)
    producers, per_producer = 4, 40
    worker = Worker(
        dsn, {JobType.SEARCH: lambda job: None}, concurrency=1, prefetch=0, poll_interval=3600
    )
    with running(worker) as r:

        def produce() -> None:
            own = make_conn()
            q = JobQueue(own)
            for _ in range(per_producer):
                job = q.enqueue(JobType.SEARCH, {}).job_id
                wait_for(functools.partial(done, own, job), f"job {job} DONE without a poll")

        run_threads([produce] * producers)
        metrics = r.stop()
    assert statuses(conn) == {3: producers * per_producer}
    assert metrics.completed == producers * per_producer
