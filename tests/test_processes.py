"""Sync handlers in child processes (pyjobq.worker.processes): real children of a real worker,
killed at a deadline or a cancel, capped in memory, replaced after so many jobs, and whatever
one does ends its own job only."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest

from pyjobq import JobQueue, JobType
from pyjobq.rows import JobStatus
from pyjobq.worker import Worker, in_process
from tests.process_handlers import allocate, compute, hang_first, hold, misbehave, tasks
from tests.workerhelp import prepare, running, spawn_worker, statuses, wait_for

Conn = psycopg.Connection[Any]


@pytest.fixture
def db(conn: Conn) -> Conn:
    """This test's database, its retries after a tenth of a second."""
    JobQueue(conn).type_set_policy(JobType.SEARCH, backoff_base_seconds=0.1, backoff_jitter=0)
    return conn


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def pid_in(path: Path) -> int:
    return int(wait_for(lambda: path.exists() and path.read_text(), f"a pid in {path.name}"))


def outcome(db: Conn, job_id: UUID) -> tuple[int, int, Any, str | None]:
    """(status, attempts, result, last error) of a job."""
    row = db.execute(
        "select status, attempts, result, last_error from pyjobq.job_all where job_id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None
    return row[0], row[1], row[2], row[3]


def test_handlers_run_in_children_each_replaced_after_its_jobs(dsn: str, db: Conn) -> None:
    q = JobQueue(db)
    ids = [e.job_id for e in q.enqueue_many(JobType.SEARCH, [{"n": 10_000}] * 6)]
    handlers = {JobType.SEARCH: in_process(compute, max_jobs_per_child=2)}
    with running(Worker(dsn, handlers, concurrency=1)) as r:
        wait_for(lambda: statuses(db) == {3: 6}, "six jobs DONE")
        metrics = r.stop()
    pids = [outcome(db, job_id)[2]["pid"] for job_id in ids]
    assert os.getpid() not in pids
    # One job at a time: each child ran two, in a row, and the next took over.
    assert [pids.index(p) for p in pids] == [0, 0, 2, 2, 4, 4]
    assert (metrics.children_started, metrics.children_killed, metrics.completed) == (3, 0, 6)
    assert not any(alive(p) for p in pids)


@pytest.mark.parametrize("how", ["sleep", "spin"])
def test_a_handler_past_its_deadline_is_killed_and_its_job_retried(
    dsn: str, db: Conn, tmp_path: Path, how: str
) -> None:
    """A thread cannot be stopped (it lingers, see test_worker_poison); a child is killed, and
    the attempt fails as any past its deadline does."""
    q = JobQueue(db)
    pidfile = tmp_path / "first"
    job = q.enqueue(JobType.SEARCH, {"how": how, "pidfile": str(pidfile)}, max_attempts=2).job_id
    other = q.enqueue(JobType.SEARCH, {"how": how}).job_id
    worker = Worker(dsn, {JobType.SEARCH: in_process(hang_first)}, job_timeout=0.5)
    with running(worker) as r:
        first = pid_in(pidfile)
        wait_for(lambda: outcome(db, job)[0] == JobStatus.DONE, "the retried attempt DONE")
        assert not alive(first)
        metrics = r.stop()
    status, attempts, result, _ = outcome(db, job)
    assert (status, attempts, result["pid"] != first) == (JobStatus.DONE, 2, True)
    assert outcome(db, other)[:2] == (JobStatus.DONE, 2)
    assert (metrics.timed_out, metrics.children_killed, metrics.lingering_threads) == (2, 2, 0)
    errors = db.execute(
        "select error from pyjobq.job_attempts(%s) where error is not null", (job,)
    ).fetchall()
    assert len(errors) == 1, errors
    assert "did not finish within 0.5s" in errors[0][0], errors


def test_hung_and_spinning_children_killed_at_their_deadline_leave_full_capacity(
    dsn: str, db: Conn, tmp_path: Path
) -> None:
    """As many handlers that never end (two asleep, two spinning on the CPU) as the worker has
    runners: each child is killed at the deadline and its job retried, no thread lingers, and
    then as many jobs run at once as before."""
    concurrency = 4
    q = JobQueue(db)
    pidfiles = [tmp_path / f"hung{n}" for n in range(concurrency)]
    hung = q.enqueue_many(
        JobType.SEARCH,
        [{"how": "sleep" if n < 2 else "spin", "pidfile": str(p)} for n, p in enumerate(pidfiles)],
        max_attempts=2,
    )
    held = tmp_path / "held"
    held.mkdir()
    handlers = {JobType.SEARCH: in_process(hang_first), JobType.OUTBOX: in_process(hold)}
    worker = Worker(dsn, handlers, concurrency=concurrency, job_timeout=0.5)
    with running(worker) as r:
        wait_for(lambda: statuses(db) == {3: concurrency}, "every hung job retried and DONE")
        assert worker.metrics.children_killed == concurrency
        assert not any(alive(pid_in(p)) for p in pidfiles)
        q.enqueue_many(JobType.OUTBOX, [{"dir": str(held)}] * concurrency)
        wait_for(lambda: len(list(held.iterdir())) == concurrency, f"{concurrency} jobs at once")
        (held / "go").touch()
        wait_for(lambda: statuses(db) == {3: 2 * concurrency}, "the held jobs DONE")
        metrics = r.stop()
    assert [outcome(db, e.job_id)[:2] for e in hung] == [(JobStatus.DONE, 2)] * concurrency
    assert (metrics.timed_out, metrics.lingering_threads) == (concurrency, 0)


def test_a_cancel_kills_the_child_running_the_job(dsn: str, db: Conn, tmp_path: Path) -> None:
    q = JobQueue(db)
    pidfile = tmp_path / "cancelled"
    job = q.enqueue(JobType.SEARCH, {"how": "spin", "pidfile": str(pidfile)}).job_id
    # A lease of 3 s: the heartbeat that carries the cancel comes within a second.
    worker = Worker(dsn, {JobType.SEARCH: in_process(hang_first)}, lease_seconds=3)
    with running(worker) as r:
        child = pid_in(pidfile)
        assert [c.outcome for c in q.cancel([job])] == ["cancelled_running"]
        wait_for(lambda: not alive(child), "the child killed")
        later = q.enqueue(JobType.SEARCH, {}).job_id
        wait_for(lambda: outcome(db, later)[0] == JobStatus.DONE, "a later job DONE")
        metrics = r.stop()
    assert (metrics.cancelled, metrics.children_killed, metrics.completed) == (1, 1, 1)
    assert outcome(db, job)[0] == JobStatus.CANCELLED
    assert outcome(db, later)[2]["pid"] != child


def test_a_child_over_its_memory_cap_fails_its_job_and_is_replaced(dsn: str, db: Conn) -> None:
    q = JobQueue(db)
    big = q.enqueue(JobType.SEARCH, {"mb": 2048}, max_attempts=1).job_id
    small = q.enqueue(JobType.SEARCH, {"mb": 8}, priority=200).job_id
    handlers = {JobType.SEARCH: in_process(allocate, memory_mb=256)}
    with running(Worker(dsn, handlers, concurrency=1)) as r:
        wait_for(lambda: statuses(db) == {3: 1, 4: 1}, "one DONE, one DEAD")
        metrics = r.stop()
    status, _, _, error = outcome(db, big)
    assert status == JobStatus.DEAD
    assert error is not None
    assert error.splitlines()[-1] == "MemoryError", error
    assert outcome(db, small)[2]["size"] == 8 * 1024 * 1024
    assert metrics.children_started == 2


def test_whatever_a_child_does_ends_its_own_job_only(dsn: str, db: Conn) -> None:
    q = JobQueue(db)
    cases = ["raise", "retry", "exit", "unpicklable result", "unreadable exception", "interrupt"]
    ids = {do: q.enqueue(JobType.SEARCH, {"do": do}, max_attempts=2).job_id for do in cases}
    good = q.enqueue_many(JobType.SEARCH, [{"do": "return"}] * 4, max_attempts=1)
    with running(Worker(dsn, {JobType.SEARCH: in_process(misbehave)}, concurrency=2)) as r:
        wait_for(lambda: statuses(db) == {3: 5, 4: 5}, "every job DONE or DEAD")
        metrics = r.stop()
    ends = {do: outcome(db, job_id) for do, job_id in ids.items()}
    assert ends["retry"][:2] == (JobStatus.DONE, 2)
    last_lines = {do: (end[3] or "").splitlines()[-1] for do, end in ends.items() if do != "retry"}
    assert last_lines == {
        "raise": "ValueError: bad input from the child",
        "exit": "pyjobq.worker.processes.ChildDied: the process running the handler ended"
        " (exit code 3)",
        "unpicklable result": "pyjobq.worker.processes.ChildError: the handler's result cannot"
        " come back from its process: cannot pickle 'module' object",
        "unreadable exception": "pyjobq.worker.processes.ChildError: the handler's answer"
        " cannot be read: Unpicklable.__init__() missing 1 required positional argument:"
        " 'text'",
        "interrupt": "pyjobq.worker.processes.ChildError: the handler raised KeyboardInterrupt",
    }
    # The child's own traceback is the cause: where in the handler it was raised.
    assert 'process_handlers.py", line' in (ends["raise"][3] or "")
    assert "in misbehave" in (ends["raise"][3] or "")
    assert all(outcome(db, e.job_id)[0] == JobStatus.DONE for e in good)
    assert metrics.completed == 5


def test_the_worker_setting_runs_every_sync_handler_in_a_child(dsn: str, db: Conn) -> None:
    """``processes`` (``pyjobq worker --processes``): a Tasks table too, its handlers sent to
    the child by the task's module and name."""
    q = JobQueue(db)
    job = q.enqueue(JobType.SEARCH, {"n": 1000}).job_id
    with running(Worker(dsn, tasks.handlers(), processes=True, max_jobs_per_child=5)) as r:
        wait_for(lambda: statuses(db) == {3: 1}, "the job DONE")
        metrics = r.stop()
    assert outcome(db, job)[2]["pid"] != os.getpid()
    assert metrics.children_started == 1


def test_a_handler_that_cannot_be_sent_to_a_child_is_refused_up_front(dsn: str) -> None:
    def local(job: Any) -> None:
        return None

    with pytest.raises(ValueError, match="must be importable"):
        in_process(local)
    with pytest.raises(ValueError, match="must be importable"):
        Worker(dsn, {JobType.SEARCH: local}, processes=True)
    with pytest.raises(ValueError, match="apply with processes only"):
        Worker(dsn, {JobType.SEARCH: compute}, max_jobs_per_child=3)
    with pytest.raises(ValueError, match="memory_mb must be between 32 and 1048576"):
        in_process(compute, memory_mb=1)


def test_the_children_of_a_killed_worker_exit_too(dsn: str, db: Conn, tmp_path: Path) -> None:
    """``pyjobq worker --processes``, killed with SIGKILL while its child runs a job: the child
    sees its parent gone and exits, instead of running on unseen."""
    prepare(db)
    job = JobQueue(db).enqueue(JobType.SEARCH, {"sleep": 120}).job_id
    worker = spawn_worker(dsn, tmp_path, "parent", "--processes", "--max-jobs-per-child", "1")
    try:
        child = wait_for(
            lambda: db.execute("select pid from effects where job_id = %s", (job,)).fetchone(),
            "the job to start",
        )[0]
        assert child != worker.pid
        worker.send_signal(signal.SIGKILL)
        assert worker.wait(30) == -signal.SIGKILL
    finally:
        worker.kill()
    wait_for(lambda: not alive(child), "the orphaned child to exit")
