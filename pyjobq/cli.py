"""The ``pyjobq`` command: migrate, enqueue, run workers, inspect and operate a queue."""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar
from uuid import UUID

import click
import psycopg

from pyjobq.errors import PyjobqError
from pyjobq.migrate import check_schema_version
from pyjobq.queue import JobQueue
from pyjobq.rows import CountRow, JobStatus

if TYPE_CHECKING:
    from pyjobq.worker import Handler

F = TypeVar("F", bound=Callable[..., Any])

DSN_ENV = ("PYJOBQ_DSN", "DATABASE_URL")

# Exit codes: 1 for an error the database reported, 2 for bad usage (click's own), 3 when
# the database cannot be reached.
EXIT_ERROR = 1
EXIT_UNREACHABLE = 3


def fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    click.secho(f"pyjobq: {message}", err=True, fg="red")
    sys.exit(code)


def resolve_dsn(dsn: str | None) -> str:
    for value in (dsn, *(os.environ.get(name) for name in DSN_ENV)):
        if value:
            return value
    fail("no database given: pass --dsn or set PYJOBQ_DSN or DATABASE_URL", 2)


def describe(error: BaseException) -> tuple[str, int]:
    """A one-paragraph message and exit code for an error reaching or using the database."""
    if isinstance(error, PyjobqError):
        hint = f"\nhint: {error.hint}" if error.hint else ""
        return f"{error}{hint}", EXIT_ERROR
    if isinstance(error, psycopg.errors.UndefinedFunction | psycopg.errors.InvalidSchemaName):
        return "this database has no pyjobq schema: run `pyjobq migrate` first", EXIT_ERROR
    if isinstance(error, psycopg.OperationalError):
        lines = str(error).strip().splitlines() or [type(error).__name__]
        return f"cannot use the database: {lines[0]}", EXIT_UNREACHABLE
    if isinstance(error, psycopg.Error):
        return f"database error: {str(error).strip()}", EXIT_ERROR
    return str(error), EXIT_ERROR


@contextmanager
def reporting() -> Iterator[None]:
    """Turn database and pyjobq errors into a message and an exit code, never a traceback."""
    try:
        yield
    except (PyjobqError, psycopg.Error) as e:
        message, code = describe(e)
        fail(message, code)


@contextmanager
def queue(dsn: str | None) -> Iterator[JobQueue]:
    """A JobQueue on one autocommit connection to the resolved DSN, once its schema version
    is known to suit this package (newer: refused; older: a warning)."""
    with reporting(), psycopg.connect(resolve_dsn(dsn), autocommit=True, connect_timeout=10) as c:
        q = JobQueue(c)
        warning = check_schema_version(q.schema_version())
        if warning:
            click.secho(f"pyjobq: warning: {warning}", err=True, fg="yellow")
        yield q


def dsn_option(f: F) -> F:
    return click.option(
        "--dsn",
        metavar="DSN",
        help="libpq conninfo or postgresql:// URL [default: $PYJOBQ_DSN, else $DATABASE_URL]",
    )(f)


def parse_json_object(text: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise click.BadParameter(f"{where} is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise click.BadParameter(f"{where} must be a JSON object, e.g. '{{\"id\": 1}}'")
    return value


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)?\s*$")
_UNIT = {None: 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    match = _DURATION.match(text)
    if not match:
        raise click.BadParameter(f"{text!r} is not a duration such as 90s, 30m, 12h or 7d")
    return timedelta(seconds=float(match.group(1)) * _UNIT[match.group(2)])


def resolve_type(q: JobQueue, value: str) -> int:
    """A job type given as its code or its registered name: the name as registered, else
    the one name that matches it ignoring case."""
    if value.lstrip("-").isdigit():
        return int(value)
    types = q.types()
    exact = [t.job_type for t in types if t.name == value]
    folded = [t.job_type for t in types if t.name.lower() == value.lower()]
    if exact or len(folded) == 1:
        return (exact or folded)[0]
    known = ", ".join(f"{t.job_type}={t.name}" for t in types)
    fail(f"no job type is named {value!r} (registered: {known})", 2)


def resolve_handlers(q: JobQueue, table: Mapping[Any, Any]) -> dict[int, Any]:
    """The handler table keyed by job type code: each key a registered code or name, each
    value callable. Fails with one line on stderr (exit 2) on the first problem."""
    registered = {t.job_type for t in q.types()}
    resolved: dict[int, Any] = {}
    for key, handler in table.items():
        if isinstance(key, bool) or not isinstance(key, int | str):
            fail(f"handler key {key!r} is neither a job type code nor a job type name", 2)
        code = resolve_type(q, key) if isinstance(key, str) else int(key)
        if code not in registered:
            fail(f"job type {key!r} is not registered (pyjobq types register CODE NAME)", 2)
        if not callable(handler):
            fail(f"the handler for job type {key!r} is not callable: {handler!r}", 2)
        if code in resolved:
            fail(f"job type {code} has two handlers", 2)
        resolved[code] = handler
    return resolved


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="pyjobq")
def main() -> None:
    """pyjobq: a job queue that lives inside PostgreSQL.

    Every command talks to the database given by --dsn, $PYJOBQ_DSN or $DATABASE_URL.
    """


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
def enqueue(
    dsn: str | None,
    job_type: str,
    payload: str,
    priority: int | None,
    run_after: datetime | None,
    delay: str | None,
    dedupe_key: str | None,
    max_attempts: int | None,
) -> None:
    """Add a job of JOB_TYPE (code or name) with a JSON object PAYLOAD.

    With PAYLOAD `-`, read one JSON object per line from stdin and add them all in one
    call (job_enqueue_many); a line may carry its own key as {"payload": {...},
    "dedupe_key": "..."} when --dedupe-key is not used. Prints the job ids.
    """
    if delay is not None:
        if run_after is not None:
            raise click.UsageError("give --run-after or --delay, not both")
        run_after = datetime.now().astimezone() + parse_duration(delay)
    elif run_after is not None and run_after.tzinfo is None:
        run_after = run_after.astimezone()
    if payload == "-":
        payloads, keys = read_json_lines(sys.stdin)
        if dedupe_key is not None:
            raise click.UsageError("--dedupe-key applies to a single job; put keys in the lines")
        with queue(dsn) as q:
            code = resolve_type(q, job_type)
            rows = q.enqueue_many(code, payloads, keys, priority, run_after, max_attempts)
        for row in rows:
            click.echo(f"{row.job_id}\t{'created' if row.created else 'existing'}")
        click.echo(f"{sum(r.created for r in rows)} of {len(rows)} jobs created", err=True)
        return
    body = parse_json_object(payload, "PAYLOAD")
    with queue(dsn) as q:
        code = resolve_type(q, job_type)
        row = q.enqueue(code, body, priority, run_after, dedupe_key, max_attempts)
    click.echo(f"{row.job_id}\t{'created' if row.created else 'existing'}")


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


def load_handlers(path: str) -> Mapping[Any, Any]:
    """Import ``module:attribute``: a mapping of job type to handler, or a function returning
    one. Whatever goes wrong (the module fails to import or raises, the attribute is missing
    or of the wrong kind) is one line on stderr and exit 2."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        fail(f"{path!r} is not of the form module:attribute", 2)
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
        handlers = getattr(module, attribute, None)
        if callable(handlers) and not isinstance(handlers, Mapping):
            handlers = handlers()
    except Exception as e:  # the user's module: anything it raises is a startup error
        fail(f"cannot load {path}: {type(e).__name__}: {e}", 2)
    if not isinstance(handlers, Mapping) or not handlers:
        fail(f"{path} is not a non-empty mapping of job type to handler", 2)
    return handlers


@main.command()
@dsn_option
@click.argument("handlers")
@click.option("-c", "--concurrency", default=8, show_default=True, type=click.IntRange(1, 1000))
@click.option(
    "--prefetch",
    type=click.IntRange(0, 10000),
    help="claimed jobs waiting for a free slot (default: follows job duration)",
)
@click.option(
    "--types",
    "only",
    help="comma-separated job type codes or names to take (default: all handled)",
)
@click.option(
    "--lease", default=60, show_default=True, type=click.IntRange(1, 86400), help="seconds"
)
@click.option("--job-timeout", type=click.FloatRange(min=0, min_open=True), help="seconds per job")
@click.option("--poll-interval", default=5.0, show_default=True, type=click.FloatRange(0.01))
@click.option("--reap-interval", default=30.0, show_default=True, type=click.FloatRange(0.1))
@click.option("--shutdown-timeout", default=30.0, show_default=True, type=click.FloatRange(0))
@click.option(
    "--no-listen", is_flag=True, help="poll only, no LISTEN (e.g. PgBouncer transaction mode)"
)
@click.option(
    "--listen-dsn",
    help="LISTEN on this server directly (when --dsn goes through PgBouncer in transaction mode)",
)
@click.option(
    "--no-prepare",
    is_flag=True,
    help="no server-side prepared statements (PgBouncer < 1.21 in transaction mode)",
)
@click.option("--metrics-file", type=click.Path(dir_okay=False), help="write final metrics as JSON")
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False),
)
@click.option(
    "--log-format",
    default="text",
    show_default=True,
    type=click.Choice(["text", "json"]),
    help="text lines for people, one JSON object per line for machines",
)
def worker(
    dsn: str | None,
    handlers: str,
    concurrency: int,
    prefetch: int | None,
    only: str | None,
    lease: int,
    job_timeout: float | None,
    poll_interval: float,
    reap_interval: float,
    shutdown_timeout: float,
    no_listen: bool,
    listen_dsn: str | None,
    no_prepare: bool,
    metrics_file: str | None,
    log_level: str,
    log_format: str,
) -> None:
    """Run a worker for the handlers in HANDLERS (`module:attribute`, a dict of type -> function).

    SIGTERM or Ctrl-C drains: no new claims, prefetched jobs released, running jobs given
    --shutdown-timeout to finish. A second signal stops at once.
    """
    from pyjobq import logs
    from pyjobq.worker import Worker

    logs.configure(log_level, log_format)
    loaded = load_handlers(handlers)
    with queue(dsn) as q:
        table = resolve_handlers(q, loaded)
        wanted = {resolve_type(q, t.strip()) for t in only.split(",")} if only else set(table)
    missing = wanted - set(table)
    if missing:
        fail(f"--types: no handler for job types {sorted(missing)}", 2)
    table = {t: h for t, h in table.items() if t in wanted}
    # A program that embeds this command (``manage.py pyjobq``) may give, as click's ``obj``,
    # a function to wrap every handler in.
    wrap: Callable[[Handler], Handler] | None = click.get_current_context().obj
    if wrap is not None:
        table = {t: wrap(h) for t, h in table.items()}
    w = Worker(
        resolve_dsn(dsn),
        table,
        concurrency=concurrency,
        prefetch=prefetch,
        lease_seconds=lease,
        job_timeout=job_timeout,
        listen=not no_listen,
        listen_dsn=listen_dsn,
        prepared_statements=not no_prepare,
        poll_interval=poll_interval,
        reap_interval=reap_interval,
        shutdown_timeout=shutdown_timeout,
    )
    with reporting():
        metrics = w.run()
    if metrics_file:
        with open(metrics_file, "w") as f:
            json.dump({"worker_id": w.worker_id, **metrics.as_dict()}, f)
    if w.abandoned:
        # Handler threads still running: do not wait for them, their leases will expire.
        logging.shutdown()
        os._exit(EXIT_ERROR)
    if w.crashed is not None:
        fail(f"the worker stopped on an internal error: {w.crashed!r} (see the log above)")


def figure(row: CountRow) -> str:
    """The job count as printed: ``~`` before an estimate, ``?`` when there is none yet."""
    if row.jobs is None:
        return "?"
    return str(row.jobs) if row.exact else f"~{row.jobs}"


def counts_table(rows: Sequence[CountRow]) -> str:
    header = ("type", "name", "status", "jobs", "oldest due (s)", "expired leases")
    body = [
        (
            str(r.job_type),
            r.job_type_name,
            r.status_name,
            figure(r),
            "" if r.oldest_due_seconds is None else f"{r.oldest_due_seconds:.1f}",
            "" if r.expired_leases is None else str(r.expired_leases),
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

    def line(row: tuple[str, ...]) -> str:
        cells = zip(row, widths, strict=True)
        return "  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(cells))

    return "\n".join(line(row) for row in [header, *body])


@main.command()
@dsn_option
@click.option("--watch", type=click.FloatRange(0.1), metavar="SECONDS", help="redraw every SECONDS")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per row")
def counts(dsn: str | None, watch: float | None, as_json: bool) -> None:
    """Jobs per type and status, with the oldest due age and expired leases.

    DONE figures of a large table are estimates, printed ~N (``"exact": false`` in JSON).
    """
    with queue(dsn) as q:
        while True:
            rows = q.counts()
            if as_json:
                for r in rows:
                    row = {
                        "job_type": r.job_type,
                        "name": r.job_type_name,
                        "status": r.status_name,
                        "jobs": r.jobs,
                        "oldest_due_seconds": r.oldest_due_seconds,
                        "expired_leases": r.expired_leases,
                        "exact": r.exact,
                    }
                    click.echo(json.dumps(row))
            else:
                if watch:
                    click.clear()
                    click.echo(time.strftime("%H:%M:%S"))
                click.echo(counts_table(rows))
            if not watch:
                return
            try:
                time.sleep(watch)
            except KeyboardInterrupt:
                return


@main.command()
@dsn_option
@click.argument("job_id", type=click.UUID)
@click.option("--json", "as_json", is_flag=True, help="one JSON object, for scripts")
def show(dsn: str | None, job_id: UUID, as_json: bool) -> None:
    """One job: status, attempts, payload, result, last error and its times (job_get)."""
    with queue(dsn) as q:
        job = q.get(job_id)
    if job is None:
        fail(f"no job {job_id} (never enqueued, or pruned)")
    fields = dataclasses.asdict(job)
    if as_json:
        click.echo(json.dumps(fields, default=str))
        return
    fields["status"] = job.status_name
    fields["job_type"] = f"{job.job_type} {job.job_type_name}"
    for name in ("status_name", "job_type_name"):
        del fields[name]
    for name, value in fields.items():
        shown = json.dumps(value) if name in ("payload", "result") and value is not None else value
        lines = str("" if shown is None else shown).splitlines() or [""]
        click.echo(f"{name:<15} {lines[0]}")
        for line in lines[1:]:
            click.echo(f"{'':<15} {line}")


@main.command()
@dsn_option
@click.option("--type", "job_type", help="only jobs of this type (code or name)")
@click.option(
    "--status",
    type=click.Choice([s.name for s in JobStatus], case_sensitive=False),
    help="only jobs in this status",
)
@click.option("--key", "dedupe_key", help="only jobs with this dedupe key")
@click.option("--oldest-first", is_flag=True, help="oldest first (default: newest first)")
@click.option("--after", type=click.UUID, help="the page after this job id (the last one shown)")
@click.option("--limit", type=click.IntRange(1, 1000), help="[default: 100]")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per job")
def jobs(
    dsn: str | None,
    job_type: str | None,
    status: str | None,
    dedupe_key: str | None,
    oldest_first: bool,
    after: UUID | None,
    limit: int | None,
    as_json: bool,
) -> None:
    """A page of jobs, newest first, with their last error (job_list); --after for the next."""
    with queue(dsn) as q:
        code = None if job_type is None else resolve_type(q, job_type)
        code_of_status = None if status is None else JobStatus[status.upper()]
        rows = q.list_jobs(code, code_of_status, dedupe_key, None, None, oldest_first, after, limit)
    for r in rows:
        if as_json:
            click.echo(json.dumps(dataclasses.asdict(r), default=str))
            continue
        # The last line: a handler's traceback ends with the exception and its message.
        error = [line for line in (r.last_error or "").splitlines() if line.strip()][-1:]
        click.echo(
            f"{r.job_id}  {r.job_type_name:<12} {r.status_name:<9} {r.attempts}/{r.max_attempts}"
            f"  {r.created_at:%Y-%m-%d %H:%M:%S}  {error[0] if error else ''}".rstrip()
        )


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
    """Cancel jobs: PENDING and RUNNING ones become CANCELLED; prints each id and its outcome."""
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


@main.group(invoke_without_command=True)
@dsn_option
@click.pass_context
def types(ctx: click.Context, dsn: str | None) -> None:
    """List the registered job types (or register one: `types register CODE NAME`)."""
    ctx.obj = dsn
    if ctx.invoked_subcommand is None:
        with queue(dsn) as q:
            for t in q.types():
                click.echo(f"{t.job_type}\t{t.name}")


@types.command("register")
@dsn_option
@click.argument("code", type=click.IntRange(1, 32767))
@click.argument("name")
@click.pass_context
def types_register(ctx: click.Context, dsn: str | None, code: int, name: str) -> None:
    """Register job type CODE (1..32767) under NAME; a no-op when already so registered."""
    with queue(dsn or ctx.obj) as q:
        row = q.type_register(code, name)
    click.echo(
        f"{row.job_type}\t{row.name}\t{'registered' if row.created else 'already registered'}"
    )


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
def demo(dsn: str | None, jobs: int, workers: int, concurrency: int, no_kill: bool) -> None:
    """Run a real workload: orders with SEARCH and OUTBOX jobs, worker processes, a crash.

    Without --dsn it starts a throwaway PostgreSQL server and removes it at the end; it
    never reads $PYJOBQ_DSN or $DATABASE_URL, since it drops schema `demo` and takes every
    SEARCH and OUTBOX job of the database it is given.
    """
    from pyjobq.demo import run_demo

    with reporting():
        ok = run_demo(dsn, jobs=jobs, workers=workers, concurrency=concurrency, kill=not no_kill)
    sys.exit(0 if ok else EXIT_ERROR)
