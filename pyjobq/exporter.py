"""Prometheus series of a worker and of a queue (the ``metrics`` extra: prometheus-client).

:class:`WorkerExporter` is a :class:`~pyjobq.metrics.WorkerHooks`: the worker feeds it what
each job and statement did, and it keeps, in its own registry, per job type
``pyjobq_jobs_{started,completed,failed,retried,dead,snoozed,waiting}_total`` and
``pyjobq_jobs_interrupted_total`` (lease lost, cancelled, abandoned at shutdown), the
histograms ``pyjobq_handler_duration_seconds`` and ``pyjobq_claim_to_start_seconds``, and per
statement ``pyjobq_statement_duration_seconds`` (each one's count is its round trips) and
``pyjobq_database_errors_total``. What no hook reports it reads from the worker's own
:class:`~pyjobq.metrics.WorkerMetrics` at each scrape once told to (:meth:`WorkerExporter.watch`):
``pyjobq_children_{started,killed}_total`` (handlers in child processes) and
``pyjobq_lingering_threads_total``. ``pyjobq worker --metrics-port`` serves them all.

:func:`queue_metrics` turns one ``job_counts()`` into the gauges ``pyjobq_jobs`` (per type and
status), ``pyjobq_jobs_exact``, ``pyjobq_oldest_due_seconds`` and ``pyjobq_expired_leases``:
the dashboard's ``/metrics`` makes that one call per scrape, cheap at any history size, and
:func:`queue_exposition` writes them out.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from uuid import UUID

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pyjobq.metrics import WorkerHooks, WorkerMetrics
from pyjobq.rows import ClaimedJob, CountRow, JobStatus

# Seconds: from a millisecond (a no-op handler, a claim) to ten minutes.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 600)
FAILED = {"retry": "retried", "dead": "dead"}
# The counts of WorkerMetrics that no hook reports, exported as they are at each scrape.
UNHOOKED = {
    "children_started": "Child processes started for handlers (in_process, processes).",
    "children_killed": "Child processes killed at a deadline, a cancel or a hard stop.",
    "lingering_threads": "Sync handlers that went on running in their thread past their timeout.",
}


class WorkerExporter(WorkerHooks):
    """A worker's Prometheus series, fed through the worker's hooks (see the module)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry

        def jobs(name: str, what: str) -> Counter:
            return Counter(f"pyjobq_jobs_{name}", what, ["job_type"], registry=r)

        self.started = jobs("started", "Jobs whose handler started.")
        self.completed = jobs("completed", "Jobs completed (DONE).")
        self.failed = jobs("failed", "Attempts that failed: retried or dead.")
        self.retried = jobs("retried", "Failed attempts with tries left: PENDING again.")
        self.dead = jobs("dead", "Failed attempts that made the job DEAD.")
        self.snoozed = jobs("snoozed", "Attempts that snoozed: PENDING again, the try given back.")
        self.waiting = jobs("waiting", "Attempts that ended waiting for an event (ctx.wait_for).")
        self.interrupted = Counter(
            "pyjobq_jobs_interrupted",
            "Jobs this worker stopped holding without an outcome of its own.",
            ["job_type", "reason"],
            registry=r,
        )
        self.handler_seconds = Histogram(
            "pyjobq_handler_duration_seconds",
            "Time from a handler's start to its outcome.",
            ["job_type"],
            buckets=BUCKETS,
            registry=r,
        )
        self.claim_to_start = Histogram(
            "pyjobq_claim_to_start_seconds",
            "Time from the claim that returned a job to its handler's start.",
            ["job_type"],
            buckets=BUCKETS,
            registry=r,
        )
        self.statement_seconds = Histogram(
            "pyjobq_statement_duration_seconds",
            "Round trip of each statement the worker sends; its count is the round trips.",
            ["statement"],
            buckets=BUCKETS,
            registry=r,
        )
        self.database_errors = Counter(
            "pyjobq_database_errors",
            "Statements that raised (the worker retries those the database may take later).",
            ["statement"],
            registry=r,
        )
        self._claimed: dict[UUID, float] = {}
        self._started: dict[UUID, float] = {}

    def watch(self, metrics: WorkerMetrics) -> None:
        """Export, from now on, the counts of ``metrics`` (a worker's ``metrics``) that no hook
        reports (``UNHOOKED``), read at each scrape; once per exporter."""
        self.registry.register(_Unhooked(metrics))

    def on_job_claimed(self, job: ClaimedJob) -> None:
        self._claimed[job.job_id] = time.monotonic()

    def on_job_released(self, job: ClaimedJob) -> None:
        self._claimed.pop(job.job_id, None)

    def on_job_start(self, job: ClaimedJob) -> None:
        now = time.monotonic()
        kind = str(job.job_type)
        self.started.labels(kind).inc()
        claimed = self._claimed.pop(job.job_id, None)
        if claimed is not None:
            self.claim_to_start.labels(kind).observe(now - claimed)
        self._started[job.job_id] = now

    def on_job_end(self, job: ClaimedJob, outcome: str, error: BaseException | None) -> None:
        kind = str(job.job_type)
        started = self._started.pop(job.job_id, None)
        self._claimed.pop(job.job_id, None)
        if outcome == "completed":
            self.completed.labels(kind).inc()
        elif outcome in FAILED:
            self.failed.labels(kind).inc()
            (self.retried if outcome == "retry" else self.dead).labels(kind).inc()
        elif outcome == "snoozed":
            self.snoozed.labels(kind).inc()
        elif outcome == "waiting":
            self.waiting.labels(kind).inc()
        else:
            self.interrupted.labels(kind, outcome).inc()
            return
        if started is not None:
            self.handler_seconds.labels(kind).observe(time.monotonic() - started)

    def on_statement(self, statement: str, seconds: float, error: Exception | None) -> None:
        self.statement_seconds.labels(statement).observe(seconds)
        if error is not None:
            self.database_errors.labels(statement).inc()


class _Unhooked(Collector):
    """A worker's counts that no hook reports, read from its WorkerMetrics at each scrape."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        for name, what in UNHOOKED.items():
            yield CounterMetricFamily(f"pyjobq_{name}", what, value=getattr(self.metrics, name))


def queue_metrics(counts: Sequence[CountRow]) -> Iterable[Metric]:
    """The queue's gauges from the rows of one ``job_counts()`` call."""
    jobs = GaugeMetricFamily(
        "pyjobq_jobs",
        "Jobs per type and status (job_counts; DONE, and DEAD or CANCELLED past 10000, estimated).",
        labels=["job_type", "name", "status"],
    )
    exact = GaugeMetricFamily(
        "pyjobq_jobs_exact",
        "1 when pyjobq_jobs is exact, 0 for an estimate.",
        labels=["job_type", "name", "status"],
    )
    oldest = GaugeMetricFamily(
        "pyjobq_oldest_due_seconds",
        "How long the oldest due PENDING job of the type has waited (0: none due).",
        labels=["job_type", "name"],
    )
    expired = GaugeMetricFamily(
        "pyjobq_expired_leases",
        "RUNNING jobs of the type whose lease expired and that no reaper took back yet.",
        labels=["job_type", "name"],
    )
    for row in counts:
        by_status = [str(row.job_type), row.job_type_name, row.status.name]
        if row.jobs is not None:
            jobs.add_metric(by_status, row.jobs)
            exact.add_metric(by_status, 1 if row.exact else 0)
        if row.status == JobStatus.PENDING:
            oldest.add_metric(by_status[:2], row.oldest_due_seconds or 0.0)
        if row.status == JobStatus.RUNNING:
            expired.add_metric(by_status[:2], row.expired_leases or 0)
    return [jobs, exact, oldest, expired]


class _Snapshot(Collector):
    """Metric families computed before the scrape, handed to the registry as they are."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self.families


def queue_exposition(counts: Sequence[CountRow]) -> bytes:
    """The queue's gauges (:func:`queue_metrics`) in Prometheus' text format."""
    registry = CollectorRegistry()
    registry.register(_Snapshot(queue_metrics(counts)))
    return generate_latest(registry)
