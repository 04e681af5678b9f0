"""Jobs that are not due yet (snoozed, waiting, backing off, enqueued for later) cost a claim of
the due ones nothing, plain or limited: it reads job_claim_idx priority by priority, each only as
far as its first job not due, and finds the next priority with one descent of the index."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, LiteralString

import psycopg
import pytest

from pyjobq import JobQueue
from tests.sqlhelp import FROZEN, claim, enqueue, freeze, frozen_dsn, one

Conn = psycopg.Connection[Any]

PRIORITIES = (50, 100, 200)
TOMORROW = FROZEN + timedelta(days=1)
CLAIM = "select job_id, attempt, lease_token from pyjobq.job_claim('w', 1)"


def sleep(conn: Conn, jobs: int) -> None:
    """``jobs`` jobs of type 1 due tomorrow at each of ``PRIORITIES``."""
    for priority in PRIORITIES:
        conn.execute(
            "select count(*) from pyjobq.job_enqueue_many(1,"
            " array(select '{}'::jsonb from generate_series(1, %s)), null, %s, %s)",
            (jobs, priority, TOMORROW),
        )


def blocks_read(conn: Conn, statement: str) -> tuple[list[Any], int]:
    """What ``statement`` returned, and how many blocks of job_claim_idx it read."""
    count = "select pg_stat_get_xact_blocks_fetched('pyjobq.job_claim_idx'::regclass)"
    with conn.transaction():
        before = one(conn, count)
        rows = conn.execute(statement).fetchall()
        read = one(conn, count) - before
    return rows, read


def three_claims(conn: Conn, dsn: str, claim: LiteralString) -> list[int]:
    """The blocks of job_claim_idx read, in a new session, by: a claim of the one due job (no
    front: from the head), a claim right after it with nothing due (from its front, then from
    the head), and a claim with nothing due and no front (an idle worker's poll)."""
    due = enqueue(conn, 1, "{}", 100)
    conn.execute("vacuum analyze pyjobq.job")
    with psycopg.connect(frozen_dsn(dsn), autocommit=True) as worker:
        taken, first = blocks_read(worker, claim)
        assert [r[0] for r in taken] == [due]
        worker.execute("select pyjobq.job_complete(%s, 'w', %s, null, %s)", taken[0])
        left, drained = blocks_read(worker, claim)
        assert left == []
        worker.execute("select set_config('pyjobq.claim_front', '', false)")
        left, idle = blocks_read(worker, claim)
        assert left == []
    return [first, drained, idle]


# The claims' paths: the plain pick, and the limited claim's candidates, for a type limit that
# binds within the claim (one RUNNING at most, a claim of two) and for key limits (the jobs
# without a key, visited in claim order).
PATHS: dict[str, tuple[dict[str, Any], LiteralString]] = {
    "plain": ({}, CLAIM),
    "type limit": (
        {"max_running": 1},
        "select job_id, attempt, lease_token from pyjobq.job_claim('w', 2)",
    ),
    "key limit": ({"key_max_running": 1}, CLAIM),
}


@pytest.mark.parametrize("path", PATHS)
def test_a_claim_reads_as_much_of_the_index_with_four_times_the_sleeping_jobs(
    conn: Conn, dsn: str, path: str
) -> None:
    """2,000 and then 8,000 jobs due tomorrow at each of three priorities (about 8 and 32 leaf
    pages of job_claim_idx each; its root still holds them all): each claim reads the same
    blocks, up to a page boundary per priority, where a walk through them would read 72 more."""
    limits, claim = PATHS[path]
    JobQueue(conn).type_set_limits(1, **limits)
    freeze(conn, FROZEN)
    sleep(conn, 2000)
    fewer = three_claims(conn, dsn, claim)
    sleep(conn, 6000)
    more = three_claims(conn, dsn, claim)
    assert one(conn, "select count(*) from pyjobq.job where status = 1") == 24000
    # Where the one due job and the claim's first descent fall among the leaf pages moves a
    # count by a block either way: a page boundary per priority, no more.
    for few, many in zip(fewer, more, strict=True):
        assert abs(many - few) <= len(PRIORITIES), (fewer, more)


def test_due_jobs_between_sleeping_ones_come_in_claim_order(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    """Due jobs at three priorities, each priority's followed by jobs due tomorrow: claims take
    every due job, priority by priority and in enqueue order within one, and no sleeping one,
    whether each claim resumes from its front or starts from the head."""
    freeze(conn, FROZEN)
    for limit in (1, 2, 4, 9, 10):
        due: list[Any] = []
        for priority in reversed(PRIORITIES):
            due[:0] = [enqueue(conn, 1, "{}", priority) for _ in range(3)]
            enqueue(conn, 1, "{}", priority, TOMORROW)
        worker = make_conn()
        freeze(worker, FROZEN)
        taken: list[Any] = []
        while rows := claim(worker, limit=limit):
            taken += [r[0] for r in rows]
        assert taken == due
