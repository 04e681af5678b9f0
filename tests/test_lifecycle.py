"""The job lifecycle in SQL: claim, complete, fail, backoff, DEAD, renew, release, reap."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any
from uuid import uuid4

import psycopg
import pytest

from tests.sqlhelp import (
    FROZEN,
    claim,
    enqueue,
    freeze,
    heap_records_of,
    one,
    one_row,
    raises_sqlstate,
    status_of,
    wait_for_lock_wait,
)

Conn = psycopg.Connection[Any]


def test_claim_leases_the_job_with_attempt_as_fencing_token(conn: Conn) -> None:
    freeze(conn, FROZEN)
    job_id = enqueue(conn)
    row = conn.execute(
        "select job_id, attempt, lease_until, max_attempts from pyjobq.job_claim('w1', 10, 30)"
    ).fetchone()
    assert row == (job_id, 1, FROZEN + timedelta(seconds=30), 3)
    status, attempts, worker, _, lease = status_of(conn, job_id)
    assert (status, attempts, worker, lease) == (2, 1, "w1", FROZEN + timedelta(seconds=30))
    assert claim(conn, "w2") == []


def test_claim_order_is_priority_then_due_time_and_skips_future_jobs(conn: Conn) -> None:
    freeze(conn, FROZEN)
    late = enqueue(conn, 1, "{}", 100, FROZEN - timedelta(seconds=1))
    early = enqueue(conn, 1, "{}", 100, FROZEN - timedelta(seconds=5))
    urgent = enqueue(conn, 1, "{}", 5, FROZEN)
    enqueue(conn, 1, "{}", 0, FROZEN + timedelta(seconds=1))
    assert [j for j, _ in claim(conn, limit=10)] == [urgent, early, late]


def test_claim_filters_by_job_type(conn: Conn) -> None:
    outbox = enqueue(conn, 2, "{}")
    enqueue(conn, 1, "{}")
    rows = conn.execute("select job_id from pyjobq.job_claim('w1', 10, null, array[2])").fetchall()
    assert rows == [(outbox,)]


@pytest.mark.parametrize("payload", ["{}", json.dumps({"text": "x" * 300})])
def test_a_claim_keeps_the_new_versions_of_its_jobs_on_their_pages(
    conn: Conn, payload: str
) -> None:
    """A claim writes each job's new version while the old one is still live, so a claim of
    a page's jobs needs room on that page for as many again. Where a new version does not fit,
    PostgreSQL locks the old one in a WAL record of its own and writes the whole new row
    elsewhere. With room for a second version of each row, a claim writes one row lock per
    job, the pick's (FOR UPDATE SKIP LOCKED), whatever the size of its rows."""
    conn.execute("select pyjobq.job_enqueue_many(1, array_fill(%s::jsonb, array[400]))", (payload,))
    conn.execute("vacuum pyjobq.job")
    records = heap_records_of(conn, "select pyjobq.job_claim('w1', 200)")
    kinds = [record.split("+")[0] for record in records]  # UPDATE+INIT: on a new page
    assert kinds.count("UPDATE") == 200
    assert kinds.count("LOCK") == 200


def test_complete_stores_result_and_frees_the_lease(conn: Conn) -> None:
    job_id = enqueue(conn)
    ((_, attempt),) = claim(conn)
    conn.execute("select pyjobq.job_complete(%s, 'w1', %s, '{\"n\": 1}')", (job_id, attempt))
    row = conn.execute(
        "select status, result, lease_until from pyjobq.job_all where job_id = %s", (job_id,)
    ).fetchone()
    assert row == (3, {"n": 1}, None)


def test_double_complete_is_job_already_finished(conn: Conn) -> None:
    job_id = enqueue(conn)
    claim(conn)
    conn.execute("select pyjobq.job_complete(%s, 'w1', 1)", (job_id,))
    with raises_sqlstate("JQ003"):
        conn.execute("select pyjobq.job_complete(%s, 'w1', 1)", (job_id,))
    with raises_sqlstate("JQ003"):
        conn.execute("select pyjobq.job_fail(%s, 'w1', 1, 'late')", (job_id,))


def test_unknown_job_is_job_not_found(conn: Conn) -> None:
    with raises_sqlstate("JQ002"):
        conn.execute("select pyjobq.job_complete(gen_random_uuid(), 'w1', 1)")


def test_fail_backs_off_exponentially_then_dead_letters(conn: Conn) -> None:
    freeze(conn, FROZEN)
    job_id = enqueue(conn)
    now = FROZEN
    for attempt, full_delay in ((1, 2.0), (2, 4.0)):
        assert claim(conn) == [(job_id, attempt)]
        status, run_after = one_row(
            conn, "select * from pyjobq.job_fail(%s, 'w1', %s, 'boom')", (job_id, attempt)
        )
        assert status == 1
        delay = (run_after - now).total_seconds()
        assert 0.75 * full_delay <= delay <= full_delay
        assert claim(conn) == []  # not due during the backoff
        now = run_after
        freeze(conn, now)
    assert claim(conn) == [(job_id, 3)]
    status, _ = one_row(conn, "select * from pyjobq.job_fail(%s, 'w1', 3, 'boom')", (job_id,))
    assert status == 4
    assert conn.execute("select last_error from pyjobq.job_all").fetchone() == ("boom",)
    freeze(conn, now + timedelta(days=1))
    assert claim(conn) == []


def test_backoff_is_capped_at_one_hour(conn: Conn) -> None:
    delays = conn.execute(
        "select extract(epoch from pyjobq.retry_backoff(a)) from generate_series(1, 40) a"
    ).fetchall()
    assert max(d for (d,) in delays) <= 3600
    assert min(d for (d,) in delays[12:]) >= 0.75 * 3600


def test_fail_with_explicit_delay_and_with_dead_letter(conn: Conn) -> None:
    freeze(conn, FROZEN)
    retry, dead = enqueue(conn), enqueue(conn)
    claim(conn, limit=2)
    out = conn.execute(
        "select * from pyjobq.job_fail(%s, 'w1', 1, 'later', 90)", (retry,)
    ).fetchone()
    assert out == (1, FROZEN + timedelta(seconds=90))
    out = conn.execute(
        "select status from pyjobq.job_fail(%s, 'w1', 1, 'bad input', p_dead_letter => true)",
        (dead,),
    ).fetchone()
    assert out == (4,)


def test_huge_error_text_is_truncated_not_rejected(conn: Conn) -> None:
    job_id = enqueue(conn)
    claim(conn)
    conn.execute("select pyjobq.job_fail(%s, 'w1', 1, repeat('x', 1000000))", (job_id,))
    assert conn.execute("select length(last_error) from pyjobq.job_all").fetchone() == (10000,)


def test_renew_lease_extends_from_now(conn: Conn) -> None:
    freeze(conn, FROZEN)
    job_id = enqueue(conn)
    claim(conn)
    freeze(conn, FROZEN + timedelta(seconds=100))
    lease = conn.execute("select pyjobq.job_renew_lease(%s, 'w1', 1, 600)", (job_id,)).fetchone()
    assert lease == (FROZEN + timedelta(seconds=700),)
    assert status_of(conn, job_id)[4] == FROZEN + timedelta(seconds=700)


def refunded(conn: Conn, job_id: Any) -> int:
    row = conn.execute(
        "select attempts_refunded from pyjobq.job_all where job_id = %s", (job_id,)
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_release_gives_the_try_back_but_never_the_token(conn: Conn) -> None:
    job_id = enqueue(conn, 1, "{}", None, None, None, 1)  # a budget of one try
    claim(conn)
    conn.execute("select pyjobq.job_release(%s, 'w1', 1)", (job_id,))
    assert status_of(conn, job_id)[:3] == (1, 1, None)
    assert refunded(conn, job_id) == 1
    # The next claim is attempt 2, a token never handed out before, and still the one try.
    assert claim(conn, "w2") == [(job_id, 2)]
    assert conn.execute(
        "select status from pyjobq.job_fail(%s, 'w2', 2, 'x')", (job_id,)
    ).fetchone() == (4,)


def test_renew_lease_many_renews_what_is_held_and_reports_the_rest(conn: Conn) -> None:
    freeze(conn, FROZEN)
    a, b, c = enqueue(conn), enqueue(conn), enqueue(conn)
    claim(conn, limit=3)
    conn.execute("select pyjobq.job_complete(%s, 'w1', 1)", (c,))
    freeze(conn, FROZEN + timedelta(seconds=100))
    rows = conn.execute(
        "select job_id, renewed, lease_until"
        " from pyjobq.job_renew_lease_many('w1', %s, array[1, 2, 1, 1], 600)",
        ([b, a, c, b],),
    ).fetchall()
    until = FROZEN + timedelta(seconds=700)
    # In input order, a job listed twice reported twice; a's attempt 2 and the DONE c are not held.
    assert rows == [(b, True, until), (a, False, None), (c, False, None), (b, True, until)]
    assert status_of(conn, b)[4] == until
    assert status_of(conn, a)[4] == FROZEN + timedelta(seconds=300)  # unchanged
    assert status_of(conn, c)[0] == 3


def test_release_many_gives_back_what_is_held_at_its_old_place(conn: Conn) -> None:
    a, b, c = enqueue(conn), enqueue(conn), enqueue(conn)
    claim(conn, limit=3)
    rows = conn.execute(
        "select job_id, released from pyjobq.job_release_many('w1', %s, array[1, 2, 1, 1])",
        ([c, a, a, c],),
    ).fetchall()
    assert rows == [(c, True), (a, False), (a, True), (c, True)]
    assert status_of(conn, a)[:3] == (1, 1, None)
    assert refunded(conn, a) == 1
    assert status_of(conn, b)[:2] == (2, 1)
    # Released a second time: no longer held, nothing changes.
    again = conn.execute(
        "select released from pyjobq.job_release_many('w1', %s, array[1])", ([a],)
    ).fetchall()
    assert again == [(False,)]
    assert claim(conn, "w2", limit=3) == [(a, 2), (c, 2)]


def test_stale_holder_cannot_touch_the_newer_attempt_even_with_the_same_worker_id(
    conn: Conn,
) -> None:
    freeze(conn, FROZEN)
    job_id = enqueue(conn)
    claim(conn, "w1")
    freeze(conn, FROZEN + timedelta(seconds=301))
    assert conn.execute("select job_id, attempt from pyjobq.job_reap()").fetchall() == [(job_id, 1)]
    freeze(conn, FROZEN + timedelta(hours=1))
    assert claim(conn, "w1") == [(job_id, 2)]
    for call in (
        "select pyjobq.job_complete(%s, 'w1', 1)",
        "select pyjobq.job_fail(%s, 'w1', 1, 'x')",
        "select pyjobq.job_renew_lease(%s, 'w1', 1)",
        "select pyjobq.job_release(%s, 'w1', 1)",
        "select pyjobq.job_complete(%s, 'w2', 2)",
    ):
        with raises_sqlstate("JQ001"):
            conn.execute(call, (job_id,))
    assert status_of(conn, job_id)[:3] == (2, 2, "w1")
    conn.execute("select pyjobq.job_complete(%s, 'w1', 2)", (job_id,))


def test_reap_retries_with_backoff_then_dead_letters(conn: Conn) -> None:
    freeze(conn, FROZEN)
    enqueue(conn, 1, "{}", None, None, None, 2)
    claim(conn)
    assert conn.execute("select * from pyjobq.job_reap()").fetchall() == []  # lease still valid
    now = FROZEN + timedelta(seconds=301)
    freeze(conn, now)
    ((_, _, status, worker, attempt, run_after),) = conn.execute(
        "select * from pyjobq.job_reap()"
    ).fetchall()
    assert (status, worker, attempt) == (1, "w1", 1)
    assert 1.5 <= (run_after - now).total_seconds() <= 2
    freeze(conn, now + timedelta(seconds=2))
    claim(conn, "w2")
    freeze(conn, now + timedelta(seconds=1000))
    reaped = conn.execute("select status, worker_id, attempt from pyjobq.job_reap()").fetchall()
    assert reaped == [(4, "w2", 2)]
    with raises_sqlstate("JQ001"):  # the holder lost its lease; it did not finish the job
        conn.execute("select pyjobq.job_complete(job_id, 'w2', 2) from pyjobq.job_all")
    assert conn.execute(
        "select last_error like 'lease expired%' from pyjobq.job_all"
    ).fetchone() == (True,)


def test_reap_respects_its_limit(conn: Conn) -> None:
    freeze(conn, FROZEN)
    for _ in range(5):
        enqueue(conn)
    claim(conn, limit=5)
    freeze(conn, FROZEN + timedelta(hours=1))
    assert len(conn.execute("select * from pyjobq.job_reap(2)").fetchall()) == 2
    assert len(conn.execute("select * from pyjobq.job_reap(10)").fetchall()) == 3


def test_complete_many_reports_which_jobs_it_completed(conn: Conn) -> None:
    a, b, c = enqueue(conn), enqueue(conn), enqueue(conn)
    claim(conn, limit=3)
    conn.execute("select pyjobq.job_release(%s, 'w1', 1)", (c,))
    rows = conn.execute(
        "select job_id, completed from pyjobq.job_complete_many('w1', %s, array[1, 2, 1],"
        " array['{\"r\": 1}', null, null]::jsonb[])",
        ([a, b, c],),
    ).fetchall()
    assert dict(rows) == {a: True, b: False, c: False}
    assert status_of(conn, a)[0] == 3
    assert status_of(conn, b)[0] == 2
    assert conn.execute("select result from pyjobq.job_all where job_id = %s", (a,)).fetchone() == (
        {"r": 1},
    )


def test_redrive_gives_dead_jobs_a_fresh_budget_but_respects_an_active_duplicate(
    conn: Conn,
) -> None:
    plain = enqueue(conn, 1, "{}", None, None, None, 1)
    keyed = enqueue(conn, 1, "{}", None, None, "k", 1)
    claim(conn, limit=2)
    for job in (plain, keyed):
        conn.execute("select pyjobq.job_fail(%s, 'w1', 1, 'x')", (job,))
    holder = enqueue(conn, 1, "{}", None, None, "k")
    assert holder != keyed
    assert conn.execute("select job_id from pyjobq.job_redrive()").fetchall() == [(plain,)]
    # A fresh budget of tries; the token goes on from where it was.
    assert status_of(conn, plain)[:2] == (1, 1)
    assert refunded(conn, plain) == 1
    assert status_of(conn, keyed)[0] == 4
    assert conn.execute(
        "select count(*) from pyjobq.job_redrive(array[%s]::uuid[])", (keyed,)
    ).fetchone() == (0,)


def dead_jobs(conn: Conn, keys: list[str | None]) -> list[Any]:
    """One DEAD job per key (None: no key), in this order of death."""
    ids = [r[0] for r in conn.execute(
        "select job_id from pyjobq.job_enqueue_many(1, array_fill('{}'::jsonb, array[%s]),"
        " %s::text[], p_max_attempts => 1) order by ord",
        (len(keys), keys),
    )]  # fmt: skip
    for job_id, attempt in claim(conn, limit=len(keys)):
        conn.execute("select pyjobq.job_fail(%s, 'w1', %s, 'x')", (job_id, attempt))
    return ids


def test_redrive_moves_a_large_batch_in_one_statement_and_keeps_one_job_per_key(
    conn: Conn,
) -> None:
    # Keys are only unique among active jobs: two DEAD jobs may share one. Redriven together,
    # the older one takes the key and the newer stays DEAD.
    ids = dead_jobs(conn, [None] * 300 + ["twice"])
    (newer,) = dead_jobs(conn, ["twice"])  # the key was free again once the first was DEAD
    before = one(conn, "select txid_current()")
    moved = {r[0] for r in conn.execute("select job_id from pyjobq.job_redrive(p_limit => 1000)")}
    assert moved == set(ids)
    # One statement, no subtransaction per row: a transaction id or two, not 300 (a
    # subtransaction that writes takes one of its own, and past 64 of them PostgreSQL's
    # subtransaction cache overflows for every snapshot taken meanwhile).
    assert one(conn, "select txid_current()") - before < 10
    assert status_of(conn, newer)[0] == 4


def test_redrive_limits_count_jobs_it_can_move_not_jobs_whose_key_is_held(conn: Conn) -> None:
    # The oldest DEAD jobs' keys are held by active jobs: a limit spent on them would return
    # nothing, call after call, and the jobs behind them would never be reached.
    blocked = dead_jobs(conn, ["a", "b"])
    movable = dead_jobs(conn, [None])
    for key in ("a", "b"):
        enqueue(conn, 1, "{}", None, None, key)
    moved = conn.execute("select job_id from pyjobq.job_redrive(p_limit => 1)").fetchall()
    assert moved == [(movable[0],)]
    assert [status_of(conn, job)[0] for job in blocked] == [4, 4]


def test_redrive_limits_count_one_job_per_key(conn: Conn) -> None:
    # The two oldest DEAD jobs share a key, so only one of them can move: a limit of 2 spent on
    # both moved one job, and the job behind them waited for the next call.
    first, second = dead_jobs(conn, ["k"])[0], dead_jobs(conn, ["k"])[0]
    (movable,) = dead_jobs(conn, [None])
    moved = conn.execute("select job_id from pyjobq.job_redrive(p_limit => 2)").fetchall()
    assert sorted(moved) == sorted([(first,), (movable,)])
    assert status_of(conn, second)[0] == 4


def test_redrive_racing_an_enqueue_of_the_same_key_leaves_that_job_dead(
    conn: Conn, make_conn: Any
) -> None:
    # The enqueue is not committed when the redrive reads which keys are free: the redrive's
    # update then waits on it and, once it commits, meets the key taken. Only that job stays.
    plain, keyed = dead_jobs(conn, [None, "k"])
    enqueuer, redriver, monitor = make_conn(), make_conn(), make_conn()
    moved: list[Any] = []
    with enqueuer.transaction():
        enqueuer.execute("select pyjobq.job_enqueue(1, '{}', p_dedupe_key => 'k')")
        t = threading.Thread(
            target=lambda: moved.extend(redriver.execute("select * from pyjobq.job_redrive()"))
        )
        t.start()
        wait_for_lock_wait(monitor, redriver, "the redrive to wait on the uncommitted enqueue")
    t.join(30)
    assert moved == [(plain,)]
    assert status_of(conn, keyed)[0] == 4
    assert status_of(conn, plain)[:2] == (1, 1)


def test_cancel_ends_pending_and_running_jobs_and_fences_the_holder(conn: Conn) -> None:
    pending = enqueue(conn, 1, "{}", None, None, "key-p")
    running = enqueue(conn)
    finished = enqueue(conn)
    claim(conn, "w1", 3)
    conn.execute("select pyjobq.job_complete(%s, 'w1', 1)", (finished,))
    conn.execute("select pyjobq.job_release(%s, 'w1', 1)", (pending,))
    gone = uuid4()
    rows = conn.execute(
        "select job_id, outcome from pyjobq.job_cancel(%s)", ([running, pending, finished, gone],)
    ).fetchall()
    assert rows == [
        (running, "cancelled_running"),
        (pending, "cancelled"),
        (finished, "finished"),
        (gone, "not_found"),
    ]
    assert [status_of(conn, j)[0] for j in (running, pending, finished)] == [5, 5, 3]
    # The holder is fenced out, and its heartbeat says why.
    for call in (
        "select pyjobq.job_complete(%s, 'w1', 1)",
        "select pyjobq.job_fail(%s, 'w1', 1, 'x')",
        "select pyjobq.job_renew_lease(%s, 'w1', 1)",
    ):
        with raises_sqlstate("JQ005"):
            conn.execute(call, (running,))
    renewed = conn.execute(
        "select renewed, cancelled from pyjobq.job_renew_lease_many('w1', %s, '{1}')", ([running],)
    ).fetchall()
    assert renewed == [(False, True)]
    # CANCELLED is final but frees the key, is counted, and can be redriven.
    assert enqueue(conn, 1, "{}", None, None, "key-p") != pending
    counts = {r[0]: r[1] for r in conn.execute(
        "select status, jobs from pyjobq.job_counts() where job_type = 1"
    )}  # fmt: skip
    assert counts[5] == 2
    moved = conn.execute("select job_id from pyjobq.job_redrive(%s)", ([running],)).fetchall()
    assert moved == [(running,)]
    assert status_of(conn, running)[0] == 1


def test_prune_deletes_old_finished_jobs_in_bounded_batches(conn: Conn) -> None:
    freeze(conn, FROZEN)
    done = [enqueue(conn) for _ in range(5)]
    pending = enqueue(conn)
    claim(conn, limit=5)
    conn.execute("select pyjobq.job_complete_many('w1', %s, array_fill(1, array[5]))", (done,))
    assert conn.execute("select pyjobq.job_prune('1 day')").fetchone() == (0,)
    freeze(conn, FROZEN + timedelta(days=2))
    assert conn.execute("select pyjobq.job_prune('1 day', 3)").fetchone() == (3,)
    assert conn.execute("select pyjobq.job_prune('1 day', 3)").fetchone() == (2,)
    assert conn.execute("select job_id from pyjobq.job_all").fetchall() == [(pending,)]


def test_counts_cover_every_type_and_status_with_health_figures(conn: Conn) -> None:
    freeze(conn, FROZEN - timedelta(seconds=60))
    enqueue(conn)
    enqueue(conn)
    claim(conn)
    freeze(conn, FROZEN + timedelta(hours=1))
    rows = {
        (r[0], r[2]): r[4:] for r in conn.execute("select * from pyjobq.job_counts()").fetchall()
    }
    assert len(rows) == 12  # 2 shipped types x 6 statuses, zeros included
    assert rows[(1, 1)] == (1, 3660.0, None, True)
    assert rows[(1, 2)] == (1, None, 1, True)
    assert rows[(2, 1)] == (0, 0.0, None, True)
    assert rows[(1, 3)] == (0, None, None, True)
