"""The Worker in process: batching, outcomes of handler exceptions, leases, wake-ups, reconnects."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from pyjobq import ClaimedJob, JobQueue, JobType
from pyjobq.metrics import WorkerHooks
from pyjobq.worker import DeadLetter, Handler, Retry, Worker, is_cancelled, make_worker_id
from pyjobq.worker.claiming import MAX_FLUSHES
from tests.sqlhelp import FROZEN, freeze, frozen_dsn, one
from tests.workerhelp import PATIENCE, asleep, prepare, running, statuses, wait_for

Conn = psycopg.Connection[Any]


@pytest.fixture
def db(conn: Conn) -> Conn:
    prepare(conn)
    return conn


def ok(job: ClaimedJob) -> dict[str, Any]:
    return {"n": job.payload["n"]}


async def ok_async(job: ClaimedJob) -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"n": job.payload["n"]}


def test_worker_id_is_unique_and_fits_the_column() -> None:
    ids = {make_worker_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(len(i) <= 80 and i.count(":") >= 2 for i in ids)


def test_worker_runs_sync_and_async_handlers_in_batches(dsn: str, db: Conn) -> None:
    q = JobQueue(db)
    q.enqueue_many(JobType.SEARCH, [{"n": i} for i in range(1500)])
    q.enqueue_many(JobType.OUTBOX, [{"n": i} for i in range(1500)])
    worker = Worker(dsn, {JobType.SEARCH: ok, JobType.OUTBOX: ok_async}, concurrency=16)
    with running(worker) as r:
        wait_for(lambda: statuses(db) == {3: 3000}, "every job DONE")
        metrics = r.stop()
    assert metrics.completed == metrics.claimed == 3000
    assert metrics.failed == metrics.lease_lost == metrics.released == 0
    # Batching, as a property rather than a rate this machine happens to reach: the first claim
    # takes the whole room (concurrency + prefetch = 32 jobs), so there are fewer claims than
    # jobs whatever the timing; completions wait for each other (flush_delay), so fewer
    # complete_many calls than jobs.
    print(f"round trips per job at load: {metrics.round_trips_per_job():.3f}")
    assert metrics.claims < metrics.claimed
    assert metrics.flushes < metrics.completed
    mismatched = db.execute(
        "select count(*) from pyjobq.job_all where result->'n' <> payload->'n'"
    ).fetchone()
    assert mismatched == (0,)


def test_adaptive_prefetch_follows_job_duration_within_its_bounds(dsn: str) -> None:
    worker = Worker(dsn, {JobType.SEARCH: ok}, concurrency=32)
    assert worker._prefetch_now() == 32  # nothing measured yet: one job ahead per runner
    worker.job_seconds = 0.00005  # no-op jobs: as many as the cap allows
    assert worker._prefetch_now() == worker.max_prefetch == 256
    worker.job_seconds = 30.0  # long jobs: one waiting per runner, no more
    assert worker._prefetch_now() == 32
    fixed = Worker(dsn, {JobType.SEARCH: ok}, concurrency=32, prefetch=5)
    fixed.job_seconds = 0.00005
    assert fixed._prefetch_now() == fixed.max_prefetch == 5


def test_a_worker_claims_no_more_than_it_can_run_so_others_get_the_rest(dsn: str, db: Conn) -> None:
    """A worker holds at most ``concurrency`` + prefetch jobs (here 2 + 2, nothing measured
    yet), never a batch of 100: with every handler held, two workers hold 4 jobs each of the
    40, whichever woke first, and the other 32 wait PENDING for whoever frees up."""
    gate = threading.Event()

    def held(job: ClaimedJob) -> None:
        assert gate.wait(60), "the gate was never opened"

    workers = [Worker(dsn, {JobType.SEARCH: held}, concurrency=2) for _ in range(2)]
    with running(workers[0]) as a, running(workers[1]) as b:
        JobQueue(db).enqueue_many(JobType.SEARCH, [{} for _ in range(40)])

        def held_by() -> dict[str | None, int]:
            rows = db.execute(
                "select worker_id, count(*) from pyjobq.job_all where status = 2 group by worker_id"
            )
            return dict(rows.fetchall())

        # Each worker's claims stop at 4, so 8 RUNNING means 4 each.
        wanted = {w.worker_id: 4 for w in workers}
        wait_for(lambda: held_by() == wanted, "each worker holding 4 jobs")
        assert statuses(db) == {1: 32, 2: 8}
        gate.set()
        wait_for(lambda: statuses(db) == {3: 40}, "every job DONE")
        a.stop()
        b.stop()


def test_only_handled_types_are_claimed(dsn: str, db: Conn) -> None:
    q = JobQueue(db)
    q.enqueue(JobType.SEARCH, {"n": 1})
    outbox = q.enqueue(JobType.OUTBOX, {"n": 2})
    with running(Worker(dsn, {JobType.SEARCH: ok})) as r:
        wait_for(lambda: statuses(db) == {1: 1, 3: 1}, "the SEARCH job DONE")
        r.stop()
    assert db.execute(
        "select status from pyjobq.job_all where job_id = %s", (outbox.job_id,)
    ).fetchone() == (1,)


def test_handler_exceptions_choose_retry_delay_dead_letter_or_backoff(
    dsn: str, db: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    def handler(job: ClaimedJob) -> None:
        kind = job.payload["kind"]
        if kind == "retry" and job.attempt == 1:
            raise Retry(0)
        if kind == "dead":
            raise DeadLetter("no such recipient")
        if kind == "error":
            raise ValueError("broken payload")

    caplog.set_level(logging.INFO, logger="pyjobq.worker")
    q = JobQueue(db)
    retry = q.enqueue(JobType.SEARCH, {"kind": "retry"}).job_id
    dead = q.enqueue(JobType.SEARCH, {"kind": "dead"}, max_attempts=5).job_id
    error = q.enqueue(JobType.SEARCH, {"kind": "error"}, max_attempts=2).job_id
    # The worker's clock stands still (years ahead, so every job is due): the default backoff
    # of the failed job never runs out, however long the checks below take to see it PENDING.
    worker = Worker(frozen_dsn(dsn), {JobType.SEARCH: handler}, poll_interval=0.05)
    with running(worker) as r:
        wait_for(lambda: statuses(db).get(2) is None and statuses(db).get(3) == 1, "outcomes")
        wait_for(lambda: statuses(db).get(4) == 1 and statuses(db).get(1) == 1, "outcomes")
        metrics = r.stop()
    rows = {
        row[0]: row[1:]
        for row in db.execute("select job_id, status, attempts, last_error from pyjobq.job_all")
    }
    assert rows[retry][:2] == (3, 2)  # retried at once, done on attempt 2
    assert rows[dead][:2] == (4, 1)  # dead-lettered although 4 attempts were left
    status, attempts, last_error = rows[error]
    assert (status, attempts) == (1, 1)  # default backoff: seconds away, still PENDING
    assert "ValueError" in last_error
    assert "in handler" in last_error
    assert (metrics.retried, metrics.dead, metrics.completed) == (2, 1, 1)
    # Each failure is logged once, naming its job in the message: a planned retry at INFO, the
    # failure that leaves the job DEAD at WARNING.
    failures = {
        (r.getMessage().split(" failed on attempt ")[0], r.levelname)
        for r in caplog.records
        if " failed on attempt " in r.getMessage()
    }
    assert failures == {
        (f"job {retry}", "INFO"),
        (f"job {dead}", "WARNING"),
        (f"job {error}", "INFO"),
    }


class Statements(WorkerHooks):
    """Counts the statements a worker sends, by name."""

    def __init__(self) -> None:
        self.sent: dict[str, int] = {}

    def on_statement(self, statement: str, seconds: float, error: Exception | None) -> None:
        self.sent[statement] = self.sent.get(statement, 0) + 1


def test_a_flush_sends_completions_and_failures_in_one_call(dsn: str, db: Conn) -> None:
    def handler(job: ClaimedJob) -> dict[str, Any]:
        if job.payload["kind"] == "dead":
            raise DeadLetter("no such recipient")
        return {"ok": True}

    q = JobQueue(db)
    done = q.enqueue(JobType.SEARCH, {"kind": "done"}).job_id
    dead = q.enqueue(JobType.SEARCH, {"kind": "dead"}).job_id
    hooks = Statements()
    # Both jobs are claimed at once; the flush waits for both (a batch of 2), however long.
    worker = Worker(
        dsn, {JobType.SEARCH: handler}, hooks=hooks, concurrency=2, flush_batch=2, flush_delay=60
    )
    with running(worker) as r:
        wait_for(lambda: statuses(db) == {3: 1, 4: 1}, "one DONE, one DEAD")
        metrics = r.stop()
    assert (metrics.completed, metrics.dead, metrics.flushes) == (1, 1, 1)
    assert hooks.sent.get("finish") == 1
    assert "fail" not in hooks.sent
    ended = dict(db.execute("select job_id, updated_at from pyjobq.job_history").fetchall())
    assert ended[done] == ended[dead]  # one call, one transaction


def test_job_timeout_fails_the_attempt(dsn: str, db: Conn) -> None:
    async def stuck(job: ClaimedJob) -> None:
        await asyncio.sleep(3600)

    JobQueue(db).enqueue(JobType.SEARCH, max_attempts=1)
    with running(Worker(dsn, {JobType.SEARCH: stuck}, job_timeout=0.1)) as r:
        wait_for(lambda: statuses(db) == {4: 1}, "the job DEAD")
        metrics = r.stop()
    assert metrics.timed_out == 1


def test_lost_lease_drops_the_result(dsn: str, db: Conn) -> None:
    started, finish = threading.Event(), threading.Event()

    def slow(job: ClaimedJob) -> dict[str, Any]:
        started.set()
        finish.wait(30)
        return {"late": True}

    job_id = JobQueue(db).enqueue(JobType.SEARCH).job_id
    worker = Worker(dsn, {JobType.SEARCH: slow}, lease_seconds=3600)
    with running(worker) as r:
        assert started.wait(30)
        # The lease runs out and another worker's reaper takes the job back, in one
        # transaction: the worker's own reaper, which runs when a lease expires, never
        # sees the expired lease and cannot take the job back first.
        with db.transaction():
            db.execute("update pyjobq.job set lease_until = now() - interval '1 second'")
            assert len(JobQueue(db).reap()) == 1
        finish.set()
        wait_for(lambda: worker.metrics.lease_lost == 1, "the loss to be noticed")
        metrics = r.stop()
    assert metrics.completed == 0
    row = db.execute("select status, result from pyjobq.job_all where job_id = %s", (job_id,))
    assert row.fetchone() == (1, None)


def test_heartbeat_renews_leases_of_running_jobs(dsn: str, db: Conn) -> None:
    release = threading.Event()

    def slow(job: ClaimedJob) -> None:
        release.wait(30)

    JobQueue(db).enqueue(JobType.SEARCH)
    worker = Worker(dsn, {JobType.SEARCH: slow}, lease_seconds=1)
    with running(worker) as r:
        wait_for(lambda: worker.metrics.renewed >= 2, "two renewals")
        release.set()
        wait_for(lambda: statuses(db) == {3: 1}, "the job DONE")
        metrics = r.stop()
    assert metrics.lease_lost == 0
    assert metrics.completed == 1


def test_notify_wakes_an_idle_worker_without_polling(dsn: str, db: Conn) -> None:
    worker = Worker(dsn, {JobType.SEARCH: ok}, poll_interval=3600)
    with running(worker) as r:
        wait_for(lambda: worker.asleep and asleep(db), "an idle, listening worker, asleep")
        claims = worker.metrics.claims
        started = time.monotonic()
        JobQueue(db).enqueue(JobType.SEARCH, {"n": 1})
        wait_for(lambda: statuses(db) == {3: 1}, "the job DONE (only a NOTIFY can wake it)")
        print(f"enqueue to DONE via NOTIFY: {(time.monotonic() - started) * 1000:.1f} ms")
        metrics = r.stop()
    assert metrics.claims == claims + 1


def test_polling_picks_up_jobs_with_listen_off(dsn: str, db: Conn) -> None:
    worker = Worker(dsn, {JobType.SEARCH: ok}, listen=False, poll_interval=0.05)
    with running(worker) as r:
        JobQueue(db).enqueue(JobType.SEARCH, {"n": 1})
        wait_for(lambda: statuses(db) == {3: 1}, "the job DONE by polling")
        assert not asleep(db)
        others = "select count(*) from pg_stat_activity where pid <> pg_backend_pid()"
        assert one(db, others + " and query ~ 'listen|job_worker'") == 0
        r.stop()


def test_worker_survives_its_connections_being_terminated(dsn: str, db: Conn) -> None:
    def medium(job: ClaimedJob) -> None:
        time.sleep(0.002)

    q = JobQueue(db)
    q.enqueue_many(JobType.SEARCH, [{"n": i} for i in range(2000)])
    worker = Worker(dsn, {JobType.SEARCH: medium}, concurrency=8, poll_interval=0.2)
    with running(worker) as r:
        wait_for(lambda: statuses(db).get(3, 0) >= 300, "some progress")
        killed = db.execute(
            "select count(pg_terminate_backend(pid)) from pg_stat_activity "
            "where datname = current_database() and pid <> pg_backend_pid()"
        ).fetchone()
        assert killed is not None
        assert killed[0] >= 2
        wait_for(lambda: statuses(db) == {3: 2000}, "every job DONE after reconnecting")
        metrics = r.stop()
    assert metrics.db_errors >= 1
    # Every job DONE once (above); the worker counts each completion it saw once. A completion
    # whose reply the terminated connection lost was retried and counted then, or, if it had
    # committed, reported completed by the retry (safe after a lost reply): never twice.
    assert metrics.completed <= 2000


def test_handlers_for_an_unregistered_type_stop_the_worker_before_it_claims(dsn: str) -> None:
    worker = Worker(dsn, {JobType.SEARCH: ok, 999: ok})
    with pytest.raises(ValueError, match=r"not registered: \[999\]"):
        asyncio.run(worker.serve())


@pytest.mark.parametrize("timeout", [None, 30.0])
def test_a_cancelled_job_stops_its_handler_and_the_worker_carries_on(
    dsn: str, db: Conn, timeout: float | None
) -> None:
    started: dict[str, threading.Event] = {"sync": threading.Event(), "async": threading.Event()}
    seen: list[str] = []

    def sync_handler(job: ClaimedJob) -> dict[str, Any]:
        if job.payload.get("long"):
            started["sync"].set()
            deadline = time.monotonic() + 30
            while not is_cancelled(job) and time.monotonic() < deadline:
                time.sleep(0.01)  # a step of the job's work, then a look at the flag
            seen.append(f"sync saw cancelled={is_cancelled(job)}")
        return {"n": job.payload["n"]}

    async def async_handler(job: ClaimedJob) -> dict[str, Any]:
        if job.payload.get("long"):
            started["async"].set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                seen.append("async cancelled")
                raise
        return {"n": job.payload["n"]}

    q = JobQueue(db)
    long_sync = q.enqueue(JobType.SEARCH, {"n": -1, "long": True}).job_id
    long_async = q.enqueue(JobType.OUTBOX, {"n": -2, "long": True}).job_id
    handlers: dict[int, Handler] = {JobType.SEARCH: sync_handler, JobType.OUTBOX: async_handler}
    # A lease of 3 s: the heartbeat that carries the news comes within a second.
    worker = Worker(dsn, handlers, concurrency=4, lease_seconds=3, job_timeout=timeout)
    with running(worker) as r:
        wait_for(lambda: started["sync"].is_set() and started["async"].is_set(), "both running")
        outcomes = {c.job_id: c.outcome for c in q.cancel([long_sync, long_async])}
        assert outcomes == {long_sync: "cancelled_running", long_async: "cancelled_running"}
        wait_for(lambda: worker.metrics.cancelled == 2, "the worker to stop both handlers")
        # It carries on: later jobs run on the same runners.
        q.enqueue_many(JobType.SEARCH, [{"n": i} for i in range(5)])
        q.enqueue_many(JobType.OUTBOX, [{"n": i} for i in range(5)])
        wait_for(lambda: statuses(db) == {3: 10, 5: 2}, "the later jobs DONE")
        metrics = r.stop()
    assert sorted(seen) == ["async cancelled", "sync saw cancelled=True"]
    assert (metrics.cancelled, metrics.completed, metrics.lease_lost) == (2, 10, 0)
    rows = db.execute(
        "select status, result from pyjobq.job_all where job_id = any (%s)",
        ([long_sync, long_async],),
    ).fetchall()
    assert rows == [(5, None), (5, None)]  # CANCELLED, and nothing the attempts returned


def test_run_works_off_the_main_thread_and_stop_comes_from_any_thread(dsn: str, db: Conn) -> None:
    """A program that runs the worker in a thread of its own: no signal handlers there, and
    stop() from the thread that started it drains the worker."""
    worker = Worker(dsn, {JobType.SEARCH: ok}, concurrency=2)
    outcome: list[Any] = []

    def main() -> None:
        try:
            outcome.append(worker.run())
        except BaseException as e:  # surfaced below
            outcome.append(e)

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    wait_for(lambda: worker.ready.is_set() or outcome, "the worker to start in its thread")
    JobQueue(db).enqueue_many(JobType.SEARCH, [{"n": i} for i in range(20)])
    wait_for(lambda: statuses(db) == {3: 20}, "every job DONE")
    worker.stop()
    thread.join(60)
    assert not thread.is_alive(), "the worker did not stop"
    (metrics,) = outcome
    assert not isinstance(metrics, BaseException), metrics
    assert metrics.completed == 20


def test_a_job_given_back_at_shutdown_is_never_started(dsn: str, db: Conn) -> None:
    """The drain gives the unstarted jobs back while the one runner is still busy. A runner that
    frees up while that release is on its way must find none of them: a job given back and run
    too would run twice."""
    JobQueue(db).enqueue_many(JobType.SEARCH, [{"n": n} for n in range(12)])
    holding, go_on = threading.Event(), threading.Event()
    started: list[int] = []

    def handler(job: ClaimedJob) -> None:
        started.append(job.payload["n"])
        if len(started) == 1:
            holding.set()
            go_on.wait(60)

    worker = Worker(dsn, {JobType.SEARCH: handler}, concurrency=1, prefetch=4)
    state = worker._state
    with running(worker) as r, psycopg.connect(dsn) as locker:
        wait_for(holding.is_set, "the first job to hold the one runner")
        wait_for(lambda: len(state.buffer) == 4, "four jobs waiting claimed")
        # Hold one of them locked, so that the release waits while the runner frees up.
        locker.execute("select 1 from pyjobq.job where job_id = %s for update",
                       (state.buffer[-1].job.job_id,))  # fmt: skip
        r.worker.stop()
        waiting = (
            "select count(*) from pg_stat_activity"
            " where wait_event_type = 'Lock' and query like '%%job_release_many%%'"
        )
        wait_for(lambda: db.execute(waiting).fetchone() == (1,), "the release to wait")
        go_on.set()
        wait_for(lambda: len(started) > 1 or not state.running, "the runner to free up")
        locker.commit()
        metrics = r.stop()
    assert started == [0]
    assert (metrics.completed, metrics.released, metrics.lease_lost) == (1, 4, 0)
    assert statuses(db) == {3: 1, 1: 11}


def test_a_worker_ticks_the_schedules_and_runs_what_they_fire(dsn: str, db: Conn) -> None:
    """The worker's clock stands a second after a tick that no one has fired: its ticker fires
    it, once, and the job runs; the next tick a minute away, twenty polls later it has ticked
    no more."""
    start = FROZEN
    freeze(db, start)
    JobQueue(db).schedule_set("minutely", "* * * * *", JobType.SEARCH, {"n": 1})
    hooks = Statements()
    worker = Worker(
        frozen_dsn(dsn, start + timedelta(seconds=61)),
        {JobType.SEARCH: ok},
        hooks=hooks,
        poll_interval=0.05,
        schedule_interval=0.1,
    )
    with running(worker) as r:
        wait_for(lambda: statuses(db) == {3: 1}, "the scheduled job DONE")
        polls = hooks.sent["claim"]
        wait_for(lambda: hooks.sent["claim"] >= polls + 20, "twenty more polls")
        metrics = r.stop()
    assert metrics.scheduled == 1
    assert hooks.sent["schedule_tick"] == 1
    assert statuses(db) == {3: 1}
    (schedule,) = JobQueue(db).schedules()
    assert (schedule.fired, schedule.last_fire_at) == (1, start + timedelta(seconds=60))


def test_an_idle_worker_sends_its_claims_and_reaps_when_a_lease_expires(dsn: str, db: Conn) -> None:
    """No schedule and no job RUNNING: over twenty polls an idle worker sends its claims and
    nothing else (job_next_chores, read in each claim, says there is nothing to tick or reap).
    Then another holder's lease of a second expires: the worker reaps it, once it has."""
    hooks = Statements()
    worker = Worker(
        dsn,
        {JobType.SEARCH: ok},
        hooks=hooks,
        poll_interval=0.05,
        reap_interval=0.1,
        schedule_interval=0.1,
    )
    with running(worker) as r:
        wait_for(lambda: hooks.sent.get("claim", 0) >= 20, "twenty polls")
        assert set(hooks.sent) == {"claim"}
        q = JobQueue(db)
        q.enqueue(JobType.OUTBOX, {})
        (held,) = q.claim("other", 1, lease_seconds=1, job_types=[JobType.OUTBOX])
        wait_for(lambda: "reap" in hooks.sent, "the expired lease reaped")
        r.stop()
    assert db.execute("select clock_timestamp() > %s", (held.lease_until,)).fetchone() == (True,)
    assert statuses(db) == {1: 1}
    assert set(hooks.sent) == {"claim", "reap"}


def test_a_sleeping_worker_woken_for_a_job_due_now_claims_without_next_due(
    dsn: str, db: Conn
) -> None:
    """Asleep, the worker knows what is to come later: the claim that put it to sleep read
    job_next_due, and a job scheduled since is announced with its time. So a NOTIFY of a job due
    now wakes a claim of job_claim alone (claim_announced). A job announced for later wakes a
    claim that reads job_next_due again, and starts when due, long before the poll."""
    hooks = Statements()
    worker = Worker(dsn, {JobType.SEARCH: ok}, hooks=hooks, poll_interval=3600)
    q = JobQueue(db)
    with running(worker) as r:
        wait_for(lambda: worker.asleep, "the worker asleep")
        q.enqueue(JobType.SEARCH, {"n": 1})
        wait_for(lambda: statuses(db) == {3: 1}, "the job due now DONE")
        wait_for(lambda: worker.asleep, "the worker asleep again")
        assert hooks.sent.get("claim_announced") == 1
        claims = hooks.sent["claim"]
        due = one(db, "select clock_timestamp() + interval '0.5 seconds'")
        q.enqueue(JobType.SEARCH, {"n": 2}, run_after=due)
        wait_for(lambda: statuses(db) == {3: 2}, "the job due later DONE")
        r.stop()
    assert hooks.sent["claim"] >= claims + 2  # woken by its announcement, then when due
    assert hooks.sent.get("claim_announced") == 1
    started = one(db, "select run_started_at from pyjobq.job_all where payload = '{\"n\": 2}'")
    assert started >= due


def test_a_worker_woken_by_a_steady_trickle_still_reads_its_chores_and_reaps(
    dsn: str, db: Conn
) -> None:
    """Jobs due now arrive faster than the poll, so the worker never sleeps a whole poll and
    most of its claims are claim_announced, which read no chores. Still it reads them at least
    once per poll interval, as an idle worker would: another holder's lease that expires
    meanwhile is reaped."""
    hooks = Statements()
    worker = Worker(
        dsn,
        {JobType.SEARCH: ok},
        hooks=hooks,
        poll_interval=0.3,
        reap_interval=0.1,
        schedule_interval=0.1,
    )
    q = JobQueue(db)
    stop = threading.Event()

    def trickle() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            producer = JobQueue(conn)
            n = 0
            while not stop.wait(0.05):
                producer.enqueue(JobType.SEARCH, {"n": n})
                n += 1

    with running(worker) as r:
        wait_for(lambda: worker.asleep, "the worker asleep")
        producer = threading.Thread(target=trickle, daemon=True)
        producer.start()
        try:
            wait_for(lambda: hooks.sent.get("claim_announced", 0) >= 5, "announced claims")
            q.enqueue(JobType.OUTBOX, {})
            (held,) = q.claim("other", 1, lease_seconds=1, job_types=[JobType.OUTBOX])
            wait_for(lambda: "reap" in hooks.sent, "the expired lease reaped")
        finally:
            stop.set()
            producer.join(PATIENCE)
        r.stop()
    assert db.execute("select clock_timestamp() > %s", (held.lease_until,)).fetchone() == (True,)
    assert one(db, "select status from pyjobq.job_all where job_id = %s", (held.job_id,)) == 1


def test_finished_jobs_waiting_unsent_stay_bounded_whatever_the_worker_holds(
    dsn: str, db: Conn
) -> None:
    """Completions cannot be sent (another session locks the history): the runners start
    no more jobs once MAX_FLUSHES + 1 flushes' worth of finished jobs wait unsent, however many
    the worker holds prefetched. Those, and the jobs running, are all that a SIGKILL could make
    run again. Once the lock goes, every job is completed."""
    started: list[Any] = []

    class Starts(WorkerHooks):
        def on_job_start(self, job: ClaimedJob) -> None:
            started.append(job.job_id)

    q = JobQueue(db)
    q.enqueue_many(JobType.SEARCH, [{"n": i} for i in range(300)])
    concurrency, flush_batch = 4, 10
    worker = Worker(
        dsn,
        {JobType.SEARCH: ok},
        hooks=Starts(),
        concurrency=concurrency,
        prefetch=200,
        flush_batch=flush_batch,
    )
    bound = (MAX_FLUSHES + 1) * flush_batch + concurrency
    with psycopg.connect(dsn) as blocker:
        blocker.execute("lock table pyjobq.job_history in access exclusive mode")
        with running(worker) as r:
            wait_for(
                lambda: worker.metrics.held_back >= concurrency,
                "every runner held back by unsent completions",
            )
            assert len(started) <= bound
            blocker.rollback()
            wait_for(lambda: statuses(db) == {3: 300}, "every job DONE")
            metrics = r.stop()
    assert metrics.completed == 300


def test_a_worker_not_allowed_to_tick_says_so_once_and_works_on(
    dsn: str, db: Conn, login_role: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pyjobq.worker")
    db.execute("revoke execute on function pyjobq.job_schedule_tick() from pyjobq_worker")
    # A tick due since a minute ago: the worker tries to fire it.
    JobQueue(db).schedule_set(
        "minutely", "* * * * *", JobType.OUTBOX, start_at=datetime.now(UTC) - timedelta(minutes=2)
    )
    JobQueue(db).enqueue_many(JobType.SEARCH, [{"n": n} for n in range(5)])
    worker = Worker(login_role("pyjobq_worker"), {JobType.SEARCH: ok}, schedule_interval=0.1)

    def refused() -> list[str]:
        return [m for m in caplog.messages if m.startswith("schedules not ticked")]

    with running(worker) as r:
        wait_for(refused, "the refusal logged")
        # After it, the worker goes on with its jobs.
        JobQueue(db).enqueue_many(JobType.SEARCH, [{"n": n} for n in range(5)])
        wait_for(lambda: statuses(db) == {3: 10}, "every job DONE")
        r.stop()
    assert len(refused()) == 1, refused()


def test_a_rate_limited_worker_sleeps_until_the_window_opens(dsn: str, db: Conn) -> None:
    """Five claims a second: a claim fills the window and leaves due jobs behind, and no
    NOTIFY says when the window opens. The worker reads when from job_next_due after its claim
    and sleeps until then, so 15 jobs drain in three windows, well before the poll interval (an
    hour here) would have let them, and never more than five start in any second."""
    q = JobQueue(db)
    q.type_set_limits(JobType.SEARCH, rate_limit=5, rate_period=timedelta(seconds=1))
    q.enqueue_many(JobType.SEARCH, [{} for _ in range(15)])
    worker = Worker(dsn, {JobType.SEARCH: lambda job: None}, concurrency=4, poll_interval=3600)
    with running(worker) as r:
        wait_for(lambda: statuses(db) == {3: 15}, "every job DONE")
        r.stop()
    starts = [row[0] for row in db.execute("select run_started_at from pyjobq.job_all order by 1")]
    assert all(b - a >= timedelta(seconds=1) for a, b in zip(starts, starts[5:], strict=False))


def test_a_worker_claims_again_as_its_jobs_free_their_keys(dsn: str, db: Conn) -> None:
    """With one RUNNING job per key allowed, a claim comes back short while jobs are due, and no
    NOTIFY says when a key has room again: the worker's own completions wake its claimer. Its
    handlers never see two jobs of a key at once, and 60 jobs of 3 keys drain well before the
    poll interval (an hour here) would have let them."""
    q = JobQueue(db)
    q.type_set_limits(JobType.SEARCH, None, 1)
    keys = [f"tenant-{n % 3}" for n in range(60)]
    q.enqueue_many(JobType.SEARCH, [{} for _ in keys], concurrency_keys=keys)
    by_key: dict[str, int] = {}
    most = 0
    lock = threading.Lock()

    def handler(job: ClaimedJob) -> None:
        nonlocal most
        key = str(db_key(job))
        with lock:
            by_key[key] = by_key.get(key, 0) + 1
            most = max(most, by_key[key])
        time.sleep(0.001)  # widens each run, so that an overlap would be seen
        with lock:
            by_key[key] -= 1

    def db_key(job: ClaimedJob) -> object:
        with psycopg.connect(dsn) as c:
            row = c.execute(
                "select concurrency_key from pyjobq.job_all where job_id = %s", (job.job_id,)
            ).fetchone()
        assert row is not None
        return row[0]

    worker = Worker(dsn, {JobType.SEARCH: handler}, concurrency=4, poll_interval=3600)
    with running(worker) as r:
        wait_for(lambda: statuses(db) == {3: 60}, "every job DONE")
        r.stop()
    assert most == 1
