"""Prometheus metrics, scraped over HTTP and parsed with prometheus_client's own parser.

The dashboard's ``/metrics`` turns one ``job_counts()`` into the queue's gauges; a worker
started with ``--metrics-port`` counts what it did, which the database's outcomes confirm.
"""

from __future__ import annotations

import json
import re
import signal
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.webhelp import ROOT, dashboard, free_port, status_of
from tests.workerhelp import prepare, spawn_worker, statuses, wait_for

parser = pytest.importorskip("prometheus_client.parser")

Conn = psycopg.Connection[Any]


def scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every sample of ``url`` by name, each keyed by its sorted labels."""
    with urllib.request.urlopen(url) as answer:
        text = answer.read().decode()
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[labels] = sample.value
    return samples


def test_the_dashboard_exports_what_job_counts_returns(conn: Conn, dsn: str) -> None:
    conn.execute("select * from pyjobq.job_enqueue_many(1, array_fill('{}'::jsonb, array[5]))")
    conn.execute("select * from pyjobq.job_claim('w1', 2)")
    conn.execute("select * from pyjobq.job_enqueue(2, '{}', p_run_after => now() - interval '9 s')")
    with dashboard(dsn) as base:
        samples = scrape(base + "/metrics")
    rows = conn.execute(
        "select job_type, job_type_name, status_name, jobs, exact, oldest_due_seconds,"
        " expired_leases from pyjobq.job_counts()"
    ).fetchall()
    assert samples["pyjobq_jobs"] == {
        (("job_type", str(t)), ("name", name), ("status", status)): float(jobs)
        for t, name, status, jobs, *_ in rows
    }
    assert set(samples["pyjobq_jobs_exact"].values()) == {1.0}
    oldest = {dict(k)["name"]: v for k, v in samples["pyjobq_oldest_due_seconds"].items()}
    assert oldest["OUTBOX"] >= 9
    expired = {dict(k)["name"]: v for k, v in samples["pyjobq_expired_leases"].items()}
    assert expired == {"SEARCH": 0.0, "OUTBOX": 0.0}


def test_a_token_guards_the_metrics_too(dsn: str) -> None:
    token = "metrics-token-for-this-test"
    with dashboard(dsn, "--token", token) as base:
        assert status_of(base + "/metrics") == 401
        request = urllib.request.Request(
            base + "/metrics", headers={"authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(request) as answer:
            assert b"pyjobq_jobs{" in answer.read()


def test_a_worker_counts_what_it_did(conn: Conn, dsn: str, tmp_path: Path) -> None:
    prepare(conn)
    conn.execute(
        "select * from pyjobq.job_type_set_policy(1, p_backoff_base_seconds => 0.01,"
        " p_backoff_cap_seconds => 0.02)"
    )
    conn.execute("select * from pyjobq.job_enqueue_many(1, array_fill('{}'::jsonb, array[20]))")
    conn.execute(
        "select pyjobq.job_enqueue(1, '{\"fail\": true}', p_max_attempts => 2)"
    )  # fails twice: retried, then dead
    port = free_port()
    worker = spawn_worker(dsn, tmp_path, "metrics", "--metrics-port", str(port))
    try:
        wait_for(lambda: statuses(conn) == {3: 20, 4: 1}, "every job to end")
        samples = scrape(f"http://127.0.0.1:{port}/metrics")
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    one_type = (("job_type", "1"),)
    assert samples["pyjobq_jobs_started_total"] == {one_type: 22.0}
    assert samples["pyjobq_jobs_completed_total"] == {one_type: 20.0}
    assert samples["pyjobq_jobs_failed_total"] == {one_type: 2.0}
    assert samples["pyjobq_jobs_retried_total"] == {one_type: 1.0}
    assert samples["pyjobq_jobs_dead_total"] == {one_type: 1.0}
    assert samples["pyjobq_handler_duration_seconds_count"] == {one_type: 22.0}
    assert samples["pyjobq_claim_to_start_seconds_count"] == {one_type: 22.0}
    round_trips = {
        dict(k)["statement"]: v
        for k, v in samples["pyjobq_statement_duration_seconds_count"].items()
    }
    assert round_trips["claim"] >= 1
    # Failures go with the completions: the flush is the only statement that ends jobs.
    assert "fail" not in round_trips
    assert 1 <= round_trips["finish"] <= 22
    assert samples.get("pyjobq_database_errors_total", {}) == {}


def test_a_worker_exports_its_children_and_lingering_threads(
    conn: Conn, dsn: str, tmp_path: Path
) -> None:
    """What no hook reports, read from the worker's own counts at each scrape: here each of
    four jobs runs in a child of its own (``--processes --max-jobs-per-child 1``)."""
    prepare(conn)
    conn.execute("select * from pyjobq.job_enqueue_many(1, array_fill('{}'::jsonb, array[4]))")
    port = free_port()
    worker = spawn_worker(
        dsn, tmp_path, "children", "--processes", "--max-jobs-per-child", "1",
        "--concurrency", "1", "--metrics-port", str(port),
    )  # fmt: skip
    try:
        wait_for(lambda: statuses(conn) == {3: 4}, "every job to end")
        samples = scrape(f"http://127.0.0.1:{port}/metrics")
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    final = json.loads((tmp_path / "children.json").read_text())
    assert final["children_started"] == 4
    assert samples["pyjobq_children_started_total"] == {(): 4.0}
    assert samples["pyjobq_children_killed_total"] == {(): 0.0}
    assert samples["pyjobq_lingering_threads_total"] == {(): 0.0}


def test_the_grafana_dashboard_plots_only_series_that_exist(conn: Conn) -> None:
    from prometheus_client import generate_latest

    from pyjobq.exporter import WorkerExporter, queue_metrics
    from pyjobq.queue import JobQueue

    exporter = WorkerExporter()
    conn.execute("select pyjobq.job_enqueue(1, '{}')")
    (job,) = JobQueue(conn).claim("w1", 1)
    for outcome in ("completed", "retry", "dead", "lease_lost"):
        exporter.on_job_claimed(job)
        exporter.on_job_start(job)
        exporter.on_job_end(job, outcome, None)
    exporter.on_statement("claim", 0.001, ValueError("x"))
    exported = {
        sample.name
        for family in [
            *parser.text_string_to_metric_families(generate_latest(exporter.registry).decode()),
            *queue_metrics(JobQueue(conn).counts()),
        ]
        for sample in family.samples
    }
    board = json.loads((ROOT / "examples" / "grafana" / "pyjobq.json").read_text())
    plotted = {
        name
        for panel in board["panels"]
        for target in panel["targets"]
        for name in re.findall(r"pyjobq_[a-z_]+", target["expr"])
    }
    assert len(plotted) >= 10
    assert plotted <= exported, plotted - exported


def test_a_job_given_back_unstarted_leaves_no_claim_time_behind(conn: Conn) -> None:
    from pyjobq.exporter import WorkerExporter
    from pyjobq.queue import JobQueue

    exporter = WorkerExporter()
    conn.execute("select pyjobq.job_enqueue(1, '{}')")
    (job,) = JobQueue(conn).claim("w1", 1)
    exporter.on_job_claimed(job)
    exporter.on_job_released(job)
    exporter.on_job_start(job)  # started later without this claim: no claim-to-start
    assert exporter.claim_to_start.labels("1")._sum.get() == 0.0
