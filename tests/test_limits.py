"""Concurrency limits: job_claim keeps a type's RUNNING jobs within its limits, in all and per
concurrency key, exactly, across sessions that claim, finish, fail, release and die."""

from __future__ import annotations

import functools
import random
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.sqlhelp import one, raises_sqlstate, run_threads, table_snapshot

Conn = psycopg.Connection[Any]


def set_limits(conn: Conn, job_type: int, total: int | None, per_key: int | None) -> None:
    conn.execute("select pyjobq.job_type_set_limits(%s, %s, %s)", (job_type, total, per_key))


def enqueue_keyed(conn: Conn, keys: list[str | None], job_type: int = 1) -> list[Any]:
    rows = conn.execute(
        "select job_id from pyjobq.job_enqueue_many(%s, array_fill('{}'::jsonb, array[%s]),"
        " p_concurrency_keys => %s) order by ord",
        (job_type, len(keys), keys),
    ).fetchall()
    return [r[0] for r in rows]


def claim(conn: Conn, limit: int, worker: str = "w1") -> list[tuple[Any, int]]:
    return [
        (job_id, attempt)
        for job_id, attempt in conn.execute(
            "select job_id, attempt from pyjobq.job_claim(%s, %s)", (worker, limit)
        ).fetchall()
    ]


def complete(conn: Conn, job: tuple[Any, int], worker: str = "w1") -> None:
    conn.execute("select pyjobq.job_complete(%s, %s, %s)", (job[0], worker, job[1]))


def test_a_type_limit_caps_its_running_jobs(conn: Conn) -> None:
    set_limits(conn, 1, 2, None)
    enqueue_keyed(conn, [None] * 5)
    other = enqueue_keyed(conn, [None] * 3, job_type=2)
    got = claim(conn, 10)
    # Type 2 has no limit: all three come with type 1's two.
    assert len(got) == 5
    assert {j for j, _ in got} >= set(other)
    assert claim(conn, 10) == []
    complete(conn, next(j for j in got if j[0] not in other))
    assert len(claim(conn, 10)) == 1


@pytest.mark.parametrize("limit", ["max_running", "rate"])
def test_jobs_of_a_type_at_its_limit_leave_the_claim_to_other_types(conn: Conn, limit: str) -> None:
    """The first due jobs are all of a type with room for one, then for none: claims fill up
    with the next type's jobs behind them."""
    conn.execute(
        "select pyjobq.job_type_set_limits(1, %s, p_rate_limit => %s, p_rate_period => %s)",
        (1, None, None) if limit == "max_running" else (None, 1, "1 hour"),
    )
    enqueue_keyed(conn, [None] * 20)
    other = enqueue_keyed(conn, [None] * 2, job_type=2)
    got = claim(conn, 2)
    assert len(got) == 2
    assert [j for j, _ in got][1] == other[0]
    assert [j for j, _ in claim(conn, 2)] == [other[1]]


def test_a_key_limit_caps_each_key_and_a_key_with_room_comes_first_as_it_frees(conn: Conn) -> None:
    set_limits(conn, 1, None, 1)
    a1, a2, _ = enqueue_keyed(conn, ["a", "a", "a"])
    b = enqueue_keyed(conn, ["b"] * 50)
    plain = enqueue_keyed(conn, [None])
    first = claim(conn, 10)
    # One per key, in claim order; a job without a key counts against no key.
    assert [j for j, _ in first] == [a1, b[0], plain[0]]
    assert claim(conn, 1) == []
    complete(conn, first[0])
    # a's next job is claimed as soon as a has room, ahead of b's backlog.
    assert [j for j, _ in claim(conn, 1)] == [a2]
    assert one(conn, "select count(*) from pyjobq.job_all where status = 1") == 1 + 49


def test_a_full_keys_backlog_holds_back_no_other_key(conn: Conn) -> None:
    """One customer's backlog ahead of everyone else's: the claim visits keys, not its jobs."""
    set_limits(conn, 1, None, 1)
    conn.execute(
        "select count(*) from pyjobq.job_enqueue_many(1, array_fill('{}'::jsonb, array[12000]),"
        " p_concurrency_keys => array_fill('big'::text, array[12000]))"
    )
    assert len(claim(conn, 1)) == 1  # the key is full from here on
    others = enqueue_keyed(conn, [f"k{i}" for i in range(100)])
    taken = [claim(conn, 10) for _ in range(10)]
    # Every claim takes the other keys' jobs, ten at a time.
    assert [len(t) for t in taken] == [10] * 10
    assert sorted(j for t in taken for j, _ in t) == sorted(others)
    conn.execute("select pg_stat_force_next_flush()")  # the view then holds this transaction's only
    with conn.transaction():
        assert claim(conn, 10) == []
        visited = one(
            conn,
            "select coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)"
            " from pg_stat_xact_user_tables where relid = 'pyjobq.job'::regclass",
        )
    # What it reads does not grow with the full key's 11,999 jobs waiting.
    assert visited < 2000


def test_limits_are_set_checked_and_removed_by_admins_only(
    conn: Conn, login_role: Callable[..., str]
) -> None:
    for args in ((1, 0, None), (1, None, 0), (1, 100001, None), (99, 1, None)):
        with raises_sqlstate("22023"):
            conn.execute("select pyjobq.job_type_set_limits(%s, %s, %s)", args)
    set_limits(conn, 1, 3, 2)
    limits = "select job_type, name, max_running, key_max_running from pyjobq.job_type_limits()"
    assert conn.execute(limits).fetchall() == [(1, "SEARCH", 3, 2)]
    for group in ("pyjobq_producer", "pyjobq_worker", "pyjobq_observer"):
        with psycopg.connect(login_role(group), autocommit=True) as other:
            with raises_sqlstate("42501"):
                other.execute("select pyjobq.job_type_set_limits(1, null, null)")
            assert other.execute(limits).fetchall() == [(1, "SEARCH", 3, 2)]
    set_limits(conn, 1, None, None)
    assert conn.execute(limits).fetchall() == []


def test_a_blank_or_long_concurrency_key_is_refused(conn: Conn) -> None:
    before = table_snapshot(conn)
    for key in (" ", "k" * 201):
        with raises_sqlstate("22023"):
            conn.execute("select pyjobq.job_enqueue(1, p_concurrency_key => %s)", (key,))
        with raises_sqlstate("22023"):
            enqueue_keyed(conn, [key])
    with raises_sqlstate("22023"):
        conn.execute(
            "select pyjobq.job_enqueue_many(1, array['{}']::jsonb[], p_concurrency_keys => %s)",
            (["a", "b"],),
        )
    assert table_snapshot(conn) == before


MOST_AT_ONCE = """
with events as (
  select job_type, concurrency_key, started_at as at, 1 as step from public.runs
  union all
  select job_type, concurrency_key, ended_at, -1 from public.runs
)
select coalesce(max(running), 0)
  from (select sum(step) over (partition by job_type, {scope} order by at, step
                               rows unbounded preceding) as running
          from events {where}) r
"""


@pytest.mark.slow
def test_limits_hold_under_claimers_that_finish_fail_release_cancel_abandon_and_die(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    """Eight sessions claim in batches (half of them type 2 alone) and complete, fail, release,
    cancel, abandon (a lease of a second, which a reaper takes back) or die (terminated with
    their claim uncommitted). Each
    run is recorded on the database's clock: its start in the claim's transaction after the
    claim, its end in the transaction that ends it (the reaper's, for an abandoned one), so
    that each recorded run lies within the time its job was RUNNING. The most runs at once:
    of type 1, never above 5, and of a key, never above 2, on type 1 (both limits) and type 2
    (per key)."""
    set_limits(conn, 1, 5, 2)
    set_limits(conn, 2, None, 2)
    keys = [f"k{i}" for i in range(6)]
    for job_type in (1, 2):
        enqueue_keyed(conn, [random.choice(keys) for _ in range(600)], job_type)
    conn.execute(
        "create table public.runs (job_id uuid, attempt int, job_type int, concurrency_key text,"
        " started_at timestamptz not null, ended_at timestamptz, primary key (job_id, attempt))"
    )
    end_runs = (
        "update public.runs set ended_at = clock_timestamp()"
        " where job_id = any(%s) and ended_at is null"
    )
    stop = threading.Event()

    def claimer(n: int) -> None:
        rng = random.Random(n)
        c = make_conn()
        worker = f"w{n}"
        # Half claim type 2 alone: claims of type 1 take its type lock, one at a time, and
        # would keep type 2's keys from ever being claimed at once.
        types = [2] if n % 2 else None
        while True:
            fate = rng.random()
            lease = 1 if 0.3 <= fate < 0.35 else 300
            c.execute("begin")
            jobs = [
                (job_id, attempt)
                for job_id, attempt in c.execute(
                    "select job_id, attempt from pyjobq.job_claim(%s, %s, %s, %s)",
                    (worker, rng.randint(1, 4), lease, types),
                ).fetchall()
            ]
            c.execute(
                "insert into public.runs select job_id, attempts, job_type, concurrency_key,"
                " clock_timestamp() from pyjobq.job_all where job_id = any(%s)",
                ([j for j, _ in jobs],),
            )
            if not jobs:
                c.execute("commit")
                # Nothing with room now: others hold the rest, or it is all done.
                if one(c, "select count(*) from pyjobq.job_all where status in (1, 2)") == 0:
                    return
                continue
            if fate < 0.05:
                # Dies holding its claims uncommitted: the claims, and their runs, roll back.
                with make_conn() as killer:
                    killer.execute("select pg_terminate_backend(%s)", (c.info.backend_pid,))
                c = make_conn()
                continue
            c.execute("commit")
            if lease == 1:
                continue  # abandoned: the reaper takes the jobs back
            if 0.35 <= fate < 0.42:
                with c.transaction():
                    c.execute(end_runs, ([j for j, _ in jobs],))
                    c.execute("select pyjobq.job_cancel(%s)", ([j for j, _ in jobs],))
                continue
            for job in jobs:
                with c.transaction():
                    c.execute(end_runs, ([job[0]],))
                    if fate < 0.15:
                        c.execute("select pyjobq.job_release(%s, %s, %s)", (job[0], worker, job[1]))
                    elif fate < 0.3:
                        c.execute(
                            "select pyjobq.job_fail(%s, %s, %s, 'x', 0)", (job[0], worker, job[1])
                        )
                    else:
                        complete(c, job, worker)

    def reaper() -> None:
        c = make_conn()
        while not stop.is_set():
            with c.transaction():
                reaped = c.execute("select job_id from pyjobq.job_reap()").fetchall()
                c.execute(end_runs, ([j for (j,) in reaped],))

    watcher = threading.Thread(target=reaper)
    watcher.start()
    try:
        run_threads([functools.partial(claimer, n) for n in range(8)])
    finally:
        stop.set()
        watcher.join()
    # Limited, the drain still took every job to its end, and every run ended.
    assert one(conn, "select count(*) from pyjobq.job_all where status in (1, 2)") == 0
    assert one(conn, "select count(*) from public.runs where ended_at is null") == 0
    assert one(conn, "select count(*) from public.runs") > 1200
    per_type = MOST_AT_ONCE.format(scope="0", where="where job_type = 1")
    per_key = MOST_AT_ONCE.format(scope="concurrency_key", where="")
    assert one(conn, per_type) <= 5
    assert one(conn, per_key) <= 2


def test_a_claim_left_open_costs_other_claims_its_types_jobs_never_a_wait(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    """A client that claims a limited type inside its own transaction and keeps it open holds
    the type's lock: a claim of every type beside it still returns the other types' jobs at
    once (it waits for that lock 50 ms at most, then leaves the type out), and the limited
    type's jobs as soon as the lock is free."""
    set_limits(conn, 2, 10, None)
    limited = enqueue_keyed(conn, [None, None], job_type=2)
    plain = enqueue_keyed(conn, [None], job_type=1)
    holder = make_conn()
    holder.execute("begin")
    holder.execute("select job_id from pyjobq.job_claim('holder', 1, null, array[2])").fetchall()
    other = make_conn()
    # A claim that waited for the holder would end here instead of returning.
    other.execute("set statement_timeout = '10s'")
    assert [j for j, _ in claim(other, 10, "other")] == plain
    holder.execute("commit")
    assert [j for j, _ in claim(other, 10, "other")] == limited[1:]
