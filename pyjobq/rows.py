"""Typed rows returned by the SQL functions, and the codes they use."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import IntEnum
from typing import Any, Literal
from uuid import UUID


class JobStatus(IntEnum):
    """``pyjobq.job.status`` codes."""

    PENDING = 1
    RUNNING = 2
    DONE = 3
    DEAD = 4
    CANCELLED = 5
    WAITING = 6


class JobType(IntEnum):
    """The job type codes the schema ships registered; applications register more."""

    SEARCH = 1
    OUTBOX = 2


@dataclass(frozen=True, slots=True)
class Enqueued:
    """A row of ``job_enqueue``/``job_enqueue_many``: the job, whether this call created it, and
    whether it changed the pending job holding its key (``on_duplicate`` replace or debounce)."""

    job_id: UUID
    created: bool
    replaced: bool


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A row of ``job_claim``; ``attempt`` and ``lease_token`` (random, shown by nothing else) are
    the fencing token to pass back. ``metadata`` is what the enqueue kept beside the payload
    (a W3C ``traceparent``, among others), or None. ``parent_results``, for a job enqueued with
    ``depends_on``, lists its parents in the order given, each ``{"job_id", "job_type",
    "status", "result"}`` (a parent that ended DEAD or CANCELLED shows so, for a job that runs
    on parent failure); None for a job without parents."""

    job_id: UUID
    job_type: int
    priority: int
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    dedupe_key: str | None
    run_after: datetime
    lease_until: datetime
    created_at: datetime
    lease_token: UUID
    metadata: dict[str, Any] | None = None
    parent_results: list[dict[str, Any]] | None = None


@dataclass(frozen=True, slots=True)
class ClaimBatch:
    """What ``claim_with_next_due`` returns: the jobs ``job_claim`` took, and the seconds until
    the times ``job_next_due`` and ``job_next_chores`` give, each None when there is none: the
    next job to become due, the next tick of a schedule, the next lease to expire (negative
    when it has)."""

    jobs: list[ClaimedJob]
    next_due_in: float | None
    next_tick_in: float | None = None
    next_expiry_in: float | None = None


@dataclass(frozen=True, slots=True)
class Completion:
    """A row of ``job_complete_many``: ``completed`` is false for an attempt no longer held."""

    job_id: UUID
    completed: bool


@dataclass(frozen=True, slots=True)
class Renewal:
    """A row of ``job_renew_lease_many``: ``renewed`` is false, and ``lease_until`` None, for an
    attempt no longer held; ``cancelled`` is true when ``job_cancel`` took it from this holder."""

    job_id: UUID
    renewed: bool
    lease_until: datetime | None
    cancelled: bool


@dataclass(frozen=True, slots=True)
class Step:
    """A row of ``job_steps``: a step of the job its handler finished, with its result (any
    JSON), and the attempt that recorded it when."""

    name: str
    result: Any
    attempt: int
    saved_at: datetime


@dataclass(frozen=True, slots=True)
class StepSaved:
    """The row of ``job_step_save``: ``saved`` is false when the step was recorded before, and
    ``result``, ``attempt`` and ``saved_at`` are then that record's."""

    saved: bool
    result: Any
    attempt: int
    saved_at: datetime


@dataclass(frozen=True, slots=True)
class EventWait:
    """The row of ``job_event_wait``: ``signalled`` with the signal's ``payload``,
    ``timed_out``, or ``waiting`` (the attempt has ended: the job sleeps until the signal or
    ``wait_until``)."""

    outcome: Literal["signalled", "timed_out", "waiting"]
    payload: Any
    wait_until: datetime


@dataclass(frozen=True, slots=True)
class Dependency:
    """A row of ``job_dependencies``: a parent or a dependant (``relation``) of the job asked
    about, its status now (None once pruned), and whether the edge is resolved (the parent
    ended)."""

    relation: str
    job_id: UUID
    job_type: int | None
    status: JobStatus | None
    status_name: str | None
    resolved: bool

    def __post_init__(self) -> None:
        if self.status is not None:
            object.__setattr__(self, "status", JobStatus(self.status))


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """The row of ``job_batch_get``: a batch's ``state`` (open, closed, finished), how many jobs
    joined it (``total``), how many have yet to end (``active``) and how many ended each way,
    and the callback jobs enqueued so far (None until due)."""

    batch_id: UUID
    state: str
    total: int
    active: int
    done: int
    dead: int
    cancelled: int
    created_at: datetime
    closed_at: datetime | None
    finished_at: datetime | None
    success_job: UUID | None
    finish_job: UUID | None
    dead_job: UUID | None

    @property
    def finished(self) -> bool:
        """Closed, and every member ended: its success and finish callbacks are enqueued."""
        return self.state == "finished"


@dataclass(frozen=True, slots=True)
class Watched:
    """A row of ``job_watch``: the job's status when it was watched (None: no such job)."""

    job_id: UUID
    status: JobStatus | None
    status_name: str | None

    def __post_init__(self) -> None:
        if self.status is not None:
            object.__setattr__(self, "status", JobStatus(self.status))

    @property
    def ended(self) -> bool:
        """DONE, DEAD or CANCELLED: nothing more will be announced for it."""
        return self.status in (JobStatus.DONE, JobStatus.DEAD, JobStatus.CANCELLED)


@dataclass(frozen=True, slots=True)
class Cancellation:
    """A row of ``job_cancel``: ``outcome`` is cancelled, cancelled_running, finished (already
    DONE, DEAD or CANCELLED, unchanged) or not_found."""

    job_id: UUID
    outcome: str


@dataclass(frozen=True, slots=True)
class Release:
    """A row of ``job_release_many``: ``released`` is false for an attempt no longer held."""

    job_id: UUID
    released: bool


# How a holder ends an attempt in ``job_finish_many``: DONE, failed (retried while tries are
# left, else DEAD), DEAD at once, or snoozed (PENDING again after its delay, the try given back).
Outcome = Literal["done", "failed", "dead", "snoozed"]


@dataclass(frozen=True, slots=True)
class Finish:
    """A row of ``job_finish_many``/``job_fail_many``: the attempt's new status (PENDING for a
    retry, DONE, DEAD) and when a retry is due, or ``None`` for an attempt no longer held."""

    job_id: UUID
    status: JobStatus | None
    run_after: datetime | None

    def __post_init__(self) -> None:
        if self.status is not None:
            object.__setattr__(self, "status", JobStatus(self.status))


@dataclass(frozen=True, slots=True)
class FailOutcome:
    """The row of ``job_fail``: PENDING with the retry time, or DEAD."""

    status: JobStatus
    run_after: datetime

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", JobStatus(self.status))


@dataclass(frozen=True, slots=True)
class ReapedJob:
    """A row of ``job_reap``: a job taken back from ``worker_id``, whose ``attempt`` expired."""

    job_id: UUID
    job_type: int
    status: JobStatus
    worker_id: str
    attempt: int
    run_after: datetime

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", JobStatus(self.status))


@dataclass(frozen=True, slots=True)
class CountRow:
    """A row of ``job_counts``.

    ``oldest_due_seconds`` is set on PENDING rows, ``expired_leases`` on RUNNING rows.
    ``exact`` is false when ``jobs`` is an estimate: DONE jobs in a table over 1 MiB, from
    the statistics of the last ANALYZE (``jobs`` is None before the first one).
    """

    job_type: int
    job_type_name: str
    status: JobStatus
    status_name: str
    jobs: int | None
    oldest_due_seconds: float | None
    expired_leases: int | None
    exact: bool

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", JobStatus(self.status))


@dataclass(frozen=True, slots=True)
class JobInfo:
    """The row of ``job_get``: one job with everything a person needs to see what happened.

    ``lease_until`` is set while RUNNING, ``finished_at`` once DONE or DEAD; ``snoozes`` and
    ``progress`` (the handler's last report) while the job is yet to end. ``attempts`` counts
    every claim of the job, ``tries`` those that spent its budget of ``max_attempts`` (since its
    last redrive, less any given back by a release, a snooze or a wait).
    """

    job_id: UUID
    job_type: int
    job_type_name: str
    status: JobStatus
    status_name: str
    priority: int
    attempts: int
    max_attempts: int
    payload: dict[str, Any]
    result: Any
    last_error: str | None
    dedupe_key: str | None
    run_after: datetime
    lease_until: datetime | None
    worker_id: str | None
    run_started_at: datetime | None
    finished_at: datetime | None
    created_at: datetime
    updated_at: datetime
    metadata: dict[str, Any] | None = None
    waiting_on: int | None = None
    batch_id: UUID | None = None
    snoozes: int | None = None
    progress: dict[str, Any] | None = None
    tries: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", JobStatus(self.status))


@dataclass(frozen=True, slots=True)
class Attempt:
    """A row of ``job_attempts``: one attempt of a job, how it ended (``failed``, ``dead``,
    ``expired``, ``cancelled``, ``snoozed``, ``waiting``, or ``done``; ``running`` while it runs),
    and its error with the error's last line (``error_summary``)."""

    attempt: int
    worker_id: str | None
    started_at: datetime | None
    ended_at: datetime | None
    outcome: str
    error_summary: str | None
    error: str | None


@dataclass(frozen=True, slots=True)
class RecordedStep:
    """A row of ``job_step_list``: a step of a job, the attempt and worker that recorded it,
    when, and its result (any JSON)."""

    name: str
    attempt: int
    worker_id: str
    saved_at: datetime
    result: Any


@dataclass(frozen=True, slots=True)
class Event:
    """A row of ``job_event_list``: an event of a job by name and its ``state``: ``waiting``
    (neither its signal nor its timeout yet), ``signalled``, ``timed_out``, or ``sent``
    (signalled, not waited for yet); when the first wait times out (``wait_until``), when the
    signal came, and its payload."""

    name: str
    state: str
    wait_until: datetime | None
    signalled_at: datetime | None
    payload: Any


@dataclass(frozen=True, slots=True)
class JobSummary:
    """A row of ``job_list``: a job without its payload and result (``job_get`` has them), with
    its ``tries`` (as in :class:`JobInfo`) and its last error's last line (``error_summary``)."""

    job_id: UUID
    job_type: int
    job_type_name: str
    status: JobStatus
    status_name: str
    priority: int
    attempts: int
    max_attempts: int
    dedupe_key: str | None
    run_after: datetime
    worker_id: str | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    tries: int | None = None
    error_summary: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", JobStatus(self.status))


@dataclass(frozen=True, slots=True)
class JobTypeInfo:
    """A row of ``job_types``."""

    job_type: int
    name: str


@dataclass(frozen=True, slots=True)
class TypePolicy:
    """A row of ``job_type_policies``: a type's retry policy, defaults filled in, whether its
    DONE jobs are kept in the history (``keep_done``), how many times a job may snooze
    (``max_snoozes``), and since when the type is paused (``paused_at``, None when it is not)."""

    job_type: int
    name: str
    max_attempts: int
    backoff_base_seconds: float
    backoff_cap_seconds: float
    backoff_jitter: float
    timeout_seconds: float
    keep_done: bool
    max_snoozes: int
    paused_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class TypeLimit:
    """A row of ``job_type_limits``: at most ``max_running`` jobs of the type RUNNING at once,
    and ``key_max_running`` per concurrency key; at most ``rate_limit`` claims in any
    ``rate_period``, and ``key_rate_limit`` per key in any ``key_rate_period`` (``None``: no
    such limit). ``fair_share``: its jobs are claimed round robin across their keys.
    ``next_claim_at``: when the type's rate next lets a claim in (``None``: now)."""

    job_type: int
    name: str
    max_running: int | None
    key_max_running: int | None
    rate_limit: int | None
    rate_period: timedelta | None
    key_rate_limit: int | None
    key_rate_period: timedelta | None
    fair_share: bool
    next_claim_at: datetime | None


@dataclass(frozen=True, slots=True)
class TypeGrant:
    """A row of ``job_type_grants``: members of ``role_name`` hold ``privilege`` (enqueue,
    work or observe) on the jobs of ``job_type``."""

    job_type: int
    job_type_name: str
    privilege: str
    role_name: str


@dataclass(frozen=True, slots=True)
class RegisteredType:
    """The row of ``job_type_register``: ``created`` is false if the pair was registered already."""

    job_type: int
    name: str
    created: bool


@dataclass(frozen=True, slots=True)
class PruneEstimate:
    """The row of ``job_prune_estimate``: about how many ended ``jobs`` ``job_prune`` would
    delete; ``exact`` when each was counted, not taken from a day's statistics."""

    jobs: int
    exact: bool


@dataclass(frozen=True, slots=True)
class Settings:
    """The row of ``job_settings``: ``require_lease_token`` refuses a holder's call without the
    claim's lease token (the schema owner excepted); ``job_prune`` deletes the audit lines older
    than ``audit_retention``."""

    require_lease_token: bool
    audit_retention: timedelta


@dataclass(frozen=True, slots=True)
class Schedule:
    """A row of ``job_schedules``: a periodic job, its next tick and what it fired."""

    name: str
    cron: str
    time_zone: str
    job_type: int
    job_type_name: str
    payload: dict[str, Any]
    priority: int
    max_attempts: int | None
    dedupe_key: str | None
    on_miss: str
    grace_seconds: int
    paused: bool
    next_fire_at: datetime
    last_fire_at: datetime | None
    last_job_id: UUID | None
    fired: int
    misses: int


@dataclass(frozen=True, slots=True)
class Fired:
    """A row of ``job_schedule_tick``: a job a schedule's tick enqueued (``created`` false: the
    active job holding the schedule's dedupe key); ``catch_up`` when it stands for missed ticks."""

    name: str
    tick: datetime
    job_id: UUID
    created: bool
    catch_up: bool


@dataclass(frozen=True, slots=True)
class MinuteCount:
    """A row of ``job_throughput``: the jobs of one type that left RUNNING in one minute."""

    minute: datetime
    job_type: int
    job_type_name: str
    completed: int
    retried: int
    dead: int


@dataclass(frozen=True, slots=True)
class WorkerSeen:
    """A row of ``job_workers``: a worker that finished jobs lately or holds some now."""

    worker_id: str
    seen_at: datetime
    running: int
    completed: int
    retried: int
    dead: int


@dataclass(frozen=True, slots=True)
class AuditLine:
    """A row of ``job_audit``: an operator action that changed jobs.

    ``role`` is the login role the database saw; ``actor`` is who the client said it acted
    for (the setting ``pyjobq.actor``), which nothing vouches for.
    """

    audit_id: int
    at: datetime
    role: str
    actor: str | None
    action: str
    jobs: int
    detail: dict[str, Any]
