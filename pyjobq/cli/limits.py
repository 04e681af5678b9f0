"""``pyjobq limits``: the concurrency limits of job types (admins set them)."""

from __future__ import annotations

import click

from pyjobq.cli.common import dsn_option, queue, resolve_type
from pyjobq.cli.group import main


@main.group(invoke_without_command=True)
@dsn_option
@click.pass_context
def limits(context: click.Context, dsn: str | None) -> None:
    """Concurrency limits per job type and per concurrency key; without a command, list them."""
    if context.invoked_subcommand is not None:
        return
    with queue(dsn) as q:
        rows = q.type_limits()
    for row in rows:
        total = "-" if row.max_running is None else row.max_running
        per_key = "-" if row.key_max_running is None else row.key_max_running
        click.echo(f"{row.name}\tmax running {total}\tper key {per_key}")
    click.echo(f"{len(rows)} job types with limits", err=True)


@limits.command("set")
@dsn_option
@click.argument("job_type")
@click.option("--max-running", type=click.IntRange(1, 100000), help="RUNNING jobs of the type")
@click.option(
    "--key-max-running", type=click.IntRange(1, 100000), help="RUNNING jobs per concurrency key"
)
def set_(
    dsn: str | None, job_type: str, max_running: int | None, key_max_running: int | None
) -> None:
    """Set JOB_TYPE's limits (code or name); a limit left out is removed."""
    with queue(dsn) as q:
        code = resolve_type(q, job_type)
        q.type_set_limits(code, max_running, key_max_running)
    click.echo(f"{job_type}\tmax running {max_running or '-'}\tper key {key_max_running or '-'}")
