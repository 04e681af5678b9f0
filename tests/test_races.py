"""Races proven by counting: job_cancel against claims, completions, failures and reaps, and
job_release against claims, from real parallel sessions acting on the same jobs at random.

Every action that changes a job writes what it was told into a ledger table in the same
transaction, so the ledger holds exactly the changes that committed. At the end every job is
final, and each has exactly one final outcome in the ledger, the one its row shows.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

import psycopg
import pytest

from tests.sqlhelp import FROZEN, freeze, run_threads

Conn = psycopg.Connection[Any]

JOBS = 300
ROUNDS = 120
LEASE = 300
# The reaper's clock is past every lease; what it reaps is due again only after the workers'
# clock, so it leaves the race and waits for the drain.
REAPER_CLOCK = FROZEN + timedelta(seconds=LEASE + 1)
DRAIN_CLOCK = FROZEN + timedelta(days=1)

LEDGER = """
create table ledger (job_id uuid not null, actor text not null, what text not null);
"""
FINAL = ("completed", "cancelled", "failed_dead", "reaped_dead")


def note(c: Conn, actor: str, rows: list[tuple[Any, str]]) -> None:
    if rows:
        c.cursor().executemany(
            "insert into ledger values (%s, %s, %s)", [(j, actor, w) for j, w in rows]
        )


def worker(c: Conn, name: str, rng: random.Random) -> None:
    """Claim a few jobs, then for each at random: complete, fail, fail for good, release, or
    leave it to the reaper."""
    for _ in range(ROUNDS):
        claimed = c.execute(
            "select job_id, attempt from pyjobq.job_claim(%s, 3, %s)", (name, LEASE)
        ).fetchall()
        for job_id, attempt in claimed:
            choice = rng.choice(["complete", "complete", "fail", "dead", "release", "leave"])
            try:
                with c.transaction():
                    if choice == "complete":
                        (done,) = c.execute(
                            "select completed from pyjobq.job_complete_many(%s, %s, %s)",
                            (name, [job_id], [attempt]),
                        ).fetchone() or (False,)
                        note(c, name, [(job_id, "completed")] if done else [])
                    elif choice in ("fail", "dead"):
                        row = c.execute(
                            "select status from pyjobq.job_fail(%s, %s, %s, 'boom', 0, %s)",
                            (job_id, name, attempt, choice == "dead"),
                        ).fetchone()
                        assert row is not None
                        note(c, name, [(job_id, "failed_dead" if row[0] == 4 else "failed")])
                    elif choice == "release":
                        (released,) = c.execute(
                            "select released from pyjobq.job_release_many(%s, %s, %s)",
                            (name, [job_id], [attempt]),
                        ).fetchone() or (False,)
                        note(c, name, [(job_id, "released")] if released else [])
            except psycopg.Error as e:
                # Cancelled (JQ005) or reaped (JQ001) first: this holder holds nothing, and
                # nothing changed.
                if e.sqlstate not in ("JQ001", "JQ005"):
                    raise


def canceller(c: Conn, ids: list[Any], rng: random.Random) -> None:
    for _ in range(ROUNDS):
        with c.transaction():
            rows = c.execute(
                "select job_id, outcome from pyjobq.job_cancel(%s)", (rng.sample(ids, 3),)
            ).fetchall()
            note(c, "canceller", [(j, "cancelled") for j, o in rows if o.startswith("cancelled")])


def reaper(c: Conn) -> None:
    for _ in range(ROUNDS):
        with c.transaction():
            rows = c.execute("select job_id, status from pyjobq.job_reap(2)").fetchall()
            note(c, "reaper", [(j, "reaped_dead" if s == 4 else "reaped") for j, s in rows])


@pytest.mark.slow
def test_cancel_and_release_race_claims_completions_failures_and_reaps(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    conn.execute(LEDGER)
    ids = [
        r[0]
        for r in conn.execute(
            "select job_id from pyjobq.job_enqueue_many(1,"
            " array(select '{}'::jsonb from generate_series(1, %s)), p_max_attempts => 3)",
            (JOBS,),
        ).fetchall()
    ]

    def session(at: Any) -> Conn:
        c = make_conn()
        freeze(c, at)
        return c

    actors: list[Callable[[], None]] = [
        *(partial(worker, session(FROZEN), f"w{n}", random.Random(n)) for n in range(4)),
        *(partial(canceller, session(FROZEN), ids, random.Random(100 + n)) for n in range(2)),
        partial(reaper, session(REAPER_CLOCK)),
    ]
    run_threads(actors)

    # The drain, past every lease and backoff: what is left runs to its end.
    drain = session(DRAIN_CLOCK)
    with drain.transaction():
        reaped = drain.execute("select job_id, status from pyjobq.job_reap(100000)").fetchall()
        note(drain, "reaper", [(j, "reaped_dead" if s == 4 else "reaped") for j, s in reaped])
    freeze(drain, DRAIN_CLOCK + timedelta(hours=2))  # past the backoff of what it reaped
    while claimed := drain.execute(
        "select job_id, attempt from pyjobq.job_claim('d', 1000)"
    ).fetchall():
        with drain.transaction():
            done = drain.execute(
                "select job_id from pyjobq.job_complete_many('d', %s, %s) where completed",
                ([r[0] for r in claimed], [r[1] for r in claimed]),
            ).fetchall()
            note(drain, "d", [(r[0], "completed") for r in done])

    statuses = dict(conn.execute("select job_id, status from pyjobq.job_all").fetchall())
    assert sorted(statuses) == sorted(ids), "no job lost, none added"
    assert set(statuses.values()) <= {3, 4, 5}, "every job final"
    finals: dict[Any, list[str]] = {job: [] for job in ids}
    for job_id, what in conn.execute(
        "select job_id, what from ledger where what = any(%s)", (list(FINAL),)
    ).fetchall():
        finals[job_id].append(what)
    expected = {3: ["completed"], 5: ["cancelled"]}
    wrong = {
        job: (statuses[job], outcomes)
        for job, outcomes in finals.items()
        if outcomes != expected.get(statuses[job], outcomes)
        or len(outcomes) != 1
        or (statuses[job] == 4) != (outcomes[0] in ("failed_dead", "reaped_dead"))
    }
    assert wrong == {}, "each job has exactly one final outcome, the one its row shows"
    # Every kind of event happened, or the race was not run.
    kinds = {r[0] for r in conn.execute("select distinct what from ledger").fetchall()}
    assert kinds >= {"completed", "cancelled", "failed", "failed_dead", "released", "reaped"}
