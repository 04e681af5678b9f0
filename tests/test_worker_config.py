"""WorkerConfig: one place for a worker's settings, their defaults and ranges, which the
command line reads its options from and the demo writes its worker processes' options with."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from click.testing import CliRunner

from pyjobq.cli import main
from pyjobq.cli.work import worker, worker_config
from pyjobq.rows import JobType
from pyjobq.worker import Worker, WorkerConfig


def ok(job: Any) -> None:
    return None


def parsed(args: list[str]) -> WorkerConfig:
    """The config ``pyjobq worker HANDLERS args`` would run with."""
    context = worker.make_context("worker", ["tests.worker_handlers:HANDLERS", *args])
    names = {f.name for f in dataclasses.fields(WorkerConfig)}
    return worker_config({k: v for k, v in context.params.items() if k in names})


def test_every_option_of_the_command_line_makes_the_same_config() -> None:
    flagged = [f for f in dataclasses.fields(WorkerConfig) if f.metadata["flag"]]
    assert {f.name for f in flagged} >= {"concurrency", "lease_seconds", "listen", "worker_id"}
    # Every flagged setting away from its default, then through the command line and back.
    config = WorkerConfig(
        concurrency=3, prefetch=7, lease_seconds=45, job_timeout=2.5, poll_interval=0.5,
        reap_interval=9.0, schedule_interval=2.0, schedules=False, shutdown_timeout=4.0,
        listen=False, listen_dsn="host=elsewhere",
        prepared_statements=False, worker_id="w-7", max_lingering_threads=2, processes=True,
        max_jobs_per_child=100, child_memory_mb=512,
    )  # fmt: skip
    changed = {f.name for f in flagged if getattr(config, f.name) != f.default}
    assert changed == {f.name for f in flagged}
    assert parsed(config.command_line()) == config
    assert parsed([]) == WorkerConfig()


def test_a_setting_the_command_line_lacks_cannot_be_written_as_options() -> None:
    with pytest.raises(ValueError, match="flush_batch has no pyjobq worker option"):
        WorkerConfig(flush_batch=10).command_line()


@pytest.mark.parametrize(
    ("setting", "value", "allowed"),
    [
        ("concurrency", 0, "between 1 and 1000"),
        ("concurrency", 1001, "between 1 and 1000"),
        ("lease_seconds", 86401, "between 1 and 86400"),
        ("job_timeout", 0.0, "greater than 0"),
        ("poll_interval", float("nan"), "at least 0.01"),
        ("prefetch_lease_fraction", 0.0, "greater than 0 and at most 1"),
        ("flush_batch", 10001, "between 1 and 10000"),
    ],
)
def test_a_setting_out_of_range_is_refused_naming_it(
    setting: str, value: float, allowed: str
) -> None:
    settings: dict[str, Any] = {setting: value}
    with pytest.raises(ValueError, match=f"^{setting} must be {allowed}, not"):
        WorkerConfig(**settings)


def test_the_worker_takes_a_config_and_options_that_override_it(dsn: str) -> None:
    base = WorkerConfig(concurrency=3, lease_seconds=45)
    worker = Worker(dsn, {JobType.SEARCH: ok}, base, concurrency=5)
    assert worker.config == dataclasses.replace(base, concurrency=5)
    with pytest.raises(ValueError, match="concurrency must be"):
        Worker(dsn, {JobType.SEARCH: ok}, concurrency=0)
    with pytest.raises(TypeError, match="no_such_setting"):
        Worker(dsn, {JobType.SEARCH: ok}, no_such_setting=1)


def test_the_command_line_refuses_a_setting_out_of_range_as_usage() -> None:
    result = CliRunner().invoke(
        main, ["worker", "tests.worker_handlers:HANDLERS", "--dsn", "x", "--concurrency", "0"]
    )
    assert result.exit_code == 2
    assert "invalid worker setting: concurrency must be between 1 and 1000" in result.output
