"""Rate limits: job_claim lets at most N claims of a type, and of each concurrency key, into any
period T, exactly, across sessions that claim at once, wait for each other, and die."""

from __future__ import annotations

import bisect
import functools
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.sqlhelp import FROZEN, freeze, one, run_threads, table_snapshot, wait_for_lock_wait

Conn = psycopg.Connection[Any]


def set_rates(
    conn: Conn,
    job_type: int,
    rate: tuple[int, str] | None,
    key_rate: tuple[int, str] | None = None,
) -> None:
    conn.execute(
        "select pyjobq.job_type_set_limits(%s, p_rate_limit => %s, p_rate_period => %s::interval,"
        " p_key_rate_limit => %s, p_key_rate_period => %s::interval)",
        (job_type, *(rate or (None, None)), *(key_rate or (None, None))),
    )


def enqueue_keyed(conn: Conn, keys: list[str | None], job_type: int = 1) -> None:
    conn.execute(
        "select pyjobq.job_enqueue_many(%s, array_fill('{}'::jsonb, array[%s]),"
        " p_concurrency_keys => %s)",
        (job_type, len(keys), keys),
    )


def claim(conn: Conn, limit: int) -> list[tuple[Any, ...]]:
    """Claims up to ``limit`` jobs: (job_id, key, run_started_at) of each, read before commit."""
    ids = [r[0] for r in conn.execute("select job_id from pyjobq.job_claim('w', %s)", (limit,))]
    return conn.execute(
        "select job_id, concurrency_key, run_started_at from pyjobq.job_all where job_id = any(%s)",
        (ids,),
    ).fetchall()


def at(seconds: float) -> datetime:
    return FROZEN + timedelta(seconds=seconds)


def test_a_type_rate_lets_n_claims_into_any_period_and_says_when_it_opens(conn: Conn) -> None:
    set_rates(conn, 1, (3, "10 seconds"))
    enqueue_keyed(conn, [None] * 10)
    freeze(conn, at(0))
    assert len(claim(conn, 2)) == 2
    freeze(conn, at(4))
    assert len(claim(conn, 5)) == 1
    freeze(conn, at(9.999))
    assert claim(conn, 5) == []
    # Full: the window opens when its oldest claims leave it, ten seconds after they came.
    assert one(conn, "select pyjobq.job_next_due()") == at(10)
    assert one(conn, "select next_claim_at from pyjobq.job_type_limits()") == at(10)
    freeze(conn, at(10))
    assert len(claim(conn, 5)) == 2
    assert one(conn, "select pyjobq.job_next_due()") == at(14)
    freeze(conn, at(14))
    assert len(claim(conn, 5)) == 1
    assert one(conn, "select next_claim_at from pyjobq.job_type_limits()") == at(20)


def test_a_key_rate_counts_each_key_apart_and_a_full_key_holds_back_only_its_own(
    conn: Conn,
) -> None:
    set_rates(conn, 1, None, (2, "1 minute"))
    enqueue_keyed(conn, ["a"] * 5 + ["b"] * 5 + [None] * 2)
    freeze(conn, at(0))
    taken = claim(conn, 100)
    assert sorted(k or "-" for _, k, _ in taken) == ["-", "-", "a", "a", "b", "b"]
    enqueue_keyed(conn, ["c"])
    assert [k for _, k, _ in claim(conn, 100)] == ["c"]
    assert one(conn, "select pyjobq.job_next_due()") == at(60)
    # The type itself has no rate, so nothing to say there.
    assert one(conn, "select next_claim_at from pyjobq.job_type_limits()") is None
    freeze(conn, at(60))
    assert sorted(k for _, k, _ in claim(conn, 100)) == ["a", "a", "b", "b"]


def test_a_claim_that_waited_for_another_starts_at_its_time(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    """The claim that holds the type's lock commits at 0:00:05; one that began at 0:00:01 and
    waited for the lock counts, and starts, at 0:00:05: times only grow along a window.

    A claim waits 50 ms at most for a type's lock, then leaves the type out, so whether the
    holder commits in time is the machine's to decide. Every round asserts one of the two
    exact outcomes, and the interleaving is made again (a minute later each round, past the
    windows) until the waiter was let through; the test fails if it never was."""
    set_rates(conn, 1, (3, "10 seconds"), (5, "10 seconds"))
    first, second = make_conn(), make_conn()
    for round_ in range(20):
        base = 60 * round_
        enqueue_keyed(conn, ["a"] * 4)
        freeze(first, at(base + 5))
        freeze(second, at(base + 1))
        first.execute("begin")
        assert len(claim(first, 2)) == 2
        taken: list[list[tuple[Any, ...]]] = []
        waiter = threading.Thread(target=lambda taken=taken: taken.append(claim(second, 5)))
        waiter.start()
        wait_for_lock_wait(conn, second, "the claim of 0:00:01 on the type's lock")
        first.execute("commit")
        waiter.join(timeout=30)
        assert not waiter.is_alive()
        started = [s for _, _, s in taken[0]]
        if started:
            assert started == [at(base + 5)]
            break
        # Gave up waiting: the type was left out of the claim, which took nothing.
        assert (
            one(
                conn,
                "with d as (delete from pyjobq.job where status = 1 returning 1)"
                " select count(*) from d",
            )
            == 2
        )
    else:
        raise AssertionError("the holder never committed within the waiter's 50 ms")
    # A key window that holds a later time than a claim's has no room for it.
    freeze(conn, at(base + 2))
    set_rates(conn, 1, None, (5, "10 seconds"))
    assert claim(conn, 5) == []
    freeze(conn, at(base + 5))
    assert len(claim(conn, 5)) == 1


def test_rates_are_checked_and_the_windows_of_a_removed_rate_go(conn: Conn) -> None:
    before = table_snapshot(conn)
    for args, name in (
        ((0, None, None), "p_rate_limit must be between 1 and 10000"),
        ((10001, None, None), "p_rate_limit must be between 1 and 10000"),
        ((1, "0", None), "p_rate_period must be at least 1 millisecond and at most 1 day"),
        ((1, "1 day 1 second", None), "p_rate_period must be at least 1 millisecond"),
        ((None, None, "1 second"), "p_key_rate_period needs p_key_rate_limit"),
    ):
        with pytest.raises(psycopg.Error) as caught:
            conn.execute(
                "select pyjobq.job_type_set_limits(1, p_rate_limit => %s,"
                " p_rate_period => %s::interval, p_key_rate_period => %s::interval)",
                args,
            )
        assert caught.value.sqlstate == "22023"
        assert name in str(caught.value)
    assert one(conn, "select count(*) from pyjobq.job_type_limits()") == 0
    assert table_snapshot(conn) == before
    set_rates(conn, 1, (5, "1 second"), (1, "1 second"))
    enqueue_keyed(conn, ["a", None])
    claim(conn, 5)
    assert one(conn, "select count(*) from pyjobq.rate_window") == 2
    set_rates(conn, 1, (5, "1 second"))
    assert one(conn, "select array_agg(concurrency_key) from pyjobq.rate_window") == [""]


def test_job_prune_drops_the_windows_no_claim_has_used_for_a_day(conn: Conn) -> None:
    set_rates(conn, 1, None, (1, "1 hour"))
    enqueue_keyed(conn, ["old", "new"])
    freeze(conn, at(0))
    assert [k for _, k, _ in claim(conn, 1)] == ["old"]
    freeze(conn, at(24 * 3600))
    assert [k for _, k, _ in claim(conn, 1)] == ["new"]
    freeze(conn, at(25 * 3600 + 1))
    conn.execute("select pyjobq.job_prune('1 day')")
    assert one(conn, "select array_agg(concurrency_key) from pyjobq.rate_window") == ["new"]


def most_in_any_window(times: list[datetime], period: timedelta) -> int:
    """The most of ``times`` that fall in any half-open window [t, t + period)."""
    times = sorted(times)
    return max((bisect.bisect_left(times, t + period) - i for i, t in enumerate(times)), default=0)


@pytest.mark.slow
def test_rates_hold_under_claimers_that_wait_finish_and_die(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    """Eight sessions claim in batches, commit, roll back, or die with their claims
    uncommitted, each reading a shared clock that a driver moves on 5 ms at a time (so that
    sessions read it at different moments and wait for each other's locks, as on a real clock,
    with no clock step of the machine's in the way). Of the claims committed, as the database
    wrote their starts: in any window of 300 ms, type 1 never has more than 7 nor a key more
    than 2; type 2's keys never more than 3."""
    period = timedelta(milliseconds=300)
    set_rates(conn, 1, (7, "300 milliseconds"), (2, "300 milliseconds"))
    set_rates(conn, 2, None, (3, "300 milliseconds"))
    keys = [f"k{i}" for i in range(5)]
    for job_type in (1, 2):
        enqueue_keyed(conn, [random.choice(keys) for _ in range(2000)], job_type)
    conn.execute("create table public.test_clock (at timestamptz not null)")
    conn.execute("insert into public.test_clock values (%s)", (FROZEN,))
    stop = threading.Event()
    committed: list[tuple[int, str, datetime]] = []
    lock = threading.Lock()

    def driver() -> None:
        with make_conn() as c:
            for _ in range(600):  # three seconds of the shared clock
                c.execute("update public.test_clock set at = at + interval '5 milliseconds'")
                time.sleep(0.002)
        stop.set()

    def claimer(n: int) -> None:
        rng = random.Random(n)
        c = make_conn()
        while not stop.is_set():
            fate = rng.random()
            c.execute("begin")
            c.execute(
                "select set_config('pyjobq.fake_now', (select at::text from public.test_clock),"
                " false)"
            )
            ids = c.execute(
                "select job_id from pyjobq.job_claim(%s, %s)", (f"w{n}", rng.randint(1, 5))
            ).fetchall()
            # A statement of its own: the claim's writes are not in the snapshot of its own.
            rows = c.execute(
                "select job_type, concurrency_key, run_started_at from pyjobq.job_all"
                " where job_id = any(%s)",
                ([i for (i,) in ids],),
            ).fetchall()
            if fate < 0.05 and rows:
                with make_conn() as killer:
                    killer.execute("select pg_terminate_backend(%s)", (c.info.backend_pid,))
                c = make_conn()
                continue
            if fate < 0.15:
                c.execute("rollback")
                continue
            c.execute("commit")
            with lock:
                committed.extend(rows)

    run_threads([driver, *(functools.partial(claimer, n) for n in range(8))])
    by_scope: dict[tuple[int, str], list[datetime]] = defaultdict(list)
    for job_type, key, started in committed:
        by_scope[(job_type, "")].append(started)
        by_scope[(job_type, key)].append(started)
    assert len(by_scope[(1, "")]) >= 35, "too few claims to show anything"
    assert most_in_any_window(by_scope.pop((1, "")), period) <= 7
    by_scope.pop((2, ""))
    for (job_type, key), times in by_scope.items():
        assert most_in_any_window(times, period) <= (2 if job_type == 1 else 3), (job_type, key)
    # The windows counted what was committed, no more: rolled back claims left nothing.
    assert one(conn, "select count(*) from pyjobq.job_all where status = 2") == len(committed)
