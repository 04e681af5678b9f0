"""Replacing, debouncing and updating pending jobs: job_enqueue's p_on_duplicate ('replace',
'debounce') changes the job holding the key, job_update changes a job by id, and either changes
only a PENDING job (its payload only while it was never claimed), so no handler ever sees its
job change under it."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal
from uuid import UUID

import psycopg
import pytest
from click.testing import CliRunner, Result

from pyjobq import JobQueue
from pyjobq.cli import main
from pyjobq.errors import InvalidArgument
from pyjobq.params import OnDuplicate
from tests.sqlhelp import FROZEN, freeze, one, raises_sqlstate, run_threads

Conn = psycopg.Connection[Any]


def test_replace_changes_the_pending_holder_until_it_is_claimed(conn: Conn) -> None:
    q = JobQueue(conn)
    first = q.enqueue(1, {"v": 1}, dedupe_key="k", priority=5)
    assert (first.created, first.replaced) == (True, False)
    replaced = q.enqueue(
        1, {"v": 2}, dedupe_key="k", priority=7, max_attempts=9, metadata={"m": 1},
        concurrency_key="c", on_duplicate="replace",
    )  # fmt: skip
    assert (replaced.job_id, replaced.created, replaced.replaced) == (first.job_id, False, True)
    job = q.get(first.job_id)
    assert job is not None
    assert (job.payload, job.priority, job.max_attempts) == ({"v": 2}, 7, 9)
    kept = q.enqueue(1, {"v": 3}, dedupe_key="k")  # keep, the default: nothing changes
    assert (kept.job_id, kept.created, kept.replaced) == (first.job_id, False, False)

    (claimed,) = q.claim("w", limit=1)
    assert (claimed.payload, claimed.metadata) == ({"v": 2}, {"m": 1})
    running = q.enqueue(1, {"v": 4}, dedupe_key="k", on_duplicate="replace")
    assert (running.job_id, running.created, running.replaced) == (first.job_id, False, False)
    q.fail(first.job_id, "w", claimed.attempt, "boom", retry_delay_seconds=0,
           lease_token=claimed.lease_token)  # fmt: skip
    retrying = q.enqueue(1, {"v": 5}, dedupe_key="k", on_duplicate="replace")
    assert (retrying.job_id, retrying.replaced) == (first.job_id, False)  # it ran: unchanged
    job = q.get(first.job_id)
    assert job is not None
    assert (job.status_name, job.payload) == ("PENDING", {"v": 2})

    q.cancel([first.job_id])
    fresh = q.enqueue(1, {"v": 6}, dedupe_key="k", on_duplicate="replace")
    assert (fresh.created, fresh.replaced) == (True, False)
    assert fresh.job_id != first.job_id


def test_debounce_pushes_the_holder_s_run_after_out_never_in(conn: Conn) -> None:
    freeze(conn, FROZEN)
    q = JobQueue(conn)
    first = q.enqueue(1, {"digest": "ada"}, dedupe_key="d", run_after=timedelta(minutes=5))
    later = q.enqueue(
        1, {"other": 1}, dedupe_key="d", run_after=timedelta(minutes=10), on_duplicate="debounce"
    )
    assert (later.job_id, later.created, later.replaced) == (first.job_id, False, True)
    sooner = q.enqueue(
        1, {"other": 2}, dedupe_key="d", run_after=timedelta(minutes=1), on_duplicate="debounce"
    )
    assert (sooner.job_id, sooner.replaced) == (first.job_id, True)
    job = q.get(first.job_id)
    assert job is not None
    assert (job.payload, job.run_after) == ({"digest": "ada"}, FROZEN + timedelta(minutes=10))


def test_enqueue_many_replaces_holders_and_its_own_earlier_rows(conn: Conn) -> None:
    q = JobQueue(conn)
    old = q.enqueue(1, {"v": 0}, dedupe_key="b")
    rows = q.enqueue_many(
        1, [{"v": 1}, {"v": 2}, {"v": 3}], dedupe_keys=["a", "a", "b"], on_duplicate="replace"
    )
    assert [(r.created, r.replaced) for r in rows] == [(True, False), (False, True), (False, True)]
    assert rows[1].job_id == rows[0].job_id
    assert rows[2].job_id == old.job_id
    payloads = dict(conn.execute("select dedupe_key, payload from pyjobq.job").fetchall())
    assert payloads == {"a": {"v": 2}, "b": {"v": 3}}


def test_bad_duplicate_policies_are_refused_and_change_nothing(conn: Conn) -> None:
    q = JobQueue(conn)
    q.enqueue(1, {"v": 1}, dedupe_key="k")
    before = conn.execute("select job_id, payload, run_after from pyjobq.job").fetchall()
    with raises_sqlstate("22023"):
        conn.execute(
            "select pyjobq.job_enqueue(1, '{}', p_dedupe_key => 'k', p_on_duplicate => 'x')"
        )
    with pytest.raises(InvalidArgument, match="p_on_duplicate 'replace' needs a dedupe key"):
        q.enqueue(1, {"v": 2}, on_duplicate="replace")
    with pytest.raises(InvalidArgument, match="cannot be combined with p_unique_for"):
        q.enqueue(1, {}, dedupe_key="k", unique_for=timedelta(hours=1), on_duplicate="debounce")
    with pytest.raises(InvalidArgument, match="needs a dedupe key"):
        q.enqueue_many(1, [{}], on_duplicate="replace")
    assert conn.execute("select job_id, payload, run_after from pyjobq.job").fetchall() == before


def test_update_changes_only_pending_jobs_and_a_payload_only_before_any_claim(
    conn: Conn,
) -> None:
    freeze(conn, FROZEN)
    q = JobQueue(conn)
    pending = q.enqueue(1, {"v": 1}).job_id
    assert q.update(pending, payload={"v": 2}, priority=3) == "updated"
    job = q.get(pending)
    assert job is not None
    assert (job.payload, job.priority, job.run_after) == ({"v": 2}, 3, FROZEN)

    (claimed,) = q.claim("w", limit=1)
    assert q.update(pending, priority=1) == "claimed"  # RUNNING: nothing changes
    q.fail(pending, "w", claimed.attempt, "boom", retry_delay_seconds=600,
           lease_token=claimed.lease_token)  # fmt: skip
    assert q.update(pending, payload={"v": 3}) == "claimed"  # it ran: a handler saw its payload
    assert q.update(pending, run_after=timedelta(0), priority=1) == "updated"  # retry it now
    job = q.get(pending)
    assert job is not None
    assert (job.payload, job.priority, job.run_after) == ({"v": 2}, 1, FROZEN)

    child = q.enqueue(1, {}, depends_on=[pending]).job_id
    assert q.update(child, priority=1) == "waiting"
    q.cancel([child])
    assert q.update(child, priority=1) == "finished"
    assert q.update(UUID(int=1), priority=1) == "not_found"
    audit = conn.execute("select action, jobs, detail from pyjobq.audit_log order by audit_id")
    updates = [(jobs, detail) for action, jobs, detail in audit if action == "update"]
    assert updates == [
        (1, {"job_ids": [str(pending)], "payload": True, "priority": 3}),
        (1, {"job_ids": [str(pending)], "payload": False, "priority": 1,
             "run_after": FROZEN.isoformat().replace("+00:00", "+00:00")}),
    ]  # fmt: skip


def test_update_refuses_bad_arguments_and_roles_without_the_enqueue_privilege(
    conn: Conn, login_role: Callable[..., str]
) -> None:
    q = JobQueue(conn)
    job_id = q.enqueue(1, {"v": 1}).job_id
    with raises_sqlstate("22004"):
        conn.execute("select pyjobq.job_update(null, '{}')")
    with pytest.raises(InvalidArgument, match="needs p_payload, p_priority or p_run_after"):
        q.update(job_id)  # nothing to change
    with pytest.raises(InvalidArgument, match="p_priority must be between 0 and 32767"):
        q.update(job_id, priority=40000)
    with raises_sqlstate("22023"):
        conn.execute("select pyjobq.job_update(%s, '[1]')", (job_id,))
    with (
        psycopg.connect(login_role("pyjobq_worker"), autocommit=True) as worker,
        raises_sqlstate("42501"),
    ):
        worker.execute("select pyjobq.job_update(%s, p_priority => 1)", (job_id,))
    billing = login_role("pyjobq_producer")
    conn.execute("select pyjobq.job_type_grant(1, 'pyjobq_admin', 'enqueue')")
    with psycopg.connect(billing, autocommit=True) as other, raises_sqlstate("42501"):
        other.execute("select pyjobq.job_update(%s, p_priority => 1)", (job_id,))
    job = q.get(job_id)
    assert job is not None
    assert (job.payload, job.priority) == ({"v": 1}, 100)


KEYS = 6
CHANGERS = 3
CHANGES = 300  # per changer


def initial_jobs(q: JobQueue, how: str) -> list[UUID]:
    """One job per key to replace or debounce; to update, 1500 jobs falling due over 0.6 s."""
    if how != "update":
        return [q.enqueue(1, {"v": 0}, dedupe_key=f"k{k}").job_id for k in range(KEYS)]
    return [
        r.job_id
        for chunk in range(30)
        for r in q.enqueue_many(1, [{"v": 0}] * 50, run_after=timedelta(milliseconds=20 * chunk))
    ]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["replace", "debounce", "update"])
def test_changes_racing_claimers_never_touch_a_claimed_job(
    conn: Conn, make_conn: Callable[[], Conn], how: OnDuplicate | Literal["update"]
) -> None:
    """Three claimers take jobs, hold each a moment and complete it with the payload they were
    given, while three changers replace or debounce the jobs holding six keys, or update jobs by
    id, as fast as they can. Every job claimed has, in the end, the payload, priority and
    run_after it was claimed with; every job's final payload is one a call said it applied to
    that job; each call that changed nothing was about a job that was claimed; every job is
    claimed once and DONE."""
    q = JobQueue(conn)
    policy: OnDuplicate | None = None if how == "update" else how
    # The versions each job was given: a call may return before the one that made its job does.
    applied: defaultdict[UUID, set[int]] = defaultdict(set)
    for job_id in initial_jobs(q, how):
        applied[job_id].add(0)
    unchanged: list[UUID] = []  # the jobs of calls that changed nothing
    claimed: dict[UUID, tuple[Any, ...]] = {}
    lock = threading.Lock()
    versions = itertools.count(1)
    finished: list[int] = []
    deadline = time.monotonic() + 120

    def claimer() -> None:
        c = make_conn()
        cq = JobQueue(c)
        while time.monotonic() < deadline:
            jobs = cq.claim("w", limit=2)
            drained = not jobs and len(finished) == CHANGERS
            if drained and not one(c, "select count(*) from pyjobq.job where status = 1"):
                return
            for j in jobs:
                with lock:
                    assert j.job_id not in claimed
                    claimed[j.job_id] = (j.payload, j.priority, j.run_after)
            time.sleep(0.002)  # held a moment: the changers meet RUNNING jobs
            for j in jobs:
                cq.complete(j.job_id, "w", j.attempt, j.payload, j.lease_token)
        raise AssertionError("the claimers did not drain the queue")

    def changer() -> None:
        c = JobQueue(make_conn())
        rng = random.Random()
        try:
            for _ in range(CHANGES):
                with lock:
                    v = next(versions)
                    target = rng.choice(list(applied))
                if how == "update":
                    outcome = c.update(target, payload={"v": v}, priority=v % 7)
                    assert outcome in ("updated", "claimed", "finished")
                    job_id, changed, created = target, outcome == "updated", False
                else:
                    r = c.enqueue(
                        1, {"v": v}, dedupe_key=f"k{rng.randrange(KEYS)}", priority=v % 7,
                        run_after=timedelta(milliseconds=rng.randrange(3)), on_duplicate=policy,
                    )  # fmt: skip
                    job_id, changed, created = r.job_id, r.replaced, r.created
                with lock:
                    if created or (changed and how != "debounce"):
                        applied[job_id].add(v)
                    elif not changed:
                        unchanged.append(job_id)
        finally:
            finished.append(1)

    run_threads([claimer] * 3 + [changer] * CHANGERS)
    final = {
        job_id: (payload, priority, run_after, status, attempts)
        for job_id, payload, priority, run_after, status, attempts in conn.execute(
            "select job_id, payload, priority, run_after, status, attempts from pyjobq.job_all"
        )
    }
    assert set(final) == set(applied) == set(claimed)
    assert {(status, attempts) for *_, status, attempts in final.values()} == {(3, 1)}
    for job_id, (payload, priority, run_after, *_) in final.items():
        assert claimed[job_id] == (payload, priority, run_after), "a claimed job was changed"
        assert payload["v"] in applied[job_id]
    assert set(unchanged) <= set(claimed)
    assert len(unchanged) < CHANGERS * CHANGES, "no call changed a pending job"
    assert unchanged, "no call met a claimed job"


def test_the_command_line_replaces_and_updates(dsn: str, conn: Conn) -> None:
    runner = CliRunner()

    def run(*args: str) -> Result:
        return runner.invoke(main, [*args, "--dsn", dsn])

    made = run("enqueue", "SEARCH", '{"v": 1}', "--dedupe-key", "k")
    job_id = made.output.split("\t")[0]
    assert made.output == f"{job_id}\tcreated\n"
    again = run("enqueue", "SEARCH", '{"v": 2}', "--dedupe-key", "k", "--on-duplicate", "replace")
    assert again.output == f"{job_id}\treplaced\n"
    kept = run("enqueue", "SEARCH", '{"v": 3}', "--dedupe-key", "k")
    assert kept.output == f"{job_id}\texisting\n"
    updated = run("update", job_id, "--priority", "4", "--delay", "0s")
    assert (updated.exit_code, updated.output) == (0, f"{job_id} updated\n")
    assert one(conn, "select payload from pyjobq.job") == {"v": 2}
    assert one(conn, "select priority from pyjobq.job") == 4
    conn.execute("select pyjobq.job_claim('w', 1)")
    refused = run("update", job_id, "--payload", '{"v": 5}')
    assert refused.exit_code == 1
    assert refused.output.startswith(f"{job_id} claimed\n")
    assert run("update", job_id).exit_code == 2  # nothing to change: usage
