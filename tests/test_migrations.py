"""The yoyo migrations build exactly the canonical schema, once, however they are run."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, NamedTuple
from uuid import UUID

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from yoyo import get_backend, read_migrations

from pyjobq import SCHEMA_VERSION, JobQueue, JobTypeConflict, LeaseLost
from pyjobq.cli import main
from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import (
    BOOKKEEPING_COMMENTS,
    Migrated,
    create_schema,
    migrate,
    migrations_dir,
    shipped_migrations,
    yoyo_url,
)
from tests.sqlhelp import FROZEN, freeze, lock_waits, one

CANONICAL_SQL = Path(__file__).resolve().parent.parent / "sql" / "pyjobq.sql"
RELEASED = migrations_dir() / "released.txt"


def released_pins() -> list[list[str]]:
    """Each line of released.txt: the release, the SHA-256 and the name of a migration."""
    lines = RELEASED.read_text().splitlines()
    return [line.split() for line in lines if line.strip() and not line.startswith("#")]


def psql_file(pg_server: LocalPostgres, path: Path, dsn: str) -> None:
    """``psql -1 -f path`` into the database, as the README installs without yoyo."""
    psql = [str(pg_server.bindir / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-1"]
    subprocess.run([*psql, "-f", str(path), dsn], capture_output=True, check=True)


def schema_dump(pg_server: LocalPostgres, dsn: str) -> str:
    """pg_dump of the pyjobq schema without yoyo's bookkeeping tables (which a schema
    installed with psql does not have), nor the history's day partitions, which the
    queue makes as days come (job_history_maintain)."""
    pg_dump = [str(pg_server.bindir / "pg_dump"), "--schema-only", "--schema=pyjobq"]
    bookkeeping = [f"--exclude-table=pyjobq.{table}" for table in BOOKKEEPING_COMMENTS]
    bookkeeping.append("--exclude-table=pyjobq.job_history_2*")
    out = subprocess.run(
        [*pg_dump, *bookkeeping, "--dbname", dsn],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # Newer pg_dump releases wrap the script in \restrict <random key> ... \unrestrict.
    keyed = ("\\restrict ", "\\unrestrict ")
    return "\n".join(line for line in out.splitlines() if not line.startswith(keyed))


def applied_counts(dsn: str, schema: str = "pyjobq") -> dict[str, int]:
    """How many times yoyo applied each migration to the database, by the bookkeeping in
    ``schema`` (pyjobq's, or public for yoyo's own command line)."""
    log = sql.Identifier(schema, "_yoyo_log")
    query = "select migration_id, count(*) from {} where operation = 'apply' group by 1"
    with psycopg.connect(dsn) as connection:
        rows = connection.execute(sql.SQL(query).format(log)).fetchall()
    return dict(rows)


def recorded(dsn: str) -> list[str]:
    """The migrations yoyo holds as applied (run, or marked as already there)."""
    with psycopg.connect(dsn) as connection:
        rows = connection.execute("select migration_id from pyjobq._yoyo_migration order by 1")
        return [r[0] for r in rows.fetchall()]


def public_tables(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as connection:
        rows = connection.execute(
            "select relname from pg_class where relnamespace = 'public'::regnamespace"
        )
        return [r[0] for r in rows.fetchall()]


def test_migrations_build_the_canonical_schema(
    pg_server: LocalPostgres, new_database: Callable[[], str]
) -> None:
    canonical = new_database()
    psql_file(pg_server, CANONICAL_SQL, canonical)
    migrated = new_database()
    migrate(migrated)

    expected = schema_dump(pg_server, canonical)
    assert "CREATE FUNCTION pyjobq." in expected
    assert "COMMENT ON FUNCTION pyjobq." in expected
    assert schema_dump(pg_server, migrated) == expected


# The tables every enqueue, claim and completion takes a lock on. An enqueue reads job_type
# before it inserts a job; a completion changes a job before it reads job_type.
HOT_TABLES = re.compile(
    r"^\s*(?:alter|lock)\s+table\s+(?:only\s+)?(pyjobq\.job(?:_type)?)\b", re.I | re.M
)


def test_no_step_from_0_2_0_on_takes_the_locks_of_two_hot_tables() -> None:
    """A step holds each lock it takes to its commit. One that holds job's while it waits for
    job_type's deadlocks with an enqueue under way, the other way round with a completion:
    each step from the first after 0.2.0 on changes one of them at most."""
    for path in sorted(migrations_dir().glob("00*.sql")):
        if int(path.name[:4]) < 28:
            continue
        tables = set(HOT_TABLES.findall(path.read_text()))
        assert len(tables) <= 1, f"{path.name} takes the locks of {sorted(tables)}"


def test_migrate_keeps_its_bookkeeping_in_the_pyjobq_schema(
    new_database: Callable[[], str],
) -> None:
    target = new_database()
    migrate(target)
    assert public_tables(target) == []
    assert recorded(target) == shipped_migrations()
    with psycopg.connect(target) as connection:
        comments = connection.execute(
            "select relname, obj_description(oid, 'pg_class') from pg_class"
            " where relnamespace = 'pyjobq'::regnamespace and relkind = 'r' and relname like %s",
            ("%yoyo%",),
        ).fetchall()
    assert {name for name, _ in comments} == set(BOOKKEEPING_COMMENTS)
    assert all(comment.startswith("yoyo-migrations: ") for _, comment in comments)
    # Dropping the schema uninstalls everything, the bookkeeping with it.
    with psycopg.connect(target, autocommit=True) as connection:
        connection.execute("drop schema pyjobq cascade")
    assert public_tables(target) == []
    assert migrate(target).applied == shipped_migrations()


def test_yoyo_command_line_applies_the_migrations(
    pg_server: LocalPostgres, new_database: Callable[[], str], tmp_path: Path
) -> None:
    by_cli = new_database()
    dbname = psycopg.conninfo.conninfo_to_dict(by_cli)["dbname"]
    url = f"postgresql+psycopg://{pg_server.user}@{pg_server.host}:{pg_server.port}/{dbname}"
    yoyo_apply = [sys.executable, "-m", "yoyo", "apply", "--batch", "--no-config-file"]
    subprocess.run(
        [*yoyo_apply, "--database", url, str(migrations_dir())],
        cwd=tmp_path,
        capture_output=True,
        check=True,
    )
    by_api = new_database()
    migrate(by_api)

    assert schema_dump(pg_server, by_cli) == schema_dump(pg_server, by_api)
    # yoyo's command line keeps its bookkeeping in public, as yoyo always does; migrate()
    # adopts what it installed and runs nothing again.
    assert applied_counts(by_cli, "public") == dict.fromkeys(shipped_migrations(), 1)
    assert migrate(by_cli) == Migrated(applied=[], adopted=shipped_migrations())
    assert recorded(by_cli) == shipped_migrations()
    assert applied_counts(by_cli) == {}


def test_concurrent_migrators_apply_each_migration_once(new_database: Callable[[], str]) -> None:
    target = new_database()
    script = "import sys; from pyjobq.migrate import migrate; migrate(sys.argv[1])"
    migrators = [
        subprocess.Popen(
            [sys.executable, "-c", script, target],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    stderrs = [migrator.communicate(timeout=120)[1] for migrator in migrators]

    assert [migrator.returncode for migrator in migrators] == [0, 0], stderrs
    assert applied_counts(target) == dict.fromkeys(shipped_migrations(), 1)


def test_migrate_waits_for_the_yoyo_lock(new_database: Callable[[], str]) -> None:
    target = new_database()
    # yoyo's own tables first: creating them takes the lock whatever migrate() does.
    with psycopg.connect(target, autocommit=True) as connection:
        create_schema(connection)
    with get_backend(yoyo_url(target)) as backend:
        backend.ensure_internal_schema_updated()
    holder = psycopg.connect(target)
    # An uncommitted lock row: a second INSERT of it blocks on the primary key, which
    # pg_stat_activity shows as a lock wait, instead of failing and polling.
    holder.execute("insert into pyjobq.yoyo_lock (locked, ctime, pid) values (1, now(), 0)")

    errors: list[BaseException] = []

    def run() -> None:
        try:
            migrate(target + " application_name=pyjobq_waiting_migrator")
        except BaseException as exc:
            errors.append(exc)

    migrator = threading.Thread(target=run)
    migrator.start()
    # Activity is read from its own connection: inside a transaction it is a frozen snapshot.
    observer = psycopg.connect(target, autocommit=True)
    try:
        deadline = time.monotonic() + 30
        waiting = False
        while not waiting and migrator.is_alive() and time.monotonic() < deadline:
            waiting = observer.execute(
                "select exists (select from pg_stat_activity"
                " where application_name = 'pyjobq_waiting_migrator'"
                " and wait_event_type = 'Lock' and query ilike '%yoyo_lock%')"
            ).fetchone() == (True,)
        assert waiting, errors
        # Nothing applied while it waits: the schema holds yoyo's tables only.
        functions = observer.execute("select to_regproc('pyjobq.schema_version')").fetchone()
        assert functions == (None,)
    finally:
        observer.close()
        holder.rollback()
        holder.close()
        migrator.join(timeout=120)

    assert not migrator.is_alive()
    assert errors == []
    assert applied_counts(target) == dict.fromkeys(shipped_migrations(), 1)


def test_migrate_again_is_a_no_op(
    pg_server: LocalPostgres, new_database: Callable[[], str]
) -> None:
    target = new_database()
    migrate(target)
    before = schema_dump(pg_server, target)

    dbname = psycopg.conninfo.conninfo_to_dict(target)["dbname"]
    migrate(f"postgresql://{pg_server.user}@{pg_server.host}:{pg_server.port}/{dbname}")

    assert schema_dump(pg_server, target) == before
    assert applied_counts(target) == dict.fromkeys(shipped_migrations(), 1)


def test_test_databases_come_fully_migrated(dsn: str) -> None:
    # Cloned from the template: every shipped step is there already, applied once.
    assert applied_counts(dsn) == dict.fromkeys(shipped_migrations(), 1)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("select pyjobq.schema_version()").fetchone() == (SCHEMA_VERSION,)


def jobs_in_every_state(dsn: str) -> dict[str, Any]:
    """On the schema of the first step, through its own signatures (as a client of that release
    calls them): one job in each state, and a lease that expired."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        freeze(conn, FROZEN)
        ids = [
            row[0]
            for row in conn.execute(
                "select job_id from pyjobq.job_enqueue_many(1,"
                " array(select jsonb_build_object('n', n) from generate_series(0, 4) n))"
                " order by ord"
            )
        ]
        held, done, dead, expired = (
            Held(*row)
            for row in conn.execute("select job_id, attempt from pyjobq.job_claim('old-w1', 4, 60)")
        )
        conn.execute(
            "select pyjobq.job_complete(%s, 'old-w1', %s, '{\"ok\": true}')",
            (done.job_id, done.attempt),
        )
        conn.execute(
            "select pyjobq.job_fail(%s, 'old-w1', %s, 'broken', p_dead_letter => true)",
            (dead.job_id, dead.attempt),
        )
        conn.execute(
            "update pyjobq.job set lease_until = %s where job_id = %s",
            (FROZEN - timedelta(seconds=1), expired.job_id),
        )
    return {"pending": ids[4], "held": held, "done": done.job_id, "dead": dead.job_id,
            "expired": expired.job_id}  # fmt: skip


class Held(NamedTuple):
    job_id: UUID
    attempt: int


def assert_old_rows_work_on_the_new_schema(dsn: str, jobs: dict[str, Any]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        q = JobQueue(conn)
        freeze(conn, FROZEN)
        assert q.schema_version() == SCHEMA_VERSION
        held = jobs["held"]
        # An install that has jobs keeps accepting its clients' calls without a lease token.
        assert q.settings().require_lease_token is False
        # The lease taken before the upgrade still fences: only its holder may finish it.
        with pytest.raises(LeaseLost):
            q.complete(held.job_id, "new-w2", held.attempt)
        q.complete(held.job_id, "old-w1", held.attempt, {"after": "upgrade"})
        (reaped,) = q.reap()
        assert (reaped.job_id, reaped.worker_id) == (jobs["expired"], "old-w1")
        (claimed,) = q.claim("new-w2", 10)
        assert (claimed.job_id, claimed.attempt) == (jobs["pending"], 1)
        q.complete(claimed.job_id, "new-w2", claimed.attempt)
        statuses: dict[UUID, int] = dict(
            conn.execute("select job_id, status from pyjobq.job_all").fetchall()
        )
    assert statuses == {
        jobs["pending"]: 3,
        held.job_id: 3,
        jobs["done"]: 3,
        jobs["dead"]: 4,
        jobs["expired"]: 1,  # reaped: PENDING again after its backoff
    }


def test_psql_upgrade_keeps_old_jobs_working(
    pg_server: LocalPostgres, new_database: Callable[[], str]
) -> None:
    # The README's path without yoyo: psql -1 -f each migration past the installed version.
    target = new_database()
    first, *later = [migrations_dir() / f"{m}.sql" for m in shipped_migrations()]
    psql_file(pg_server, first, target)
    jobs = jobs_in_every_state(target)
    for step in later:
        psql_file(pg_server, step, target)
    assert_old_rows_work_on_the_new_schema(target, jobs)
    canonical = new_database()
    psql_file(pg_server, CANONICAL_SQL, canonical)
    assert schema_dump(pg_server, target) == schema_dump(pg_server, canonical)


def test_migrate_upgrades_a_database_with_jobs_from_the_first_step(
    new_database: Callable[[], str],
) -> None:
    target = new_database()
    migrations = read_migrations(str(migrations_dir()))
    with psycopg.connect(target, autocommit=True) as connection:
        create_schema(connection)
    with get_backend(yoyo_url(target)) as backend, backend.lock():
        backend.apply_migrations(backend.to_apply(migrations[:1]))
    jobs = jobs_in_every_state(target)
    migrate(target)
    assert applied_counts(target) == dict.fromkeys(shipped_migrations(), 1)
    assert_old_rows_work_on_the_new_schema(target, jobs)


def apply_until(target: str, migration: str, including: bool = False) -> None:
    """Apply the shipped migrations before ``migration`` (and it too when ``including``)."""
    migrations = read_migrations(str(migrations_dir()))
    end = [m.id for m in migrations].index(migration) + int(including)
    with psycopg.connect(target, autocommit=True) as connection:
        create_schema(connection)
    with get_backend(yoyo_url(target)) as backend, backend.lock():
        backend.apply_migrations(backend.to_apply(migrations[:end]))


def end_two_of_three(conn: psycopg.Connection[Any]) -> tuple[Any, Any, Any]:
    """Three jobs enqueued, the first completed and the second DEAD: their (job_id, attempt,
    lease_token) rows, and the third's id."""
    ids = [one(conn, "select job_id from pyjobq.job_enqueue(1)") for _ in range(3)]
    done, dead = conn.execute(
        "select job_id, attempt, lease_token from pyjobq.job_claim('w1', 2)"
    ).fetchall()
    conn.execute("select pyjobq.job_complete(%s, 'w1', %s, null, %s)", done)
    conn.execute("select * from pyjobq.job_fail(%s, 'w1', %s, 'x', null, true, %s)", dead)
    return done, dead, ids[2]


def test_the_upgrade_to_the_history_keeps_the_default_partition_empty(
    new_database: Callable[[], str],
) -> None:
    """Schema 27 moves the jobs that ended before it into the partition of the upgrade's day,
    which reaches back to the first job: the default partition, which each day's attach reads
    while holding it, stays empty, and the old history goes with one drop."""
    target = new_database()
    apply_until(target, "0027_history")
    with psycopg.connect(target, autocommit=True) as conn:
        done, dead, pending = end_two_of_three(conn)
        today = one(conn, "select (now() at time zone 'UTC')::date")
    migrate(target)
    day = f"job_history_{today:%Y%m%d}"
    with psycopg.connect(target, autocommit=True) as conn:
        placed = conn.execute(
            "select job_id, tableoid::regclass::text from pyjobq.job"
            " union all select job_id, tableoid::regclass::text from pyjobq.job_history"
        ).fetchall()
        assert sorted(placed) == sorted(
            [(done[0], f"pyjobq.{day}"), (dead[0], f"pyjobq.{day}"), (pending, "pyjobq.job")]
        )
        assert one(conn, "select count(*) from pyjobq.job_history_default") == 0
        # Its day made, the maintainer makes tomorrow's; once the day is past, one drop.
        assert one(conn, "select pyjobq.job_history_maintain()") == 1
        freeze(conn, f"{today + timedelta(days=2)} 00:00+00")
        assert one(conn, "select pyjobq.job_prune('1 day')") == 2
        assert one(conn, "select to_regclass(%s)", (f"pyjobq.{day}",)) is None


def test_released_migrations_never_change() -> None:
    """Each migration a release shipped is as it shipped (released.txt pins its SHA-256), and
    the migrations no release shipped yet come after every one that was."""
    pins = released_pins()
    changed = [
        f"{name} (as {release} shipped it)"
        for release, digest, name in pins
        if hashlib.sha256((migrations_dir() / name).read_bytes()).hexdigest() != digest
    ]
    assert not changed, "released migrations changed: put the change in a new migration"
    shipped = [f"{m}.sql" for m in shipped_migrations()]
    pinned = sorted(name for _, _, name in pins)
    assert shipped[: len(pinned)] == pinned


def test_an_install_upgraded_by_the_released_schema_27_gets_its_old_history_out_of_the_default(
    new_database: Callable[[], str],
) -> None:
    """0.2.0's schema 27 left the jobs that had ended before it in the default partition, which
    job_prune never drops and each day's attach reads while holding it; schema 28 moves them to
    a partition of their own, reaching up to the first day partition, which goes with one drop."""
    target = new_database()
    apply_until(target, "0027_history")
    with psycopg.connect(target, autocommit=True) as conn:
        freeze(conn, "2030-01-01 12:00+00")
        done, dead, pending = end_two_of_three(conn)
    apply_until(target, "0027_history", including=True)
    with psycopg.connect(target, autocommit=True) as conn:
        freeze(conn, "2030-01-03 12:00+00")
        assert one(conn, "select pyjobq.job_history_maintain()") == 2  # the 3rd and the 4th
        assert one(conn, "select count(*) from pyjobq.job_history_default") == 2
    migrate(target)
    with psycopg.connect(target, autocommit=True) as conn:
        placed = conn.execute(
            "select job_id, tableoid::regclass::text from pyjobq.job"
            " union all select job_id, tableoid::regclass::text from pyjobq.job_history"
        ).fetchall()
        assert sorted(placed) == sorted(
            [
                (done[0], "pyjobq.job_history_20300102"),
                (dead[0], "pyjobq.job_history_20300102"),
                (pending, "pyjobq.job"),
            ]
        )
        assert one(conn, "select count(*) from pyjobq.job_history_default") == 0
        freeze(conn, "2030-01-04 00:00+00")
        assert one(conn, "select pyjobq.job_prune('1 day')") == 2
        assert one(conn, "select to_regclass('pyjobq.job_history_20300102')") is None
        assert one(conn, "select to_regclass('pyjobq.job_history_20300103')") is not None


def test_schema_28_moves_the_old_history_past_a_worker_that_reads_it_and_then_writes_to_it(
    new_database: Callable[[], str],
) -> None:
    """A 0.2.0 worker that read the history and then completes a job holds the history while
    schema 28's move waits for it: the move lets the completion through instead of deadlocking
    with it, and then moves the old history as it does alone."""
    target = new_database()
    apply_until(target, "0027_history")
    with psycopg.connect(target, autocommit=True) as conn:
        freeze(conn, "2030-01-01 12:00+00")
        done, dead, pending = end_two_of_three(conn)
    apply_until(target, "0027_history", including=True)
    failed: list[BaseException] = []

    def move() -> None:
        try:
            apply_until(target, "0028_after_the_release", including=True)
        except BaseException as exc:  # reported by the assertion below
            failed.append(exc)

    with psycopg.connect(target, autocommit=True) as conn:
        freeze(conn, "2030-01-03 12:00+00")
        assert one(conn, "select pyjobq.job_history_maintain()") == 2
        claimed = conn.execute(
            "select job_id, attempt, lease_token from pyjobq.job_claim('w1', 1)"
        ).fetchone()
        assert claimed is not None
        assert claimed[0] == pending
        with psycopg.connect(target) as worker:
            freeze(worker, "2030-01-03 12:00+00")
            assert one(worker, "select count(*) from pyjobq.job_history") == 2
            mover = threading.Thread(target=move)
            mover.start()
            deadline = time.monotonic() + 30
            while not lock_waits(conn):
                assert mover.is_alive(), failed
                assert time.monotonic() < deadline
                time.sleep(0.01)
            worker.execute("select pyjobq.job_complete(%s, 'w1', %s, null, %s)", claimed)
            worker.commit()
        mover.join(timeout=30)
        assert not mover.is_alive()
        assert not failed, failed
        placed = conn.execute(
            "select job_id, tableoid::regclass::text from pyjobq.job_history"
        ).fetchall()
        assert sorted(placed) == sorted(
            [
                (done[0], "pyjobq.job_history_20300102"),
                (dead[0], "pyjobq.job_history_20300102"),
                (pending, "pyjobq.job_history_20300103"),
            ]
        )


def test_migrate_adopts_a_schema_installed_with_psql(
    pg_server: LocalPostgres, new_database: Callable[[], str]
) -> None:
    whole, first = new_database(), new_database()
    psql_file(pg_server, CANONICAL_SQL, whole)
    psql_file(pg_server, migrations_dir() / f"{shipped_migrations()[0]}.sql", first)
    jobs = jobs_in_every_state(first)

    # Installed whole: every step is recorded, none runs again ("schema already exists").
    assert migrate(whole) == Migrated(applied=[], adopted=shipped_migrations())
    assert recorded(whole) == shipped_migrations()
    assert applied_counts(whole) == {}
    # Installed at the first step: the later steps run, on the jobs it has.
    assert migrate(first) == Migrated(shipped_migrations()[1:], shipped_migrations()[:1])
    assert recorded(first) == shipped_migrations()
    assert applied_counts(first) == dict.fromkeys(shipped_migrations()[1:], 1)
    assert_old_rows_work_on_the_new_schema(first, jobs)
    assert schema_dump(pg_server, first) == schema_dump(pg_server, whole)


def test_the_command_says_what_it_adopted_and_what_it_applied(
    pg_server: LocalPostgres, new_database: Callable[[], str]
) -> None:
    target = new_database()
    psql_file(pg_server, migrations_dir() / f"{shipped_migrations()[0]}.sql", target)
    first, *later = shipped_migrations()
    said = CliRunner().invoke(main, ["migrate", "--dsn", target])
    assert said.exit_code == 0, said.output
    assert said.output.splitlines() == [
        f"adopted {first}: installed before, recorded as applied",
        f"applied {', '.join(later)}: pyjobq schema version {SCHEMA_VERSION}",
    ]


def test_the_upgrade_to_keys_per_job_type_keeps_every_key_where_it_was(
    new_database: Callable[[], str],
) -> None:
    """Schema 3 makes a dedupe key a key of its job type. Before it, one active job per key over
    every type: so no key is active on two types at the upgrade, and each active key stays
    with its job, now within that job's type."""
    target = new_database()
    migrations = read_migrations(str(migrations_dir()))
    with psycopg.connect(target, autocommit=True) as connection:
        create_schema(connection)
    with get_backend(yoyo_url(target)) as backend, backend.lock():
        backend.apply_migrations(backend.to_apply(migrations[:2]))
    with psycopg.connect(target, autocommit=True) as conn:
        # Schema 2's enqueue and claim, as its clients call them.
        def old_enqueue(job_type: int, key: str) -> Any:
            return one(
                conn,
                "select job_id from pyjobq.job_enqueue(%s, p_dedupe_key => %s)",
                (job_type, key),
            )

        search = old_enqueue(1, "k-search")
        outbox = old_enqueue(2, "k-outbox")
        (claimed,) = conn.execute("select job_id from pyjobq.job_claim('w', 1, null, '{1}')")
        assert claimed == (search,)  # claimed first: RUNNING across the upgrade
        assert old_enqueue(2, "k-search") == search  # schema 2: the leak
    migrate(target)
    with psycopg.connect(target, autocommit=True) as conn:
        q = JobQueue(conn)
        for job_type, key, job in [(1, "k-search", search), (2, "k-outbox", outbox)]:
            again = q.enqueue(job_type, dedupe_key=key)
            assert (again.job_id, again.created) == (job, False)
        other_type = q.enqueue(2, dedupe_key="k-search")
        assert other_type.created
        assert other_type.job_id != search
        count = conn.execute("select count(*) from pyjobq.job").fetchone()
    assert count == (3,)


def test_migrate_registers_the_applications_job_types_once(
    new_database: Callable[[], str],
) -> None:
    target = new_database()
    types = {100: "PROCESS_ORDER", 101: "SEND_EMAIL"}
    assert migrate(target, job_types=types).registered == ["PROCESS_ORDER", "SEND_EMAIL"]
    again = migrate(target, job_types=types)
    assert (again.applied, again.registered) == ([], [])
    with psycopg.connect(target) as conn:
        assert JobQueue(conn).type_code("send_email") == 101
    with pytest.raises(JobTypeConflict):
        migrate(target, job_types={100: "SOMETHING_ELSE"})
