"""pyjobq behind a real PgBouncer in transaction pooling mode.

Transaction pooling hands each transaction whichever server connection is free, so nothing may
outlive a transaction: no session settings, no LISTEN, and no prepared statements unless the
pooler tracks them (PgBouncer >= 1.21 with ``max_prepared_statements``). Debian 12 ships
PgBouncer 1.18, so clients turn psycopg's automatic prepared statements off with
``prepare_threshold=None`` (the worker's ``prepared_statements=False``), and the worker
either polls (``listen=False``) or LISTENs on the server itself (``listen_dsn``). The queue
itself needs nothing else: every call is one statement, so it is one transaction.

Needs the ``pgbouncer`` binary (Debian: ``apt-get install pgbouncer``); skipped without it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from pyjobq import JobQueue, JobStatus, LeaseLost
from pyjobq.localpg import LocalPostgres
from tests.faults.harness import EFFECTS, Recorder, make_worker
from tests.sqlhelp import FROZEN
from tests.worker_handlers import EFFECTS as HANDLER_EFFECTS
from tests.workerhelp import Running, asleep, spawn_worker, statuses, wait_for

Conn = psycopg.Connection[Any]

PGBOUNCER = shutil.which("pgbouncer") or (
    "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None
)

pytestmark = pytest.mark.skipif(
    PGBOUNCER is None, reason="pgbouncer is not installed (Debian: apt-get install pgbouncer)"
)

# What a client of PgBouncer < 1.21 in transaction mode must pass to psycopg.
CLIENT: dict[str, Any] = {"autocommit": True, "prepare_threshold": None}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def pgbouncer(pg_server: LocalPostgres) -> Iterator[int]:
    """A PgBouncer in transaction mode in front of the session's server; yields its port."""
    assert PGBOUNCER is not None
    base = Path(tempfile.mkdtemp(prefix="pyjobq-pgbouncer-"))
    port = free_port()
    (base / "users.txt").write_text(f'"{pg_server.user}" ""\n')
    (base / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={pg_server.host} port={pg_server.port}\n"
        "[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {port}\n"
        "unix_socket_dir =\n"
        "auth_type = trust\n"
        f"auth_file = {base / 'users.txt'}\n"
        "pool_mode = transaction\n"
        # Few server connections for many clients: transactions really do change hands.
        "default_pool_size = 3\n"
        "max_client_conn = 200\n"
        f"logfile = {base / 'pgbouncer.log'}\n"
    )
    # PgBouncer refuses to run as root: run it as the OS user the test server runs as.
    as_user: dict[str, Any] = {}
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
        for f in base.iterdir():
            shutil.chown(f, "postgres", "postgres")
        as_user = {"user": "postgres", "group": "postgres", "extra_groups": []}
    process = subprocess.Popen(
        [PGBOUNCER, str(base / "pgbouncer.ini")],
        # Its log file has everything: a pipe nobody reads would fill, and PgBouncer would
        # block writing to it (a connection per job logs two lines per job).
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        **as_user,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    log = (base / "pgbouncer.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"pgbouncer did not start: {log}") from None
                time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def bouncer_dsn(dsn: str, pgbouncer: int) -> str:
    """This test's database, reached through PgBouncer."""
    return make_conninfo(dsn, host="127.0.0.1", port=str(pgbouncer))


def test_the_whole_lifecycle_through_pgbouncer(bouncer_dsn: str, conn: Conn) -> None:
    # Two clients, three server connections: statements land on different backends.
    with psycopg.connect(bouncer_dsn, **CLIENT) as a, psycopg.connect(bouncer_dsn, **CLIENT) as b:
        qa, qb = JobQueue(a), JobQueue(b)
        backends = set()
        for _ in range(10):  # more than psycopg's default prepare_threshold (5)
            first = qa.enqueue(1, {"n": 1}, dedupe_key="pgb")
            backends.add(a.execute("select pg_backend_pid()").fetchone())
            with b.transaction():
                duplicate = qb.enqueue(1, {"n": 1}, dedupe_key="pgb")
                assert (duplicate.job_id, duplicate.created) == (first.job_id, False)
                # b holds a server connection for its transaction: a runs on another one.
                backends.add(a.execute("select pg_backend_pid()").fetchone())
        assert len(backends) > 1, "transaction pooling moved the client between backends"
        (job,) = qb.claim("w1", 1, 60, [1])
        assert job.job_id == first.job_id
        qa.renew_lease(job.job_id, "w1", job.attempt, 120)
        qb.fail(job.job_id, "w1", job.attempt, "transient", retry_delay_seconds=0)
        (again,) = qa.claim("w1", 1, 60)
        assert (again.job_id, again.attempt) == (job.job_id, 2)
        qb.complete(again.job_id, "w1", again.attempt, {"ok": True})
        with pytest.raises(LeaseLost):
            qa.complete(again.job_id, "w2", again.attempt)
        others = qa.enqueue_many(1, [{"n": 2}, {"n": 3}, {"n": 4}])
        claimed = qa.claim("w2", 3, 60)
        assert {c.job_id for c in claimed} == {o.job_id for o in others}
        qb.release(claimed[0].job_id, "w2", claimed[0].attempt)
        done = qa.complete_many("w2", [c.job_id for c in claimed[1:]], [1, 1])
        assert all(d.completed for d in done)
        # The clock is frozen per transaction (set_config(..., true)), never per session.
        (held,) = qb.claim("w3", 1, 1)
        with b.transaction():
            b.execute("select set_config('pyjobq.fake_now', %s, true)", ("2999-01-01",))
            reaped = qb.reap()
        assert [(r.job_id, r.worker_id) for r in reaped] == [(held.job_id, "w3")]
        qb.enqueue(1, {"n": 5})
        (dead,) = qa.claim("w4", 1, 60)
        qa.fail(dead.job_id, "w4", dead.attempt, "fatal", dead_letter=True)
        assert qb.redrive([dead.job_id]) == [dead.job_id]
        counts = {(c.job_type, c.status): c.jobs for c in qa.counts()}
        assert counts[(1, JobStatus.DONE)] == 3
        with b.transaction():
            b.execute("select set_config('pyjobq.fake_now', %s, true)", ("2999-01-01",))
            assert qb.prune(timedelta(days=1)) == 3
    assert conn.execute("select count(*) from pyjobq.job_all").fetchone() == (2,)


@contextmanager
def bounced_worker(
    bouncer_dsn: str, pool: AsyncConnectionPool | None = None, **options: Any
) -> Iterator[Running]:
    """A 4-runner worker whose statements (and handler's effects) go through PgBouncer:
    on ``pool`` when given, else on a pool of its own."""
    recorder = Recorder(bouncer_dsn, 4, prepare_threshold=None)
    recorder.open()
    runner = Running(make_worker(pool or bouncer_dsn, recorder, 4, **options))

    async def open_pool() -> None:
        if pool is not None:
            await pool.open(wait=True)

    async def close_pool() -> None:
        if pool is not None:
            await pool.close()

    try:
        runner.loop.run_until_complete(open_pool())
        runner.start()
        yield runner
    finally:
        if runner.thread.is_alive():
            runner.stop()
        recorder.close()
        runner.loop.run_until_complete(close_pool())


def test_worker_polls_and_drains_through_pgbouncer(bouncer_dsn: str, conn: Conn) -> None:
    conn.execute(EFFECTS)
    n = 600
    JobQueue(conn).enqueue_many(1, [{}] * n)
    pool = AsyncConnectionPool(bouncer_dsn, min_size=1, max_size=4, kwargs=CLIENT, open=False)
    with bounced_worker(bouncer_dsn, pool, listen=False, poll_interval=0.1) as runner:
        wait_for(lambda: statuses(conn) == {3: n}, "every job DONE through PgBouncer")
        metrics = runner.stop()
    assert metrics.completed == n


def test_worker_claims_through_pgbouncer_and_listens_on_the_server(
    bouncer_dsn: str, dsn: str, conn: Conn
) -> None:
    conn.execute(EFFECTS)
    # The worker's own pool, as the CLI's --no-prepare --listen-dsn makes it. Polling is
    # off in effect: only a notification can wake the claimer.
    options: dict[str, Any] = {
        "prepared_statements": False,
        "listen_dsn": dsn,
        "poll_interval": 3600,
    }
    with bounced_worker(bouncer_dsn, **options) as runner:
        wait_for(lambda: asleep(conn) == 1, "the worker's LISTEN session on the server, asleep")
        # Enough claims and completions for psycopg to prepare them, were it allowed to.
        for batch in range(1, 4):
            JobQueue(conn).enqueue_many(1, [{}] * 50)

            def batch_done(b: int = batch) -> bool:
                return statuses(conn) == {3: 50 * b}

            wait_for(batch_done, f"batch {batch} DONE on its NOTIFY")
        metrics = runner.stop()
    assert metrics.completed == 150


def test_cli_worker_behind_pgbouncer(
    bouncer_dsn: str, dsn: str, conn: Conn, tmp_path: Path
) -> None:
    conn.execute(HANDLER_EFFECTS)
    # Its handlers also open a connection per job through PgBouncer.
    worker = spawn_worker(
        bouncer_dsn, tmp_path, "w", "--no-prepare", "--listen-dsn", dsn, "--poll-interval", "3600"
    )
    try:
        wait_for(lambda: asleep(conn) == 1, "the worker's LISTEN session on the server, asleep")
        for batch in range(1, 4):
            JobQueue(conn).enqueue_many(1, [{}] * 100)

            def batch_done(b: int = batch) -> bool:
                return statuses(conn) == {3: 100 * b}

            wait_for(batch_done, f"batch {batch} DONE on its NOTIFY")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    finally:
        worker.kill()
    assert conn.execute("select count(*) from effects").fetchone() == (300,)


def test_a_late_enqueue_is_claimed_within_the_front_lifetime_through_pgbouncer(
    bouncer_dsn: str, conn: Conn, make_conn: Any
) -> None:
    # Claim fronts are state of the server session: behind PgBouncer, a client resumes from
    # whatever front the last claim on that server connection left, whoever made it. The
    # bound still holds, because every server session's chain of resumed claims lives one
    # second from its own head scan. The clock is frozen per transaction and moves 0.1 s a
    # claim, whichever client makes it.
    ticks = iter(range(1000))

    def claim_batch(client: Conn) -> list[Any]:
        at = FROZEN + timedelta(seconds=0.1 * next(ticks))
        with client.transaction():
            client.execute("select set_config('pyjobq.fake_now', %s, true)", (str(at),))
            rows = client.execute("select job_id, attempt from pyjobq.job_claim('w1', 20)")
            taken = rows.fetchall()
            client.execute(
                "select pyjobq.job_complete_many('w1', %s::uuid[], %s::int[])",
                ([r[0] for r in taken], [r[1] for r in taken]),
            )
        return [r[0] for r in taken]

    q = JobQueue(conn)
    q.enqueue_many(1, [{}] * 200)
    producer = make_conn()
    producer.execute("begin")
    late = JobQueue(producer).enqueue(1, {"late": True}).job_id
    q.enqueue_many(1, [{}] * 40000)
    clients = [psycopg.connect(bouncer_dsn, **CLIENT) for _ in range(3)]
    try:
        for i in range(30):  # the fronts move past the late job's position
            claim_batch(clients[i % 3])
        producer.execute("commit")
        # Within a second of claims (10 of them), the front of every server session they
        # land on has expired or was started after the commit by a scan from the head.
        taken = [j for i in range(10) for j in claim_batch(clients[i % 3])]
    finally:
        for client in clients:
            client.close()
    assert late in taken
    assert statuses(conn)[1] > 39000
