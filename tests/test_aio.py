"""AsyncJobQueue: the API of JobQueue, on the same database, inside the caller's transaction."""

from __future__ import annotations

import asyncio
import inspect
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from pyjobq import JobQueue, JobStatus, JobType, LeaseLost
from pyjobq.aio import AsyncJobQueue

Conn = psycopg.Connection[Any]


def _public(cls: type) -> dict[str, Any]:
    return {n: m for n, m in vars(cls).items() if callable(m) and not n.startswith("_")}


def test_async_twin_has_exactly_the_sync_methods_and_signatures() -> None:
    sync, aio = _public(JobQueue), _public(AsyncJobQueue)
    assert sorted(aio) == sorted(sync)
    for name, method in aio.items():
        assert inspect.iscoroutinefunction(method), name
        assert inspect.signature(method) == inspect.signature(sync[name]), name


def test_async_lifecycle_on_the_database_the_sync_binding_sees(dsn: str, conn: Conn) -> None:
    sync = JobQueue(conn)

    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            q = AsyncJobQueue(aconn)
            assert await q.schema_version() == sync.schema_version()
            done = await q.enqueue(JobType.SEARCH, {"q": "a"})
            failed = await q.enqueue(JobType.SEARCH, {"q": "b"}, max_attempts=1)
            many = await q.enqueue_many(JobType.OUTBOX, [{"n": 1}, {"n": 2}], ["k1", None])
            assert [e.created for e in many] == [True, True]
            claimed = {j.job_id: j for j in await q.claim("w1", 10, 30)}
            assert set(claimed) == {done.job_id, failed.job_id, *(e.job_id for e in many)}
            await q.complete(done.job_id, "w1", 1, {"ok": True})
            outcome = await q.fail(failed.job_id, "w1", 1, "boom")
            assert outcome.status is JobStatus.DEAD
            assert await q.renew_lease(many[0].job_id, "w1", 1, 60) is not None
            await q.release(many[1].job_id, "w1", 1)
            with pytest.raises(LeaseLost):
                await q.complete(many[1].job_id, "w1", 1)
            rows = await q.complete_many("w1", [many[0].job_id, many[1].job_id], [1, 1])
            assert [(r.job_id, r.completed) for r in rows] == [
                (many[0].job_id, True),
                (many[1].job_id, False),
            ]
            assert await q.reap() == []
            assert await q.redrive([failed.job_id]) == [failed.job_id]
            assert await q.prune(timedelta(days=1)) == 0
            assert (await q.type_register(77, "REPORT")).created
            assert [t.name for t in await q.types()] == [t.name for t in sync.types()]
            tally = [(c.job_type, c.status, c.jobs) for c in await q.counts()]
            assert tally == [(c.job_type, c.status, c.jobs) for c in sync.counts()]

    asyncio.run(scenario())
    status = dict(conn.execute("select job_id, status from pyjobq.job_all").fetchall())
    assert sorted(status.values()) == [1, 1, 3, 3]


def test_async_enqueue_in_the_callers_transaction_rolls_back_with_it(dsn: str, conn: Conn) -> None:
    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            q = AsyncJobQueue(aconn)
            async with aconn.transaction(force_rollback=True):
                await q.enqueue(JobType.SEARCH, {"q": "gone"})
                await q.enqueue_many(JobType.OUTBOX, [{"n": 1}])
            async with aconn.transaction():
                await q.enqueue(JobType.SEARCH, {"q": "kept"})

    asyncio.run(scenario())
    payloads = [r[0] for r in conn.execute("select payload from pyjobq.job_all").fetchall()]
    assert payloads == [{"q": "kept"}]


def test_async_queue_on_a_pool_commits_each_call(dsn: str, conn: Conn) -> None:
    async def scenario() -> None:
        pool = AsyncConnectionPool(dsn, min_size=1, max_size=2, open=False)
        async with pool:
            q = AsyncJobQueue(pool)
            await q.enqueue(JobType.SEARCH)
            assert len(await q.claim("w1", 5)) == 1

    asyncio.run(scenario())
    assert conn.execute("select status from pyjobq.job_all").fetchall() == [(2,)]
