"""Upgrades from the releases (each release's tree read from this repository's history), as
docs/upgrading.md gives them: the release's own ``pyjobq migrate`` installs it and its clients
fill it; its producer goes on enqueueing through the upgrade. From 0.1.0 its workers drain and
stop, today's start ahead of the migration and wait for it; from 0.2.0 its workers go on
running through the migration and after it, beside today's. Every job ends DONE after exactly
one run, and a lease a client of the release holds survives."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, LiteralString

import psycopg
import pytest
from yoyo import get_backend, read_migrations

from pyjobq import SCHEMA_VERSION
from pyjobq.migrate import create_schema, migrate, migrations_dir, yoyo_url
from pyjobq.worker import Worker
from tests.sqlhelp import enqueue, one
from tests.workerhelp import Running, wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
# The commits whose trees are the releases, and the schema each installs.
RELEASES = {
    "0.1.0": ("2a432d785003677372eca2f89470cf30a7649b59", 1),
    "0.2.0": ("b8ab6b0fe40ab3914bf2005d72dd5fa5b5f147b3", 27),
}
BEFORE, AFTER = 1500, 1500

HANDLERS = """
import os


def record(job):
    # One line per run, appended whole (O_APPEND): the test counts runs per job.
    with open(os.environ["UPGRADE_RUNS"], "a") as runs:
        runs.write(f"{os.environ['UPGRADE_WORKER']} {job.job_id}\\n")


handlers = {2: record}
"""

# A producer of the release, enqueueing through its own binding until told to stop.
PRODUCER = """
import os
import sys
import time

import psycopg
from pyjobq import JobQueue

with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    q = JobQueue(conn)
    made = 0
    while not os.path.exists(sys.argv[2]) or made == 0:
        q.enqueue_many(2, [{"by": "producer"}] * 10)
        made += 10
        time.sleep(0.01)  # a steady trickle, not a flood
print(made)
"""


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The tree of a release, as ``git archive`` writes it (a checkout: migrations/ beside
    pyjobq/), extracted once per module."""
    if not (ROOT / ".git").exists():
        pytest.skip("needs the repository's history (a git checkout)")
    trees: dict[str, Path] = {}

    def tree(version: str) -> Path:
        if version not in trees:
            commit, _ = RELEASES[version]
            target = tmp_path_factory.mktemp(f"pyjobq-{version}")
            paths = ["pyproject.toml", "pyjobq", "migrations"]
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", commit, *paths],
                capture_output=True,
                check=True,
            ).stdout
            # tar(1), not tarfile: extractall's filter= came in 3.11.4, and Debian's 3.11 is older.
            subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
            trees[version] = target
        return trees[version]

    return tree


def release_env(source: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYJOBQ_DSN")}
    return {**env, "PYTHONPATH": str(source), **extra}


@pytest.fixture
def started(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start processes of the release (its tree on PYTHONPATH) or of today's package, in a
    directory holding the handlers; killed at the end if still running."""
    (tmp_path / "upgrade_handlers.py").write_text(HANDLERS)
    processes: list[subprocess.Popen[str]] = []

    def start(args: list[str], source: Path, **env: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, *args],
            cwd=tmp_path,
            env=release_env(source, UPGRADE_RUNS=str(tmp_path / "runs"), **env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        processes.append(process)
        return process

    yield start
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.communicate()


def worker(dsn: str) -> list[str]:
    options = ["--dsn", dsn, "-c", "4", "--poll-interval", "0.2", "--reap-interval", "0.5"]
    return ["-m", "pyjobq", "worker", "upgrade_handlers:handlers", *options]


def stopped(process: subprocess.Popen[str], signum: int | None = signal.SIGTERM) -> tuple[str, str]:
    """Signal it (SIGTERM: a worker drains), then its stdout and stderr once it exited with 0."""
    if signum is not None:
        process.send_signal(signum)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    return out, err


def runs(tmp_path: Path) -> list[tuple[str, str]]:
    """(worker, job id) for each run of a job so far."""
    path = tmp_path / "runs"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(name, job) for name, job in (line.split() for line in lines)]


def ran(tmp_path: Path) -> set[str]:
    """The workers that ran a job so far."""
    return {name for name, _ in runs(tmp_path)}


def jobs(dsn: str, where: LiteralString) -> int:
    """How many jobs match ``where``, on either schema: the release's job table held every job;
    today's holds those yet to end, and the view job_all shows them with the history."""
    with psycopg.connect(dsn) as conn:
        new = one(conn, "select to_regclass('pyjobq.job_all') is not null")
        table: LiteralString = "pyjobq.job_all" if new else "pyjobq.job"
        return int(one(conn, f"select count(*) from {table} where {where}"))


class Release:
    """A release installed in a database by its own ``pyjobq migrate`` and filled by its
    clients, through its own signatures: one job of type 1 in each state, the lease of one held
    by a client, and 2,000 of type 2 to drain."""

    def __init__(
        self, version: str, source: Path, dsn: str, started: Callable[..., subprocess.Popen[str]]
    ) -> None:
        self.version, self.source, self.dsn, self.started = version, source, dsn, started
        _, self.schema = RELEASES[version]
        assert f'version = "{version}"' in (source / "pyproject.toml").read_text()
        which = "import pyjobq; print(pyjobq.__file__, pyjobq.SCHEMA_VERSION)"
        out, err = started(["-c", which], source).communicate(timeout=60)
        assert out.split() == [str(source / "pyjobq" / "__init__.py"), str(self.schema)], err
        migrated = started(["-m", "pyjobq", "migrate", "--dsn", dsn], source)
        said = migrated.communicate(timeout=60)[0].strip()
        assert said.endswith(f"pyjobq schema version {self.schema}"), said
        with psycopg.connect(dsn, autocommit=True) as conn:
            self.held, self.done, self.dead, self.expired = (enqueue(conn) for _ in range(4))
            claimed: dict[Any, int] = dict(
                conn.execute("select job_id, attempt from pyjobq.job_claim('old-client', 4, 600)")
            )
            conn.execute("select pyjobq.job_complete(%s, 'old-client', 1, '{}')", (self.done,))
            conn.execute(
                "select pyjobq.job_fail(%s, 'old-client', 1, 'broken', p_dead_letter => true)",
                (self.dead,),
            )
            conn.execute(
                "update pyjobq.job set lease_until = now() - interval '1 second' where job_id = %s",
                (self.expired,),
            )
            self.pending = enqueue(conn)
            conn.execute(
                "select pyjobq.job_enqueue_many(2,"
                " array(select '{}'::jsonb from generate_series(1, 2000)))"
            )
        assert claimed == dict.fromkeys([self.held, self.done, self.dead, self.expired], 1)

    def producer(self, stop: Path) -> subprocess.Popen[str]:
        """The release's producer, enqueueing until ``stop`` exists; started once it has."""
        process = self.started(["-c", PRODUCER, self.dsn, str(stop)], self.source)
        wait_for(lambda: jobs(self.dsn, "job_type = 2") > 2000, "the release's producer to enqueue")
        return process

    def migrate(self, producer: subprocess.Popen[str]) -> None:
        """Today's migration, and then ``producer``'s enqueue on the new schema (a producer that
        died on the way fails it at once, with what it said)."""
        applied = migrate(self.dsn).applied
        assert len(applied) == SCHEMA_VERSION - self.schema
        at_upgrade = jobs(self.dsn, "job_type = 2")

        def enqueued() -> bool:
            assert producer.poll() is None, producer.communicate()
            return jobs(self.dsn, "job_type = 2") > at_upgrade

        wait_for(enqueued, "the producer to enqueue after the upgrade")

    def drained(self, producer: subprocess.Popen[str], stop: Path, tmp_path: Path) -> Counter[str]:
        """Stops the producer, waits for every job of type 2 to be DONE, checks that each ran
        exactly once and that the client's lease held; the runs by worker."""
        stop.touch()
        total = 2000 + int(stopped(producer, None)[0])
        wait_for(
            lambda: jobs(self.dsn, "job_type = 2 and status = 3") == total,
            f"all {total} jobs of type 2 to be DONE",
        )
        done = runs(tmp_path)
        per_job = Counter(job for _, job in done)
        assert len(per_job) == total
        twice = [job for job, n in per_job.items() if n > 1]
        assert not twice, [(name, job) for name, job in done if job in twice[:3]]
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            # The client's lease held across the upgrade: its own call, in the release's form,
            # finishes the job. The expired one is taken back by a reap: a worker's, if one
            # came by before the drain ended (the workers' reapers run on their own clocks),
            # else this one, in the release's form too.
            conn.execute("select pyjobq.job_complete(%s, 'old-client', 1, '{}')", (self.held,))
            conn.execute("select count(*) from pyjobq.job_reap(100)")
            statuses: dict[Any, int] = dict(
                conn.execute("select job_id, status from pyjobq.job_all where job_type = 1")
            )
        assert statuses == {
            self.held: 3,
            self.done: 3,
            self.dead: 4,
            self.expired: 1,
            self.pending: 1,
        }
        return Counter(name for name, _ in done)


def test_an_upgrade_from_0_1_0_under_its_producer_loses_and_repeats_nothing(
    releases: Callable[[str], Path],
    new_database: Callable[[], str],
    started: Callable[..., subprocess.Popen[str]],
    tmp_path: Path,
) -> None:
    """The procedure docs/upgrading.md gives for 0.1.0: its producers go on throughout; its
    workers are stopped (SIGTERM: they finish what they run) before the migration, and today's
    are started before it, waiting on the old schema; leases held by its clients survive."""
    release = Release("0.1.0", releases("0.1.0"), new_database(), started)
    stop = tmp_path / "stop"
    producer = release.producer(stop)
    # --prefetch 0: at SIGTERM the release's worker gives back the jobs it prefetched, and may
    # start one of them too, which then runs twice (fixed since, 35624aa; the CHANGELOG's Fixed).
    # Without prefetch it holds only jobs it runs, and its drain finishes them.
    old = [*worker(release.dsn), "--prefetch", "0"]
    old_workers = [started(old, release.source, UPGRADE_WORKER=f"old{n}") for n in range(2)]
    wait_for(lambda: ran(tmp_path) >= {"old0", "old1"}, "both of the release's workers to run jobs")
    for process in old_workers:
        stopped(process)
    new_workers = [started(worker(release.dsn), ROOT, UPGRADE_WORKER=f"new{n}") for n in range(2)]
    release.migrate(producer)
    by_worker = release.drained(producer, stop, tmp_path)
    for process in new_workers:
        # Each waited on the old schema, then started once the migration had run.
        log = stopped(process)[1]
        assert "older than the" in log, log
        assert "the database's schema is now this package's: starting" in log, log
    # Both of the release's workers ran jobs, and today's did after the upgrade (which of the
    # two woke first, and took how many, is the machine's timing).
    assert {"old0", "old1"} <= by_worker.keys(), by_worker
    assert {"new0", "new1"} & by_worker.keys(), by_worker


def test_an_upgrade_from_0_2_0_under_its_running_workers_loses_and_repeats_nothing(
    releases: Callable[[str], Path],
    new_database: Callable[[], str],
    started: Callable[..., subprocess.Popen[str]],
    tmp_path: Path,
) -> None:
    """The procedure docs/upgrading.md gives from 0.2.0 on: migrate first, with the release's
    producer enqueueing and its workers claiming and finishing jobs throughout; they run on the
    new schema unchanged; then today's workers are deployed beside them and the release's are
    stopped (SIGTERM: they finish what they run); leases held by its clients survive."""
    release = Release("0.2.0", releases("0.2.0"), new_database(), started)
    stop = tmp_path / "stop"
    producer = release.producer(stop)
    old_workers = [
        started(worker(release.dsn), release.source, UPGRADE_WORKER=f"old{n}") for n in range(2)
    ]
    wait_for(lambda: ran(tmp_path) >= {"old0", "old1"}, "both of the release's workers to run jobs")
    release.migrate(producer)
    before = len(runs(tmp_path))
    wait_for(
        lambda: {name for name, _ in runs(tmp_path)[before:]} >= {"old0", "old1"},
        "both of the release's workers to run jobs on the new schema",
    )
    new_workers = [started(worker(release.dsn), ROOT, UPGRADE_WORKER=f"new{n}") for n in range(2)]
    wait_for(lambda: ran(tmp_path) >= {"new0", "new1"}, "both of today's workers to run jobs")
    for process in old_workers:
        stopped(process)
    by_worker = release.drained(producer, stop, tmp_path)
    for process in new_workers:
        log = stopped(process)[1]
        assert "older than the" not in log, log
    assert {"old0", "old1", "new0", "new1"} <= by_worker.keys(), by_worker


def test_a_worker_started_ahead_of_the_migration_waits_and_stops_when_asked(
    new_database: Callable[[], str], caplog: pytest.LogCaptureFixture
) -> None:
    dsn = new_database()
    with psycopg.connect(dsn, autocommit=True) as connection:
        create_schema(connection)
    with get_backend(yoyo_url(dsn)) as backend, backend.lock():
        backend.apply_migrations(backend.to_apply(read_migrations(str(migrations_dir()))[:1]))
    worker = Worker(dsn, {1: lambda job: None}, poll_interval=0.05)
    waiting = Running(worker)
    waiting.thread.start()
    wait_for(lambda: "waiting for it" in caplog.text, "the worker to wait for the migration")
    assert "the database has pyjobq schema 1, older than" in caplog.text
    assert not worker.ready.is_set()
    waiting.stop()
    assert worker.exit_code == 0
