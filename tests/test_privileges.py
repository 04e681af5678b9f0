"""Least privilege: group roles reach the queue only through their own functions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from psycopg import sql

from tests.sqlhelp import one, one_row

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
        "job_batch_open",
        "job_batch_close",
        "job_batch_get",
        "job_get",
        "job_dependencies",
        "job_list",
        "job_cancel",
        "job_update",
        "job_watch",
        "job_signal",
        "job_attempts",
        "job_step_list",
        "job_event_list",
        "job_types",
        "job_type_code",
        "job_type_policies",
        "job_type_limits",
        "schema_version",
        "clock_now",
    },
    "pyjobq_worker": {
        "job_claim",
        "job_next_due",
        "job_complete",
        "job_complete_many",
        "job_fail",
        "job_fail_many",
        "job_finish_many",
        "job_renew_lease",
        "job_renew_lease_many",
        "job_release",
        "job_release_many",
        "job_step_save",
        "job_steps",
        "job_event_wait",
        "job_progress",
        "job_reap",
        "job_schedule_tick",
        "job_next_chores",
        "job_worker_idle",
        "job_worker_busy",
        "job_types",
        "job_type_code",
        "job_type_policies",
        "job_type_limits",
        "schema_version",
        "clock_now",
    },
    "pyjobq_observer": {
        "job_counts",
        "job_dependencies",
        "job_batch_get",
        "job_throughput",
        "job_workers",
        "job_types",
        "job_type_code",
        "job_type_policies",
        "job_type_limits",
        "schema_version",
        "clock_now",
    },
    "pyjobq_admin": {
        "job_counts",
        "job_throughput",
        "job_workers",
        "job_audit",
        "job_get",
        "job_dependencies",
        "job_batch_get",
        "job_list",
        "job_cancel",
        "job_update",
        "job_watch",
        "job_signal",
        "job_attempts",
        "job_step_list",
        "job_event_list",
        "job_reap",
        "job_redrive",
        "job_prune",
        "job_prune_estimate",
        "job_history_maintain",
        "job_type_register",
        "job_type_allocate",
        "job_type_grant",
        "job_type_revoke",
        "job_type_grants",
        "job_type_set_policy",
        "job_type_set_history",
        "job_type_set_snoozes",
        "job_type_pause",
        "job_type_resume",
        "job_settings",
        "job_settings_set",
        "job_type_set_limits",
        "job_schedule_set",
        "job_schedule_delete",
        "job_schedule_pause",
        "job_schedule_resume",
        "job_schedules",
        "job_schedule_tick",
        "job_next_chores",
        "job_types",
        "job_type_code",
        "job_type_policies",
        "job_type_limits",
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
        "select * from pyjobq.job_all",
        "update pyjobq.job set status = 1",
        "delete from pyjobq.job",
        "select * from pyjobq.job_history",
        "delete from pyjobq.job_history_default",
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
    assert conn.execute("select status from pyjobq.job_all").fetchone() == (3,)


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
        "select payload from pyjobq.job_all where job_id = %s", (job_id,)
    ).fetchone() == ({"x": 1},)


@pytest.fixture
def login_as(login_role: Any) -> Iterator[Any]:
    """Open a session as a fresh LOGIN role that is a member of the given group roles."""
    sessions: list[Conn] = []

    def login(*groups: str) -> Conn:
        sessions.append(psycopg.connect(login_role(*groups), autocommit=True))
        return sessions[-1]

    yield login
    for session in sessions:
        session.close()


MOVED_CLOCK_CALLS = [
    ("pyjobq_worker", "select * from pyjobq.job_reap()"),
    ("pyjobq_worker", "select * from pyjobq.job_claim('w2', 10, 86400)"),
    ("pyjobq_worker", "select pyjobq.job_renew_lease(%(held)s, 'w1', 1, 86400, %(token)s)"),
    ("pyjobq_producer", "select * from pyjobq.job_enqueue(1, '{}')"),
    ("pyjobq_admin", "select pyjobq.job_prune('0 seconds')"),
    ("pyjobq_observer", "select * from pyjobq.job_counts()"),
    ("pyjobq_observer", "select pyjobq.clock_now()"),
]


@pytest.mark.parametrize("fake_now", ["2100-01-01", "infinity", "2000-01-01"])
@pytest.mark.parametrize(("group", "call"), MOVED_CLOCK_CALLS)
def test_no_role_but_the_owner_moves_the_clock(
    conn: Conn, login_as: Any, group: str, call: str, fake_now: str
) -> None:
    # A live lease of worker w1, a job due next week, a finished one: what a moved clock
    # would reap, claim early, or prune.
    held = one(conn, "select job_id from pyjobq.job_enqueue(1, '{}')")
    token = one(conn, "select lease_token from pyjobq.job_claim('w1', 1, 60)")
    conn.execute("select pyjobq.job_enqueue(1, '{}', p_run_after => now() + interval '7 days')")
    done = one(conn, "select job_id from pyjobq.job_enqueue(1, '{}')")
    conn.execute("select pyjobq.job_claim('w1', 1, 60)")
    conn.execute("select pyjobq.job_complete(%s, 'w1', 1)", (done,))
    before = conn.execute("select * from pyjobq.job_all order by job_id").fetchall()

    session = login_as(group)
    session.execute("select set_config('pyjobq.fake_now', %s, false)", (fake_now,))
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
        session.execute(call, {"held": held, "token": token})
    assert refused.value.diag.message_hint
    assert conn.execute("select * from pyjobq.job_all order by job_id").fetchall() == before
    # Reset, the same role runs on the real clock again.
    session.execute("reset pyjobq.fake_now")
    session.execute("select pyjobq.clock_now()" if group == "pyjobq_observer" else "select 1")


def test_the_owner_moves_the_clock_but_never_to_infinity(conn: Conn) -> None:
    conn.execute("set pyjobq.fake_now = '2030-01-01 00:00:00+00'")
    assert one(conn, "select pyjobq.clock_now()").year == 2030
    for value in ("infinity", "-infinity"):
        conn.execute("select set_config('pyjobq.fake_now', %s, false)", (value,))
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            conn.execute("select * from pyjobq.job_enqueue(1, '{}')")
    conn.execute("reset pyjobq.fake_now")
    assert conn.execute("select count(*) from pyjobq.job_all").fetchone() == (0,)


@pytest.mark.parametrize(
    ("group", "call"),
    [
        ("pyjobq_observer", "select * from pyjobq.job_get(%(job)s)"),
        ("pyjobq_worker", "select * from pyjobq.job_get(%(job)s)"),
        ("pyjobq_observer", "select * from pyjobq.job_list()"),
        ("pyjobq_worker", "select * from pyjobq.job_list()"),
        ("pyjobq_observer", "select * from pyjobq.job_cancel(array[%(job)s]::uuid[])"),
        ("pyjobq_worker", "select * from pyjobq.job_cancel(array[%(job)s]::uuid[])"),
        ("pyjobq_worker", "select * from pyjobq.job_watch(array[%(job)s]::uuid[])"),
        ("pyjobq_producer", "select pyjobq.job_type_grant(1, 'pyjobq_producer', 'work')"),
        (
            "pyjobq_producer",
            "select * from pyjobq.job_release_many('w1', array[%(job)s]::uuid[], '{1}')",
        ),
        (
            "pyjobq_observer",
            "select * from pyjobq.job_renew_lease_many('w1', array[%(job)s]::uuid[], '{1}')",
        ),
        # The helpers behind the job_* functions are no one's to call: this one moves DEAD
        # jobs back without the redrive's checks.
        ("pyjobq_admin", "select pyjobq._redrive_rows(array[%(job)s]::uuid[], now())"),
        ("pyjobq_admin", "select pyjobq._claim_front_write(null)"),
    ],
)
def test_payloads_and_helpers_are_refused_to_roles_without_them(
    conn: Conn, login_as: Any, group: str, call: str
) -> None:
    job = one_row(conn, "select job_id from pyjobq.job_enqueue(1, '{\"secret\": 1}')")
    conn.execute("select pyjobq.job_claim('w1', 1)")
    conn.execute("select pyjobq.job_fail(%s, 'w1', 1, 'x', p_dead_letter => true)", job)
    before = conn.execute("select * from pyjobq.job_all").fetchall()
    session = login_as(group)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        session.execute(call, {"job": job[0]})
    assert conn.execute("select * from pyjobq.job_all").fetchall() == before


def test_the_grants_are_what_api_grant_lists(conn: Conn) -> None:
    """grant_roles makes each group's EXECUTE grants exactly the table's rows: a row changed and
    grant_roles run again moves the grant, both ways."""
    listed = conn.execute(
        "select r.name, g.function::regprocedure::oid"
        " from pyjobq.api_grant g cross join unnest(g.roles) r(name)"
    ).fetchall()
    granted = conn.execute(
        "select r.name, p.oid from pg_proc p"
        " cross join unnest(array['pyjobq_producer', 'pyjobq_worker', 'pyjobq_observer',"
        " 'pyjobq_admin']) r(name)"
        " where p.pronamespace = 'pyjobq'::regnamespace"
        " and has_function_privilege(r.name, p.oid, 'execute')"
    ).fetchall()
    assert sorted(listed) == sorted(granted)
    may = "select has_function_privilege('pyjobq_producer', 'pyjobq.job_get(uuid)', 'execute')"
    conn.execute(
        "update pyjobq.api_grant set roles = '{pyjobq_admin}'"
        " where function = 'pyjobq.job_get(uuid)'"
    )
    conn.execute("select pyjobq.grant_roles()")
    assert one(conn, may) is False
    conn.execute(
        "update pyjobq.api_grant set roles = '{pyjobq_producer,pyjobq_admin}'"
        " where function = 'pyjobq.job_get(uuid)'"
    )
    conn.execute("select pyjobq.grant_roles()")
    assert one(conn, may) is True
