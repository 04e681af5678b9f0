"""Least privilege: group roles reach the queue only through their own functions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from psycopg import sql

Conn = psycopg.Connection[Any]

GROUPS = ("pyjobq_producer", "pyjobq_worker", "pyjobq_observer", "pyjobq_admin")


@pytest.fixture
def as_member(conn: Conn) -> Iterator[Any]:
    """Switch ``conn`` to a fresh role that is a member of the given group role."""
    created: list[sql.Identifier] = []

    def switch(group: str) -> Conn:
        conn.execute("reset role")
        name = sql.Identifier(f"app_{uuid4().hex[:12]}")
        conn.execute(
            sql.SQL("create role {} nologin in role {}").format(name, sql.Identifier(group))
        )
        created.append(name)
        conn.execute(sql.SQL("set role {}").format(name))
        return conn

    yield switch
    conn.execute("reset role")
    for name in created:
        conn.execute(sql.SQL("drop owned by {}").format(name))
        conn.execute(sql.SQL("drop role {}").format(name))


def test_installation_creates_the_group_roles(conn: Conn) -> None:
    rows = conn.execute(
        "select rolname, rolcanlogin from pg_roles where rolname like 'pyjobq\\_%' order by 1"
    ).fetchall()
    assert rows == sorted((g, False) for g in GROUPS)


ALLOWED = {
    "pyjobq_producer": {
        "job_enqueue",
        "job_enqueue_many",
        "job_types",
        "schema_version",
        "clock_now",
    },
    "pyjobq_worker": {
        "job_claim",
        "job_complete",
        "job_complete_many",
        "job_fail",
        "job_renew_lease",
        "job_release",
        "job_reap",
        "job_types",
        "schema_version",
        "clock_now",
    },
    "pyjobq_observer": {"job_counts", "job_types", "schema_version", "clock_now"},
    "pyjobq_admin": {
        "job_counts",
        "job_reap",
        "job_redrive",
        "job_prune",
        "job_type_register",
        "job_types",
        "schema_version",
        "clock_now",
    },
}


@pytest.mark.parametrize("group", GROUPS)
def test_each_group_may_execute_exactly_its_functions(conn: Conn, group: str) -> None:
    rows = conn.execute(
        "select p.proname from pg_proc p"
        " where p.pronamespace = 'pyjobq'::regnamespace"
        " and has_function_privilege(%s, p.oid, 'execute')",
        (group,),
    ).fetchall()
    assert {r[0] for r in rows} == ALLOWED[group]


def test_a_worker_cannot_touch_the_tables_but_runs_the_lifecycle(
    conn: Conn, as_member: Any
) -> None:
    conn.execute("select pyjobq.job_enqueue(1, '{}')")
    worker = as_member("pyjobq_worker")
    for statement in (
        "select * from pyjobq.job",
        "update pyjobq.job set status = 3",
        "delete from pyjobq.job",
        "insert into pyjobq.job_type values (9, 'X')",
        "select pyjobq.job_enqueue(1, '{}')",
        "select pyjobq.job_prune('0 s')",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            worker.execute(statement)
    job_id, attempt = worker.execute(
        "select job_id, attempt from pyjobq.job_claim('w1')"
    ).fetchone()
    worker.execute("select pyjobq.job_complete(%s, 'w1', %s)", (job_id, attempt))
    conn.execute("reset role")
    assert conn.execute("select status from pyjobq.job").fetchone() == (3,)


def test_no_function_is_executable_by_public_and_definers_pin_search_path(conn: Conn) -> None:
    public = conn.execute(
        "select p.proname from pg_proc p"
        " where p.pronamespace = 'pyjobq'::regnamespace"
        " and exists (select 1 from aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a"
        "             where a.grantee = 0 and a.privilege_type = 'EXECUTE')"
    ).fetchall()
    assert public == []
    definers = conn.execute(
        "select p.proname, p.proconfig from pg_proc p"
        " where p.pronamespace = 'pyjobq'::regnamespace and p.prosecdef"
    ).fetchall()
    assert {name for name, _ in definers} >= {"job_claim", "job_enqueue", "job_complete"}
    for name, config in definers:
        assert "search_path=pg_catalog, pyjobq, pg_temp" in config, name


def test_objects_planted_in_pg_temp_or_public_are_never_resolved(
    conn: Conn, as_member: Any
) -> None:
    producer = as_member("pyjobq_producer")
    producer.execute("create temp table job (job_id uuid, status smallint)")
    producer.execute("set search_path = pg_temp, public, pyjobq")
    job_id = producer.execute("select job_id from job_enqueue(1, '{\"x\": 1}')").fetchone()[0]
    assert producer.execute("select count(*) from pg_temp.job").fetchone() == (0,)
    conn.execute("reset role")
    assert conn.execute(
        "select payload from pyjobq.job where job_id = %s", (job_id,)
    ).fetchone() == ({"x": 1},)
