"""Claims, completions and reaps from real parallel connections, counted afterwards."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from pyjobq import JobQueue, LeaseLost, LockTimeout
from tests.sqlhelp import FROZEN, freeze, one, run_threads, wait_for_lock_wait

Conn = psycopg.Connection[Any]

JOBS = 2400
WORKERS = 8


def test_eight_workers_claim_every_job_exactly_once(conn: Conn, make_conn: Any) -> None:
    conn.execute(
        "select count(*) from pyjobq.job_enqueue_many(1,"
        " array(select jsonb_build_object('i', g) from generate_series(1, %s) g))",
        (JOBS,),
    )
    claimed: list[Any] = []
    completed: list[Any] = []
    over_limit: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(WORKERS)

    def worker(n: int) -> Callable[[], None]:
        c = make_conn()
        name = f"w{n}"
        limit = 5 + n * 3  # 5..26: batches of several sizes at once

        def run() -> None:
            barrier.wait()
            while True:
                rows = c.execute(
                    "select job_id, attempt from pyjobq.job_claim(%s, %s)", (name, limit)
                ).fetchall()
                if not rows:
                    return
                if len(rows) > limit:
                    over_limit.append(len(rows))
                done = c.execute(
                    "select job_id from pyjobq.job_complete_many(%s, %s, %s) where completed",
                    (name, [r[0] for r in rows], [r[1] for r in rows]),
                ).fetchall()
                with lock:
                    claimed.extend(r[0] for r in rows)
                    completed.extend(d[0] for d in done)

        return run

    run_threads([worker(n) for n in range(WORKERS)])
    assert over_limit == []
    assert len(claimed) == JOBS
    assert len(set(claimed)) == JOBS
    assert Counter(completed) == Counter(claimed)
    assert conn.execute(
        "select count(*), min(attempts), max(attempts) from pyjobq.job_all where status = 3"
    ).fetchone() == (JOBS, 1, 1)


def test_reapers_racing_completers_never_both_win(conn: Conn, make_conn: Any) -> None:
    jobs = 600
    freeze(conn, FROZEN)
    conn.execute(
        "select count(*) from pyjobq.job_enqueue_many(1,"
        " array(select '{}'::jsonb from generate_series(1, %s)))",
        (jobs,),
    )
    held = conn.execute("select job_id from pyjobq.job_claim('w1', 1000, 60)").fetchall()
    assert len(held) == jobs
    expired = str(FROZEN + timedelta(seconds=61))
    completed: list[Any] = []
    reaped: list[Any] = []
    lock = threading.Lock()

    def completer(part: list[Any]) -> Callable[[], None]:
        c = make_conn()
        freeze(c, expired)

        def run() -> None:
            for (job_id,) in part:
                try:
                    JobQueue(c).complete(job_id, "w1", 1)
                except LeaseLost:
                    continue
                else:
                    with lock:
                        completed.append(job_id)

        return run

    def reaper() -> Callable[[], None]:
        c = make_conn()
        freeze(c, expired)

        def run() -> None:
            while True:
                rows = c.execute("select job_id from pyjobq.job_reap(7)").fetchall()
                with lock:
                    reaped.extend(r[0] for r in rows)
                if not rows and c.execute(
                    "select count(*) from pyjobq.job_all where status = 2"
                ).fetchone() == (0,):
                    return

        return run

    run_threads([completer(held[0::2]), completer(held[1::2][::-1]), reaper(), reaper(), reaper()])
    assert not set(completed) & set(reaped)
    assert len(completed) + len(reaped) == jobs
    assert len(set(reaped)) == len(reaped)
    counts = dict(
        conn.execute("select status, count(*) from pyjobq.job_all group by status").fetchall()
    )
    assert counts == {k: v for k, v in {3: len(completed), 1: len(reaped)}.items() if v}


def test_reaper_waits_for_nobody_and_a_completion_that_commits_first_wins(
    conn: Conn, make_conn: Any
) -> None:
    freeze(conn, FROZEN)
    job_id = one(conn, "select job_id from pyjobq.job_enqueue(1, '{}')")
    conn.execute("select pyjobq.job_claim('w1', 1, 60)")
    completer, reaper = make_conn(), make_conn()
    for c in (completer, reaper):
        freeze(c, FROZEN + timedelta(seconds=61))
    with completer.transaction():
        completer.execute("select pyjobq.job_complete(%s, 'w1', 1)", (job_id,))
        # The row is locked by the uncommitted completion: the reaper skips it at once.
        assert reaper.execute("select * from pyjobq.job_reap()").fetchall() == []
    assert reaper.execute("select * from pyjobq.job_reap()").fetchall() == []
    assert conn.execute("select status from pyjobq.job_all").fetchone() == (3,)


def test_a_completion_that_waited_on_a_reap_reports_lease_lost(conn: Conn, make_conn: Any) -> None:
    freeze(conn, FROZEN)
    job_id = one(conn, "select job_id from pyjobq.job_enqueue(1, '{}')")
    conn.execute("select pyjobq.job_claim('w1', 1, 60)")
    completer, reaper, monitor = make_conn(), make_conn(), make_conn()
    for c in (completer, reaper):
        freeze(c, FROZEN + timedelta(seconds=61))
    outcome: list[str | None] = []

    def complete() -> None:
        try:
            completer.execute("select pyjobq.job_complete(%s, 'w1', 1)", (job_id,))
            outcome.append(None)
        except psycopg.Error as e:
            outcome.append(e.sqlstate)

    with reaper.transaction():
        assert len(reaper.execute("select * from pyjobq.job_reap()").fetchall()) == 1
        t = threading.Thread(target=complete)
        t.start()
        wait_for_lock_wait(monitor, completer, "the completion to wait on the reaper's lock")
    t.join()
    assert outcome == ["JQ001"]
    assert conn.execute("select status, attempts from pyjobq.job_all").fetchone() == (1, 1)


@pytest.mark.slow
def test_a_call_that_must_wait_gives_up_after_its_lock_timeout(conn: Conn, make_conn: Any) -> None:
    job_id = one(conn, "select job_id from pyjobq.job_enqueue(1, '{}')")
    conn.execute("select pyjobq.job_claim('w1')")
    holder, waiter = make_conn(), make_conn()
    with holder.transaction():
        holder.execute("select 1 from pyjobq.job where job_id = %s for update", (job_id,))
        with pytest.raises(LockTimeout) as timed_out:
            JobQueue(waiter).complete(job_id, "w1", 1)
    assert timed_out.value.sqlstate == "55P03"
    assert conn.execute("select status from pyjobq.job_all").fetchone() == (2,)
    JobQueue(waiter).complete(job_id, "w1", 1)  # nothing was changed: the holder may finish
