"""Dependencies and batches under a race, proven by counting: worker processes complete, fail and
abandon the jobs of a random graph, spread over batches, while another cancels jobs of it at random,
another closes the batches, a producer adds children of its jobs to the batches in transactions it
keeps open, and a reaper takes back what was abandoned, all at once and from separate processes.

Every claim writes, in its own transaction, what it took and the statuses of the parents it was
given; every cancel writes what it cancelled. At the end (after a drain) no job is left WAITING,
PENDING or RUNNING; none ran twice; each ran only once its parents had all ended, DONE unless it
runs on parent failure; each whose parent failed is CANCELLED unless it runs anyway; and each whose
parents all ended DONE ran, unless a cancel reached it or an ancestor. Every batch finished, its
counts are its members' ends, and each of its callbacks was enqueued exactly once, or never when it
was not due.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.sqlhelp import FROZEN, freeze, one, wait_for_lock_wait

Conn = psycopg.Connection[Any]

ROOTS = 40
LAYERS = 6
PER_LAYER = 40
ROUNDS = 60
BATCHES = 3
CALLBACKS = {
    which: {"job_type": 2, "payload": {"on": which}} for which in ("success", "finish", "dead")
}
LEASE = 300
REAPER_CLOCK = FROZEN + timedelta(seconds=LEASE + 1)
DRAIN_CLOCK = FROZEN + timedelta(days=1)

LEDGER = """
create table ran (job_id uuid not null, worker text not null, parents jsonb);
create table cancelled (job_id uuid not null);
create table produced (job_id uuid not null, runs_anyway boolean not null);
"""


def build_graph(conn: Conn, rng: random.Random, batches: list[Any]) -> dict[Any, bool]:
    """Roots, then layers whose jobs name 1 to 4 jobs of earlier layers or earlier rows of their
    own call; each layer's policy and batch drawn at random. Returns job id -> runs on parent
    failure."""
    runs_anyway: dict[Any, bool] = {}
    ids = [
        r[0]
        for r in conn.execute(
            "select job_id from pyjobq.job_enqueue_many(1, %s::jsonb[], p_max_attempts => 1,"
            " p_batch_id => %s) order by ord",
            (["{}"] * ROOTS, batches[0]),
        ).fetchall()
    ]
    runs_anyway.update(dict.fromkeys(ids, False))
    for _ in range(LAYERS):
        specs = []
        for row in range(1, PER_LAYER + 1):
            parents: list[Any] = [str(p) for p in rng.sample(ids, rng.randint(0, 3))]
            if row > 1 and rng.random() < 0.5:
                parents.append(rng.randint(1, row - 1))
            specs.append(json.dumps(parents or [str(rng.choice(ids))]))
        policy = rng.choice(["cancel", "cancel", "run"])
        layer = [
            r[0]
            for r in conn.execute(
                "select job_id from pyjobq.job_enqueue_many(1, %s::jsonb[], p_max_attempts => 1,"
                " p_depends_on => %s::jsonb[], p_on_parent_failure => %s, p_batch_id => %s)"
                " order by ord",
                (["{}"] * PER_LAYER, specs, policy, rng.choice(batches)),
            ).fetchall()
        ]
        runs_anyway.update(dict.fromkeys(layer, policy == "run"))
        ids += layer
    return runs_anyway


def session(dsn: str, at: Any) -> Conn:
    c = psycopg.connect(dsn, autocommit=True)
    freeze(c, at)
    return c


def worker(dsn: str, name: str, seed: int) -> None:
    """Claim (recording what the claim showed of the parents), then complete, fail for good or
    abandon each job at random."""
    rng = random.Random(seed)
    with session(dsn, FROZEN) as c:
        for _ in range(ROUNDS):
            with c.transaction():
                claimed = c.execute(
                    "select job_id, attempt, lease_token, parent_results"
                    " from pyjobq.job_claim(%s, 3, %s, '{1}')",
                    (name, LEASE),
                ).fetchall()
                c.cursor().executemany(
                    "insert into ran values (%s, %s, %s)",
                    [(j, name, psycopg.types.json.Jsonb(p)) for j, _, _, p in claimed],
                )
            completing = [r for r in claimed if rng.random() < 0.7]
            if completing:
                c.execute(
                    "select * from pyjobq.job_complete_many(%s, %s, %s, null, %s)",
                    (name, *[[r[i] for r in completing] for i in (0, 1, 2)]),
                )
            for job_id, attempt, token, _ in claimed:
                if job_id in {r[0] for r in completing} or rng.random() < 0.5:
                    continue  # completed, or left to the reaper
                try:
                    c.execute(
                        "select * from pyjobq.job_fail(%s, %s, %s, 'boom', null, true, %s)",
                        (job_id, name, attempt, token),
                    )
                except psycopg.Error as e:
                    if e.sqlstate not in ("JQ001", "JQ005"):  # reaped or cancelled first
                        raise


def canceller(dsn: str, ids: list[Any], seed: int) -> None:
    rng = random.Random(seed)
    with session(dsn, FROZEN) as c:
        for _ in range(ROUNDS // 3):
            with c.transaction():
                rows = c.execute(
                    "select job_id, outcome from pyjobq.job_cancel(%s)", (rng.sample(ids, 2),)
                ).fetchall()
                c.cursor().executemany(
                    "insert into cancelled values (%s)",
                    [(j,) for j, o in rows if o.startswith("cancelled")],
                )


def closer(dsn: str, batches: list[Any], seed: int) -> None:
    """Close the batches one by one at random moments of the race, the last at its end."""
    rng = random.Random(seed)
    open_ = list(batches)
    with session(dsn, FROZEN) as c:
        for _ in range(ROUNDS):
            c.execute("select * from pyjobq.job_batch_get(%s)", (rng.choice(batches),))
            if open_ and rng.random() < 0.05:
                c.execute("select pyjobq.job_batch_close(%s)", (open_.pop(),))
        for batch in open_:
            c.execute("select pyjobq.job_batch_close(%s)", (batch,))


def producer(dsn: str, ids: list[Any], batches: list[Any], seed: int) -> None:
    """Enqueue children of jobs of the graph (live or ended, RUNNING among them), most into its
    batches while they are open, each in a transaction kept open while the others go on, then
    committed, or rolled back one time in five; what committed is written in the same
    transaction."""
    rng = random.Random(seed)
    with session(dsn, FROZEN) as c:
        for _ in range(ROUNDS // 3):
            policy = rng.choice(["cancel", "run"])
            c.execute("begin")
            try:
                child = one(
                    c,
                    "select job_id from pyjobq.job_enqueue(1, '{}', p_max_attempts => 1,"
                    " p_depends_on => %s::uuid[], p_on_parent_failure => %s, p_batch_id => %s)",
                    (rng.sample(ids, rng.randint(1, 3)), policy, rng.choice([*batches, None])),
                )
            except psycopg.Error as e:
                c.execute("rollback")
                if e.sqlstate != "JQ006":  # the batch was closed
                    raise
                continue
            c.execute("insert into produced values (%s, %s)", (child, policy == "run"))
            # Held open over some of the others' rounds: the interleaving is the point.
            time.sleep(rng.random() * 0.05)
            c.execute("rollback" if rng.random() < 0.2 else "commit")


def reaper(dsn: str) -> None:
    with session(dsn, REAPER_CLOCK) as c:
        for _ in range(ROUNDS):
            c.execute("select * from pyjobq.job_reap(2)")


@pytest.mark.slow
def test_dependants_run_once_after_their_parents_whatever_the_interleaving(
    conn: Conn, dsn: str
) -> None:
    conn.execute(LEDGER)
    freeze(conn, FROZEN)
    batches = [
        one(conn, "select pyjobq.job_batch_open(%s)", (Jsonb(CALLBACKS),)) for _ in range(BATCHES)
    ]
    runs_anyway = build_graph(conn, random.Random(7), batches)
    ids = list(runs_anyway)
    actors: list[tuple[Callable[..., None], tuple[Any, ...]]] = [
        *((worker, (dsn, f"w{n}", n)) for n in range(4)),
        (canceller, (dsn, ids, 100)),
        (closer, (dsn, batches, 200)),
        (reaper, (dsn,)),
        (producer, (dsn, ids, batches, 300)),
    ]
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=f, args=a) for f, a in actors]
    for p in processes:
        p.start()
    for p in processes:
        p.join(timeout=120)
    assert [p.exitcode for p in processes] == [0] * len(processes)
    produced = dict(conn.execute("select job_id, runs_anyway from produced").fetchall())
    assert produced, "the producer's enqueues committed"
    runs_anyway.update(produced)
    ids += produced

    # The drain: what was abandoned is reaped (DEAD: one try each), the rest runs to its end.
    with session(dsn, DRAIN_CLOCK) as drain:
        drain.execute("select * from pyjobq.job_reap(100000)")
        while claimed := drain.execute(
            "select job_id, attempt, lease_token, parent_results"
            " from pyjobq.job_claim('d', 1000, null, '{1}')"
        ).fetchall():
            drain.cursor().executemany(
                "insert into ran values (%s, 'd', %s)",
                [(j, psycopg.types.json.Jsonb(p)) for j, _, _, p in claimed],
            )
            drain.execute(
                "select * from pyjobq.job_complete_many('d', %s, %s, null, %s)",
                tuple([r[i] for r in claimed] for i in (0, 1, 2)),
            )

    status = dict(
        conn.execute("select job_id, status from pyjobq.job_all where job_type = 1").fetchall()
    )
    assert sorted(status) == sorted(ids), "no job lost, none added"
    assert {j: s for j, s in status.items() if s not in (3, 4, 5)} == {}, "none left behind"
    runs: dict[Any, list[Any]] = {}
    for job_id, parents in conn.execute("select job_id, parents from ran").fetchall():
        runs.setdefault(job_id, []).append(parents)
    assert {j: len(r) for j, r in runs.items() if len(r) > 1} == {}, "none ran twice"
    parents_of: dict[Any, list[Any]] = {}
    for parent, child in conn.execute("select parent_id, child_id from pyjobq.job_edge").fetchall():
        parents_of.setdefault(child, []).append(parent)
    cancelled = {r[0] for r in conn.execute("select job_id from cancelled").fetchall()}

    wrong: dict[Any, str] = {}
    for job_id, parents in parents_of.items():
        ended = {status[p] for p in parents}
        seen = runs.get(job_id, [None])[0]
        if seen is not None:
            shown = {p["status"] for p in seen}
            allowed = {"DONE", "DEAD", "CANCELLED"} if runs_anyway[job_id] else {"DONE"}
            if not shown <= allowed or len(seen) != len(parents):
                wrong[job_id] = f"ran with parents {shown}"
        elif not runs_anyway[job_id] and ended != {3} and status[job_id] != 5:
            wrong[job_id] = f"a parent failed, yet it is {status[job_id]}"
        elif job_id not in cancelled and (runs_anyway[job_id] or ended == {3}):
            # Its parents let it run and no cancel reached it: the drain would have run it.
            wrong[job_id] = f"never ran, yet it is {status[job_id]}"
    assert wrong == {}
    unresolved = conn.execute("select count(*) from pyjobq.job_edge where not resolved").fetchone()
    assert unresolved == (0,), "every edge of an ended parent is resolved"
    # The race was run: jobs ran, failed, were reaped, and were cancelled, some through a parent.
    assert set(status.values()) == {3, 4, 5}
    assert len(runs) > len(ids) // 3
    assert cancelled
    cascaded = conn.execute(
        "select count(*) > 0 from pyjobq.job_all"
        " where status = 5 and last_error like 'parent % ended %'"
    ).fetchone()
    assert cascaded == (True,)

    # Every batch finished, counted its members' ends, and enqueued each callback exactly once
    # when it was due: success only when every member is DONE, dead only when one is DEAD.
    for batch in batches:
        row = conn.execute(
            "select state, total, done, dead, cancelled from pyjobq.job_batch_get(%s)", (batch,)
        ).fetchone()
        ends = conn.execute(
            "select count(*), count(*) filter (where status = 3),"
            " count(*) filter (where status = 4),"
            " count(*) filter (where status = 5) from pyjobq.job_all where batch_id = %s",
            (batch,),
        ).fetchone()
        assert ends is not None
        assert row == ("finished", *ends)
        fired = sorted(
            r[0]
            for r in conn.execute(
                "select payload ->> 'on' from pyjobq.job_all"
                " where job_type = 2 and payload -> 'batch' ->> 'batch_id' = %s",
                (str(batch),),
            ).fetchall()
        )
        due = {"finish"} | ({"success"} if ends[1] == ends[0] else set())
        due |= {"dead"} if ends[2] else set()
        assert fired == sorted(due), (batch, ends)


@pytest.mark.parametrize("end", ["fail", "cancel"])
def test_a_cascade_takes_the_rows_it_reaches_in_the_order_a_completion_does(
    conn: Conn, make_conn: Callable[[], Conn], end: str
) -> None:
    """A parent ending DEAD or CANCELLED reaches its dependants' dependants; a completion takes
    the children of the job it completes in id order. Child B of C (and of P) has the smaller id
    (its clock ran behind), so a cascade locking C's generation before B's would hold C while it
    waits for B, which P's completer holds while it waits for C: a deadlock. Here P's completer
    holds B before the cascade starts; the cascade must wait for B holding nothing below it."""
    freeze(conn, FROZEN)
    x, p = (
        one(conn, "select job_id from pyjobq.job_enqueue(1, p_max_attempts => 1)") for _ in range(2)
    )
    held = {
        r[0]: r[1:]
        for r in conn.execute(
            "select job_id, attempt, lease_token from pyjobq.job_claim('w1', 2)"
        ).fetchall()
    }
    freeze(conn, FROZEN + timedelta(milliseconds=10))
    c = one(conn, "select job_id from pyjobq.job_enqueue(1, p_depends_on => %s)", ([x, p],))
    freeze(conn, FROZEN)
    b = one(conn, "select job_id from pyjobq.job_enqueue(1, p_depends_on => %s)", ([c, p],))
    assert b < c

    completer, ender, monitor = make_conn(), make_conn(), make_conn()
    for s in (completer, ender):
        freeze(s, FROZEN)
    with completer.transaction():
        completer.execute("select from pyjobq.job where job_id = %s for no key update", (b,))
        errors: list[psycopg.Error] = []

        def cascade() -> None:
            try:
                if end == "fail":
                    ender.execute(
                        "select * from pyjobq.job_fail(%s, 'w1', %s, 'boom', null, true, %s)",
                        (x, *held[x]),
                    )
                else:
                    ender.execute("select * from pyjobq.job_cancel(array[%s::uuid])", (c,))
            except psycopg.Error as e:
                errors.append(e)

        ending = threading.Thread(target=cascade)
        ending.start()
        wait_for_lock_wait(monitor, ender, "the cascade to wait for B")
        completer.execute("select pyjobq.job_complete(%s, 'w1', %s, '{}', %s)", (p, *held[p]))
    ending.join(timeout=30)
    assert errors == []
    statuses = dict(conn.execute("select job_id, status from pyjobq.job_all").fetchall())
    assert (statuses[p], statuses[c], statuses[b]) == (3, 5, 5)
    assert statuses[x] == (4 if end == "fail" else 2)
