"""Counters a :class:`~pyjobq.worker.Worker` keeps, and the hooks it calls around each job."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from pyjobq.rows import ClaimedJob


@dataclass
class WorkerMetrics:
    """What one worker did since it started; read it any time, it is only ever added to.

    ``round_trips`` counts every statement the worker sent for jobs (claim, finish_many,
    renew_lease, release, reap), so ``round_trips / (completed + failed)`` is the cost
    per job. ``latency_*`` measure from the moment a job was due to the moment a handler
    started it.
    """

    claimed: int = 0
    started: int = 0
    completed: int = 0
    failed: int = 0
    retried: int = 0
    dead: int = 0
    # Attempts whose handler snoozed (Snooze): PENDING again, the try given back.
    snoozed: int = 0
    # Attempts that ended waiting for an event (ctx.wait_for): asleep until signalled.
    waiting: int = 0
    timed_out: int = 0
    # Sync handlers that went on running in their thread after their timeout.
    lingering_threads: int = 0
    # Child processes started for handlers (in_process, processes), and those killed at a
    # deadline, a cancel or a hard stop.
    children_started: int = 0
    children_killed: int = 0
    lease_lost: int = 0
    cancelled: int = 0
    released: int = 0
    renewed: int = 0
    reaped: int = 0
    # Jobs that schedules' ticks enqueued through this worker's job_schedule_tick calls.
    scheduled: int = 0
    round_trips: int = 0
    claims: int = 0
    flushes: int = 0
    # Times a runner waited, before starting a job, for finished jobs to be sent (see
    # Claimer.unsent_full): completions that cannot keep up hold the runners back.
    held_back: int = 0
    db_errors: int = 0
    hook_errors: int = 0
    latency_seconds_total: float = 0.0
    latency_seconds_max: float = 0.0

    def observe_latency(self, seconds: float) -> None:
        self.latency_seconds_total += seconds
        self.latency_seconds_max = max(self.latency_seconds_max, seconds)

    def round_trips_per_job(self) -> float:
        finished = self.completed + self.failed
        return self.round_trips / finished if finished else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "round_trips_per_job": round(self.round_trips_per_job(), 4)}


class WorkerHooks:
    """Subclass and pass to a Worker to observe jobs; every method is a no-op here.

    Hooks run on the worker's event loop and must not block. What a hook raises is logged
    (``hook ... raised``, with the job) and counted in ``WorkerMetrics.hook_errors``; it
    changes neither the job's outcome nor the worker.
    """

    def on_job_claimed(self, job: ClaimedJob) -> None:
        """A claim returned ``job``; a handler starts it when a runner is free."""

    def on_job_released(self, job: ClaimedJob) -> None:
        """``job``, claimed and never started, is given back (``job_release_many``): at a
        drain, or when it waited past its share of the lease."""

    def on_job_start(self, job: ClaimedJob) -> None:
        """A handler is about to run ``job``."""

    def on_job_end(self, job: ClaimedJob, outcome: str, error: BaseException | None) -> None:
        """``job`` finished: ``outcome`` is completed, retry, dead, snoozed, waiting,
        lease_lost, cancelled or abandoned."""

    def on_statement(self, statement: str, seconds: float, error: Exception | None) -> None:
        """A statement of the worker's took ``seconds``: claim, claim_announced (a claim woken
        by a NOTIFY alone, without job_next_due), finish, renew, release, reap, next_due or
        schedule_tick; ``error`` is what it raised (the worker retries
        those the database may accept later)."""
