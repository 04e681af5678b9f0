"""Commands that act on a queue's jobs: reap, redrive, cancel, update, signal, prune."""

from __future__ import annotations

import json
from uuid import UUID

import click

from pyjobq.cli.common import (
    dsn_option,
    fail,
    parse_duration,
    parse_json_object,
    queue,
    resolve_type,
)
from pyjobq.cli.group import main


@main.command()
@dsn_option
@click.option("--limit", type=click.IntRange(1, 100000), help="[default: 1000]")
def reap(dsn: str | None, limit: int | None) -> None:
    """Take back RUNNING jobs whose lease expired (workers do this on their own too)."""
    with queue(dsn) as q:
        rows = q.reap(limit)
    for r in rows:
        click.echo(f"{r.job_id}\t{r.status.name}\tfrom {r.worker_id} attempt {r.attempt}")
    click.echo(f"{len(rows)} jobs reaped", err=True)


@main.command()
@dsn_option
@click.argument("job_ids", nargs=-1)
@click.option("--type", "job_type", help="only DEAD jobs of this type (code or name)")
@click.option("--limit", type=click.IntRange(1, 100000), help="[default: 1000]")
def redrive(
    dsn: str | None, job_ids: tuple[str, ...], job_type: str | None, limit: int | None
) -> None:
    """Move DEAD or CANCELLED jobs (JOB_IDS, or all of --type, or all) back to PENDING."""
    try:
        ids = [UUID(j) for j in job_ids] or None
    except ValueError:
        raise click.BadParameter("job ids must be UUIDs", param_hint="JOB_IDS") from None
    with queue(dsn) as q:
        code = None if job_type is None else resolve_type(q, job_type)
        moved = q.redrive(ids, code, limit)
    for job_id in moved:
        click.echo(str(job_id))
    click.echo(f"{len(moved)} jobs redriven", err=True)


@main.command()
@dsn_option
@click.argument("job_ids", nargs=-1, required=True)
def cancel(dsn: str | None, job_ids: tuple[str, ...]) -> None:
    """Cancel jobs: PENDING, WAITING and RUNNING ones become CANCELLED (with their dependants);
    prints each id and its outcome."""
    try:
        ids = [UUID(j) for j in job_ids]
    except ValueError:
        raise click.BadParameter("job ids must be UUIDs", param_hint="JOB_IDS") from None
    with queue(dsn) as q:
        rows = q.cancel(ids)
    for row in rows:
        click.echo(f"{row.job_id} {row.outcome}")


@main.command()
@dsn_option
@click.argument("job_id", type=click.UUID)
@click.option("--payload", help="a JSON object: the new payload (only of a job never claimed)")
@click.option("--priority", type=click.IntRange(0, 32767), help="the new priority")
@click.option("--delay", help="due this long from now, e.g. 0s (run it now), 5m")
def update(
    dsn: str | None, job_id: UUID, payload: str | None, priority: int | None, delay: str | None
) -> None:
    """Change a PENDING job (job_update): its payload, priority or when it is due. Prints the id
    and the outcome; exit 0 when updated, 1 when the job was claimed, waiting for its parents,
    finished or not found (nothing changed)."""
    body = None if payload is None else parse_json_object(payload, "--payload")
    due = None if delay is None else parse_duration(delay)
    if body is None and priority is None and due is None:
        raise click.UsageError("give --payload, --priority or --delay")
    with queue(dsn) as q:
        outcome = q.update(job_id, body, priority, due)
    click.echo(f"{job_id} {outcome}")
    if outcome != "updated":
        fail(f"job {job_id} was not changed: {outcome}")


@main.command()
@dsn_option
@click.argument("job_id")
@click.argument("name")
@click.option("--payload", default="null", help="the signal's JSON payload [default: null]")
def signal(dsn: str | None, job_id: str, name: str, payload: str) -> None:
    """Send event NAME to job JOB_ID (job_signal): a job waiting for it is due at once, one that
    waits for it later gets it then. Exit 0 when sent, 1 when the job already had it."""
    try:
        target = UUID(job_id)
    except ValueError:
        raise click.BadParameter("must be a UUID", param_hint="JOB_ID") from None
    try:
        value = json.loads(payload)
    except json.JSONDecodeError as e:
        raise click.BadParameter(f"not valid JSON: {e}", param_hint="--payload") from None
    with queue(dsn) as q:
        sent = q.signal(target, name, value)
    if not sent:
        fail(f"job {target} already had event {name!r}: the first signal stays")
    click.echo(f"{target} {name} sent")


@main.command()
@dsn_option
@click.option("--older-than", required=True, help="age of ended jobs to delete, e.g. 7d, 12h")
@click.option("--limit", type=click.IntRange(1, 100000), help="per call [default: 10000]")
def prune(dsn: str | None, older_than: str, limit: int | None) -> None:
    """Delete DONE, DEAD and CANCELLED jobs last changed more than --older-than ago, in batches."""
    age = parse_duration(older_than)
    total = 0
    with queue(dsn) as q:
        while True:
            deleted = q.prune(age, limit)
            total += deleted
            if deleted < (limit or 10000):
                break
    click.echo(f"{total} jobs deleted")
