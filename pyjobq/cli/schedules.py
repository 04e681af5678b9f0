"""``pyjobq schedule``: set, pause, resume, delete and list periodic jobs (admins)."""

from __future__ import annotations

from datetime import datetime

import click

from pyjobq.cli.common import dsn_option, parse_json_object, queue, resolve_type
from pyjobq.cli.group import main


@main.group()
def schedule() -> None:
    """Periodic jobs: a cron expression in a time zone, and the job each tick enqueues."""


@schedule.command("set")
@dsn_option
@click.argument("name")
@click.argument("cron")
@click.argument("job_type")
@click.argument("payload", required=False, default="{}")
@click.option("--time-zone", help="IANA name, e.g. Europe/Berlin  [default: UTC]")
@click.option("--priority", type=int, help="lower runs first (0..32767)  [default: 100]")
@click.option("--max-attempts", type=int, help="1..1000  [default: the type's, else 3]")
@click.option("--dedupe-key", help="a tick while a job with this key is active adds nothing")
@click.option(
    "--on-miss",
    type=click.Choice(["skip", "catch_up"]),
    help="ticks later than the grace: none, or one job for all  [default: skip]",
)
@click.option(
    "--grace", "grace_seconds", type=int, help="seconds late a tick still fires  [default: 60]"
)
@click.option(
    "--start-at",
    type=click.DateTime(["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d %H:%M:%S%z"]),
    help="count ticks from this time, e.g. 2030-01-01T00:00:00+00:00  [default: now]",
)
def set_(
    dsn: str | None,
    name: str,
    cron: str,
    job_type: str,
    payload: str,
    time_zone: str | None,
    priority: int | None,
    max_attempts: int | None,
    dedupe_key: str | None,
    on_miss: str | None,
    grace_seconds: int | None,
    start_at: datetime | None,
) -> None:
    """Create or replace schedule NAME: at each tick of CRON (five fields, quoted, or an @alias)
    a JOB_TYPE job (code or name) with PAYLOAD (a JSON object). Prints the next tick."""
    body = parse_json_object(payload, "PAYLOAD")
    with queue(dsn) as q:
        code = resolve_type(q, job_type)
        next_fire_at = q.schedule_set(
            name, cron, code, body, time_zone, priority, max_attempts, dedupe_key, on_miss,
            grace_seconds, start_at,
        )  # fmt: skip
    click.echo(f"{name}\tnext {next_fire_at.isoformat()}")


def _change(dsn: str | None, name: str, verb: str) -> None:
    """job_schedule_pause, _resume or _delete (``verb``) on schedule ``name``."""
    with queue(dsn) as q:
        found: bool = getattr(q, f"schedule_{verb}")(name)
    if not found:
        raise click.ClickException(f"no schedule named {name!r}")
    click.echo(f"{name}\t{verb}d")


@schedule.command()
@dsn_option
@click.argument("name")
def pause(dsn: str | None, name: str) -> None:
    """Stop schedule NAME firing until it is resumed."""
    _change(dsn, name, "pause")


@schedule.command()
@dsn_option
@click.argument("name")
def resume(dsn: str | None, name: str) -> None:
    """Let schedule NAME fire again from its first tick after now."""
    _change(dsn, name, "resume")


@schedule.command()
@dsn_option
@click.argument("name")
def delete(dsn: str | None, name: str) -> None:
    """Delete schedule NAME; the jobs it enqueued stay."""
    _change(dsn, name, "delete")


@schedule.command("list")
@dsn_option
def list_(dsn: str | None) -> None:
    """Every schedule: its cron and zone, type, next and last tick, ticks fired and missed."""
    with queue(dsn) as q:
        rows = q.schedules()
    for s in rows:
        state = "paused" if s.paused else f"next {s.next_fire_at.isoformat()}"
        last = s.last_fire_at.isoformat() if s.last_fire_at else "never"
        click.echo(
            f"{s.name}\t{s.cron}\t{s.time_zone}\t{s.job_type_name}\t{state}\tlast {last}"
            f"\tfired {s.fired}\tmissed {s.misses}"
        )
    click.echo(f"{len(rows)} schedules", err=True)
