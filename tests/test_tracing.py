"""Traces from enqueue to handler, with the OpenTelemetry SDK's in-memory exporter.

The enqueue stores the current span's W3C context in the job's metadata; the worker runs the
handler in a span whose parent is that context, so the handler's span is in the enqueuer's
trace. A client in another language stores the same ``traceparent`` key through the SQL API.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from pyjobq import ClaimedJob, JobQueue, JobType
from pyjobq.worker import Worker
from tests.workerhelp import running, statuses, wait_for

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

Conn = psycopg.Connection[Any]
EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def provider() -> None:
    """One tracer provider for the process (OpenTelemetry lets it be set once)."""
    current = trace.get_tracer_provider()
    if not isinstance(current, sdk_trace.TracerProvider):
        configured = sdk_trace.TracerProvider()
        configured.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(configured)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


SEEN: dict[str, Any] = {}


def remember_sync(job: ClaimedJob) -> None:
    """What a sync handler sees as the current span, in its pool thread."""
    SEEN[str(job.job_id)] = trace.get_current_span().get_span_context()


async def remember_async(job: ClaimedJob) -> None:
    SEEN[str(job.job_id)] = trace.get_current_span().get_span_context()


def run_jobs(dsn: str, conn: Conn, jobs: int) -> None:
    worker = Worker(dsn, {JobType.SEARCH: remember_sync, JobType.OUTBOX: remember_async})
    with running(worker) as r:
        wait_for(lambda: statuses(conn) == {3: jobs}, "every job DONE")
        r.stop()


def test_the_handler_span_is_a_child_of_the_enqueuer_span(
    dsn: str, conn: Conn, spans: InMemorySpanExporter
) -> None:
    q = JobQueue(conn)
    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("request") as request:
        sync_job = q.enqueue(JobType.SEARCH, {"n": 1}).job_id
        async_job = q.enqueue(JobType.OUTBOX, {"n": 2}).job_id
    stored = q.get(sync_job)
    assert stored is not None
    assert stored.metadata is not None
    trace_id = request.get_span_context().trace_id
    assert stored.metadata["traceparent"].split("-")[1] == f"{trace_id:032x}"
    run_jobs(dsn, conn, 2)
    handled = {
        dict(s.attributes or {})["pyjobq.job_id"]: s
        for s in spans.get_finished_spans()
        if s.name.startswith("pyjobq process")
    }
    for job_id, job_type in ((sync_job, 1), (async_job, 2)):
        span = handled[str(job_id)]
        assert span.context.trace_id == trace_id
        assert span.parent is not None
        assert span.parent.span_id == request.get_span_context().span_id
        assert span.kind == trace.SpanKind.CONSUMER
        attributes = dict(span.attributes or {})
        assert attributes["pyjobq.job_type"] == job_type
        assert attributes["pyjobq.attempt"] == 1
        # The handler ran inside it, in its thread or on the loop.
        assert SEEN[str(job_id)].span_id == span.context.span_id


def test_a_job_enqueued_outside_a_trace_starts_its_own(
    dsn: str, conn: Conn, spans: InMemorySpanExporter
) -> None:
    job_id = JobQueue(conn).enqueue(JobType.SEARCH, {}).job_id
    stored = JobQueue(conn).get(job_id)
    assert stored is not None
    assert stored.metadata is None
    run_jobs(dsn, conn, 1)
    (span,) = [s for s in spans.get_finished_spans() if s.name.startswith("pyjobq process")]
    assert span.parent is None


def test_a_traceparent_written_by_any_client_is_followed(
    dsn: str, conn: Conn, spans: InMemorySpanExporter
) -> None:
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    conn.execute(
        "select pyjobq.job_enqueue(1, '{}', p_metadata => %s)",
        (f'{{"traceparent": "00-{trace_id}-{parent_id}-01", "tenant": "a"}}',),
    )
    run_jobs(dsn, conn, 1)
    (span,) = [s for s in spans.get_finished_spans() if s.name.startswith("pyjobq process")]
    assert f"{span.context.trace_id:032x}" == trace_id
    assert span.parent is not None
    assert f"{span.parent.span_id:016x}" == parent_id
