"""Privileges per job type, enforced inside the functions, tested as real LOGIN roles.

Two teams share one queue: type 11 (TEAM_B) grants enqueue, work and observe to team B only,
type 10 (TEAM_A) grants nothing and so keeps the group roles' meaning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from psycopg import sql

from pyjobq import JobQueue, TypeGrant
from tests.sqlhelp import one_row

Conn = psycopg.Connection[Any]

OPEN, RESTRICTED = 10, 11


@pytest.fixture
def teams(conn: Conn) -> Iterator[dict[str, str]]:
    """Two NOLOGIN team roles (names unique to the test: roles are server-wide); type 11
    grants every privilege to team B."""
    names = {team: f"team_{team}_{uuid4().hex[:8]}" for team in ("a", "b")}
    for name in names.values():
        conn.execute(sql.SQL("create role {} nologin").format(sql.Identifier(name)))
    q = JobQueue(conn)
    q.type_register(OPEN, "TEAM_A")
    q.type_register(RESTRICTED, "TEAM_B")
    for privilege in ("enqueue", "work", "observe"):
        assert q.type_grant(RESTRICTED, names["b"], privilege)
    yield names
    for name in names.values():
        conn.execute(sql.SQL("drop role {}").format(sql.Identifier(name)))


@pytest.fixture
def session(login_role: Callable[..., str]) -> Iterator[Callable[..., Conn]]:
    """An autocommit session of a new LOGIN role that is a member of the given roles."""
    opened: list[Conn] = []

    def connect(*roles: str) -> Conn:
        opened.append(psycopg.connect(login_role(*roles), autocommit=True))
        return opened[-1]

    yield connect
    for c in opened:
        c.close()


def sqlstate_of(conn: Conn, query: str, params: tuple[Any, ...] = ()) -> str | None:
    try:
        conn.execute(query, params)
    except psycopg.Error as e:
        return e.sqlstate
    return None


def jobs(conn: Conn, job_type: int, n: int = 2) -> list[Any]:
    rows = conn.execute(
        "select job_id from pyjobq.job_enqueue_many(%s, array_fill('{}'::jsonb, array[%s]))",
        (job_type, n),
    ).fetchall()
    return [r[0] for r in rows]


def test_a_restricted_type_is_claimed_only_by_its_team(
    conn: Conn, teams: dict[str, str], session: Callable[..., Conn]
) -> None:
    open_jobs, restricted_jobs = jobs(conn, OPEN), jobs(conn, RESTRICTED)
    worker_a = session("pyjobq_worker", teams["a"])
    worker_b = session("pyjobq_worker", teams["b"])
    # Without p_job_types, team A's worker claims every type it may work: not type 11.
    claimed = worker_a.execute("select job_id, job_type from pyjobq.job_claim('a', 10)").fetchall()
    assert sorted(claimed) == sorted((j, OPEN) for j in open_jobs)
    # Asked for by code, the restricted type is refused, and nothing is claimed.
    state = sqlstate_of(worker_a, "select * from pyjobq.job_claim('a', 10, null, %s)", ([11],))
    assert state == "42501"
    claimed_b = worker_b.execute("select job_id from pyjobq.job_claim('b', 10, null, '{11}')")
    assert sorted(r[0] for r in claimed_b.fetchall()) == sorted(restricted_jobs)


def test_another_team_cannot_finish_or_learn_about_a_held_job(
    conn: Conn, teams: dict[str, str], session: Callable[..., Conn]
) -> None:
    (held, other) = jobs(conn, RESTRICTED)
    worker_a = session("pyjobq_worker", teams["a"])
    worker_b = session("pyjobq_worker", teams["b"])
    tokens = dict(
        worker_b.execute("select job_id, lease_token from pyjobq.job_claim('b-1', 2, null, '{11}')")
    )
    # Even with the holder's worker id, attempt and lease token, team A is refused before
    # anything about the job is said: 42501, not JQ001.
    for call in (
        "select pyjobq.job_complete(%s, 'b-1', 1, p_lease_token => %s)",
        "select pyjobq.job_fail(%s, 'b-1', 1, 'x', p_lease_token => %s)",
        "select pyjobq.job_renew_lease(%s, 'b-1', 1, p_lease_token => %s)",
        "select pyjobq.job_release(%s, 'b-1', 1, p_lease_token => %s)",
    ):
        assert sqlstate_of(worker_a, call, (held, tokens[held])) == "42501", call
    # The batch functions report the job as not held, and leave it alone.
    for call in (
        "select completed from pyjobq.job_complete_many('b-1', %s, '{1}', p_lease_tokens => %s)",
        "select renewed from pyjobq.job_renew_lease_many('b-1', %s, '{1}', p_lease_tokens => %s)",
        "select released from pyjobq.job_release_many('b-1', %s, '{1}', %s)",
    ):
        assert worker_a.execute(call, ([held], [tokens[held]])).fetchall() == [(False,)], call
    status = conn.execute(
        "select status, worker_id from pyjobq.job_all where job_id = any (%s) order by job_id",
        ([held, other],),
    ).fetchall()
    assert status == [(2, "b-1"), (2, "b-1")]
    completed = worker_b.execute(
        "select completed from pyjobq.job_complete_many('b-1', %s, '{1,1}', p_lease_tokens => %s)",
        ([held, other], [tokens[held], tokens[other]]),
    ).fetchall()
    assert completed == [(True,), (True,)]


def test_enqueue_and_observe_follow_the_grants(
    conn: Conn, teams: dict[str, str], session: Callable[..., Conn]
) -> None:
    producer_a = session("pyjobq_producer", teams["a"])
    producer_b = session("pyjobq_producer", teams["b"])
    observer_a = session("pyjobq_observer", teams["a"])
    observer_b = session("pyjobq_observer", teams["b"])
    enqueue = 'select job_id from pyjobq.job_enqueue(%s, \'{"email": "x@example.com"}\')'
    assert sqlstate_of(producer_a, enqueue, (RESTRICTED,)) == "42501"
    assert (
        sqlstate_of(producer_a, "select pyjobq.job_enqueue_many(11, array['{}'::jsonb])") == "42501"
    )
    (job_b,) = one_row(producer_b, enqueue, (RESTRICTED,))
    (job_a,) = one_row(producer_a, enqueue, (OPEN,))
    # job_get: the payload of a restricted type is for its observers.
    assert sqlstate_of(producer_a, "select * from pyjobq.job_get(%s)", (job_b,)) == "42501"
    got = producer_b.execute("select payload from pyjobq.job_get(%s)", (job_b,)).fetchone()
    assert got == ({"email": "x@example.com"},)
    assert producer_b.execute("select job_id from pyjobq.job_get(%s)", (job_a,)).fetchone()
    # job_counts shows each observer the types it may observe.
    types_a = {r[0] for r in observer_a.execute("select job_type from pyjobq.job_counts()")}
    types_b = {r[0] for r in observer_b.execute("select job_type from pyjobq.job_counts()")}
    assert RESTRICTED not in types_a
    assert OPEN in types_a
    assert {OPEN, RESTRICTED} <= types_b


def test_revoking_the_last_grant_opens_the_type_again(
    conn: Conn, teams: dict[str, str], session: Callable[..., Conn]
) -> None:
    (job,) = jobs(conn, RESTRICTED, 1)
    worker_a = session("pyjobq_worker", teams["a"])
    q = JobQueue(conn)
    assert q.type_grants() == [
        TypeGrant(RESTRICTED, "TEAM_B", privilege, teams["b"])
        for privilege in ("enqueue", "observe", "work")
    ]
    assert q.type_revoke(RESTRICTED, teams["b"], "work")
    assert not q.type_revoke(RESTRICTED, teams["b"], "work")  # already gone
    claimed = worker_a.execute("select job_id from pyjobq.job_claim('a', 5, null, '{11}')")
    assert claimed.fetchall() == [(job,)]


def test_grants_are_managed_by_admins_with_checked_arguments(
    conn: Conn, teams: dict[str, str], session: Callable[..., Conn]
) -> None:
    worker = session("pyjobq_worker", teams["b"])
    admin = session("pyjobq_admin")
    grant = "select pyjobq.job_type_grant(%s, %s, %s)"
    # A worker cannot grant itself a type: the function is the admins'.
    assert sqlstate_of(worker, grant, (OPEN, teams["b"], "work")) == "42501"
    assert admin.execute(grant, (OPEN, teams["a"], "work")).fetchone() == (True,)
    assert admin.execute(grant, (OPEN, teams["a"], "work")).fetchone() == (False,)
    for args, state in [
        ((OPEN, "no_such_role", "work"), "22023"),
        ((OPEN, teams["a"], "own"), "22023"),
        ((OPEN, teams["a"], None), "22004"),
        ((99, teams["a"], "work"), "22023"),
        ((OPEN, "", "work"), "22023"),
    ]:
        assert sqlstate_of(admin, grant, args) == state, args
    # The owner is never locked out of a type.
    (job,) = jobs(conn, OPEN, 1)
    assert conn.execute("select job_id from pyjobq.job_claim('owner', 1)").fetchall() == [(job,)]


def enqueue_keyed(conn: Conn, job_type: int, key: str) -> tuple[Any, bool]:
    row = one_row(
        conn,
        "select job_id, created from pyjobq.job_enqueue(%s, p_dedupe_key => %s)",
        (job_type, key),
    )
    return row[0], row[1]


def test_a_dedupe_key_belongs_to_its_job_type(
    conn: Conn, teams: dict[str, str], session: Callable[..., Conn]
) -> None:
    """A producer of type 10 can neither read a job of type 11 through a shared key nor take
    the key from team B: a key means "this key, for this job type"."""
    producer_a = session("pyjobq_producer", teams["a"])
    producer_b = session("pyjobq_producer", teams["b"])
    b_job, b_created = enqueue_keyed(producer_b, RESTRICTED, "invoice:7")
    a_job, a_created = enqueue_keyed(producer_a, OPEN, "invoice:7")
    assert b_created
    assert a_created
    assert a_job != b_job  # not team B's job id
    # Taken first by team A on its own type, the key still creates team B's job.
    first_a, _ = enqueue_keyed(producer_a, OPEN, "order:9")
    first_b, created = enqueue_keyed(producer_b, RESTRICTED, "order:9")
    assert created
    assert first_b != first_a
    # Within a type the guard holds as before, and the batch form agrees.
    assert enqueue_keyed(producer_b, RESTRICTED, "invoice:7") == (b_job, False)
    rows = producer_a.execute(
        "select job_id, created from pyjobq.job_enqueue_many(%s, array['{}'::jsonb, '{}'],"
        " array['invoice:7', 'fresh'])",
        (OPEN,),
    ).fetchall()
    assert rows[0] == (a_job, False)
    assert rows[1][1] is True


def test_a_cancel_of_another_types_job_is_not_told_to_a_worker_that_may_not_work_it(
    conn: Conn, teams: dict[str, str], session: Callable[..., Conn]
) -> None:
    (job,) = jobs(conn, RESTRICTED, 1)
    worker_b = session("pyjobq_worker", teams["b"])
    attempt, token = one_row(worker_b, "select attempt, lease_token from pyjobq.job_claim('b', 1)")
    conn.execute("select pyjobq.job_cancel(array[%s]::uuid[])", (job,))
    worker_a = session("pyjobq_worker", teams["a"])
    asked = (
        "select cancelled from pyjobq.job_renew_lease_many('b', array[%s]::uuid[], array[%s],"
        " p_lease_tokens => array[%s]::uuid[])"
    )
    assert one_row(worker_a, asked, (job, attempt, token)) == (False,)
    assert one_row(worker_b, asked, (job, attempt, token)) == (True,)


def test_no_error_tells_a_co_worker_the_holders_token(
    conn: Conn, session: Callable[..., Conn]
) -> None:
    """Two members of the worker group: the one that holds no lease learns neither the holder's
    worker id nor its attempt from being refused, so it cannot forge the holder's calls."""
    (job,) = jobs(conn, 1, 1)
    holder, co_worker = session("pyjobq_worker"), session("pyjobq_worker")
    one_row(holder, "select attempt from pyjobq.job_claim('holder-7f3a', 1)")
    with pytest.raises(psycopg.Error) as refused:
        co_worker.execute(
            "select pyjobq.job_complete(%s, 'prober', 2, p_lease_token => gen_random_uuid())",
            (job,),
        )
    assert refused.value.sqlstate == "JQ001"
    diag = refused.value.diag
    told = " ".join(filter(None, [diag.message_primary, diag.message_detail, diag.message_hint]))
    assert "holder-7f3a" not in told
    assert "attempt 1" not in told


def test_list_cancel_and_watch_keep_to_the_types_a_role_may_use(
    conn: Conn, teams: dict[str, str], session: Callable[..., Conn]
) -> None:
    """job_list shows only the types the caller may observe; job_cancel (the producers' side of
    a type: enqueue) and job_watch (observe) refuse another team's job with 42501 and change
    nothing."""
    (open_job,), (restricted_job,) = jobs(conn, OPEN, 1), jobs(conn, RESTRICTED, 1)
    producer_a = session("pyjobq_producer", teams["a"])
    producer_b = session("pyjobq_producer", teams["b"])
    listed_a = {r[0] for r in producer_a.execute("select job_id from pyjobq.job_list()")}
    listed_b = {r[0] for r in producer_b.execute("select job_id from pyjobq.job_list()")}
    assert listed_a == {open_job}
    assert listed_b == {open_job, restricted_job}
    for call in ("select * from pyjobq.job_cancel(%s)", "select * from pyjobq.job_watch(%s)"):
        assert sqlstate_of(producer_a, call, ([restricted_job],)) == "42501"
    assert one_row(conn, "select status, notify_done from pyjobq.job_all where job_id = %s",
                   (restricted_job,)) == (1, False)  # fmt: skip
    outcome = one_row(producer_b, "select outcome from pyjobq.job_cancel(%s)", ([restricted_job],))
    assert outcome == ("cancelled",)
