"""Commands that look at a queue: counts, show, jobs."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from uuid import UUID

import click

from pyjobq.cli.common import dsn_option, fail, queue, resolve_type
from pyjobq.cli.group import main
from pyjobq.rows import CountRow, JobStatus


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
    """One job: status, attempts, payload, result, last error and its times (job_get), its
    parents and dependants with their statuses (job_dependencies), and the story of its
    attempts (job_attempts)."""
    with queue(dsn) as q:
        job = q.get(job_id)
        graph = q.dependencies(job_id) if job is not None else []
        story = q.attempts(job_id) if job is not None else []
    if job is None:
        fail(f"no job {job_id} (never enqueued, or pruned)")
    fields = dataclasses.asdict(job)
    if as_json:
        fields["dependencies"] = [dataclasses.asdict(d) for d in graph]
        fields["attempt_story"] = [dataclasses.asdict(a) for a in story]
        click.echo(json.dumps(fields, default=str))
        return
    fields["status"] = job.status_name
    fields["job_type"] = f"{job.job_type} {job.job_type_name}"
    for name in ("status_name", "job_type_name"):
        del fields[name]
    for name, value in fields.items():
        as_json = name in ("payload", "result", "progress") and value is not None
        shown = json.dumps(value) if as_json else value
        lines = str("" if shown is None else shown).splitlines() or [""]
        click.echo(f"{name:<15} {lines[0]}")
        for line in lines[1:]:
            click.echo(f"{'':<15} {line}")
    for dep in graph:
        state = dep.status_name or "pruned"
        waiting = "" if dep.resolved else " (not ended yet)"
        click.echo(f"{dep.relation:<15} {dep.job_id} {state}{waiting}")
    for a in story:
        said = f": {a.error_summary}" if a.error_summary else ""
        click.echo(f"{'attempt ' + str(a.attempt):<15} {a.outcome} by {a.worker_id}{said}")


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
        click.echo(
            f"{r.job_id}  {r.job_type_name:<12} {r.status_name:<9} {r.tries}/{r.max_attempts}"
            f"  {r.created_at:%Y-%m-%d %H:%M:%S}  {r.error_summary or ''}".rstrip()
        )
