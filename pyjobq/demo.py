"""``pyjobq demo``: a real workload on a throwaway server, with a crash, verified at the end.

Orders are inserted into ``demo.orders`` in the same transactions as their SEARCH and
OUTBOX jobs; several worker processes run the jobs, some of which fail and retry or end
DEAD; one worker is SIGKILLed mid-run so its leases expire and are reaped. The handlers
record each (job, attempt) they ran in ``demo.effects``, whose primary key catches any
attempt run twice. OUTBOX jobs carry their customer as concurrency key, under a limit of
``OUTBOX_PER_CUSTOMER`` running at once, and a schedule fires every minute, its ticks counted
from a minute ago so that the first is due at once. A small pipeline (``demo_pipeline``) runs
beside them: parts, a merge that waits for them, and a batch callback; and two durable jobs
(``demo_durable``): one waits for a signal, the other is checkpointed and its worker is the one
killed. The summary checks every job finished exactly as expected, the limit held, each due tick
fired once, the merge waited for its parts, the callback was enqueued once, the waiting job
slept until its signal and the checkpointed one's steps each ran once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pyjobq import demo_durable
from pyjobq.demo_crash import APP_NAME, Killed, kill_a_worker_mid_job
from pyjobq.demo_durable import DSN_ENV, Durable
from pyjobq.demo_pipeline import Pipeline, enqueue_pipeline, pipeline_checks, pipeline_finished
from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import migrate
from pyjobq.params import Payload
from pyjobq.queue import JobQueue
from pyjobq.rows import ClaimedJob, JobType
from pyjobq.worker import DeadLetter, Retry, WorkerConfig

BATCH = 500
# Each worker process: short leases and a quick reaper, so the killed worker's jobs come back
# within seconds, and a short drain at the end.
WORKER_CONFIG = WorkerConfig(
    lease_seconds=2, reap_interval=1, poll_interval=1, shutdown_timeout=10, schedule_interval=1
)
LEASE_SECONDS = WORKER_CONFIG.lease_seconds
# Few customers, so that without the limit several of one customer's events would run at once.
CUSTOMERS = 10
OUTBOX_PER_CUSTOMER = 2
SCHEDULE = "minutely"

SCHEMA = """
drop schema if exists demo cascade;
create schema demo;
create table demo.orders (
  order_id bigint primary key,
  customer text not null,
  amount numeric(10, 2) not null,
  search_job uuid not null,
  outbox_job uuid not null
);
-- One row per attempt a handler ran; the key makes a second run of one attempt fail loudly.
create table demo.effects (
  job_id uuid not null,
  attempt int not null,
  job_type int not null,
  pid int not null,
  started_at timestamptz not null default clock_timestamp(),
  ended_at timestamptz,
  constraint effects_pkey primary key (job_id, attempt)
);
create table demo.duplicates (job_id uuid not null, attempt int not null, pid int not null);
"""

ENQUEUE_ORDERS = """
insert into demo.orders (order_id, customer, amount, search_job, outbox_job)
select o.id, 'customer ' || (o.id %% %s), (o.id %% 1000) / 10.0, o.search_job, o.outbox_job
  from unnest(%s::bigint[], %s::uuid[], %s::uuid[]) as o(id, search_job, outbox_job)
"""


# -- the handlers the worker processes run ------------------------------------


def is_poison_search(order_id: int) -> bool:
    """SEARCH jobs that always fail: retried with backoff, then DEAD."""
    return order_id % 250 == 7


def is_flaky_search(order_id: int) -> bool:
    """SEARCH jobs whose first attempt asks for a quick retry."""
    return order_id % 10 == 3


def is_rejected_outbox(order_id: int) -> bool:
    """OUTBOX jobs the handler dead-letters at once."""
    return order_id % 400 == 11


_sync_pool: ConnectionPool | None = None
_async_pool: AsyncConnectionPool | None = None

# Taken by the demo for a moment, so that it can kill a worker whose handler is mid-job.
GATE = "lock table demo.effects in exclusive mode"
RECORD = (
    "insert into demo.effects (job_id, attempt, job_type, pid) values (%s, %s, %s, %s)"
    " on conflict do nothing"
)
RECORD_END = (
    "update demo.effects set ended_at = clock_timestamp() where job_id = %s and attempt = %s"
)
DUPLICATE = "insert into demo.duplicates values (%s, %s, %s)"


def search(job: ClaimedJob) -> Payload:
    """A sync handler (thread pool): index the order, failing on purpose for some."""
    global _sync_pool
    if _sync_pool is None:
        _sync_pool = ConnectionPool(os.environ[DSN_ENV], min_size=1, max_size=16, open=True)
    order_id = int(job.payload["order_id"])
    with _sync_pool.connection() as conn:
        cur = conn.execute(RECORD, (job.job_id, job.attempt, job.job_type, os.getpid()))
        if cur.rowcount == 0:
            conn.execute(DUPLICATE, (job.job_id, job.attempt, os.getpid()))
    time.sleep(0.002)
    if is_poison_search(order_id):
        raise ValueError(f"order {order_id}: document cannot be indexed")
    if is_flaky_search(order_id) and job.attempt == 1:
        raise Retry(0.2, "search index busy")
    if job.parent_results is not None:  # what its claim saw of its parents (the pipeline's merge)
        return {"indexed": order_id, "parents": [p["status"] for p in job.parent_results]}
    return {"indexed": order_id}


async def outbox(job: ClaimedJob) -> Payload:
    """An async handler (event loop): publish the order event, rejecting some."""
    global _async_pool
    if _async_pool is None:
        _async_pool = AsyncConnectionPool(os.environ[DSN_ENV], min_size=1, max_size=8, open=False)
        await _async_pool.open()
    order_id = int(job.payload["order_id"])
    async with _async_pool.connection() as conn:
        cur = await conn.execute(RECORD, (job.job_id, job.attempt, job.job_type, os.getpid()))
        if cur.rowcount == 0:
            await conn.execute(DUPLICATE, (job.job_id, job.attempt, os.getpid()))
    await asyncio.sleep(0.002)
    # When it ended, on the database's clock as when it started: the summary counts how many
    # of a customer's events were being published at once.
    async with _async_pool.connection() as conn:
        await conn.execute(RECORD_END, (job.job_id, job.attempt))
    if is_rejected_outbox(order_id):
        raise DeadLetter(f"order {order_id}: recipient rejected the event")
    return {"published": order_id}


HANDLERS = {JobType.SEARCH: search, JobType.OUTBOX: outbox, **demo_durable.HANDLERS}


# -- the driver ----------------------------------------------------------------


def enqueue_orders(conn: psycopg.Connection[Any], first: int, count: int) -> None:
    """One transaction: the orders and their two jobs each, all or nothing."""
    q = JobQueue(conn)
    ids = list(range(first, first + count))
    searches = q.enqueue_many(JobType.SEARCH, [{"order_id": i} for i in ids])
    outboxes = q.enqueue_many(
        JobType.OUTBOX,
        [{"order_id": i, "event": "created"} for i in ids],
        concurrency_keys=[f"customer {i % CUSTOMERS}" for i in ids],
    )
    conn.execute(
        ENQUEUE_ORDERS,
        (CUSTOMERS, ids, [s.job_id for s in searches], [o.job_id for o in outboxes]),
    )


def status_tally(conn: psycopg.Connection[Any]) -> dict[str, int]:
    # The job table is private to pyjobq; the demo reads it only to check its own jobs.
    rows = conn.execute(
        """
        select j.status, count(*)
          from demo.orders o
          join pyjobq.job_all j on j.job_id in (o.search_job, o.outbox_job)
         group by j.status
        """
    ).fetchall()
    names = {1: "pending", 2: "running", 3: "done", 4: "dead"}
    tally = dict.fromkeys(names.values(), 0)
    for status, n in rows:
        tally[names[status]] = n
    return tally


def run_demo(
    dsn: str | None,
    *,
    jobs: int = 6000,
    workers: int = 3,
    concurrency: int = 16,
    kill: bool = True,
    dashboard_port: int | None = None,
) -> bool:
    """Run the demo; returns whether every check passed. With ``dashboard_port``, then serve
    the dashboard (actions allowed) on that loopback port until Ctrl-C, before the throwaway
    server goes."""
    with ExitStack() as stack:
        if dsn is None:
            click.echo("starting a throwaway PostgreSQL server ...")
            server = LocalPostgres(
                settings={
                    "fsync": "off",
                    "synchronous_commit": "off",
                    "full_page_writes": "off",
                    "max_connections": "200",
                }
            )
            stack.enter_context(server)
            dsn = server.dsn()
        migrate(dsn)
        work_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pyjobq-demo-")))
        ok = _run(dsn, work_dir, jobs, workers, concurrency, kill)
        if dashboard_port is not None:
            show_dashboard(dsn, dashboard_port)
        return ok
    return False


def show_dashboard(dsn: str, port: int) -> None:
    """Serve the dashboard on the demo's queue until Ctrl-C or SIGTERM."""
    from pyjobq.dashboard import DashboardSettings, serve

    click.echo(
        f"dashboard on http://127.0.0.1:{port}/ (the DEAD jobs can be redriven there);"
        " Ctrl-C stops it and the demo's server"
    )
    serve(DashboardSettings(dsn=dsn, allow_actions=True), "127.0.0.1", port)


def _run(dsn: str, work_dir: Path, jobs: int, workers: int, concurrency: int, kill: bool) -> bool:
    orders = max(1, jobs // 2)
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(SCHEMA)
    conn.execute(demo_durable.SCHEMA)
    q = JobQueue(conn)
    q.type_set_limits(JobType.OUTBOX, key_max_running=OUTBOX_PER_CUSTOMER)
    a_minute_ago = one_value(conn, "select now() - interval '1 minute'")
    q.schedule_set(
        SCHEDULE, "* * * * *", JobType.SEARCH, {"order_id": 0}, grace_seconds=120,
        start_at=a_minute_ago,
    )  # fmt: skip
    procs: list[subprocess.Popen[bytes]] = []
    logs = work_dir / "workers.log"
    log_file = logs.open("wb")
    click.echo(
        f"{orders} orders -> {2 * orders} jobs (SEARCH sync handler, OUTBOX async handler), "
        f"{workers} worker processes x {concurrency}, leases {LEASE_SECONDS}s; OUTBOX at most"
        f" {OUTBOX_PER_CUSTOMER} running per customer; schedule {SCHEDULE!r} every minute"
    )
    config = replace(WORKER_CONFIG, concurrency=concurrency)
    for n in range(workers):
        command = [
            sys.executable, "-m", "pyjobq", "worker", "pyjobq.demo:HANDLERS",
            "--dsn", dsn, *config.command_line(),
            "--metrics-file", str(work_dir / f"metrics-{n}.json"), "--log-level", "WARNING",
        ]  # fmt: skip
        # Each process's sessions carry its own application_name, so that the demo can tell when
        # every backend of a killed worker has gone.
        env = {**os.environ, DSN_ENV: dsn, "PGAPPNAME": f"{APP_NAME}-{n}"}
        procs.append(subprocess.Popen(command, env=env, stdout=log_file, stderr=log_file))
    pipeline = enqueue_pipeline(conn)
    # The checkpointed job's first attempt stops at the checkpoint gate until the crash.
    checkpoint_gate = psycopg.connect(dsn)
    checkpoint_gate.execute(demo_durable.CHECKPOINT_GATE)
    durable = demo_durable.enqueue_durable(conn)
    try:
        return _drive(conn, dsn, work_dir, procs, orders, kill, pipeline, durable, checkpoint_gate)
    finally:
        checkpoint_gate.close()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        log_file.close()
        conn.close()


def _drive(
    conn: psycopg.Connection[Any],
    dsn: str,
    work_dir: Path,
    procs: list[subprocess.Popen[bytes]],
    orders: int,
    kill: bool,
    pipeline: Pipeline,
    durable: Durable,
    checkpoint_gate: psycopg.Connection[Any],
) -> bool:
    # Atomicity first: a batch whose transaction rolls back leaves neither orders nor jobs.
    with psycopg.connect(dsn) as tx:
        enqueue_orders(tx, 10_000_000, 10)
        tx.rollback()
    total = 2 * orders
    started = time.monotonic()
    killed: Killed | None = None
    next_id = 1
    tty = sys.stdout.isatty()
    last_line = 0.0
    finished_at = None
    while True:
        if next_id <= orders:
            count = min(BATCH, orders - next_id + 1)
            # The crash comes with the batch that takes the run past 30% of its orders.
            crash = kill and killed is None and next_id + count - 1 >= orders * 0.3
            if not kill and next_id + count - 1 >= orders * 0.3:
                checkpoint_gate.rollback()  # no crash: the checkpointed job goes on
            with ExitStack() as gate_stack:
                gate = gate_stack.enter_context(psycopg.connect(dsn)) if crash else None
                if gate is not None:
                    gate.execute(GATE)
                with psycopg.connect(dsn) as tx:
                    enqueue_orders(tx, next_id, count)
                next_id += count
                if gate is not None:
                    killed = kill_a_worker_mid_job(conn, (gate, checkpoint_gate), procs, durable)
                    click.echo(
                        f"{'' if not tty else chr(10)}SIGKILLed worker pid {killed.pid} holding "
                        f"{len(killed.job_ids)} jobs mid-run, the checkpointed one at step "
                        f"{demo_durable.STOP_AT}; its {LEASE_SECONDS}s leases will be reaped by "
                        "the others"
                    )
        else:
            time.sleep(0.2)
        demo_durable.approve_when_waiting(conn, durable)
        tally = status_tally(conn)
        finished = tally["done"] + tally["dead"]
        now = time.monotonic()
        line = (
            f"  pending {tally['pending']:6d}  running {tally['running']:4d}  "
            f"done {tally['done']:6d}  dead {tally['dead']:4d}  "
            f"{finished / max(now - started, 1e-9):7.0f} jobs/s"
        )
        if tty:
            click.echo("\r" + line, nl=False)
        elif now - last_line >= 2:
            click.echo(line)
            last_line = now
        if (
            next_id > orders
            and finished == total
            and schedule_ran(conn)
            and pipeline_finished(conn, pipeline)
            and demo_durable.durable_finished(conn, durable)
        ):
            finished_at = now
            break
        if now - started > 300:
            click.echo("\ngave up after 300 s: see the worker log " + str(work_dir), err=True)
            return False
    if tty:
        click.echo()
    elapsed = finished_at - started
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        p.wait(timeout=30)
    metrics = [json.loads(f.read_text()) for f in sorted(work_dir.glob("metrics-*.json"))]
    return _summarise(conn, metrics, orders, elapsed, killed, kill, pipeline, durable)


def one_value(conn: psycopg.Connection[Any], query: str, params: tuple[Any, ...] = ()) -> Any:
    """The first column of the row ``query`` returns, or None."""
    row = conn.execute(query, params).fetchone()
    return None if row is None else row[0]


def schedule_ran(conn: psycopg.Connection[Any]) -> bool:
    """Whether the schedule has fired and every job it enqueued has finished."""
    return bool(
        one_value(
            conn,
            "select s.fired > 0 and not exists (select from pyjobq.job_all j"
            " where j.payload = '{\"order_id\": 0}' and j.status in (1, 2))"
            " from pyjobq.job_schedules() s where s.name = %s",
            (SCHEDULE,),
        )
    )


def most_at_once_per_customer(conn: psycopg.Connection[Any]) -> int:
    """The most OUTBOX handlers of one customer that ran at once, from the times each recorded
    (half-open: one that ended as another started did not overlap it)."""
    return int(
        one_value(
            conn,
            """
            with events as (
              select o.customer, e.started_at as at, 1 as step
                from demo.effects e join demo.orders o on o.outbox_job = e.job_id
               where e.ended_at is not null
              union all
              select o.customer, e.ended_at, -1
                from demo.effects e join demo.orders o on o.outbox_job = e.job_id
               where e.ended_at is not null
            )
            select coalesce(max(running), 0)
              from (select sum(step) over (partition by customer order by at, step
                                           rows unbounded preceding) as running
                      from events) r
            """,
        )
    )


def _summarise(
    conn: psycopg.Connection[Any],
    metrics: list[dict[str, Any]],
    orders: int,
    elapsed: float,
    killed: Killed | None,
    kill: bool,
    pipeline: Pipeline,
    durable: Durable,
) -> bool:
    total = 2 * orders

    tally = status_tally(conn)
    jobs_of_demo = """
        from demo.orders o join pyjobq.job_all j on j.job_id in (o.search_job, o.outbox_job)
    """
    expected_dead = sum(is_poison_search(i) for i in range(1, orders + 1)) + sum(
        is_rejected_outbox(i) for i in range(1, orders + 1)
    )
    unexpected = one_value(
        conn,
        "select count(*) "
        + jobs_of_demo
        + """
         where (j.status = 4) <> ((j.job_type = 1 and o.order_id %% 250 = 7)
                                  or (j.job_type = 2 and o.order_id %% 400 = 11))
        """,
    )
    # Tries beyond the first; a claim given back at a worker's shutdown is not one.
    retries = one_value(
        conn, "select coalesce(sum(j.attempts - j.attempts_refunded - 1), 0) " + jobs_of_demo
    )
    duplicates = one_value(conn, "select count(*) from demo.duplicates")
    missing_effect = one_value(
        conn,
        "select count(*) "
        + jobs_of_demo
        + """
         where j.status = 3
           and not exists (select 1 from demo.effects e
                            where e.job_id = j.job_id and e.attempt = j.attempts)
        """,
    )
    rolled_back = one_value(conn, "select count(*) from demo.orders where order_id >= 10000000")
    rolled_back_jobs = one_value(
        conn, "select count(*) from pyjobq.job_all where (payload->>'order_id')::bigint >= 10000000"
    )
    fired, fired_done = conn.execute(
        "select s.fired, (select count(*) from pyjobq.job_all j"
        " where j.payload = '{\"order_id\": 0}' and j.status = 3)"
        " from pyjobq.job_schedules() s where s.name = %s",
        (SCHEDULE,),
    ).fetchone() or (0, 0)
    most_at_once = most_at_once_per_customer(conn)
    pipeline_line, pipeline_ok, pipeline_done = pipeline_checks(conn, pipeline)
    durable_lines, durable_ok, durable_done = demo_durable.durable_checks(
        conn, durable, killed is not None
    )
    reaped = sum(m["reaped"] for m in metrics)
    completed = sum(m["completed"] for m in metrics)
    round_trips = sum(m["round_trips"] for m in metrics)
    finished_by_survivors = sum(m["completed"] + m["failed"] for m in metrics)
    checks = [
        (tally["done"] + tally["dead"] == total, f"all {total} jobs DONE or DEAD"),
        (unexpected == 0, f"DEAD are exactly the {expected_dead} poison/rejected jobs"),
        (duplicates == 0, "no (job, attempt) ran twice"),
        (missing_effect == 0, "every DONE job's final attempt ran its handler"),
        (
            completed <= tally["done"] + fired_done + pipeline_done + durable_done,
            "no job completed twice (completions <= DONE rows)",
        ),
        (rolled_back == 0 and rolled_back_jobs == 0, "rolled-back batch left no orders, no jobs"),
        (
            0 < most_at_once <= OUTBOX_PER_CUSTOMER,
            f"at most {OUTBOX_PER_CUSTOMER} OUTBOX jobs of a customer ran at once ({most_at_once})",
        ),
        (fired == fired_done > 0, f"schedule {SCHEDULE!r} fired, one job per due tick, all DONE"),
    ]
    checks += pipeline_ok + durable_ok
    if kill:
        checks.append((killed is not None, "a worker was SIGKILLed while holding leases"))
    if killed is not None:
        # Once its sessions had ended, only a reaper could take these jobs from the killed worker:
        # each must have run again (a later attempt) or been dead-lettered by the reaper.
        taken_back = one_value(
            conn,
            """
            select count(*)
              from unnest(%s::uuid[], %s::int[]) as h(job_id, attempt)
              join pyjobq.job_all j on j.job_id = h.job_id
             where j.status = 4 or (j.status = 3 and j.attempts > h.attempt)
            """,
            (killed.job_ids, killed.attempts),
        )
        held = len(killed.job_ids)
        checks.append(
            (
                taken_back == held > 0,
                f"the {held} leases the killed worker held were reaped, its jobs ran again "
                f"or went DEAD ({taken_back})",
            )
        )
    click.echo("")
    click.echo(f"orders            {orders}")
    click.echo(f"jobs              {total}: {tally['done']} DONE, {tally['dead']} DEAD")
    click.echo(f"elapsed           {elapsed:.1f} s, {total / elapsed:.0f} jobs/s")
    click.echo(f"retries           {retries} (attempts beyond the first)")
    if killed is not None:
        click.echo(
            f"killed worker     pid {killed.pid}, {len(killed.job_ids)} leases held when its "
            "sessions ended"
        )
    click.echo(f"reaped leases     {reaped} (every reap by the surviving workers)")
    click.echo(f"schedule          {SCHEDULE!r} fired {fired} tick(s), {fired_done} job(s) DONE")
    click.echo(
        f"concurrency limit OUTBOX {OUTBOX_PER_CUSTOMER} per customer, {CUSTOMERS} customers:"
        f" at most {most_at_once} ran at once"
    )
    click.echo(pipeline_line)
    for line in durable_lines:
        click.echo(line)
    if finished_by_survivors:
        per_job = round_trips / finished_by_survivors
        click.echo(f"round trips/job   {per_job:.3f} (surviving workers)")
    ok = True
    for passed, text in checks:
        ok &= passed
        click.secho(f"  {'ok  ' if passed else 'FAIL'} {text}", fg="green" if passed else "red")
    click.secho("demo verified" if ok else "demo FAILED", bold=True, fg="green" if ok else "red")
    return ok
