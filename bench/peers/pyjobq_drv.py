"""pyjobq driver for the benchmark contract (see contract.py), the subject of the comparison.

Run with the project's own interpreter (.venv), which has pyjobq and psycopg.
Settings are pyjobq's recommended ones:

* enqueue: ``AsyncJobQueue.enqueue_many`` (one ``job_enqueue_many`` call per
  ``PYJOBQ_ENQUEUE_BATCH`` jobs, default 20000, all on one connection and in
  one transaction);
* drain and latency: one ``pyjobq.worker.Worker`` with ``concurrency=W`` and
  its defaults (adaptive prefetch, completions flushed with ``job_complete_many``
  10 ms after the first of a batch finished, LISTEN/NOTIFY wake-ups).
  ``PYJOBQ_DRAIN=loop`` runs a bench-local loop instead: W connections, each
  ``claim(limit=PYJOBQ_LOOP_BATCH)`` then ``complete_many`` of what it got.
  ``PYJOBQ_KEEP_DONE=0`` makes the job type keep none of its DONE jobs
  (``job_type_set_history``): they are counted from the finish counts then.

Beyond the common contract it has two commands of its own, for the
pyjobq-only scenarios of run.py:

    claimcost K PENDING DONE   load PENDING due and DONE finished rows straight
                               into job and job_history, VACUUM ANALYZE, then time K
                               cycles of claim(10) + complete_many, one client
    sustained SECONDS RATE W   a producer enqueues RATE jobs/s (a batch every
                               10 ms) while one Worker(concurrency=W) runs them;
                               once a second: pickup latency, backlog and
                               n_dead_tup of pyjobq.job
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

import contract

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


from pyjobq.aio import AsyncJobQueue
from pyjobq.migrate import migrate
from pyjobq.rows import ClaimedJob
from pyjobq.worker import Worker, WorkerConfig

JOB_TYPE = 1
ENQUEUE_BATCH = int(os.environ.get("PYJOBQ_ENQUEUE_BATCH", "20000"))
DRAIN_MODE = os.environ.get("PYJOBQ_DRAIN", "worker")
LOOP_BATCH = int(os.environ.get("PYJOBQ_LOOP_BATCH", "50"))
KEEP_DONE = os.environ.get("PYJOBQ_KEEP_DONE", "1") != "0"
# Worker prefetch (jobs claimed ahead of free runners); unset = the Worker default.
PREFETCH = int(os.environ["PYJOBQ_PREFETCH"]) if os.environ.get("PYJOBQ_PREFETCH") else None
# Most completions per job_complete_many call; unset = the Worker default.
FLUSH_BATCH = int(os.environ.get("PYJOBQ_FLUSH_BATCH") or WorkerConfig().flush_batch)
CLAIMCOST_BATCH = 10
SUSTAINED_TICK_S = 0.010


def pyjobq_version() -> str:
    """The installed distribution's version plus the checkout's commit, which is what runs."""
    try:
        from importlib.metadata import version

        base = version("pyjobq")
    except Exception:
        base = "checkout"
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent,
    ).stdout.strip()
    return f"{base}+{commit}" if commit else base


def dsn() -> str:
    """The database of the libpq environment, spelled out (yoyo does not read PG* itself)."""
    names = {"PGHOST": "host", "PGPORT": "port", "PGUSER": "user", "PGDATABASE": "dbname"}
    names["PGPASSWORD"] = "password"
    return make_conninfo(**{k: os.environ[e] for e, k in names.items() if os.environ.get(e)})


async def connect() -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(dsn(), autocommit=True)


def worker_settings(w: int) -> dict[str, Any]:
    if DRAIN_MODE == "loop":
        return {
            "drain": f"bench loop: W connections, claim(limit={LOOP_BATCH}) + complete_many",
        }
    return {
        "drain": "pyjobq.worker.Worker(concurrency=W), defaults: adaptive prefetch"
        f" (at most max(256, 8W)), flush_delay=10ms, flush_batch={FLUSH_BATCH}",
        "listen": "LISTEN/NOTIFY on pyjobq_job",
    }


async def setup() -> dict[str, Any]:
    await asyncio.to_thread(migrate, dsn())
    if not KEEP_DONE:
        async with await connect() as conn:
            await AsyncJobQueue(conn).type_set_history(JOB_TYPE, keep_done=False)
    return {
        "version": pyjobq_version(),
        "settings": {
            "enqueue": f"job_enqueue_many, {ENQUEUE_BATCH} jobs per call, one transaction",
            **worker_settings(0),
            "driver": "psycopg 3 (async)",
            "keep_done": KEEP_DONE,
        },
    }


async def enqueue(n: int) -> float:
    async with await connect() as conn:
        q = AsyncJobQueue(conn)
        payloads: list[dict[str, Any]] = [{} for _ in range(n)]
        started = time.perf_counter()
        async with conn.transaction():
            for i in range(0, n, ENQUEUE_BATCH):
                await q.enqueue_many(JOB_TYPE, payloads[i : i + ENQUEUE_BATCH])
        return time.perf_counter() - started


async def count_status() -> dict[int, int]:
    async with await connect() as conn:
        cur = await conn.execute("select status, count(*) from pyjobq.job_all group by status")
        counts = {int(s): int(c) for s, c in await cur.fetchall()}
        if not KEEP_DONE:  # the DONE jobs that were not kept, from the finish counts
            cur = await conn.execute(
                "select coalesce(sum(completed), 0) from pyjobq.job_stat where job_type = %s",
                (JOB_TYPE,),
            )
            row = await cur.fetchone()
            counts[3] = int(row[0]) if row else 0
        return counts


async def count_done() -> int:
    return (await count_status()).get(3, 0)


async def verify(n: int, handled: int) -> dict[str, Any]:
    counts = await count_status()
    return {
        "ok": counts.get(3, 0) == n and sum(counts.values()) == n,
        "handled": handled,
        "done": counts.get(3, 0),
        "by_status": {str(k): v for k, v in sorted(counts.items())},
    }


async def run_worker(worker: Worker) -> asyncio.Task[Any]:
    task = asyncio.create_task(worker.serve())
    ready = asyncio.create_task(worker.ready.wait())
    await asyncio.wait([task, ready], return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()  # raises what made the worker fail
    return task


async def stop_worker(worker: Worker, task: asyncio.Task[Any]) -> dict[str, Any]:
    worker.stop()
    metrics = await asyncio.wait_for(task, timeout=60)
    return dict(metrics.as_dict())


async def drain_worker(n: int, w: int) -> contract.DrainResult:
    handled = [0]
    all_handled = asyncio.Event()

    async def noop(job: ClaimedJob) -> None:
        await contract.work()
        handled[0] += 1
        if handled[0] >= n:
            all_handled.set()

    worker = Worker(
        dsn(), {JOB_TYPE: noop}, concurrency=w, prefetch=PREFETCH, flush_batch=FLUSH_BATCH
    )
    started = time.perf_counter()
    task = await run_worker(worker)
    await all_handled.wait()
    await contract.confirm(count_done, n)
    seconds = time.perf_counter() - started
    metrics = await stop_worker(worker, task)
    verified = await verify(n, handled[0])
    verified["round_trips_per_job"] = metrics["round_trips_per_job"]
    verified["claims"] = metrics["claims"]
    verified["flushes"] = metrics["flushes"]
    return contract.DrainResult(seconds=seconds, verified=verified)


async def drain_loop(n: int, w: int) -> contract.DrainResult:
    conns = [await connect() for _ in range(w)]
    handled = [0]

    async def one(i: int, conn: psycopg.AsyncConnection[Any]) -> None:
        q, me = AsyncJobQueue(conn), f"bench-{i}"
        while True:
            jobs = await q.claim(me, LOOP_BATCH)
            if not jobs:
                return
            await asyncio.gather(*(contract.work() for _ in jobs))  # the batch's handlers
            handled[0] += len(jobs)
            await q.complete_many(me, [j.job_id for j in jobs], [j.attempt for j in jobs])

    started = time.perf_counter()
    await asyncio.gather(*(one(i, c) for i, c in enumerate(conns)))
    seconds = time.perf_counter() - started
    for c in conns:
        await c.close()
    return contract.DrainResult(seconds=seconds, verified=await verify(n, handled[0]))


async def drain(n: int, w: int) -> contract.DrainResult:
    if DRAIN_MODE == "loop":
        return await drain_loop(n, w)
    return await drain_worker(n, w)


async def latency(k: int, w: int) -> list[float | None]:
    probes = contract.Probes()

    async def probe(job: ClaimedJob) -> None:
        probes.handler_started(int(job.payload["i"]))

    worker = Worker(dsn(), {JOB_TYPE: probe}, concurrency=w)
    task = await run_worker(worker)
    await asyncio.sleep(0.5)  # let the listener LISTEN before the first probe
    async with await connect() as producer:
        q = AsyncJobQueue(producer)

        async def enqueue_one(i: int) -> None:
            await q.enqueue(JOB_TYPE, {"i": i})

        samples = await probes.run(k, enqueue_one)
    await stop_worker(worker, task)
    return samples


# --- pyjobq-only scenarios ---------------------------------------------------------


# Ids and seq as job_enqueue_many makes them (time-ordered), without its per-call limit.
LOAD_SQL = """
insert into pyjobq.{table}
  (job_id, seq, job_type, status, payload, result, attempts, run_after, worker_id,
   run_started_at, created_at, updated_at)
select n.job_id, n.seq, 1, %(status)s, '{}', %(result)s, %(attempts)s, now() - interval '1 hour',
       %(worker)s, %(started)s, now() - interval '1 hour', now() - interval '1 hour'
  from pyjobq._new_job_ids(now() - interval '1 hour', %(n)s) n
"""


async def load(conn: psycopg.AsyncConnection[Any], pending: int, done: int) -> dict[str, float]:
    """Fill the queue the fast way: DONE rows into the history (older), then due PENDING
    ones into job."""
    took: dict[str, float] = {}
    started = time.perf_counter()
    chunk = 1_000_000
    for i in range(0, done, chunk):
        await conn.execute(
            LOAD_SQL.format(table="job_history"),
            {
                "status": 3,
                "result": None,
                "attempts": 1,
                "worker": "bench",
                "started": None,
                "n": min(chunk, done - i),
            },
        )
    if pending:
        await conn.execute(
            LOAD_SQL.format(table="job"),
            {
                "status": 1,
                "result": None,
                "attempts": 0,
                "worker": None,
                "started": None,
                "n": pending,
            },
        )
    took["load_s"] = time.perf_counter() - started
    started = time.perf_counter()
    await conn.execute("vacuum analyze pyjobq.job, pyjobq.job_history")
    took["vacuum_analyze_s"] = time.perf_counter() - started
    cur = await conn.execute(
        "select sum(pg_total_relation_size(relid)) from pg_partition_tree('pyjobq.job_history')"
        " where isleaf or relid = 'pyjobq.job'::regclass"
    )
    row = await cur.fetchone()
    took["table_mb"] = round((row[0] if row else 0) / 2**20, 1)
    return took


async def claimcost(k: int, pending: int, done: int) -> dict[str, Any]:
    async with await connect() as conn:
        loaded = await load(conn, pending, done)
        await conn.execute("checkpoint")
        q, me = AsyncJobQueue(conn), "bench-claimcost"
        cycles: list[float] = []
        claims: list[float] = []
        for _ in range(k):
            t0 = time.perf_counter()
            jobs = await q.claim(me, CLAIMCOST_BATCH)
            t1 = time.perf_counter()
            await q.complete_many(me, [j.job_id for j in jobs], [j.attempt for j in jobs])
            t2 = time.perf_counter()
            if len(jobs) != min(CLAIMCOST_BATCH, pending):
                raise RuntimeError(f"claim returned {len(jobs)} jobs")
            cycles.append((t2 - t0) * 1000)
            claims.append((t1 - t0) * 1000)
            pending -= len(jobs)
            if pending <= 0:
                break
        cur = await conn.execute(
            "explain (analyze, buffers, costs off, timing off, summary off) "
            "select c.job_id from pyjobq.job c where c.status = 1"
            " and c.run_after <= now() order by c.priority, c.run_after limit 10"
        )
        plan = [r[0] for r in await cur.fetchall()]
    cycles.sort()
    claims.sort()
    return {
        "pending": pending,
        "done": done,
        "cycles": len(cycles),
        "cycle_p50_ms": round(contract.percentile(cycles, 50), 3),
        "cycle_p99_ms": round(contract.percentile(cycles, 99), 3),
        "cycle_mean_ms": round(statistics.fmean(cycles), 3),
        "claim_p50_ms": round(contract.percentile(claims, 50), 3),
        "claim_mean_ms": round(statistics.fmean(claims), 3),
        "plan": plan,
        **loaded,
    }


async def sustained(seconds: float, rate: int, w: int) -> dict[str, Any]:
    per_tick = max(1, round(rate * SUSTAINED_TICK_S))
    committed: dict[int, float] = {}
    started_at: list[tuple[float, float]] = []  # (handler start, latency ms)

    async def handler(job: ClaimedJob) -> None:
        now = time.perf_counter()
        at = committed.get(int(job.payload["b"]))
        if at is not None:
            started_at.append((now, (now - at) * 1000))

    worker = Worker(dsn(), {JOB_TYPE: handler}, concurrency=w)
    task = await run_worker(worker)
    samples: list[dict[str, Any]] = []
    producer, observer = await connect(), await connect()
    q = AsyncJobQueue(producer)
    stop = asyncio.Event()

    async def produce() -> int:
        batch, sent = 0, 0
        next_at = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            next_at += SUSTAINED_TICK_S
            await q.enqueue_many(JOB_TYPE, [{"b": batch}] * per_tick)
            committed[batch] = time.perf_counter()
            batch += 1
            sent += per_tick
        return sent

    async def observe() -> None:
        t0 = time.perf_counter()
        seen = 0
        while not stop.is_set():
            await asyncio.sleep(1.0)
            cur = await observer.execute(
                "select (select count(*) from pyjobq.job where status = 1),"
                " n_dead_tup, n_live_tup, autovacuum_count, autoanalyze_count,"
                " pg_relation_size('pyjobq.job'),"
                " pg_relation_size('pyjobq.job_claim_idx')"
                " from pg_stat_user_tables where relid = 'pyjobq.job'::regclass"
            )
            row = await cur.fetchone()
            lat = sorted(ms for _, ms in started_at[seen:])
            seen = len(started_at)
            if row is None:
                continue
            samples.append(
                {
                    "t_s": round(time.perf_counter() - t0, 2),
                    "pending": row[0],
                    "n_dead_tup": row[1],
                    "n_live_tup": row[2],
                    "autovacuums": row[3],
                    "autoanalyzes": row[4],
                    "heap_mb": round(row[5] / 2**20, 2),
                    "claim_idx_kb": round(row[6] / 1024, 1),
                    "jobs": len(lat),
                    "p50_ms": round(contract.percentile(lat, 50), 3) if lat else None,
                    "p99_ms": round(contract.percentile(lat, 99), 3) if lat else None,
                }
            )

    producer_task = asyncio.create_task(produce())
    observer_task = asyncio.create_task(observe())
    await asyncio.sleep(seconds)
    stop.set()
    sent = await producer_task
    await observer_task
    await contract.confirm(count_done, sent)
    metrics = await stop_worker(worker, task)
    await producer.close()
    await observer.close()
    lat = sorted(ms for _, ms in started_at)
    half = sorted(ms for t, ms in started_at if t >= started_at[0][0] + seconds / 2)
    counts = await count_status()
    return {
        "seconds": seconds,
        "rate": rate,
        "workers": w,
        "sent": sent,
        "done": counts.get(3, 0),
        "p50_ms": round(contract.percentile(lat, 50), 3),
        "p99_ms": round(contract.percentile(lat, 99), 3),
        "second_half_p50_ms": round(contract.percentile(half, 50), 3) if half else None,
        "second_half_p99_ms": round(contract.percentile(half, 99), 3) if half else None,
        "max_dead_tup": max((s["n_dead_tup"] for s in samples), default=0),
        "samples": samples,
        "round_trips_per_job": metrics["round_trips_per_job"],
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "claimcost":
        k, pending, done = (int(a) for a in sys.argv[2:5])
        contract.emit(asyncio.run(claimcost(k, pending, done)))
    elif len(sys.argv) > 1 and sys.argv[1] == "sustained":
        seconds, rate, w = float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
        contract.emit(asyncio.run(sustained(seconds, rate, w)))
    else:
        contract.main(contract.Driver(setup=setup, enqueue=enqueue, drain=drain, latency=latency))


if __name__ == "__main__":
    main()
