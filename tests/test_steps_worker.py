"""Checkpointed steps in the worker: a handler's finished steps are not run again by its later
attempts, async or sync, and a step recorded in the transaction of its own writes makes them
happen once, even when its worker is SIGKILLed at any point, again and again."""

from __future__ import annotations

import random
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pyjobq import JobQueue
from pyjobq.params import Payload
from pyjobq.rows import ClaimedJob
from pyjobq.worker import Retry, Worker, job_context, sync_job_context
from tests.sqlhelp import one, one_row
from tests.worker_handlers import STEP_TABLES, STEPS
from tests.workerhelp import running, spawn_worker, wait_for, wait_until_sessions_end

Conn = psycopg.Connection[Any]


def result_of(conn: Conn, job_id: Any) -> tuple[Any, ...]:
    query = "select status, attempts, result from pyjobq.job_all where job_id = %s"
    return one_row(conn, query, (job_id,))


def done(conn: Conn, job_id: Any) -> bool:
    return bool(result_of(conn, job_id)[0] == 3)


def test_an_async_handler_runs_each_finished_step_once_across_attempts(
    dsn: str, conn: Conn
) -> None:
    runs: Counter[str] = Counter()

    def charge(amount: int) -> Payload:
        runs["charge"] += 1
        return {"charged": amount}

    async def label(order: str) -> str:
        runs["label"] += 1
        return f"label-{order}"

    async def handler(job: ClaimedJob) -> Payload:
        ctx = job_context()
        assert ctx.job == job
        charged = await ctx.step("charge", charge, 30)
        printed = await ctx.step("label", label, order="o-1")
        if job.attempt < 3:
            raise Retry(0)  # a failure after the steps: the next attempt starts over
        return {"charged": charged, "label": printed}

    job_id = JobQueue(conn).enqueue(1, {}).job_id
    with running(Worker(dsn, {1: handler}, concurrency=1)):
        wait_for(lambda: done(conn, job_id), "the job to end")
    assert result_of(conn, job_id) == (
        3,
        3,
        {"charged": {"charged": 30}, "label": "label-o-1"},
    )
    assert runs == {"charge": 1, "label": 1}


def test_a_sync_handler_records_a_step_with_its_writes(dsn: str, conn: Conn) -> None:
    conn.execute("create table shipments (job_id uuid not null, attempt int not null)")
    runs: Counter[str] = Counter()

    def handler(job: ClaimedJob) -> Payload:
        ctx = sync_job_context()
        with psycopg.connect(dsn, autocommit=True) as c:

            def ship() -> int:
                runs["ship"] += 1
                c.execute("insert into shipments values (%s, %s)", (job.job_id, job.attempt))
                return job.attempt

            shipped_by = ctx.step_tx(c, "ship", ship)
        fresh = ctx.step("fresh", lambda: runs.update(["fresh"]) or "once")
        if job.attempt == 1:
            raise Retry(0)
        return {"shipped_by": shipped_by, "fresh": fresh}

    job_id = JobQueue(conn).enqueue(1, {}).job_id
    with running(Worker(dsn, {1: handler}, concurrency=1)):
        wait_for(lambda: done(conn, job_id), "the job to end")
    assert result_of(conn, job_id) == (3, 2, {"shipped_by": 1, "fresh": "once"})
    assert runs == {"ship": 1, "fresh": 1}
    assert one(conn, "select count(*) from shipments") == 1


def test_a_step_that_raises_is_not_recorded_nor_are_its_writes(dsn: str, conn: Conn) -> None:
    conn.execute("create table writes (attempt int not null)")

    async def handler(job: ClaimedJob) -> Payload:
        ctx = job_context()
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:

            async def write() -> int:
                await c.execute("insert into writes values (%s)", (job.attempt,))
                if job.attempt == 1:
                    raise ValueError("the step failed after its write")
                return job.attempt

            try:
                return {"by": await ctx.step_tx(c, "write", write)}
            except ValueError:
                raise Retry(0) from None

    job_id = JobQueue(conn).enqueue(1, {}).job_id
    with running(Worker(dsn, {1: handler}, concurrency=1)):
        wait_for(lambda: done(conn, job_id), "the job to end")
    assert result_of(conn, job_id) == (3, 2, {"by": 2})
    assert conn.execute("select attempt from writes").fetchall() == [(2,)]


def test_a_step_result_that_cannot_be_stored_fails_the_attempt(dsn: str, conn: Conn) -> None:
    async def handler(job: ClaimedJob) -> Payload:
        await job_context().step("bad", lambda: {"not json": object()})
        return {}

    job_id = JobQueue(conn).enqueue(1, {}, max_attempts=1).job_id
    with running(Worker(dsn, {1: handler}, concurrency=1)):
        wait_for(lambda: result_of(conn, job_id)[0] == 4, "the job to go DEAD")
    error = one(conn, "select last_error from pyjobq.job_all where job_id = %s", (job_id,))
    assert "UnstorableResult" in error
    assert one(conn, "select count(*) from pyjobq.job_step") == 0


def test_a_job_context_exists_only_inside_a_handler() -> None:
    with pytest.raises(RuntimeError, match="no job runs here"):
        job_context()
    with pytest.raises(RuntimeError, match="no job runs here"):
        sync_job_context()


def test_a_handler_completes_its_job_in_the_transaction_of_its_writes(dsn: str, conn: Conn) -> None:
    """ctx.complete_tx: the order row and the job's DONE commit together; an attempt whose
    transaction rolls back leaves neither, and fails as any other."""
    conn.execute("create table orders (job_id uuid not null, attempt int not null)")

    async def handler(job: ClaimedJob) -> Payload:
        ctx = job_context()
        async with (
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c,
            c.transaction(),
        ):
            await c.execute("insert into orders values (%s, %s)", (job.job_id, job.attempt))
            await ctx.complete_tx(c, {"order_of_attempt": job.attempt})
            if job.attempt == 1:
                raise Retry(0)  # rolls back the order and the DONE alike
        return {"not": "stored"}

    def sync_handler(job: ClaimedJob) -> Payload:
        with psycopg.connect(dsn, autocommit=True) as c, c.transaction():
            c.execute("insert into orders values (%s, %s)", (job.job_id, job.attempt))
            sync_job_context().complete_tx(c, {"sync": True})
        return {}

    q = JobQueue(conn)
    first, second = q.enqueue(1, {}).job_id, q.enqueue(2, {}).job_id
    with running(Worker(dsn, {1: handler, 2: sync_handler}, concurrency=2)) as r:
        wait_for(lambda: done(conn, first) and done(conn, second), "both jobs to end")
        metrics = r.stop()
    assert result_of(conn, first) == (3, 2, {"order_of_attempt": 2})
    assert result_of(conn, second) == (3, 1, {"sync": True})
    orders = conn.execute("select job_id, attempt from orders order by attempt").fetchall()
    assert sorted(orders) == sorted([(first, 2), (second, 1)])
    assert (metrics.completed, metrics.failed, metrics.lease_lost) == (2, 1, 0)


KILLS = 50


@pytest.mark.slow
def test_ten_step_jobs_survive_fifty_sigkills_with_each_write_once(
    dsn: str, conn: Conn, tmp_path: Path
) -> None:
    """A worker process runs jobs of ten steps, each step's write recorded with the step in
    one transaction; it is SIGKILLed fifty times, each time a random number of steps after it
    started, its leases made to run out and reaped. Every job ends DONE with each step's write
    there exactly once, its result the tokens those writes hold, and no step run again by an
    attempt after the one that recorded it."""
    conn.execute(STEP_TABLES)
    q = JobQueue(conn)
    q.type_register(3, "TEN_STEPS")
    rng = random.Random(51)
    jobs: list[Any] = []
    for kill in range(KILLS):
        # Enough steps left to run that the kill lands in the middle of some job.
        left = one(
            conn,
            "select count(*) * %s - (select count(*) from pyjobq.job_step s"
            "                         join pyjobq.job j using (job_id))"
            "  from pyjobq.job where job_type = 3",
            (STEPS,),
        )
        if left <= 6:
            jobs += [e.job_id for e in q.enqueue_many(3, [{}] * 2, max_attempts=100)]
        before = one(conn, "select count(*) from step_runs")
        victim = spawn_worker(
            dsn, tmp_path, f"victim{kill}", "--concurrency", "2", "--lease", "3600",
            handlers="STEP_HANDLERS",
        )  # fmt: skip
        try:
            target = before + rng.randint(1, 6)

            def ran_steps(target: int = target) -> bool:
                return bool(one(conn, "select count(*) from step_runs") >= target)

            wait_for(ran_steps, f"worker {kill} to run steps")
            victim.send_signal(signal.SIGKILL)
            assert victim.wait(30) == -signal.SIGKILL
        finally:
            victim.kill()
        wait_until_sessions_end(conn, f"victim{kill}")
        # Its hour-long leases run out now; the reaper retries its jobs, due at once.
        conn.execute("update pyjobq.job set lease_until = now() - interval '1 second'")
        conn.execute("select pyjobq.job_reap()")
        conn.execute("update pyjobq.job set run_after = now() where status = 1")
    survivor = spawn_worker(dsn, tmp_path, "survivor", handlers="STEP_HANDLERS")
    try:
        wait_for(
            lambda: one(conn, "select count(*) from pyjobq.job where job_type = 3") == 0,
            "the survivor to finish every job",
        )
    finally:
        survivor.send_signal(signal.SIGTERM)
        survivor.wait(30)
    statuses = conn.execute(
        "select status, count(*) from pyjobq.job_all where job_type = 3 group by status"
    ).fetchall()
    assert statuses == [(3, len(jobs))]
    # Each step's write is there once, and is the one its record returned.
    writes = Counter(conn.execute("select job_id, step from step_effects").fetchall())
    assert writes == Counter({(j, n): 1 for j in jobs for n in range(STEPS)})
    for job_id in jobs:
        tokens = dict(
            conn.execute(
                "select step, token from step_effects where job_id = %s", (job_id,)
            ).fetchall()
        )
        _, _, result = result_of(conn, job_id)
        assert result == {"tokens": [tokens[n] for n in range(STEPS)]}
    # A finished step is reused: no attempt after the one that recorded it ran it again.
    rerun = one(
        conn,
        "select count(*) from step_runs r join pyjobq.job_step s"
        " on s.job_id = r.job_id and s.name = 'step-' || r.step where r.attempt > s.attempt",
    )
    assert rerun == 0
    runs = one(conn, "select count(*) from step_runs")
    interrupted = one(conn, "select count(*) from pyjobq.job_all where attempts > 1")
    print(
        f"\n{KILLS} SIGKILLs, {len(jobs)} jobs of {STEPS} steps: {sum(writes.values())} writes,"
        f" each once; {runs} step runs ({runs - len(writes)} cut short by a kill and rolled"
        f" back); {interrupted} jobs ran more than one attempt; 0 steps run again after"
        " their record"
    )
