"""``pyjobq batch``: open a batch with its callbacks, close it, show it, wait for it."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any
from uuid import UUID

import click

from pyjobq.aio_batches import Callback
from pyjobq.cli.common import EXIT_ERROR, dsn_option, fail, parse_json_object, queue
from pyjobq.cli.group import main
from pyjobq.rows import BatchInfo

WHEN = ("success", "finish", "dead")


@main.group()
def batch() -> None:
    """Batches: jobs that join one with `enqueue --batch`, and the callback jobs the queue
    enqueues exactly once when they have all ended (job_batch_open, _close, _get)."""


@batch.command("open")
@dsn_option
@click.option(
    "--on",
    "callbacks",
    multiple=True,
    type=(click.Choice(WHEN), str, str),
    metavar="WHEN TYPE PAYLOAD",
    help="a callback job of TYPE (code or name) with PAYLOAD (a JSON object), enqueued when"
    " the closed batch's jobs are all DONE (success), have all ended (finish), or at the"
    " first DEAD one (dead); repeatable",
)
def open_(dsn: str | None, callbacks: tuple[tuple[str, str, str], ...]) -> None:
    """Open a batch and print its id, for `pyjobq enqueue --batch ID`. A callback's payload
    gets "batch" with the counts."""
    chosen: dict[str, Callback] = {}
    for when, job_type, payload in callbacks:
        if when in chosen:
            raise click.BadParameter(f"--on {when} given twice", param_hint="--on")
        chosen[when] = (job_type, parse_json_object(payload, f"--on {when} PAYLOAD"))
    with queue(dsn) as q:
        batch_id = q.open_batch(chosen.get("success"), chosen.get("finish"), chosen.get("dead"))
    click.echo(batch_id)


@batch.command()
@dsn_option
@click.argument("batch_id", type=click.UUID)
def close(dsn: str | None, batch_id: UUID) -> None:
    """Close batch BATCH_ID: no job joins it any more, and once its jobs have all ended it is
    finished and its callbacks are enqueued. Closing a closed batch changes nothing."""
    with queue(dsn) as q:
        q.close_batch(batch_id)  # an unknown batch: JQ002, exit 1
        found = q.get_batch(batch_id)
    _show(batch_id, found, as_json=False)


def _show(batch_id: UUID, found: BatchInfo | None, as_json: bool) -> None:
    """A batch as `show` prints it: one JSON object, or a field per line."""
    if found is None:
        fail(f"no batch {batch_id} (never opened, or pruned)")
    fields: dict[str, Any] = dataclasses.asdict(found)
    if as_json:
        click.echo(json.dumps(fields, default=str))
        return
    for name, value in fields.items():
        click.echo(f"{name:<12} {'' if value is None else value}")


@batch.command()
@dsn_option
@click.argument("batch_id", type=click.UUID)
@click.option("--json", "as_json", is_flag=True, help="one JSON object, for scripts")
def show(dsn: str | None, batch_id: UUID, as_json: bool) -> None:
    """Batch BATCH_ID: its state (open, closed, finished), how many jobs joined it, how many
    are active and how many ended each way, and its callback jobs once enqueued."""
    with queue(dsn) as q:
        found = q.get_batch(batch_id)
    _show(batch_id, found, as_json)


@batch.command()
@dsn_option
@click.argument("batch_id", type=click.UUID)
@click.option("--timeout", default=60.0, show_default=True, type=click.FloatRange(0, 86400))
@click.option("--json", "as_json", is_flag=True, help="one JSON object, for scripts")
def wait(dsn: str | None, batch_id: UUID, timeout: float, as_json: bool) -> None:
    """Wait for batch BATCH_ID to finish, without polling (LISTEN pyjobq_batch), and print it;
    exit 1 if it has not finished within --timeout seconds."""
    with queue(dsn) as q:
        found = q.wait_batch(batch_id, timeout)
        current = found or q.get_batch(batch_id)
    _show(batch_id, current, as_json)
    if found is None:
        click.secho(f"pyjobq: batch {batch_id} not finished after {timeout:g}s", err=True)
        sys.exit(EXIT_ERROR)
