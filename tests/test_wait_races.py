"""Waits raced against signals, timeouts, cancels and holders that die, on real parallel
connections: each wait resumes exactly once, no signal is lost or delivered twice, and no job
is left waiting past its timeout."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest

from pyjobq import JobQueue, JobStateError
from tests.sqlhelp import one

Conn = psycopg.Connection[Any]

JOBS = 150
PATIENCE = 60.0


@pytest.mark.slow
def test_waits_signals_timeouts_cancels_and_deaths_race(
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
    resumed: list[tuple[UUID, str, Any, float]] = []  # (job, outcome, payload, wait started)
    deadline = time.monotonic() + PATIENCE
    errors: list[BaseException] = []

    def remaining(c: Conn) -> int:
        return int(one(c, "select count(*) from pyjobq.job"))

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
                got = h.event_wait(
                    job.job_id, worker, job.attempt, "go", rng.uniform(0.05, 0.4), job.lease_token
                )
                if got.outcome == "waiting":
                    continue
                h.complete(
                    job.job_id, worker, job.attempt, {"outcome": got.outcome}, job.lease_token
                )
            except JobStateError:  # cancelled, or reaped, meanwhile
                continue
            with lock:
                resumed.append((job.job_id, got.outcome, got.payload, started))

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

    def guarded(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as e:
                errors.append(e)

        return run

    targets: list[Callable[[], None]] = [partial(holder, n) for n in range(4)]
    targets += [signaller, canceller, reaper]
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
    # Each wait resumed exactly once, and only for a job that ended DONE.
    resumes = Counter(r[0] for r in resumed)
    assert resumes == Counter({j: 1 for j, s in ended.items() if s == 3})
    for job_id, outcome, payload, started in resumed:
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
    kinds = Counter(r[1] for r in resumed)
    print(
        f"\n{JOBS} jobs: {kinds['signalled']} resumed by their signal, {kinds['timed_out']} timed"
        f" out, {sum(1 for s in ended.values() if s == 5)} cancelled; {len(sent)} signals"
        f" accepted, {sum(refused.values())} refused as second; each wait resumed once"
    )
