"""job_enqueue and job_enqueue_many: defaults, dedupe, job types."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any, LiteralString

import psycopg

from tests.sqlhelp import (
    FROZEN,
    claim,
    enqueue,
    freeze,
    heap_records_of,
    one,
    one_row,
    raises_sqlstate,
    run_threads,
    status_of,
)
from tests.workerhelp import wait_for

Conn = psycopg.Connection[Any]


def test_enqueue_with_literals_applies_the_defaults(conn: Conn) -> None:
    freeze(conn, FROZEN)
    job_id, created = one_row(conn, "select job_id, created from pyjobq.job_enqueue(1, '{}')")
    assert created is True
    row = conn.execute(
        "select status, priority, payload, attempts, max_attempts, run_after, created_at"
        " from pyjobq.job_all where job_id = %s",
        (job_id,),
    ).fetchone()
    assert row == (1, 100, {}, 0, 3, FROZEN, FROZEN)


def test_active_duplicate_returns_the_existing_job_and_key_is_reusable_after_done(
    conn: Conn,
) -> None:
    first = one_row(
        conn, "select job_id, created from pyjobq.job_enqueue(1, '{}', p_dedupe_key => 'k')"
    )
    again = one_row(
        conn, "select job_id, created from pyjobq.job_enqueue(1, '{}', p_dedupe_key => 'k')"
    )
    assert first[1] is True
    assert again == (first[0], False)
    claim(conn)
    running = one_row(
        conn, "select job_id, created from pyjobq.job_enqueue(1, '{}', p_dedupe_key => 'k')"
    )
    assert running == (first[0], False)
    conn.execute("select pyjobq.job_complete(%s, 'w1', 1)", (first[0],))
    fresh = one_row(
        conn, "select job_id, created from pyjobq.job_enqueue(1, '{}', p_dedupe_key => 'k')"
    )
    assert fresh[1] is True
    assert fresh[0] != first[0]


def test_enqueue_many_keeps_input_order_and_dedupes_within_and_across_batches(conn: Conn) -> None:
    existing = enqueue(conn, 2, "{}", None, None, "old")
    rows = conn.execute(
        "select ord, job_id, created from pyjobq.job_enqueue_many(2,"
        " array['{\"i\": 1}', '{\"i\": 2}', '{\"i\": 3}', '{\"i\": 4}']::jsonb[],"
        " array['a', null, 'a', 'old'])"
    ).fetchall()
    assert [r[0] for r in rows] == [1, 2, 3, 4]
    assert [r[2] for r in rows] == [True, True, False, False]
    assert rows[2][1] == rows[0][1]
    assert rows[3][1] == existing
    payloads = conn.execute(
        "select payload from pyjobq.job_all where job_id = any(%s) order by payload->>'i'",
        ([rows[0][1], rows[1][1]],),
    ).fetchall()
    assert payloads == [({"i": 1},), ({"i": 2},)]
    assert conn.execute("select count(*) from pyjobq.job_all").fetchone() == (3,)


def test_enqueue_many_of_twenty_thousand_jobs(conn: Conn) -> None:
    rows = conn.execute(
        "select count(*), count(distinct job_id), bool_and(created)"
        " from pyjobq.job_enqueue_many(1, array(select jsonb_build_object('i', g)"
        " from generate_series(1, 20000) g))"
    ).fetchone()
    assert rows == (20000, 20000, True)


def test_registered_types_can_be_enqueued_and_conflicts_are_refused(conn: Conn) -> None:
    with raises_sqlstate("22023"):
        enqueue(conn, 7, "{}")
    assert conn.execute("select * from pyjobq.job_type_register(7, 'EMAIL')").fetchone() == (
        7,
        "EMAIL",
        True,
    )
    assert conn.execute("select created from pyjobq.job_type_register(7, 'EMAIL')").fetchone() == (
        False,
    )
    with raises_sqlstate("JQ004"):
        conn.execute("select pyjobq.job_type_register(7, 'SMS')")
    with raises_sqlstate("JQ004"):
        conn.execute("select pyjobq.job_type_register(8, 'EMAIL')")
    job_id = enqueue(conn, 7, "{}")
    assert status_of(conn, job_id)[0] == 1
    assert conn.execute("select * from pyjobq.job_types()").fetchall() == [
        (1, "SEARCH"),
        (2, "OUTBOX"),
        (7, "EMAIL"),
    ]


def test_sixteen_concurrent_enqueuers_of_one_key_share_one_job(make_conn: Any) -> None:
    conns = [make_conn() for _ in range(16)]
    barrier = threading.Barrier(len(conns))
    results: list[tuple[Any, bool]] = []

    def enqueuer(c: Conn) -> Callable[[], None]:
        def run() -> None:
            barrier.wait()
            results.append(
                one_row(
                    c,
                    "select job_id, created"
                    " from pyjobq.job_enqueue(1, '{}', p_dedupe_key => 'same')",
                )
            )

        return run

    run_threads([enqueuer(c) for c in conns])
    assert len(results) == 16
    assert len({job_id for job_id, _ in results}) == 1
    assert [created for _, created in results].count(True) == 1
    assert conns[0].execute("select count(*) from pyjobq.job_all").fetchone() == (1,)


def test_enqueuers_wait_for_an_uncommitted_duplicate_and_then_share_it(make_conn: Any) -> None:
    holder, monitor = make_conn(), make_conn()
    waiters = [make_conn() for _ in range(4)]
    pids = [w.info.backend_pid for w in waiters]
    results: list[Any] = []
    with holder.transaction():
        held = holder.execute(
            "select job_id from pyjobq.job_enqueue(1, '{}', p_dedupe_key => 'k')"
        ).fetchone()[0]
        threads = [
            threading.Thread(
                target=lambda c=w: results.append(
                    c.execute(
                        "select job_id, created"
                        " from pyjobq.job_enqueue(1, '{}', p_dedupe_key => 'k')"
                    ).fetchone()
                )
            )
            for w in waiters
        ]
        for t in threads:
            t.start()
        # Proven by the lock manager, not by sleeping: all four wait on the holder.
        wait_for(
            lambda: (
                monitor.execute(
                    "select count(*) from pg_stat_activity"
                    " where pid = any(%s) and wait_event_type = 'Lock'",
                    (pids,),
                ).fetchone()
                == (4,)
            ),
            "all four enqueuers to wait on the holder's lock",
        )
    for t in threads:
        t.join()
    assert results == [(held, False)] * 4


def test_job_ids_are_time_ordered_unique_and_follow_the_claim_order(conn: Conn) -> None:
    freeze(conn, FROZEN)
    first = conn.execute(
        "select job_id from pyjobq.job_enqueue_many(1, array_fill('{}'::jsonb, array[500]))"
        " order by ord"
    ).fetchall()
    single = conn.execute("select job_id from pyjobq.job_enqueue(1)").fetchone()
    freeze(conn, FROZEN + timedelta(milliseconds=5))
    later = conn.execute(
        "select job_id from pyjobq.job_enqueue_many("
        "1, array['{}', '{}']::jsonb[], array['k', null]) order by ord"
    ).fetchall()
    ids = [r[0] for r in [*first, single, *later]]
    assert len(set(ids)) == len(ids) == 503
    # Increasing within a call, and from one millisecond to the next: new keys land
    # at the right edge of job_pkey.
    assert ids[:500] == sorted(ids[:500])
    assert min(ids[-2:]) > max(ids[:501])
    # The layout: 48 bits of the (database) clock in ms, version 8, the RFC 4122 variant.
    assert all(i.version == 8 and i.variant == uuid.RFC_4122 for i in ids)
    assert ids[0].int >> 80 == int(FROZEN.timestamp() * 1000)
    # The claim order's tiebreaker (seq) is the id order.
    order = conn.execute("select job_id from pyjobq.job_all order by seq").fetchall()
    assert [r[0] for r in order] == ids


def test_job_ids_survive_a_clock_before_1970(conn: Conn) -> None:
    freeze(conn, "1960-01-01T00:00:00+00:00")
    job_id, created = one_row(conn, "select job_id, created from pyjobq.job_enqueue(1)")
    assert created is True
    assert job_id.version == 8


def test_only_an_enqueue_with_a_key_inserts_speculatively(conn: Conn) -> None:
    """An insert with ON CONFLICT is speculative: a record of its own confirms the row. A job
    with a dedupe key needs it, for the guard against active duplicates; a job without one
    can conflict with nothing, and its insert is a plain one."""
    keyless = heap_records_of(conn, "select pyjobq.job_enqueue(1, '{}')")
    keyed = heap_records_of(conn, "select pyjobq.job_enqueue(1, '{}', p_dedupe_key => 'k')")
    for records, speculative in ((keyless, False), (keyed, True)):
        assert any(r.startswith("INSERT") for r in records), records
        assert any("CONFIRM" in r for r in records) is speculative, records  # HEAP_CONFIRM


def test_every_way_into_the_job_table_writes_the_same_row(conn: Conn) -> None:
    """A new job's row is written by five statements, one for each shape of input (one job
    without a key; with one; a batch without keys; with keys; with parents): the same
    arguments make the same row through each, every column but the job's own id, seq and key."""
    freeze(conn, FROZEN)
    batch = one(conn, "select pyjobq.job_batch_open()")
    parent = str(enqueue(conn))
    common: LiteralString = (
        " p_priority => 7, p_run_after => %(at)s, p_max_attempts => 4,"
        " p_metadata => '{\"m\": 1}', p_batch_id => %(batch)s)"
    )

    def single(args: LiteralString) -> LiteralString:
        return (
            "select job_id from pyjobq.job_enqueue(1, '{\"a\": 1}', p_concurrency_key => 'c',"
            + args
            + common
        )

    def many(args: LiteralString) -> LiteralString:
        return (
            "select job_id from pyjobq.job_enqueue_many(1, array['{\"a\": 1}'::jsonb],"
            " p_concurrency_keys => array['c']," + args + common
        )

    window: LiteralString = " p_unique_for => '1 day',"
    parents: LiteralString = " p_depends_on => array[jsonb_build_array(%(parent)s::uuid)],"
    pending = {
        "one": single(""),
        "one with a key": single(" p_dedupe_key => 'k1',"),
        "one in a window": single(" p_dedupe_key => 'k2'," + window),
        "many": many(""),
        "many with keys": many(" p_dedupe_keys => array['k3'],"),
        "many in a window": many(" p_dedupe_keys => array['k4']," + window),
    }
    waiting = {
        "one with parents": single(" p_depends_on => array[%(parent)s]::uuid[],"),
        "many with parents": many(parents),
        "many with parents and keys": many(" p_dedupe_keys => array['k5']," + parents),
    }
    params = {"at": FROZEN + timedelta(hours=1), "batch": batch, "parent": parent}

    def rows(statements: dict[str, LiteralString]) -> dict[str, str]:
        """Each way's row, as JSON, without the columns that are the job's own."""
        made = {name: one(conn, statement, params) for name, statement in statements.items()}
        return {
            name: json.dumps(
                one(
                    conn,
                    "select to_jsonb(j) - array['job_id', 'seq', 'dedupe_key']"
                    " from pyjobq.job j where j.job_id = %s",
                    (job_id,),
                ),
                sort_keys=True,
            )
            for name, job_id in made.items()
        }

    for ways, status in ((pending, 1), (waiting, 6)):
        made = rows(ways)
        first, row = next(iter(made.items()))
        differ = {name: made[name] for name in made if made[name] != row}
        assert not differ, (first, row, differ)
        fields = json.loads(row)
        assert fields["status"] == status
        given = ("priority", "payload", "metadata", "max_attempts", "concurrency_key", "batch_id")
        assert [fields[name] for name in given] == [7, {"a": 1}, {"m": 1}, 4, "c", str(batch)]
