"""Failover: the primary killed mid-drain and its streaming standby promoted, while the producer
and the workers stay on one multi-host DSN (``target_session_attrs=read-write``) that finds the
promoted standby by itself.

With synchronous replication a commit is acknowledged only once the standby has flushed it, so
the promoted standby holds every enqueue, claim and completion a client was told about: the
verdict is :func:`assert_no_loss`. With asynchronous replication the standby may be behind by
the last commits when the primary dies, and those are gone although their clients were told
they committed: that variant measures what it lost, and :func:`assert_recovered` only checks
that what the new primary holds drains by itself.

What the clients were told is kept outside the database (the producer's acknowledged ids and a
:class:`Witness` of acknowledged completions), since the database's own records, the jobs and
``fault_effects``, fail over with it and cannot show their own loss."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from contextlib import ExitStack
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.conninfo import make_conninfo

from pyjobq import ClaimedJob
from pyjobq.localpg import LocalPostgres
from pyjobq.metrics import WorkerHooks
from pyjobq.migrate import migrate
from tests.faults.harness import Producer, assert_sound, finished, retrying, verify
from tests.faults.scenarios import Figures, Probe, finished_on, prepare, start_workers, wait_drained
from tests.workerhelp import wait_for

# The standby's application_name, which synchronous_standby_names names.
STANDBY = "standby"

# Both servers. PostgreSQL's default durability, and the replication settings spelled out even
# where they are the defaults, since the scenario depends on them. The pg_hba.conf that
# initdb --auth=trust writes already admits replication connections over the socket and loopback.
SETTINGS = {
    "max_connections": "60",
    "synchronous_commit": "on",
    "wal_level": "replica",
    "max_wal_senders": "4",
    "hot_standby": "on",
}

DBNAME = "faults"
# How long pg_promote may wait for the promotion to finish (well under a second here).
PROMOTE_SECONDS = 30


class Primary(LocalPostgres):
    """A throwaway server that can clone itself into a streaming standby, and be killed."""

    def standby(self, settings: Mapping[str, str]) -> LocalPostgres:
        """A standby of this server, not started yet. ``pg_basebackup -R`` writes its
        ``primary_conninfo`` with ``application_name`` STANDBY, the name
        ``synchronous_standby_names`` refers to. Its directory is inside this server's, so it
        is removed with it. Its settings are its own: a promoted standby must not inherit
        ``synchronous_standby_names``, or every commit would wait for a standby it does not
        have."""
        base = self.base_dir / STANDBY
        conninfo = make_conninfo(self.dsn(), application_name=STANDBY)
        self._run("pg_basebackup", "-D", str(base / "data"), "-R", "-c", "fast", "-d", conninfo)
        return LocalPostgres(base_dir=base, settings=settings)

    def kill(self) -> None:
        """Stop at once, as a crash would: no checkpoint, every session cut, no WAL sent after
        (the crash scenario's immediate shutdown, without the restart)."""
        self._run("pg_ctl", "stop", "-D", str(self.data_dir), "-m", "immediate", "-w")


def multi_host_dsn(servers: list[LocalPostgres], dbname: str) -> str:
    """One conninfo for all ``servers``: libpq tries them in order and keeps the first that
    accepts writes, so the same string reaches the primary before the failover and the
    promoted standby after it."""
    return make_conninfo(
        host=",".join(s.host for s in servers),
        port=",".join(str(s.port) for s in servers),
        user=servers[0].user,
        dbname=dbname,
        target_session_attrs="read-write",
    )


class Witness(WorkerHooks):
    """What the workers were told, kept outside the database: the attempts they started, and
    the completions they saw commit."""

    def __init__(self) -> None:
        self.started: list[tuple[UUID, int]] = []
        self.completed: list[tuple[UUID, int]] = []

    def on_job_start(self, job: ClaimedJob) -> None:
        self.started.append((job.job_id, job.attempt))

    def on_job_end(self, job: ClaimedJob, outcome: str, error: BaseException | None) -> None:
        if outcome == "completed":
            self.completed.append((job.job_id, job.attempt))

    def figures(self, dsn: str) -> Figures:
        """``completions_lost``: acknowledged completions the database no longer holds. A job
        completed at attempt n stays DONE at attempt n; when it is not, or when attempt n was
        acknowledged completed a second time (possible only once the database lost the first
        completion and the claim before it), the completion was lost and the job ran again.
        ``completed_twice`` and ``started_twice`` count attempts completed, or started, more
        than once: a claim the database handed out again after losing it. fault_duplicates
        cannot see these, since the first run's row was lost with the claim."""
        completed = Counter(self.completed)
        rows = retrying(
            dsn,
            "select job_id, status, attempts from pyjobq.job_all where job_id = any(%s)",
            ([job_id for job_id, _ in completed],),
        )
        now = {job_id: (status, attempts) for job_id, status, attempts in rows}
        twice = _repeats(completed)
        gone = sum(1 for job_id, attempt in completed if now.get(job_id) != (3, attempt))
        return {
            "completions_acknowledged": len(self.completed),
            "completions_lost": gone + twice,
            "completed_twice": twice,
            "started_twice": _repeats(Counter(self.started)),
        }


def _repeats(counts: Counter[tuple[UUID, int]]) -> int:
    return sum(n - 1 for n in counts.values())


def failover(synchronous: bool = True, scale: float = 1.0) -> Figures:
    """A primary and a streaming standby of their own, both stopped at the end whatever happens:
    the primary killed mid-drain (immediate shutdown), the standby promoted (``pg_promote``) at
    once, as a failover manager would."""
    mode = "sync" if synchronous else "async"
    primary_settings = dict(SETTINGS)
    if synchronous:
        primary_settings["synchronous_standby_names"] = STANDBY
    with ExitStack() as servers:
        primary = Primary(settings=primary_settings)
        servers.enter_context(primary)
        standby = servers.enter_context(primary.standby(SETTINGS))
        wait_for(lambda: _sync_state(primary) == mode, f"the standby to stream ({mode})")
        with psycopg.connect(primary.dsn(), autocommit=True) as conn:
            conn.execute(f"create database {DBNAME}")
        migrate(primary.dsn(DBNAME))
        return _fail_over(primary, standby, mode, scale)


def _sync_state(primary: LocalPostgres) -> str | None:
    """The standby's sync_state (sync or async) once it streams, else None."""
    rows = retrying(
        primary.dsn(),
        "select sync_state from pg_stat_replication"
        " where application_name = %s and state = 'streaming'",
        (STANDBY,),
    )
    return str(rows[0][0]) if rows else None


def _fail_over(primary: Primary, standby: LocalPostgres, mode: str, scale: float) -> Figures:
    """Run the workload through the failover; times are on the standby's clock, the one that
    outlives it (both servers share the machine's)."""
    dsn = multi_host_dsn([primary, standby], DBNAME)
    prepare(dsn)
    # Which server ran each job: inet_server_port() tells the old primary from the new one.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("alter table fault_effects add column port int default inet_server_port()")
    total = int(1500 * scale)
    witness = Witness()
    with ExitStack() as stack:
        start_workers(stack, dsn, 2, 4, hooks=witness)
        producer = Producer(dsn, batch=20, interval=0.02, limit=total).start()
        stack.callback(producer.stop)
        # Mid-drain on both sides: the producer has half of its jobs to enqueue through the
        # failover, the workers have finished some and hold others.
        wait_for(
            lambda: len(producer.acknowledged) >= total // 2 and finished(dsn) >= total // 6,
            "half of the jobs to be enqueued and a sixth to finish",
        )
        # The standby's clock times the failover: the primary's is about to go.
        with psycopg.connect(standby.dsn(DBNAME), autocommit=True) as conn:
            killed_at = _clock(conn)
            primary.kill()
            enqueued_before_kill = len(producer.acknowledged)
            finished_before_kill = finished_on(conn)
            promoted = conn.execute("select pg_promote(true, %s)", (PROMOTE_SECONDS,)).fetchone()
            promoted_at = _clock(conn)
        with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
            probe_port = conn.info.port
            probe = Probe.enqueue(conn)
        wait_for(producer.done, "the producer to enqueue every job", 120)
        acknowledged = producer.acknowledged + probe.job_ids
        drain = wait_drained(dsn, _kept(dsn, acknowledged))
    figures = verify(dsn, acknowledged)
    figures.update(witness.figures(dsn))
    ran_on = "select min(at) from fault_effects where port = %s"
    first_run = retrying(dsn, ran_on, (standby.port,))[0][0]
    # Each worker's first claim on the promoted standby, as far as its jobs' last attempts show.
    back = retrying(
        dsn,
        "select min(run_started_at) from pyjobq.job_all where run_started_at >= %s"
        " group by worker_id",
        (promoted_at,),
    )
    figures.update(
        scenario=(
            f"primary killed mid-drain (pg_ctl stop -m immediate), {mode} standby promoted"
            " (pg_promote), clients on one multi-host DSN"
        ),
        replication=mode,
        promoted=promoted == (True,),
        probe_served_by_standby=probe_port == standby.port,
        finished_before_kill=finished_before_kill,
        enqueued_before_kill=enqueued_before_kill,
        enqueued_after_kill=len(producer.acknowledged) - enqueued_before_kill,
        producer_errors=len(producer.errors),
        promotion_seconds=_seconds(killed_at, promoted_at),
        outage_seconds=None if first_run is None else _seconds(killed_at, first_run),
        workers_back_seconds=sorted(_seconds(killed_at, at) for (at,) in back),
        recovery_seconds=probe.recovery_seconds(dsn),
        drain_seconds=round(drain, 2),
    )
    return figures


def _clock(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute("select clock_timestamp()").fetchone()
    assert row is not None
    value: datetime = row[0]
    return value


def _seconds(start: datetime, end: datetime) -> float:
    return round((end - start).total_seconds(), 2)


def _kept(dsn: str, job_ids: list[UUID]) -> list[UUID]:
    """The jobs of ``job_ids`` the database has: all of them, unless the failover lost some."""
    rows = retrying(dsn, "select job_id from pyjobq.job_all where job_id = any(%s)", (job_ids,))
    return [r[0] for r in rows]


def assert_failed_over(figures: Figures) -> None:
    """The fault happened as staged: the primary died mid-drain, the standby was promoted and
    served the probe, and the producer went on enqueueing through the same DSN after the
    primary was gone."""
    assert figures["promoted"], figures
    assert figures["probe_served_by_standby"], figures
    assert 0 < figures["finished_before_kill"] < figures["jobs"], figures
    assert figures["enqueued_after_kill"] > 0, figures
    assert figures["outage_seconds"] is not None, figures


def assert_no_loss(figures: Figures) -> None:
    """The verdict with a synchronous standby: the other scenarios' (nothing acknowledged
    lost, no attempt run twice, everything DONE or DEAD), and, judged from outside the
    database, no acknowledged completion lost and no attempt started or completed twice."""
    assert figures["replication"] == "sync", figures
    assert_failed_over(figures)
    assert_sound(figures)
    assert figures["completions_lost"] == 0, figures
    assert figures["completed_twice"] == figures["started_twice"] == 0, figures


def assert_recovered(figures: Figures) -> None:
    """The verdict with an asynchronous standby, whose loss is a figure, not a failure: the
    queue the promoted standby holds still drains by itself."""
    assert_failed_over(figures)
    assert figures["unfinished"] == 0, figures
    assert figures["done"] + figures["dead"] == figures["jobs"], figures
