"""Argument junk for every public function: a result or a pyjobq error, never anything else.

Hypothesis feeds each binding method integers at and beyond every range (and beyond int8),
empty, blank, huge, unicode and SQL-looking text, nulls, odd arrays and JSON of every shape.
Each call must either succeed or raise :class:`InvalidArgument` / :class:`JobStateError`, and
may change only the rows its own result names: a fixed set of background jobs in every state
is snapshotted around each call. Every example runs in a transaction that is rolled back, so
examples do not see each other's rows. Payloads are stored verbatim or refused with a clear
error. Finally, no function builds SQL at run time (no EXECUTE in any body).

``PYJOBQ_TEST_SCALE=10`` runs ten times as many examples.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyjobq import InvalidArgument, JobQueue, JobStateError
from pyjobq.errors import translate

Conn = psycopg.Connection[Any]

SCALE = float(os.environ.get("PYJOBQ_TEST_SCALE", "1"))

FUZZ = settings(
    max_examples=int(150 * SCALE),
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.large_base_example,
        HealthCheck.data_too_large,
    ],
)

SQLISH = [
    "'); drop table pyjobq.job_all; --",
    "1; delete from pyjobq.job_all",
    "' or '1'='1",
    "$$; truncate pyjobq.job_all; $$",
    '"; select pg_sleep(10); --',
    "%s %(x)s {} \\x00 \\\\",
    "pyjobq.job_all",
    "null",
]

BOUNDARY_INTS = [
    -(2**63), -(2**31) - 1, -(2**31), -32769, -32768, -1, 0, 1, 2, 80, 81, 100, 200, 201,
    1000, 1001, 10000, 10001, 32767, 32768, 86400, 86401, 100000, 100001,
    2**31 - 1, 2**31, 2**63 - 1, 2**63, 10**40,
]  # fmt: skip

# Text without NUL (PostgreSQL text cannot hold it) and without lone surrogates (not UTF-8).
SAFE_CHARS = st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00")

ints = st.one_of(st.none(), st.sampled_from(BOUNDARY_INTS), st.integers())
texts = st.one_of(
    st.none(),
    st.sampled_from(["", " ", "\t\n", "x" * 80, "x" * 81, "k" * 200, "k" * 201, "é" * 200]),
    st.sampled_from(SQLISH),
    st.text(SAFE_CHARS, max_size=90),
    st.sampled_from(["x" * 100_000, "ü" * 20_000]),
)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([2**64, -(2**80), 10**300]),
    # JSON numbers are decimals: beyond 2**53 a float and the decimal jsonb keeps differ.
    st.floats(min_value=-(2.0**53), max_value=2.0**53, allow_nan=False),
    st.text(SAFE_CHARS, max_size=40),
    st.sampled_from(SQLISH),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(SAFE_CHARS, max_size=10), inner)
    ),
    max_leaves=25,
)
payloads = st.one_of(
    st.none(),
    st.dictionaries(st.text(SAFE_CHARS, max_size=20), json_values, max_size=6),
    json_values,  # arrays and scalars must be refused
    st.just({"nul": "a\x00b"}),  # \u0000 is not allowed in jsonb
    st.just({"huge": "y" * 2_000_000}),
)
timestamps = st.one_of(
    st.none(),
    st.datetimes(timezones=st.just(UTC)),
    st.sampled_from(
        [datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC), datetime.now(UTC)]
    ),
)
floats = st.one_of(st.none(), st.floats(), st.sampled_from([-0.0, 31536000.0, 31536000.5]))
intervals = st.one_of(
    st.none(),
    st.timedeltas(),
    st.sampled_from([timedelta(0), timedelta(-1), timedelta.max, timedelta.min]),
)


@dataclass
class Background:
    """Jobs in every state that a fuzzed call must leave alone unless its result names them."""

    ids: list[UUID]
    running: tuple[UUID, str, int]


@pytest.fixture
def background(conn: Conn) -> Background:
    q = JobQueue(conn)
    ids = [q.enqueue(1, {"n": i}, dedupe_key=f"bg{i}").job_id for i in range(5)]
    ids.append(q.enqueue(2, {"later": True}, run_after=datetime(2099, 1, 1, tzinfo=UTC)).job_id)
    done, dead, running = q.claim("bg-worker", 3)
    q.complete(done.job_id, "bg-worker", done.attempt, {"r": 1})
    q.fail(dead.job_id, "bg-worker", dead.attempt, "gone", dead_letter=True)
    return Background(ids, (running.job_id, "bg-worker", running.attempt))


def snapshot(conn: Conn) -> dict[UUID, tuple[Any, ...]]:
    rows = conn.execute("select j.job_id, j.* from pyjobq.job_all j").fetchall()
    return {r[0]: r[1:] for r in rows}


@dataclass
class Outcome:
    result: Any
    error: Exception | None
    changed: set[UUID]
    before: dict[UUID, tuple[Any, ...]]
    after: dict[UUID, tuple[Any, ...]]


@pytest.fixture
def attempt(conn: Conn, background: Background) -> Callable[[Callable[[JobQueue], Any]], Outcome]:
    """Run one call in a rolled-back transaction; return its result or error and what changed."""
    q = JobQueue(conn)

    def run(call: Callable[[JobQueue], Any]) -> Outcome:
        with conn.transaction(force_rollback=True):
            before = snapshot(conn)
            result: Any = None
            error: Exception | None = None
            try:
                with conn.transaction():
                    result = call(q)
            except (InvalidArgument, JobStateError) as e:
                error = e
            after = snapshot(conn)
        changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
        if error is not None:
            assert not changed
        return Outcome(result, error, changed, before, after)

    return run


def job_ids(background: Background) -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from([*background.ids, background.running[0]]), st.uuids())


@st.composite
def holder(draw: Any, background: Background) -> tuple[UUID, Any, Any]:
    """Mostly junk, sometimes exactly the background holder's token (which must work)."""
    if draw(st.integers(0, 4)) == 0:
        return background.running
    return draw(job_ids(background)), draw(texts), draw(ints)


def is_json_nul_free(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" not in value
    if isinstance(value, dict):
        return all(is_json_nul_free(k) and is_json_nul_free(v) for k, v in value.items())
    if isinstance(value, list):
        return all(is_json_nul_free(v) for v in value)
    return True


# -- one test per function --------------------------------------------------------------------


def test_enqueue(attempt: Any, background: Background) -> None:
    @FUZZ
    @given(ints, payloads, ints, timestamps, texts, ints)
    def check(
        job_type: Any, payload: Any, priority: Any, run_after: Any, key: Any, mx: Any
    ) -> None:
        out = attempt(lambda q: q.enqueue(job_type, payload, priority, run_after, key, mx))
        if out.error is not None:
            return
        assert isinstance(payload, dict | None)
        assert is_json_nul_free(payload)
        if out.result.created:
            assert out.changed == {out.result.job_id}
            row = out.after[out.result.job_id]
            columns = ("payload", "dedupe_key", "priority", "max_attempts")
            stored = dict(zip(columns, (row[4], row[6], row[3], row[8]), strict=True))
            assert stored["payload"] == (payload or {}), "payload stored verbatim"
            assert stored["dedupe_key"] == key, "dedupe key stored verbatim"
        else:
            assert not out.changed
            assert out.result.job_id in out.before

    check()


def test_enqueue_many(attempt: Any, background: Background) -> None:
    @FUZZ
    @given(
        ints,
        st.lists(payloads, max_size=4),
        st.one_of(st.none(), st.lists(texts, max_size=5)),
        ints,
        timestamps,
        ints,
    )
    def check(job_type: Any, items: Any, keys: Any, priority: Any, run_after: Any, mx: Any) -> None:
        out = attempt(lambda q: q.enqueue_many(job_type, items, keys, priority, run_after, mx))
        if out.error is not None:
            return
        assert len(out.result) == len(items) >= 1
        created = {r.job_id for r in out.result if r.created}
        assert out.changed == created
        for item, r in zip(items, out.result, strict=True):
            if r.created:
                assert out.after[r.job_id][4] == item

    check()


def test_claim(attempt: Any, background: Background) -> None:
    @FUZZ
    @given(texts, ints, ints, st.one_of(st.none(), st.lists(ints, max_size=4)))
    def check(worker: Any, limit: Any, lease: Any, types: Any) -> None:
        out = attempt(lambda q: q.claim(worker, limit, lease, types))
        if out.error is None:
            assert out.changed == {c.job_id for c in out.result}
            assert all(out.before[c.job_id][2] == 1 for c in out.result)

    check()


def test_complete(attempt: Any, background: Background) -> None:
    @FUZZ
    @given(holder(background), st.one_of(st.none(), json_values))
    def check(token: Any, result: Any) -> None:
        out = attempt(lambda q: q.complete(*token, result))
        if out.error is None:
            assert token == background.running
            assert out.changed == {token[0]}

    check()


def test_complete_many(attempt: Any, background: Background) -> None:
    @FUZZ
    @given(
        texts,
        st.lists(job_ids(background), max_size=4),
        st.lists(ints, max_size=4),
        st.one_of(st.none(), st.lists(st.one_of(st.none(), json_values), max_size=4)),
    )
    def check(worker: Any, ids: Any, attempts: Any, results: Any) -> None:
        out = attempt(lambda q: q.complete_many(worker, ids, attempts, results))
        if out.error is None:
            assert [c.job_id for c in out.result] == ids
            assert out.changed == {c.job_id for c in out.result if c.completed}

    check()


def test_fail(attempt: Any, background: Background) -> None:
    @FUZZ
    @given(holder(background), texts, floats, st.one_of(st.none(), st.booleans()))
    def check(token: Any, error: Any, delay: Any, dead: Any) -> None:
        out = attempt(lambda q: q.fail(*token, error, delay, dead))
        if out.error is None:
            assert token == background.running
            assert out.changed == {token[0]}
            assert delay is None or (math.isfinite(delay) and 0 <= delay <= 31536000)
            stored = out.after[token[0]][13]
            assert stored == (None if error is None else error[:10000])

    check()


def test_renew_lease_and_release(attempt: Any, background: Background) -> None:
    @FUZZ
    @given(holder(background), ints, st.booleans())
    def check(token: Any, lease: Any, release: bool) -> None:
        if release:
            out = attempt(lambda q: q.release(*token))
        else:
            out = attempt(lambda q: q.renew_lease(*token, lease))
        if out.error is None:
            assert token == background.running
            assert out.changed == {token[0]}

    check()


def test_reap_redrive_prune(attempt: Any, background: Background) -> None:
    @FUZZ
    @given(
        ints,
        st.one_of(st.none(), st.lists(job_ids(background), max_size=4)),
        ints,
        intervals,
        st.sampled_from(["reap", "redrive", "prune"]),
    )
    def check(limit: Any, ids: Any, job_type: Any, older_than: Any, which: str) -> None:
        if which == "reap":
            out = attempt(lambda q: q.reap(limit))
            if out.error is None:
                assert out.changed == {r.job_id for r in out.result}
        elif which == "redrive":
            out = attempt(lambda q: q.redrive(ids, job_type, limit))
            if out.error is None:
                assert out.changed == set(out.result)
                assert all(out.before[i][2] == 4 for i in out.result)
        else:
            out = attempt(lambda q: q.prune(older_than, limit))
            if out.error is None:
                assert len(out.changed) == out.result
                assert all(i not in out.after for i in out.changed), "prune only deletes"
                assert all(out.before[i][2] in (3, 4) for i in out.changed)

    check()


def test_type_register_and_readers(conn: Conn, attempt: Any) -> None:
    @FUZZ
    @given(ints, texts)
    def check(code: Any, name: Any) -> None:
        out = attempt(lambda q: q.type_register(code, name))
        assert not out.changed
        if out.error is None:
            assert (out.result.job_type, out.result.name) == (code, name)
        assert attempt(lambda q: q.counts()).error is None
        assert attempt(lambda q: q.types()).error is None

    check()


# -- payload shapes the generators above cannot reach ----------------------------------------


def test_sql_looking_values_are_stored_verbatim(conn: Conn) -> None:
    q = JobQueue(conn)
    for text in SQLISH:
        job = q.enqueue(1, {"q": text, text: [text]}, dedupe_key=text)
        (claimed,) = q.claim("w", 1, job_types=[1])
        assert claimed.job_id == job.job_id
        assert claimed.payload == {"q": text, text: [text]}
        assert claimed.dedupe_key == text
        q.fail(job.job_id, "w", 1, text, dead_letter=True)
        row = conn.execute(
            "select last_error from pyjobq.job_all where job_id = %s", (job.job_id,)
        ).fetchone()
        assert row == (text,)
    assert conn.execute("select count(*) from pyjobq.job_all").fetchone() == (len(SQLISH),)


def test_deep_and_huge_payloads_are_stored_verbatim_or_refused_clearly(conn: Conn) -> None:
    q = JobQueue(conn)
    deep: Any = {"leaf": "é\U0001f600"}
    for _ in range(200):  # 400 levels: as deep as Python's json module goes comfortably
        deep = {"a": [deep]}
    big = {"blob": "z" * 20_000_000, "many": list(range(100_000))}
    for payload in (deep, big):
        job = q.enqueue(1, payload)
        row = conn.execute("select payload from pyjobq.job_all where job_id = %s", (job.job_id,))
        assert row.fetchone() == (payload,)
    # Nesting deeper than the server's stack allows is refused with 54001 and stores nothing.
    count = conn.execute("select count(*) from pyjobq.job_all").fetchone()
    text = '{"a":' * 100_000 + "1" + "}" * 100_000
    with pytest.raises(psycopg.errors.StatementTooComplex) as refused:
        conn.execute("select pyjobq.job_enqueue(1, %s::jsonb)", (text,))
    assert isinstance(translate(refused.value), InvalidArgument)  # what the binding raises
    assert conn.execute("select count(*) from pyjobq.job_all").fetchone() == count


# -- static check -------------------------------------------------------------------------------


def strip_comments_and_literals(source: str) -> Iterator[str]:
    """The code of a function body with -- comments and '...' literals removed, line by line."""
    without_literals = re.sub(r"'(?:[^']|'')*'", "''", source)
    for line in without_literals.splitlines():
        yield line.split("--", 1)[0]


# The history's partitions are named by their day: making, attaching, counting and dropping
# one takes a statement built at run time. Each such statement takes its names from the
# catalog (a regclass) or from to_char of a date, quoted by format's %I, and its values as
# %L literals of dates or as USING parameters; no argument of a caller reaches it (the
# caller's p_days_ahead and p_older_than are checked numbers and intervals).
# Partition DDL, whose names are days, and the grants, whose names are api_grant's signatures.
DYNAMIC = {"_history_day", "job_prune", "grant_roles"}


def test_no_function_builds_sql_at_run_time(conn: Conn) -> None:
    """Dynamic SQL (EXECUTE) is how injection gets in; every statement here is static, but for
    the partition DDL of the history, whose names are days, and the grants from api_grant."""
    rows = conn.execute(
        "select p.proname, l.lanname, p.prosrc from pg_proc p"
        " join pg_namespace n on n.oid = p.pronamespace"
        " join pg_language l on l.oid = p.prolang"
        " where n.nspname = 'pyjobq'"
    ).fetchall()
    assert len(rows) >= 15
    dynamic = re.compile(r"(?<!grant )(?<!revoke )\bexecute\b", re.IGNORECASE)
    offenders = {
        name: line.strip()
        for name, _, source in rows
        for line in strip_comments_and_literals(source)
        if dynamic.search(" ".join(line.split()))
    }
    assert set(offenders) == DYNAMIC
    assert {lang for _, lang, _ in rows} <= {"sql", "plpgsql"}
    # The check itself catches the thing it looks for.
    probe = "begin\n  execute format('select %I', p_x);\nend"
    assert any(dynamic.search(line) for line in strip_comments_and_literals(probe))


def test_fuzz_sees_a_fresh_uuid_as_not_found(attempt: Any) -> None:
    out = attempt(lambda q: q.complete(uuid4(), "w", 1))
    assert type(out.error).__name__ == "JobNotFound"
