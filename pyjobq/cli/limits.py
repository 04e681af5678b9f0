"""``pyjobq limits``: the concurrency and rate limits and fair share of job types (admins set
them)."""

from __future__ import annotations

from datetime import timedelta

import click

from pyjobq.cli.common import dsn_option, parse_duration, queue, resolve_type
from pyjobq.cli.group import main
from pyjobq.rows import TypeLimit


def parse_rate(text: str | None) -> tuple[int | None, timedelta | None]:
    """``N/PERIOD`` (``10/1s``, ``100/1m``; ``N`` alone: per second) as (claims, period)."""
    if text is None:
        return None, None
    count, _, period = text.partition("/")
    if not count.strip().isdigit():
        raise click.BadParameter(f"{text!r} is not a rate such as 10/1s or 1000/1h")
    return int(count), parse_duration(period) if period else None


def show_rate(limit: int | None, period: timedelta | None) -> str:
    return "-" if limit is None or period is None else f"{limit}/{period.total_seconds():g}s"


def describe(row: TypeLimit) -> str:
    """One line of ``pyjobq limits``: a type's limits, and when its rate next lets a claim in."""
    total = "-" if row.max_running is None else row.max_running
    per_key = "-" if row.key_max_running is None else row.key_max_running
    rate = show_rate(row.rate_limit, row.rate_period)
    key_rate = show_rate(row.key_rate_limit, row.key_rate_period)
    line = f"{row.name}\tmax running {total}\tper key {per_key}\trate {rate}\tper key {key_rate}"
    if row.fair_share:
        line += "\tfair share"
    if row.next_claim_at is not None:
        line += f"\tnext claim at {row.next_claim_at.isoformat()}"
    return line


@main.group(invoke_without_command=True)
@dsn_option
@click.pass_context
def limits(context: click.Context, dsn: str | None) -> None:
    """Concurrency and rate limits per job type and per concurrency key, and fair share across
    keys; without a command, list them, with when each type's rate next lets a claim in."""
    if context.invoked_subcommand is not None:
        return
    with queue(dsn) as q:
        rows = q.type_limits()
    for row in rows:
        click.echo(describe(row))
    click.echo(f"{len(rows)} job types with limits", err=True)


@limits.command("set")
@dsn_option
@click.argument("job_type")
@click.option("--max-running", type=click.IntRange(1, 100000), help="RUNNING jobs of the type")
@click.option(
    "--key-max-running", type=click.IntRange(1, 100000), help="RUNNING jobs per concurrency key"
)
@click.option("--rate", help="claims of the type in any period, e.g. 10/1s or 1000/1h")
@click.option("--key-rate", help="claims per concurrency key in any period, e.g. 2/1m")
@click.option("--fair-share", is_flag=True, help="claim round robin across concurrency keys")
def set_(
    dsn: str | None,
    job_type: str,
    max_running: int | None,
    key_max_running: int | None,
    rate: str | None,
    key_rate: str | None,
    fair_share: bool,
) -> None:
    """Set JOB_TYPE's limits (code or name), all at once: a limit left out is removed."""
    rate_limit, rate_period = parse_rate(rate)
    key_rate_limit, key_rate_period = parse_rate(key_rate)
    with queue(dsn) as q:
        code = resolve_type(q, job_type)
        q.type_set_limits(
            code,
            max_running,
            key_max_running,
            rate_limit,
            rate_period,
            key_rate_limit,
            key_rate_period,
            fair_share,
        )
        rows = [r for r in q.type_limits() if r.job_type == code]
    click.echo(describe(rows[0]) if rows else f"{job_type}\tno limits")
