"""Catalog promises: one signature per function, comments, pinned search_path, the claim plan."""

from __future__ import annotations

import json
from typing import Any, LiteralString

import psycopg
import pytest

from pyjobq import JobStatus, JobType
from tests.sqlhelp import one, raises_sqlstate, table_snapshot

Conn = psycopg.Connection[Any]

FUNCTIONS = """
select p.proname, p.oid::regprocedure::text, p.proconfig, obj_description(p.oid, 'pg_proc'),
       p.prosqlbody is not null, p.prosecdef
  from pg_proc p
 where p.pronamespace = 'pyjobq'::regnamespace
"""


def test_no_function_is_overloaded(conn: Conn) -> None:
    rows = conn.execute(FUNCTIONS).fetchall()
    names = [r[0] for r in rows]
    assert len(names) == len(set(names))
    assert {"job_enqueue", "job_claim", "job_complete", "job_fail", "job_reap"} <= set(names)


def test_every_function_is_commented_and_pins_its_search_path(conn: Conn) -> None:
    """Each function resolves names as it was written, whatever the caller's search_path: it
    pins its own, or its body is standard SQL (``begin atomic``), whose every name is bound
    when it is created. Those run with their caller's rights (never SECURITY DEFINER), and
    the planner inlines them into the statements that test each row with them."""
    bound = 0
    for _, signature, config, comment, sql_body, definer in conn.execute(FUNCTIONS).fetchall():
        assert comment, f"{signature} has no COMMENT ON"
        if sql_body:
            bound += 1
            assert config is None, signature
            assert not definer, signature
            continue
        assert config, f"{signature} has no SET clause"
        assert any(c.startswith("search_path=pg_catalog") for c in config), signature
    assert bound >= 2


def test_every_table_is_commented(conn: Conn) -> None:
    rows = conn.execute(
        "select c.relname, obj_description(c.oid, 'pg_class') from pg_class c"
        " where c.relnamespace = 'pyjobq'::regnamespace and c.relkind = 'r'"
    ).fetchall()
    assert rows
    assert all(comment for _, comment in rows), rows


def test_unqualified_claim_works_with_the_documented_search_path(conn: Conn) -> None:
    conn.execute("set search_path = public, pyjobq")
    conn.execute("SELECT job_enqueue(1, '{}')")
    rows = conn.execute("SELECT job_claim('w1', 10)").fetchall()
    assert len(rows) == 1


def test_functions_ignore_objects_planted_on_the_callers_search_path(conn: Conn) -> None:
    conn.execute("create table public.job (job_id uuid, status smallint)")
    conn.execute(
        "create function public.clock_now() returns timestamptz language sql"
        " as $$ select 'epoch'::timestamptz $$"
    )
    conn.execute("set search_path = public, pyjobq")
    conn.execute("select job_enqueue(1, '{}')")
    assert conn.execute("select count(*) from public.job").fetchone() == (0,)
    assert conn.execute("select count(*) from job_claim('w1', 10)").fetchone() == (1,)


def test_python_enums_match_the_sql_codes(conn: Conn) -> None:
    statuses = conn.execute(
        "select distinct status, status_name from pyjobq.job_counts()"
    ).fetchall()
    assert sorted(statuses) == sorted((s.value, s.name) for s in JobStatus)
    types = dict(conn.execute("select job_type, name from pyjobq.job_types()").fetchall())
    assert {t.value: t.name for t in JobType} == types
    ended_check = one(
        conn,
        "select pg_get_constraintdef(oid) from pg_constraint"
        " where conname = 'job_history_ended' and conrelid = 'pyjobq.job_history'::regclass",
    )
    # pyjobq.job's check (job_row_valid) calls this function
    job_row_rules = one(
        conn, "select prosrc from pg_proc where oid = 'pyjobq._job_row_valid'::regproc"
    )
    live, ended = (
        (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.WAITING),
        (JobStatus.DONE, JobStatus.CANCELLED),
    )
    codes = ", ".join(str(s.value) for s in live)
    assert f"return p_status in ({codes})" in job_row_rules
    assert ended_check == f"CHECK (((status >= {ended[0]}) AND (status <= {ended[1]})))"
    assert set(JobStatus) == {*live, *range(ended[0], ended[1] + 1)}


@pytest.mark.parametrize(
    "change",
    [
        "status = 3",  # ended: it belongs in job_history
        "status = 6, waiting_on = 0, run_on_parent_failure = false",  # waiting on nothing
        "waiting_on = 1",  # a count of parents without the policy for their failure
        "payload = '[]'",
        "metadata = '1'",
        "attempts_refunded = 1",  # more refunded than used
        "attempts = max_attempts + 1",
        "lease_until = now()",  # a lease, not RUNNING
        "status = 2, worker_id = 'w1'",  # RUNNING without a lease
        "status = 2, lease_until = now()",  # RUNNING without a worker
    ],
)
def test_the_job_table_refuses_a_row_that_breaks_a_rule(conn: Conn, change: LiteralString) -> None:
    """The job table's own check, whatever writes it: each rule, broken alone by its owner."""
    job_id = one(conn, "select job_id from pyjobq.job_enqueue(1, '{}')")
    before = table_snapshot(conn)
    with raises_sqlstate("23514"):
        conn.execute("update pyjobq.job set " + change + " where job_id = %s", (job_id,))
    assert table_snapshot(conn) == before
    # while a change that breaks none goes through
    conn.execute(
        "update pyjobq.job set status = 2, worker_id = 'w1', lease_until = now(), attempts = 1"
        " where job_id = %s",
        (job_id,),
    )


def nested_plans(
    conn: Conn, statement: str, marker: str, calls: int, params: tuple[Any, ...] = ()
) -> list[dict[str, Any]]:
    """auto_explain's JSON plans of the nested statements whose text has ``marker``, over ``calls``
    runs of ``statement`` (past the 5 custom plans, into the generic one when calls > 5)."""
    plans: list[dict[str, Any]] = []

    def keep(diag: psycopg.errors.Diagnostic) -> None:
        text = diag.message_primary or ""
        if marker in text:
            plans.append(json.loads(text[text.index("{") :]))

    conn.add_notice_handler(keep)
    try:
        conn.execute("load 'auto_explain'")
    except psycopg.errors.UndefinedFile:
        pytest.skip("the server has no auto_explain module (built without contrib)")
    for setting, value in {
        "auto_explain.log_min_duration": "0",
        "auto_explain.log_nested_statements": "on",
        "auto_explain.log_format": "json",
        "auto_explain.log_level": "notice",
    }.items():
        conn.execute("select set_config(%s, %s, false)", (setting, value))
    for _ in range(calls):
        conn.execute(statement, params)
    conn.execute("select set_config('auto_explain.log_min_duration', '-1', false)")
    conn.remove_notice_handler(keep)
    return plans


def bulk_load_unanalyzed(conn: Conn, jobs: int) -> None:
    """``jobs`` due jobs inserted directly, with autovacuum off so the table is never analyzed."""
    conn.execute("alter table pyjobq.job set (autovacuum_enabled = false)")
    conn.execute(
        "insert into pyjobq.job (job_type, payload, priority, run_after, created_at, updated_at)"
        " select 1 + g %% 2, '{}', g %% 5, now() - interval '1 hour', now(), now()"
        " from generate_series(1, %s) g",
        (jobs,),
    )
    assert conn.execute(
        "select last_analyze, last_autoanalyze from pg_stat_user_tables where relname = 'job'"
    ).fetchone() == (None, None)


def index_scans(plan: Any, index: str) -> list[dict[str, Any]]:
    """The nodes of a JSON plan that scan ``index``."""
    if isinstance(plan, list):
        return [scan for value in plan for scan in index_scans(value, index)]
    if not isinstance(plan, dict):
        return []
    found = [plan] if plan.get("Index Name") == index else []
    return found + [scan for value in plan.values() for scan in index_scans(value, index)]


def node_types(plan: Any) -> list[str]:
    """Every node type and index name in a JSON plan, depth first."""
    found: list[str] = []
    if isinstance(plan, dict):
        if "Node Type" in plan:
            found.append(plan["Node Type"])
        if "Index Name" in plan:
            found.append(plan["Index Name"])
        for value in plan.values():
            found.extend(node_types(value))
    elif isinstance(plan, list):
        for value in plan:
            found.extend(node_types(value))
    return found


def locking_scans(plan: Any) -> list[Any]:
    """Every subtree under a LockRows node: the scans that pick the jobs to claim."""
    if isinstance(plan, dict):
        if plan.get("Node Type") == "LockRows":
            return [plan]
        children = list(plan.values())
    elif isinstance(plan, list):
        children = plan
    else:
        return []
    return [found for child in children for found in locking_scans(child)]


def test_claim_on_a_bulk_loaded_never_analyzed_table_scans_the_claim_index(conn: Conn) -> None:
    bulk_load_unanalyzed(conn, 200000)
    # Each claim's statements on the job table: its pick, which locks what it takes, and
    # the descents of job_claim_idx that find the priorities to read.
    plans = nested_plans(conn, "select * from pyjobq.job_claim('w1', 10)", "pyjobq.job c", 7)
    assert len([plan for plan in plans if locking_scans(plan)]) == 7
    for plan in plans:
        nodes = node_types(locking_scans(plan) or plan)
        assert "job_claim_idx" in nodes, nodes
        assert "Sort" not in nodes, nodes
        assert not [n for n in nodes if n.startswith("Bitmap")], nodes
        assert "Seq Scan" not in nodes, nodes
        # Disabling sorts inflates plan costs; JIT compiling each claim would cost ~1 s.
        assert "JIT" not in json.dumps(plan)


def assert_each_job_found_by_primary_key(plan: Any) -> None:
    """``plan`` looks each job up by ``job_pkey``, input rows on the outside: no scan of the
    table, no join that walks the index whole, no JIT."""
    nodes = node_types(plan)
    assert "job_pkey" in nodes, nodes
    assert "Seq Scan" not in nodes, nodes
    assert "Hash Join" not in nodes, nodes
    assert "Merge Join" not in nodes, nodes
    # A lookup per input job, not a full walk of the index joined to the input.
    assert all("Index Cond" in scan for scan in index_scans(plan, "job_pkey")), plan
    assert "JIT" not in json.dumps(plan)


def test_a_session_whose_first_claim_met_an_empty_queue_still_leases_by_primary_key(
    conn: Conn,
) -> None:
    # A worker's first claim, planned once for its session, meets a queue of one job; a
    # backlog comes after, and no statistics are taken meanwhile.
    conn.execute("alter table pyjobq.job set (autovacuum_enabled = false)")
    conn.execute("select pyjobq.job_enqueue(1, '{}')")
    assert len(conn.execute("select * from pyjobq.job_claim('w1', 10)").fetchall()) == 1
    conn.execute(
        "select count(*) from pyjobq.job_enqueue_many(1,"
        " array(select '{}'::jsonb from generate_series(1, 20000)))"
    )
    # The lease's update, and the pick's read of where the claim ended (its new front).
    plans = nested_plans(conn, "select * from pyjobq.job_claim('w1', 10)", "pyjobq.job j", 7)
    assert len(plans) == 14
    for plan in plans:
        assert_each_job_found_by_primary_key(plan)


def test_complete_many_finds_jobs_by_primary_key_whatever_the_statistics(conn: Conn) -> None:
    bulk_load_unanalyzed(conn, 20000)
    conn.execute("analyze pyjobq.job")  # statistics taken while no job was RUNNING
    conn.execute("select count(*) from pyjobq.job_claim('w1', 1000)")
    held = conn.execute("select job_id from pyjobq.job_all where status = 2 limit 70").fetchall()
    batches = [[r[0] for r in held[i : i + 10]] for i in range(0, 70, 10)]
    plans: list[dict[str, Any]] = []
    complete = "select * from pyjobq.job_complete_many('w1', %s, array_fill(1, array[10]))"
    for batch in batches:
        plans += nested_plans(conn, complete, "delete from pyjobq.job", 1, (batch,))
    assert len(plans) == 7
    for plan in plans:
        assert "job_lease_idx" not in node_types(plan), plan
        assert_each_job_found_by_primary_key(plan)
    assert conn.execute("select count(*) from pyjobq.job_all where status = 3").fetchone() == (70,)
