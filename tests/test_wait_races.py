"""Waits raced against signals, timeouts, cancels, redrives and holders that die, on real
parallel connections: each wait resumes exactly once per run that ends the job, no signal is
lost or delivered twice, and no job is left waiting past its timeout."""

from __future__ import annotations

import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest

from pyjobq import JobQueue, JobStateError
from tests.sqlhelp import one
from tests.workerhelp import spawn_worker, wait_until_sessions_end

Conn = psycopg.Connection[Any]

JOBS = 150
PATIENCE = 60.0


@pytest.mark.slow
def test_waits_signals_timeouts_cancels_redrives_and_deaths_race(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    q = JobQueue(conn)
    ids = [e.job_id for e in q.enqueue_many(1, [{}] * JOBS, max_attempts=1000)]
    rng = random.Random(53)
    signalled = set(rng.sample(ids, JOBS * 2 // 3))  # the rest can only time out
    doomed = set(rng.sample(ids, JOBS // 10))  # cancelled at some point
    lock = threading.Lock()
    # What the test saw, in the order it saw it (time.monotonic() after each call returned):
    sent: dict[UUID, tuple[float, Any]] = {}  # a signal job_signal accepted
    refused: Counter[UUID] = Counter()  # job_signal said the job already had it
    # (job, outcome, payload, wait started, how the run ended: "done", or "dead" and redriven)
    resumed: list[tuple[UUID, str, Any, float, str]] = []
    deadline = time.monotonic() + PATIENCE
    errors: list[BaseException] = []

    def remaining(c: Conn) -> int:
        """The jobs yet to end for good: PENDING, RUNNING, or DEAD and due to be redriven."""
        return int(one(c, "select count(*) from pyjobq.job_all where status not in (3, 5)"))

    def holder(n: int) -> None:
        c = make_conn()
        h = JobQueue(c)
        while time.monotonic() < deadline and remaining(c):
            dies = rng.random() < 0.1
            worker = f"dead-{n}" if dies else f"w{n}"
            claimed = h.claim(worker, limit=1)
            if not claimed or dies:  # a dead holder leaves its job held
                time.sleep(0.005)
                continue
            (job,) = claimed
            started = time.monotonic()
            try:
                # The doomed wait longer, so that their cancels race their waits.
                timeout = rng.uniform(0.5, 1.5) if job.job_id in doomed else rng.uniform(0.05, 0.4)
                got = h.event_wait(job.job_id, worker, job.attempt, "go", timeout, job.lease_token)
                if got.outcome == "waiting":
                    continue
                if rng.random() < 0.15:  # DEAD: the redriver brings it back
                    h.fail(job.job_id, worker, job.attempt, "no", None, True, job.lease_token)
                    ending = "dead"
                else:
                    result = {"outcome": got.outcome}
                    h.complete(job.job_id, worker, job.attempt, result, job.lease_token)
                    ending = "done"
            except JobStateError:  # cancelled, or reaped, meanwhile
                continue
            with lock:
                resumed.append((job.job_id, got.outcome, got.payload, started, ending))

    def signaller() -> None:
        c = make_conn()
        s = JobQueue(c)
        twice = rng.sample(sorted(signalled), 20)  # twenty of them sent twice
        for job_id in sorted([*signalled, *twice], key=lambda _: rng.random()):
            time.sleep(rng.uniform(0, 0.01))
            payload = uuid4().hex
            try:
                accepted = s.signal(job_id, "go", payload)
            except JobStateError:  # ended: cancelled or done
                continue
            with lock:
                if accepted:
                    assert job_id not in sent, "a second signal accepted"
                    sent[job_id] = (time.monotonic(), payload)
                else:
                    refused[job_id] += 1

    def canceller() -> None:
        c = make_conn()
        for job_id in doomed:
            time.sleep(rng.uniform(0, 0.05))
            JobQueue(c).cancel([job_id])

    def reaper() -> None:
        """The dead holders' leases run out now; the reaper retries their jobs, due at once."""
        c = make_conn()
        while time.monotonic() < deadline and remaining(c):
            c.execute(
                "update pyjobq.job set lease_until = now() - interval '1 second'"
                " where status = 2 and worker_id like 'dead-%'"
            )
            reaped = [r[0] for r in c.execute("select job_id from pyjobq.job_reap()")]
            c.execute("update pyjobq.job set run_after = now() where job_id = any(%s)", (reaped,))
            time.sleep(0.01)

    def redriver() -> None:
        """DEAD jobs back to PENDING: their next run finds the wait as it ended."""
        c = make_conn()
        while time.monotonic() < deadline and remaining(c):
            dead = [r[0] for r in c.execute("select job_id from pyjobq.job_all where status = 4")]
            if dead:  # the DEAD ones only: a redrive of every ended job would undo the cancels
                JobQueue(c).redrive(dead)
            time.sleep(0.02)

    def guarded(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as e:
                errors.append(e)

        return run

    targets: list[Callable[[], None]] = [partial(holder, n) for n in range(4)]
    targets += [signaller, canceller, reaper, redriver]
    threads = [threading.Thread(target=guarded(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # Nothing left waiting: every job ended, DONE or CANCELLED.
    ended = dict(conn.execute("select job_id, status from pyjobq.job_all").fetchall())
    assert remaining(conn) == 0
    assert set(ended.values()) <= {3, 5}
    assert {j for j, s in ended.items() if s == 5} <= doomed
    # Each wait resumed exactly once in the run that completed its job, and only for a job that
    # ended DONE; a run that made it DEAD resumed it too, and its redriven job ran again.
    resumes = Counter(r[0] for r in resumed if r[4] == "done")
    assert resumes == Counter({j: 1 for j, s in ended.items() if s == 3})
    redriven = {r[0] for r in resumed if r[4] == "dead"}
    assert redriven, "no run made its job DEAD: nothing was redriven"
    for job_id, outcome, payload, started, _ in resumed:
        if outcome == "signalled":
            # The payload of the one signal accepted, never another's.
            assert sent[job_id][1] == payload
        else:
            # Timed out: no signal had been accepted before this wait started.
            assert outcome == "timed_out"
            assert job_id not in sent or sent[job_id][0] > started, "a signal was lost"
    # A signal accepted once, refused after.
    assert set(refused) <= set(sent)
    stored = dict(
        conn.execute("select job_id, payload from pyjobq.job_event where signalled_at is not null")
    )
    assert stored == {j: p for j, (_, p) in sent.items()}
    kinds = Counter(r[1] for r in resumed if r[4] == "done")
    print(
        f"\n{JOBS} jobs: {kinds['signalled']} resumed by their signal, {kinds['timed_out']} timed"
        f" out, {sum(1 for s in ended.values() if s == 5)} cancelled,"
        f" {len(redriven)} made DEAD after their wait and redriven; {len(sent)} signals"
        f" accepted, {sum(refused.values())} refused as second; each wait resumed once"
    )


WAITERS = 80


@pytest.mark.slow
def test_waits_race_signals_and_cancels_while_their_workers_are_killed(
    dsn: str, conn: Conn, make_conn: Callable[[], Conn], tmp_path: Path
) -> None:
    """Real worker processes run jobs that wait for their event ``go`` while signals and
    cancels arrive and a worker is SIGKILLed every few hundred milliseconds, mid-job or not (a
    new one takes its place; the others reap its one-second leases). Every job ends DONE or
    CANCELLED; a DONE job's wait ended signalled with the one signal accepted for it, or timed
    out before any signal came; each signal accepted is stored once."""
    q = JobQueue(conn)
    q.type_register(4, "AWAIT_GO")
    rng = random.Random(54)
    payloads = [{"timeout": round(rng.uniform(0.2, 1.5), 3)} for _ in range(WAITERS)]
    ids = [e.job_id for e in q.enqueue_many(4, payloads, max_attempts=1000)]
    signalled = set(rng.sample(ids, WAITERS * 2 // 3))
    doomed = set(rng.sample(ids, WAITERS // 10))
    sent: dict[UUID, Any] = {}
    errors: list[BaseException] = []
    deadline = time.monotonic() + 120

    def signaller() -> None:
        s = JobQueue(make_conn())
        for job_id in sorted(signalled, key=lambda _: rng.random()):
            time.sleep(rng.uniform(0, 0.04))
            payload = uuid4().hex
            try:
                if s.signal(job_id, "go", payload):
                    sent[job_id] = payload
            except JobStateError:  # ended: cancelled, or done after its timeout
                continue

    def canceller() -> None:
        c = JobQueue(make_conn())
        for job_id in doomed:
            time.sleep(rng.uniform(0, 0.2))
            c.cancel([job_id])

    def guarded(target: Callable[[], None]) -> threading.Thread:
        def run() -> None:
            try:
                target()
            except BaseException as e:
                errors.append(e)

        return threading.Thread(target=run)

    args = [
        "--concurrency",
        "4",
        "--lease",
        "1",
        "--reap-interval",
        "0.2",
        "--poll-interval",
        "0.1",
    ]
    workers = {n: spawn_worker(dsn, tmp_path, f"w{n}", *args, handlers="WAIT_HANDLERS")
               for n in range(2)}  # fmt: skip
    threads = [guarded(signaller), guarded(canceller)]
    for t in threads:
        t.start()
    kills = 0
    try:
        while one(conn, "select count(*) from pyjobq.job where job_type = 4"):
            assert time.monotonic() < deadline, "jobs left unfinished"
            time.sleep(rng.uniform(0.2, 0.6))
            n = rng.choice(sorted(workers))
            workers[n].send_signal(signal.SIGKILL)
            assert workers[n].wait(30) == -signal.SIGKILL
            kills += 1
            fresh = len(workers) + kills
            workers[fresh] = spawn_worker(
                dsn, tmp_path, f"w{fresh}", *args, handlers="WAIT_HANDLERS"
            )
            del workers[n]
    finally:
        for w in workers.values():
            w.send_signal(signal.SIGTERM)
        for w in workers.values():
            w.wait(30)
        for t in threads:
            t.join()
    assert not errors, errors
    for n in range(len(workers) + kills):
        wait_until_sessions_end(conn, f"w{n}")
    ended = dict(
        conn.execute("select job_id, status from pyjobq.job_all where job_type = 4").fetchall()
    )
    assert set(ended.values()) <= {3, 5}
    assert {j for j, s in ended.items() if s == 5} <= doomed
    events = {
        row[0]: row[1:]
        for row in conn.execute(
            "select job_id, wait_until, signalled_at, payload from pyjobq.job_event"
        )
    }
    # Each signal accepted is stored once, with its payload.
    assert {j: e[2] for j, e in events.items() if e[1] is not None} == sent
    results = dict(
        conn.execute(
            "select job_id, result from pyjobq.job_all where job_type = 4 and status = 3"
        ).fetchall()
    )
    for job_id, result in results.items():
        wait_until, signalled_at, payload = events[job_id]
        if result["outcome"] == "signalled":
            assert result["payload"] == payload == sent[job_id]
        else:
            # Timed out: no signal had come before the wait's timeout.
            assert result == {"outcome": "timed_out"}
            assert signalled_at is None or signalled_at >= wait_until, "a signal was lost"
    expired = one(
        conn,
        "select count(*) from pyjobq.job_attempt a join pyjobq.job_all j using (job_id)"
        " where j.job_type = 4 and a.outcome = 'expired'",
    )
    assert kills >= 5
    assert expired > 0, "no kill landed on a held job"
    outcomes = Counter(r["outcome"] for r in results.values())
    print(
        f"\n{WAITERS} waiting jobs, {kills} worker processes SIGKILLed, {expired} attempts taken"
        f" back from them by a reaper: {outcomes['signalled']} resumed by their signal,"
        f" {outcomes['timed_out']} timed out, {len(ended) - len(results)} cancelled;"
        f" {len(sent)} signals accepted, each stored once, none lost"
    )
