"""The claim front: a session resumes after its last claim, yet never skips a job it should take."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg

from tests.sqlhelp import FROZEN, claim, enqueue, freeze, one, one_row

Conn = psycopg.Connection[Any]


def fill(conn: Conn, jobs: int) -> list[Any]:
    """``jobs`` jobs enqueued in one call: they share run_after and differ only in seq."""
    rows = conn.execute(
        "select job_id from pyjobq.job_enqueue_many(1,"
        " array(select '{}'::jsonb from generate_series(1, %s))) order by ord",
        (jobs,),
    ).fetchall()
    return [r[0] for r in rows]


def ids(rows: list[tuple[Any, ...]]) -> list[Any]:
    return [r[0] for r in rows]


def test_claims_resume_in_enqueue_order_and_record_a_front(conn: Conn) -> None:
    jobs = fill(conn, 10)
    assert ids(claim(conn, limit=3)) == jobs[:3]
    assert one(conn, "select current_setting('pyjobq.claim_front', true)")
    assert ids(claim(conn, limit=3)) == jobs[3:6]
    assert ids(claim(conn, limit=10)) == jobs[6:]


def test_a_more_urgent_job_enqueued_after_the_front_is_taken_first(conn: Conn) -> None:
    jobs = fill(conn, 6)
    claim(conn, limit=2)
    urgent = enqueue(conn, 1, "{}", 5)
    assert ids(claim(conn, limit=2)) == [urgent, jobs[2]]


def test_a_released_job_goes_back_before_the_front_and_is_taken_next(conn: Conn) -> None:
    jobs = fill(conn, 6)
    first, _ = claim(conn, limit=2)
    conn.execute("select pyjobq.job_release(%s, 'w1', %s)", first)
    assert ids(claim(conn, limit=2)) == [jobs[0], jobs[2]]


def test_jobs_put_before_the_front_void_it(conn: Conn) -> None:
    freeze(conn, FROZEN)
    jobs = fill(conn, 6)
    claim(conn, limit=2)
    overdue = enqueue(conn, 1, "{}", None, FROZEN - timedelta(hours=1))
    assert ids(claim(conn, limit=2)) == [overdue, jobs[2]]
    (retried, attempt), *_ = claim(conn, limit=1)
    conn.execute("select pyjobq.job_fail(%s, 'w1', %s, 'now', 0)", (retried, attempt))
    assert ids(claim(conn, limit=1)) == [retried]


def test_a_front_is_kept_per_set_of_job_types(conn: Conn) -> None:
    outbox = enqueue(conn, 2, "{}")
    search = fill(conn, 4)
    rows = conn.execute("select job_id from pyjobq.job_claim('w1', 2, null, array[1])").fetchall()
    assert ids(rows) == search[:2]
    rows = conn.execute("select job_id from pyjobq.job_claim('w1', 2, null, array[2])").fetchall()
    assert ids(rows) == [outbox]


def test_jobs_left_behind_by_a_rolled_back_claim_are_taken_when_the_rest_runs_dry(
    conn: Conn, make_conn: Any
) -> None:
    jobs = fill(conn, 10)
    other = make_conn()
    with other.transaction(force_rollback=True):
        assert ids(claim(other, "w2", 3)) == jobs[:3]
        assert ids(claim(conn, limit=3)) == jobs[3:6]  # skips the three rows w2 holds
    # w2 rolled back: jobs[:3] are PENDING again, behind this session's front.
    assert ids(claim(conn, limit=2)) == jobs[6:8]
    # The rest after the front, then the head scan's: returned in claim order all the same.
    assert ids(claim(conn, limit=10)) == jobs[:3] + jobs[8:]
    assert conn.execute("select count(*) from pyjobq.job_all where status = 1").fetchone() == (0,)


def test_a_clock_set_back_voids_the_front_for_good(conn: Conn) -> None:
    freeze(conn, FROZEN + timedelta(hours=1))
    jobs = fill(conn, 4)
    claim(conn, limit=2)
    freeze(conn, FROZEN)
    assert claim(conn, limit=2) == []  # nothing is due yet, and the front is dropped
    assert conn.execute("select current_setting('pyjobq.claim_front')").fetchone() == ("",)
    earlier = enqueue(conn)  # due at FROZEN, so before the old front's run_after
    freeze(conn, FROZEN + timedelta(hours=2))
    assert ids(claim(conn, limit=2)) == [earlier, jobs[2]]


def drain_batches(conn: Conn, batches: int, limit: int = 20, tick: float = 0.0) -> list[Any]:
    """Claim and complete ``batches`` batches of ``limit`` jobs; the ids claimed, in order.

    With ``tick``, the session's frozen clock moves that many seconds before each claim.
    """
    taken: list[Any] = []
    for _ in range(batches):
        if tick:
            now = one(conn, "select pyjobq.clock_now()")
            freeze(conn, now + timedelta(seconds=tick))
        rows = claim(conn, limit=limit)
        conn.execute(
            "select pyjobq.job_complete_many('w1', %s::uuid[], %s::int[])",
            ([r[0] for r in rows], [r[1] for r in rows]),
        )
        taken += ids(rows)
    return taken


def pending(conn: Conn) -> int:
    return int(one(conn, "select count(*) from pyjobq.job_all where status = 1"))


def test_a_late_committing_enqueue_waits_at_most_the_front_lifetime(
    conn: Conn, make_conn: Any
) -> None:
    # The outbox pattern under load: the job's transaction commits after claims passed
    # its position. The clock is frozen and moves 0.1 s per claim, so the claims after
    # the commit span 1.1 s: the front may pass the job for a second, not longer.
    freeze(conn, FROZEN)
    fill(conn, 200)
    producer = make_conn()
    freeze(producer, FROZEN)
    producer.execute("begin")
    late = enqueue(producer, 1, '{"late": true}')
    fill(conn, 40000)
    drain_batches(conn, 30, tick=0.1)
    producer.execute("commit")
    assert late in drain_batches(conn, 11, tick=0.1)
    assert pending(conn) > 39000


def test_jobs_of_a_rolled_back_claim_wait_at_most_the_front_lifetime(
    conn: Conn, make_conn: Any
) -> None:
    freeze(conn, FROZEN)
    jobs = fill(conn, 2000)
    other = make_conn()
    freeze(other, FROZEN)
    with other.transaction(force_rollback=True):
        locked = ids(claim(other, "w2", 20))
        drain_batches(conn, 3, tick=0.1)  # skips the rows w2 holds, and the front passes them
    taken = drain_batches(conn, 11, tick=0.1)
    assert set(locked) <= set(taken)
    assert locked == jobs[:20]
    assert pending(conn) > 1700


def test_the_front_can_be_turned_off_for_a_session(conn: Conn, make_conn: Any) -> None:
    freeze(conn, FROZEN)
    conn.execute("set pyjobq.claim_front_off = on")
    jobs = fill(conn, 100)
    other = make_conn()
    freeze(other, FROZEN)
    with other.transaction(force_rollback=True):
        locked = ids(claim(other, "w2", 5))
        assert ids(claim(conn, limit=5)) == jobs[5:10]
    # No front: the very next claim scans from the head and finds the rolled-back jobs.
    assert ids(claim(conn, limit=5)) == locked


def test_a_setting_that_is_not_a_front_is_ignored_for_any_role(conn: Conn, login_role: Any) -> None:
    # The front is a session setting, so any caller may write anything there. What cannot be
    # read as a live front of this epoch and job types changes nothing: the claim scans from
    # the head, takes the first jobs in order, and raises nothing.
    jobs = fill(conn, 40)
    (epoch,) = one_row(
        conn, "select case when is_called then last_value else 0 end from pyjobq.job_claim_epoch"
    )
    types = "{1,2}"  # every registered type: what a claim without p_job_types serves
    (now_us,) = one_row(conn, "select (extract(epoch from now()) * 1000000)::bigint")
    forged = [
        "garbage",
        "/".join(["x"] * 7),
        f"{epoch}/abc/{types}/0/100/0/0",
        f"{epoch}/{now_us}/{types}/{now_us}/99999/{now_us}/1",  # priority out of range
        f"{epoch}/{now_us}/{types}/{now_us}/100/{'9' * 30}/1",  # run_after beyond bigint
        f"{epoch}/{now_us + 10**15}/{types}/0/100/{now_us}/{10**17}",  # starts in the future
        f"{epoch}/{now_us}/{types}/{now_us}/100/{now_us}/{10**17}/extra",
    ]
    with psycopg.connect(login_role("pyjobq_worker"), autocommit=True) as worker:
        taken: list[Any] = []
        for value in forged:
            worker.execute("select set_config('pyjobq.claim_front', %s, false)", (value,))
            rows = worker.execute(
                "select job_id from pyjobq.job_claim('w1', 2, null, null)"
            ).fetchall()
            taken += ids(rows)
            # Read as no front, and cleared, or replaced by the front this claim wrote.
            (front,) = one_row(worker, "select current_setting('pyjobq.claim_front')")
            assert front != value
            worker.execute("reset pyjobq.claim_front")
    assert taken == jobs[: 2 * len(forged)]
