"""Every bad argument raises its SQLSTATE, names the argument, and changes nothing."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.sqlhelp import enqueue, raises_sqlstate, table_snapshot

Conn = psycopg.Connection[Any]

BAD_CALLS = [
    ("22023", "p_job_type", "select pyjobq.job_enqueue(99, '{}')"),
    ("22023", "p_job_type", "select pyjobq.job_enqueue(0, '{}')"),
    ("22004", "p_job_type", "select pyjobq.job_enqueue(null, '{}')"),
    ("22023", "p_payload", "select pyjobq.job_enqueue(1, '[1, 2]')"),
    ("22023", "p_payload", "select pyjobq.job_enqueue(1, '\"text\"')"),
    ("22023", "p_metadata", "select pyjobq.job_enqueue(1, '{}', p_metadata => '[1]')"),
    (
        "22023",
        "p_metadata",
        "select pyjobq.job_enqueue_many(1, array['{}'::jsonb], p_metadata => '\"x\"')",
    ),
    ("22023", "p_priority", "select pyjobq.job_enqueue(1, '{}', -1)"),
    ("22023", "p_priority", "select pyjobq.job_enqueue(1, '{}', 40000)"),
    ("22023", "p_max_attempts", "select pyjobq.job_enqueue(1, '{}', p_max_attempts => 0)"),
    ("22023", "p_max_attempts", "select pyjobq.job_enqueue(1, '{}', p_max_attempts => 1001)"),
    ("22023", "p_dedupe_key", "select pyjobq.job_enqueue(1, '{}', p_dedupe_key => '')"),
    (
        "22023",
        "p_dedupe_key",
        "select pyjobq.job_enqueue(1, '{}', p_dedupe_key => repeat('k', 201))",
    ),
    ("22023", "p_run_after", "select pyjobq.job_enqueue(1, '{}', p_run_after => 'infinity')"),
    ("22023", "p_run_after", "select pyjobq.job_enqueue(1, '{}', p_run_after => '9999-01-01')"),
    (
        "22023",
        "p_run_after",
        "select pyjobq.job_enqueue_many(1, array['{}'::jsonb], p_run_after => '-infinity')",
    ),
    ("22023", "p_created_after", "select * from pyjobq.job_list(p_created_after => 'infinity')"),
    (
        "22023",
        "p_created_before",
        "select * from pyjobq.job_list(p_created_before => '0001-01-01')",
    ),
    ("22023", "p_payloads", "select pyjobq.job_enqueue_many(1, array['{}', '[]']::jsonb[])"),
    ("22023", "p_payloads", "select pyjobq.job_enqueue_many(1, array[]::jsonb[])"),
    (
        "22023",
        "p_dedupe_keys",
        "select pyjobq.job_enqueue_many(1, array['{}']::jsonb[], array['a', 'b'])",
    ),
    (
        "22023",
        "p_dedupe_keys",
        "select pyjobq.job_enqueue_many(1, array['{}']::jsonb[], array[' '])",
    ),
    ("22004", "p_worker_id", "select pyjobq.job_claim(null)"),
    ("22023", "p_worker_id", "select pyjobq.job_claim('')"),
    ("22023", "p_worker_id", "select pyjobq.job_claim(repeat('w', 81))"),
    ("22023", "p_limit", "select pyjobq.job_claim('w1', 0)"),
    ("22023", "p_limit", "select pyjobq.job_claim('w1', 1001)"),
    ("22023", "p_lease_seconds", "select pyjobq.job_claim('w1', 1, 0)"),
    ("22023", "p_job_types", "select pyjobq.job_claim('w1', 1, 10, array[1, 40000])"),
    ("22023", "p_lease_seconds", "select pyjobq.job_claim('w1', 1, 86401)"),
    ("22023", "p_attempt", "select pyjobq.job_complete(gen_random_uuid(), 'w1', 0)"),
    ("22004", "p_attempt", "select pyjobq.job_fail(gen_random_uuid(), 'w1', null)"),
    (
        "22023",
        "p_retry_delay_seconds",
        "select pyjobq.job_fail(gen_random_uuid(), 'w1', 1, 'e', -1)",
    ),
    ("22023", "p_lease_seconds", "select pyjobq.job_renew_lease(gen_random_uuid(), 'w1', 1, -5)"),
    ("22023", "p_worker_id", "select pyjobq.job_release(gen_random_uuid(), ' ', 1)"),
    (
        "22023",
        "p_job_ids",
        "select pyjobq.job_complete_many('w1', array[]::uuid[], array[]::int[])",
    ),
    (
        "22023",
        "p_attempts",
        "select pyjobq.job_complete_many('w1', array[gen_random_uuid()], array[1, 2])",
    ),
    (
        "22023",
        "p_results",
        "select pyjobq.job_complete_many('w1', array[gen_random_uuid()], array[1],"
        " array[null, null]::jsonb[])",
    ),
    (
        "22023",
        "p_job_ids",
        "select pyjobq.job_renew_lease_many('w1', array[]::uuid[], array[]::int[])",
    ),
    (
        "22023",
        "p_attempts",
        "select pyjobq.job_renew_lease_many('w1', array[gen_random_uuid()], array[1, 1])",
    ),
    (
        "22023",
        "p_lease_seconds",
        "select pyjobq.job_renew_lease_many('w1', array[gen_random_uuid()], array[1], 0)",
    ),
    (
        "22023",
        "p_job_ids",
        "select pyjobq.job_release_many('w1', array_fill(gen_random_uuid(), array[10001]),"
        " array_fill(1, array[10001]))",
    ),
    ("22023", "p_attempts", "select pyjobq.job_release_many('w1', array[gen_random_uuid()], null)"),
    ("22023", "p_worker_id", "select pyjobq.job_release_many('', array[gen_random_uuid()], '{1}')"),
    ("22023", "p_job_ids", "select pyjobq.job_cancel(array[]::uuid[])"),
    ("22023", "p_job_ids", "select pyjobq.job_cancel(null)"),
    ("22023", "p_limit", "select pyjobq.job_reap(0)"),
    ("22023", "p_limit", "select pyjobq.job_redrive(p_limit => 100001)"),
    ("22023", "p_job_type", "select pyjobq.job_redrive(p_job_type => 42)"),
    ("22023", "p_older_than", "select pyjobq.job_prune('-1 day')"),
    ("22004", "p_older_than", "select pyjobq.job_prune(null)"),
    ("22023", "p_job_type", "select pyjobq.job_type_register(40000, 'X')"),
    ("22023", "p_name", "select pyjobq.job_type_register(9, '')"),
    ("22023", "p_name", "select pyjobq.job_type_register(9, E' \\t\\n')"),
    ("22023", "p_worker_id", "select pyjobq.job_claim(E'\\t')"),
    ("22023", "p_dedupe_key", "select pyjobq.job_enqueue(1, '{}', p_dedupe_key => E'\\n\\r')"),
    (
        "22023",
        "p_dedupe_keys",
        "select pyjobq.job_enqueue_many(1, array['{}']::jsonb[], array[E'\\t'])",
    ),
    ("22004", "p_job_id", "select pyjobq.job_complete(null, 'w1', 1)"),
    ("22004", "p_job_id", "select pyjobq.job_fail(null, 'w1', 1)"),
    ("22004", "p_job_id", "select pyjobq.job_renew_lease(null, 'w1', 1)"),
    ("22004", "p_job_id", "select pyjobq.job_release(null, 'w1', 1)"),
    ("22023", "p_older_than", "select pyjobq.job_prune('1000000 years')"),
    (
        "22023",
        "p_payloads",
        'select pyjobq.job_enqueue_many(1, \'{{"{}"},{"{}"}}\'::jsonb[])',
    ),
    (
        "22023",
        "p_dedupe_keys",
        "select pyjobq.job_enqueue_many(1, array['{}', '{}']::jsonb[], '{{a},{b}}'::text[])",
    ),
    ("22023", "p_job_types", "select pyjobq.job_claim('w1', 1, 10, '{{1},{2}}'::int[])"),
    (
        "22023",
        "p_job_ids",
        "select pyjobq.job_complete_many('w1', array[array[gen_random_uuid()]], '{{1}}')",
    ),
    ("22023", "p_job_ids", "select pyjobq.job_redrive(array[array[gen_random_uuid()]])"),
]


@pytest.mark.parametrize(("sqlstate", "argument", "call"), BAD_CALLS)
def test_bad_argument_raises_its_sqlstate_and_changes_nothing(
    conn: Conn, sqlstate: str, argument: str, call: str
) -> None:
    enqueue(conn)  # a RUNNING job and a PENDING one, so that a change to either would show
    enqueue(conn)
    conn.execute("select pyjobq.job_claim('w1')")
    before = table_snapshot(conn)
    types_before = conn.execute("select * from pyjobq.job_types()").fetchall()
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(call)
    assert caught.value.sqlstate == sqlstate
    assert argument in (caught.value.diag.message_primary or "")
    assert table_snapshot(conn) == before
    assert conn.execute("select * from pyjobq.job_types()").fetchall() == types_before


STATE_CALLS = [
    ("JQ002", "select pyjobq.job_complete(gen_random_uuid(), 'w1', 1)"),
    ("JQ002", "select pyjobq.job_fail(gen_random_uuid(), 'w1', 1)"),
    ("JQ002", "select pyjobq.job_renew_lease(gen_random_uuid(), 'w1', 1)"),
    ("JQ002", "select pyjobq.job_release(gen_random_uuid(), 'w1', 1)"),
]


@pytest.mark.parametrize(("sqlstate", "call"), STATE_CALLS)
def test_unknown_job_id_raises_job_not_found_with_a_hint(
    conn: Conn, sqlstate: str, call: str
) -> None:
    with raises_sqlstate(sqlstate):
        conn.execute(call)
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(call)
    assert caught.value.diag.message_hint


def test_lease_lost_carries_detail_and_hint(conn: Conn) -> None:
    job_id = enqueue(conn)
    conn.execute("select pyjobq.job_claim('w1')")
    with pytest.raises(psycopg.Error) as caught:
        conn.execute("select pyjobq.job_complete(%s, 'w2', 1)", (job_id,))
    assert caught.value.sqlstate == "JQ001"
    assert caught.value.diag.message_detail
    assert caught.value.diag.message_hint


def test_arrays_not_numbered_from_one_pair_their_elements_in_order(conn: Conn) -> None:
    payloads = """'[0:1]={"{\\"n\\": 0}","{\\"n\\": 1}"}'::jsonb[]"""
    ords = conn.execute(
        f"select ord from pyjobq.job_enqueue_many(1, {payloads}, '[5:6]={{ka,kb}}'::text[])"
    ).fetchall()
    assert ords == [(1,), (2,)]
    stored = conn.execute("select dedupe_key, payload from pyjobq.job_all order by seq").fetchall()
    assert stored == [("ka", {"n": 0}), ("kb", {"n": 1})]
