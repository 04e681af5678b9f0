"""Commands that set a database up and add jobs: migrate, enqueue, types, demo."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import click
import psycopg
from psycopg import sql

from pyjobq.cli.common import (
    EXIT_ERROR,
    dsn_option,
    parse_duration,
    parse_json_object,
    queue,
    reporting,
    resolve_dsn,
    resolve_type,
)
from pyjobq.cli.group import main
from pyjobq.params import OnDuplicate
from pyjobq.rows import Enqueued

# The dev server's port unless --port says otherwise: the same URL every time it starts.
DEV_SERVER_PORT = 54320
# The groups of the dev server's application role: what an application's login role joins.
DEV_GROUPS = ("pyjobq_producer", "pyjobq_worker", "pyjobq_observer")


@main.command()
@dsn_option
def migrate(dsn: str | None) -> None:
    """Create or upgrade the pyjobq schema in the database."""
    from pyjobq.migrate import migrate as apply

    with reporting():
        done = apply(resolve_dsn(dsn))
    with queue(dsn) as q:
        version = q.schema_version()
    if done.adopted:
        click.echo(f"adopted {', '.join(done.adopted)}: installed before, recorded as applied")
    if done.applied:
        click.echo(f"applied {', '.join(done.applied)}: pyjobq schema version {version}")
    else:
        click.echo(f"pyjobq schema version {version}: up to date, nothing applied")


@main.command()
@dsn_option
@click.argument("job_type")
@click.argument("payload", required=False, default="{}")
@click.option("--priority", type=click.IntRange(0, 32767), help="lower runs first [default: 100]")
@click.option(
    "--run-after",
    type=click.DateTime(["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"]),
    help="not before this time (ISO 8601; local time unless an offset is given)",
)
@click.option("--delay", help="not before this long from now, e.g. 30s, 5m")
@click.option("--dedupe-key", help="at most one active job per key (single job only)")
@click.option("--max-attempts", type=click.IntRange(1, 1000), help="[default: 3]")
@click.option(
    "--unique-for", help="a job with the key that ended within this long counts too, e.g. 1h"
)
@click.option("--concurrency-key", help="counts against the type's per-key limit (single job)")
@click.option(
    "--depends-on",
    type=click.UUID,
    multiple=True,
    help="a parent job: WAITING until every parent has ended (repeat for more)",
)
@click.option(
    "--on-parent-failure",
    type=click.Choice(["cancel", "run"]),
    help="when a parent ends DEAD or CANCELLED [default: cancel]",
)
@click.option("--batch", "batch_id", type=click.UUID, help="join this open batch (job_batch_open)")
@click.option(
    "--on-duplicate",
    type=click.Choice(["keep", "replace", "debounce"]),
    help="what becomes of a PENDING job holding the key, if never claimed [default: keep]",
)
def enqueue(
    dsn: str | None,
    job_type: str,
    payload: str,
    priority: int | None,
    run_after: datetime | None,
    delay: str | None,
    dedupe_key: str | None,
    max_attempts: int | None,
    unique_for: str | None,
    concurrency_key: str | None,
    depends_on: tuple[UUID, ...],
    on_parent_failure: str | None,
    batch_id: UUID | None,
    on_duplicate: OnDuplicate | None,
) -> None:
    """Add a job of JOB_TYPE (code or name) with a JSON object PAYLOAD.

    With PAYLOAD `-`, read one JSON object per line from stdin and add them all in one
    call (job_enqueue_many); a line may carry its own key as {"payload": {...},
    "dedupe_key": "..."} when --dedupe-key is not used. --depends-on, --batch and
    --on-duplicate apply to every job. Prints the job ids, each created, replaced (the pending
    job holding its key, changed) or existing.
    """
    parents = list(depends_on) or None
    due: datetime | timedelta | None = run_after
    if delay is not None:
        if run_after is not None:
            raise click.UsageError("give --run-after or --delay, not both")
        due = parse_duration(delay)  # from now on the database's clock
    elif run_after is not None and run_after.tzinfo is None:
        due = run_after.astimezone()
    window = None if unique_for is None else parse_duration(unique_for)
    if payload == "-":
        payloads, keys = read_json_lines(sys.stdin)
        if dedupe_key is not None:
            raise click.UsageError("--dedupe-key applies to a single job; put keys in the lines")
        with queue(dsn) as q:
            code = resolve_type(q, job_type)
            rows = q.enqueue_many(
                code,
                payloads,
                keys,
                priority,
                due,
                max_attempts,
                window,
                depends_on=None if parents is None else [parents] * len(payloads),
                on_parent_failure=on_parent_failure,
                batch_id=batch_id,
                on_duplicate=on_duplicate,
            )
        for row in rows:
            click.echo(f"{row.job_id}\t{what_became(row)}")
        click.echo(f"{sum(r.created for r in rows)} of {len(rows)} jobs created", err=True)
        return
    body = parse_json_object(payload, "PAYLOAD")
    with queue(dsn) as q:
        code = resolve_type(q, job_type)
        row = q.enqueue(
            code,
            body,
            priority,
            due,
            dedupe_key,
            max_attempts,
            window,
            concurrency_key,
            depends_on=parents,
            on_parent_failure=on_parent_failure,
            batch_id=batch_id,
            on_duplicate=on_duplicate,
        )
    click.echo(f"{row.job_id}\t{what_became(row)}")


def what_became(row: Enqueued) -> str:
    """How an enqueue's row reads: created, replaced or existing."""
    return "created" if row.created else "replaced" if row.replaced else "existing"


def read_json_lines(lines: Iterable[str]) -> tuple[list[dict[str, Any]], list[str | None] | None]:
    payloads: list[dict[str, Any]] = []
    keys: list[str | None] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        value = parse_json_object(line, f"stdin line {number}")
        if set(value) <= {"payload", "dedupe_key"} and isinstance(value.get("payload"), dict):
            payloads.append(value["payload"])
            keys.append(value.get("dedupe_key"))
        else:
            payloads.append(value)
            keys.append(None)
    if not payloads:
        raise click.BadParameter("stdin held no JSON lines", param_hint="PAYLOAD")
    return payloads, (keys if any(k is not None for k in keys) else None)


@main.group(invoke_without_command=True)
@dsn_option
@click.pass_context
def types(ctx: click.Context, dsn: str | None) -> None:
    """List the registered job types, a paused one with the time it was paused (or register,
    pause or resume one: `types register CODE NAME`, `types pause|resume TYPE`)."""
    if ctx.invoked_subcommand is None:
        with queue(dsn) as q:
            paused = {p.job_type: p.paused_at for p in q.type_policies()}
            for t in q.types():
                since = paused.get(t.job_type)
                click.echo(
                    f"{t.job_type}\t{t.name}"
                    + (f"\tpaused since {since:%Y-%m-%d %H:%M:%S%z}" if since else "")
                )


@types.command("register")
@dsn_option
@click.argument("code", type=click.IntRange(1, 32767))
@click.argument("name")
@click.pass_context
def types_register(ctx: click.Context, dsn: str | None, code: int, name: str) -> None:
    """Register job type CODE (1..32767) under NAME; a no-op when already so registered."""
    # --dsn given to the group (`pyjobq types --dsn ... register`) serves too.
    parent = ctx.parent.params.get("dsn") if ctx.parent is not None else None
    with queue(dsn or parent) as q:
        row = q.type_register(code, name)
    click.echo(
        f"{row.job_type}\t{row.name}\t{'registered' if row.created else 'already registered'}"
    )


@types.command("pause")
@dsn_option
@click.argument("job_type")
@click.pass_context
def types_pause(ctx: click.Context, dsn: str | None, job_type: str) -> None:
    """Pause JOB_TYPE (a code or a name): its jobs stay PENDING, no claim takes them."""
    _pause_or_resume(ctx, dsn, job_type, pause=True)


@types.command("resume")
@dsn_option
@click.argument("job_type")
@click.pass_context
def types_resume(ctx: click.Context, dsn: str | None, job_type: str) -> None:
    """Resume JOB_TYPE (a code or a name) after `types pause`."""
    _pause_or_resume(ctx, dsn, job_type, pause=False)


def _pause_or_resume(ctx: click.Context, dsn: str | None, job_type: str, *, pause: bool) -> None:
    parent = ctx.parent.params.get("dsn") if ctx.parent is not None else None
    code: int | str = int(job_type) if job_type.isdigit() else job_type
    with queue(dsn or parent) as q:
        changed = q.type_pause(code) if pause else q.type_resume(code)
    state = "paused" if pause else "resumed"
    click.echo(f"{job_type}\t{state if changed else 'already ' + state}")


@main.command()
@click.option(
    "--dsn",
    metavar="DSN",
    help="a scratch database to use instead of a throwaway server (schema `demo` is dropped)",
)
@click.option("--jobs", default=6000, show_default=True, type=click.IntRange(2, 1_000_000))
@click.option("--workers", default=3, show_default=True, type=click.IntRange(2, 64))
@click.option("--concurrency", default=16, show_default=True, type=click.IntRange(1, 1000))
@click.option("--no-kill", is_flag=True, help="do not SIGKILL a worker mid-run")
@click.option(
    "--dashboard",
    "dashboard_port",
    is_flag=False,
    flag_value=8788,
    metavar="[PORT]",
    type=click.IntRange(0, 65535),
    help="then serve the dashboard on 127.0.0.1:PORT (default 8788) until Ctrl-C",
)
def demo(
    dsn: str | None,
    jobs: int,
    workers: int,
    concurrency: int,
    no_kill: bool,
    dashboard_port: int | None,
) -> None:
    """Run a real workload: orders with SEARCH and OUTBOX jobs, worker processes, a crash.

    Without --dsn it starts a throwaway PostgreSQL server and removes it at the end; it
    never reads $PYJOBQ_DSN or $DATABASE_URL, since it drops schema `demo` and takes every
    SEARCH and OUTBOX job of the database it is given.
    """
    from pyjobq.demo import run_demo

    with reporting():
        ok = run_demo(
            dsn,
            jobs=jobs,
            workers=workers,
            concurrency=concurrency,
            kill=not no_kill,
            dashboard_port=dashboard_port,
        )
    sys.exit(0 if ok else EXIT_ERROR)


@main.command("dev-server")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEV_SERVER_PORT,
    show_default=True,
    help="the port on 127.0.0.1 to listen on (0: a free one)",
)
@click.option(
    "--role",
    default="app",
    show_default=True,
    help="the application's login role the printed URL connects as",
)
def dev_server(port: int, role: str) -> None:
    """Run a throwaway PostgreSQL server with the pyjobq schema, for development, until Ctrl-C.

    It prints `export PYJOBQ_DSN='postgresql://app@127.0.0.1:PORT/postgres'` (`eval` the line in
    a shell): a login role in the producer, worker and observer groups, as an application's
    would be. The owner's URL, for migrations and admin commands, goes to stderr. The same
    server as the demo's and the tests': trust auth, its data in a temporary directory that
    Ctrl-C or SIGTERM stops and deletes.
    """
    from pyjobq.localpg import LocalPostgres, PortTaken
    from pyjobq.migrate import migrate

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop as on Ctrl-C
    server = LocalPostgres(port=port)
    try:
        server.start()
    except PortTaken as e:
        raise click.BadParameter(str(e), param_hint="--port") from None
    try:
        with reporting():
            migrate(server.dsn())
            with psycopg.connect(server.dsn(), autocommit=True) as owner:
                owner.execute(
                    sql.SQL("create role {} login in role {}").format(
                        sql.Identifier(role), sql.SQL(", ").join(map(sql.Identifier, DEV_GROUPS))
                    )
                )
            # From the URL line on, a caller may stop it: a signal that comes before the sleep is
            # a stop as well, never an abort.
            try:
                click.echo(f"export PYJOBQ_DSN='{server.url(role)}'")
                click.echo(
                    f"pyjobq dev-server: ready; the owner (a superuser): {server.url()}\n"
                    "pyjobq dev-server: Ctrl-C stops it and deletes its data",
                    err=True,
                )
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                click.echo("pyjobq dev-server: stopping", err=True)
    finally:
        server.stop()
