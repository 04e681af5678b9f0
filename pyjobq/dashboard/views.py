"""The dashboard's pages and actions, each a thin call of the SQL API.

Every handler reads through :class:`~pyjobq.aio.AsyncJobQueue` on the dashboard's pool, as any
client would; what a page offers follows the functions the dashboard's role may execute
(``Dashboard.can``) and whether actions were allowed at start.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, urlencode
from uuid import UUID

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from pyjobq.dashboard import bulk, charts
from pyjobq.dashboard.filters import BadFilter, JobFilter
from pyjobq.dashboard.guard import CSRF_FIELD, TOKEN_COOKIE
from pyjobq.dashboard.state import Dashboard
from pyjobq.errors import PyjobqError
from pyjobq.exporter import queue_exposition
from pyjobq.rows import JobStatus

PAGE_SIZE = 50
# Actions are logged with the worker's vocabulary (pyjobq.logs): job_id, and who did what.
log = logging.getLogger("pyjobq.dashboard")


def dashboard(request: Request) -> Dashboard:
    state: Dashboard = request.app.state.dashboard
    return state


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> Response:
    """A page: its template with what every page shows (the role, the nav, the CSRF field)."""
    board = dashboard(request)
    return board.templates.TemplateResponse(
        request,
        template,
        {
            "board": board,
            "csrf": board.guard.csrf_for(request.state.csrf_nonce),
            "csrf_field": CSRF_FIELD,
            "statuses": list(JobStatus),
            "notice": request.query_params.get("notice"),
            **context,
        },
        status_code=status_code,
    )


def problem(request: Request, status_code: int, message: str) -> Response:
    return render(request, "problem.html", status_code=status_code, message=message)


async def form(request: Request) -> dict[str, str]:
    """The urlencoded fields of a POST (the dashboard's forms send nothing else)."""
    return dict(parse_qsl((await request.body()).decode(), keep_blank_values=True))


def back_to(path: str, notice: str) -> Response:
    return RedirectResponse(f"{path}?{urlencode({'notice': notice})}", status_code=303)


# Reading ---------------------------------------------------------------------------------------


async def overview_context(board: Dashboard) -> dict[str, Any]:
    """What the overview shows: counts per type and status, the last hour's throughput and
    the workers seen, each from its SQL function when the role may call it."""
    now = datetime.now(UTC)
    counts = await board.queue.counts() if board.may("job_counts") else []
    types: dict[str, dict[str, Any]] = {}
    for row in counts:
        entry = types.setdefault(row.job_type_name, {"code": row.job_type, "by_status": {}})
        entry["by_status"][row.status.name] = row
    series = (
        charts.minutes(await board.queue.throughput(60), now) if board.may("job_throughput") else []
    )
    return {
        "types": types,
        "series": series,
        "chart": charts.throughput_svg(series) if series else None,
        "failure_rate": charts.failure_rate(series) if series else None,
        "finished_last_hour": sum(m.completed + m.failed for m in series),
        "workers": await board.queue.workers() if board.may("job_workers") else [],
        "paused": {
            p.job_type: p.paused_at
            for p in (await board.queue.type_policies() if board.may("job_type_policies") else [])
        },
        "now": now,
    }


async def overview(request: Request) -> Response:
    return render(request, "overview.html", **await overview_context(dashboard(request)))


async def overview_live(request: Request) -> Response:
    """The overview's live part alone: the page's script swaps it in every few seconds."""
    return render(request, "overview_live.html", **await overview_context(dashboard(request)))


async def jobs(request: Request) -> Response:
    board = dashboard(request)
    if not board.may("job_list"):
        return problem(request, 403, f"role {board.role} may not list jobs (job_list)")
    types = await board.queue.types()
    try:
        flt = JobFilter.parse(request.query_params, {t.name: t.job_type for t in types})
        after = UUID(request.query_params["after"]) if "after" in request.query_params else None
    except (BadFilter, ValueError) as e:
        return problem(request, 400, str(e))
    try:
        page = await flt.list_jobs(board.queue, after=after, limit=PAGE_SIZE)
    except PyjobqError as e:
        return problem(request, 400, str(e))
    more = flt.query(after=str(page[-1].job_id)) if len(page) == PAGE_SIZE else None
    return render(request, "jobs.html", filter=flt, jobs=page, types=types, next_query=more)


JOB_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)


def path_job_id(request: Request) -> UUID | None:
    """The job id in the request's path, or None when it is not one."""
    try:
        return UUID(request.path_params["job_id"])
    except ValueError:
        return None


async def find(request: Request) -> Response:
    """The page of the job whose id is in ``q``: an id, or a whole log line that names one."""
    found = JOB_ID.search(request.query_params.get("q", ""))
    if found is None:
        return problem(request, 400, "no job id there: paste one, or a log line with job_id=")
    return RedirectResponse(f"/jobs/{found.group(0).lower()}", status_code=303)


async def job(request: Request) -> Response:
    board = dashboard(request)
    if not board.may("job_get"):
        return problem(request, 403, f"role {board.role} may not read jobs (job_get)")
    if (job_id := path_job_id(request)) is None:
        return problem(request, 400, "not a job id")
    found = await board.queue.get(job_id)
    if found is None:
        return problem(request, 404, f"no job {job_id} (never enqueued, or pruned)")
    graph = await board.queue.dependencies(job_id) if board.may("job_dependencies") else []
    story = await board.queue.attempts(job_id) if board.may("job_attempts") else []
    steps = await board.queue.step_list(job_id) if board.may("job_step_list") else []
    events = await board.queue.event_list(job_id) if board.may("job_event_list") else []
    batch = (
        await board.queue.get_batch(found.batch_id)
        if found.batch_id is not None and board.may("job_batch_get")
        else None
    )
    return render(
        request,
        "job.html",
        job=found,
        payload=json.dumps(found.payload, indent=2, sort_keys=True),
        result=None if found.result is None else json.dumps(found.result, indent=2),
        attempts=story,
        steps=steps,
        events=events,
        waiting_for=next((e.name for e in events if e.state == "waiting"), ""),
        parents=[d for d in graph if d.relation == "parent"],
        dependants=[d for d in graph if d.relation == "dependant"],
        type_names={t.job_type: t.name for t in await board.queue.types()} if graph else {},
        batch=batch,
    )


async def schedules(request: Request) -> Response:
    """The schedules (``job_schedules``, admins) and the types' limits (``job_type_limits``)."""
    board = dashboard(request)
    found = await board.queue.schedules() if board.may("job_schedules") else None
    return render(
        request, "schedules.html", schedules=found, limits=await board.queue.type_limits()
    )


async def audit(request: Request) -> Response:
    board = dashboard(request)
    if not board.may("job_audit"):
        return problem(request, 403, f"role {board.role} may not read the audit log (job_audit)")
    before = request.query_params.get("before")
    lines = await board.queue.audit(int(before) if before and before.isdigit() else None, 100)
    return render(request, "audit.html", lines=lines)


# Acting ----------------------------------------------------------------------------------------


def actor(request: Request) -> str:
    """Who the audit line names: the proxy's user header when one is trusted, else the
    dashboard and the client's address."""
    board = dashboard(request)
    if board.settings.actor_header:
        named = request.headers.get(board.settings.actor_header)
        if named:
            return named
    host = request.client.host if request.client else "unknown"
    return f"dashboard {host}"


def acted(request: Request, action: str, jobs: int, **fields: str) -> None:
    """One log line per action, with what its audit line says."""
    board = dashboard(request)
    log.info(
        "%s: %d jobs",
        action,
        jobs,
        extra={
            "action": action,
            "jobs": jobs,
            "role": board.role,
            "actor": actor(request),
            **fields,
        },
    )


def refused(request: Request, fields: dict[str, str], function: str) -> Response | None:
    """Why a POST may not run (no CSRF proof, read-only, the role lacks the function)."""
    board = dashboard(request)
    if not board.guard.csrf_valid(request, fields.get(CSRF_FIELD)):
        return problem(request, 403, "this form is not from this dashboard (no valid CSRF token)")
    if not board.acts(function):
        return problem(
            request, 403, f"{function} is not allowed here (read-only, or role lacks it)"
        )
    return None


async def job_action(request: Request) -> Response:
    """Cancel or redrive one job from its page."""
    action = request.path_params["action"]
    function = {"cancel": "job_cancel", "redrive": "job_redrive"}.get(action)
    fields = await form(request)
    if function is None:
        return problem(request, 404, f"no action {action}")
    if (no := refused(request, fields, function)) is not None:
        return no
    if (job_id := path_job_id(request)) is None:
        return problem(request, 400, "not a job id")
    changed = await bulk.apply(dashboard(request).pool, action, [job_id], actor(request))
    acted(request, action, changed, job_id=str(job_id))
    verb = {"cancel": "cancelled", "redrive": "redriven"}[action]
    return back_to(f"/jobs/{job_id}", f"{verb}" if changed else f"not {verb}: nothing to do")


async def type_action(request: Request) -> Response:
    """Pause or resume a job type from the overview (``job_type_pause``, ``job_type_resume``,
    audited in the name of the actor)."""
    action = request.path_params["action"]
    function = {"pause": "job_type_pause", "resume": "job_type_resume"}.get(action)
    fields = await form(request)
    if function is None:
        return problem(request, 404, f"no action {action}")
    if (no := refused(request, fields, function)) is not None:
        return no
    try:
        code = int(request.path_params["job_type"])
        async with bulk.acting_as(dashboard(request).pool, actor(request)) as queue:
            changed = await (queue.type_pause if action == "pause" else queue.type_resume)(code)
    except (ValueError, PyjobqError) as e:
        return problem(request, 400, f"not a job type: {e}")
    acted(request, action, 0, job_type=str(code))
    done = {"pause": ("paused", "was paused already"), "resume": ("resumed", "was not paused")}
    return back_to("/", f"type {code} {done[action][0 if changed else 1]}")


async def job_signal(request: Request) -> Response:
    """Send one job event ``name`` with the JSON ``payload`` (``job_signal``) from its page."""
    fields = await form(request)
    if (no := refused(request, fields, "job_signal")) is not None:
        return no
    if (job_id := path_job_id(request)) is None:
        return problem(request, 400, "not a job id")
    name, text = fields.get("name", "").strip(), fields.get("payload", "").strip()
    try:
        payload = json.loads(text) if text else None
    except json.JSONDecodeError as e:
        return problem(request, 400, f"the payload is not JSON: {e}")
    try:
        sent = await dashboard(request).queue.signal(job_id, name, payload)
    except PyjobqError as e:
        return problem(request, 400, str(e))
    acted(request, "signal", int(sent), job_id=str(job_id), event=name)
    return back_to(
        f"/jobs/{job_id}", f"{name} sent" if sent else f"not sent: {name} was sent before"
    )


async def bulk_preview(request: Request) -> Response:
    board = dashboard(request)
    action = request.query_params.get("action", "")
    try:
        named = {t.name: t.job_type for t in await board.queue.types()}
        preview = await bulk.preview(
            board.queue, action, JobFilter.parse(request.query_params, named)
        )
    except (BadFilter, bulk.BadAction, PyjobqError) as e:
        return problem(request, 400, str(e))
    allowed = board.acts(f"job_{action}") and preview.count > 0
    key = board.previews.keep(preview) if allowed else None
    return render(request, "preview.html", preview=preview, key=key, cap=bulk.CAP)


async def bulk_run(request: Request) -> Response:
    """Run a preview: its action on the jobs it counted."""
    fields = await form(request)
    action = fields.get("action", "")
    if (no := refused(request, fields, f"job_{action}")) is not None:
        return no
    board = dashboard(request)
    preview = board.previews.take(fields.get("preview", ""))
    if preview is None or preview.action != action:
        return problem(request, 410, "this preview ran already or expired: preview it again")
    try:
        changed = await bulk.run(board.pool, preview, actor(request))
    except PyjobqError as e:
        return problem(request, 400, str(e))
    acted(request, action, changed, filter=preview.filter.describe())
    moved_on = preview.count - changed
    rest = f" ({moved_on} of those previewed had moved on)" if moved_on else ""
    return back_to("/audit", f"{action}: {changed} jobs{rest}")


def age(days: str) -> tuple[float, timedelta]:
    """The form's ``days`` as a number and as an age (ValueError when it is neither)."""
    try:
        number = float(days)
        return number, timedelta(days=number)
    except OverflowError as e:
        raise ValueError(days) from e


async def prune_form(request: Request) -> Response:
    """The prune form; with ``days``, what a prune of that age would delete
    (``job_prune_estimate``) and the button that runs it."""
    board = dashboard(request)
    allowed = board.acts("job_prune")
    days = request.query_params.get("days")
    if days is None or not allowed:
        return render(request, "prune.html", allowed=allowed, days=None, estimate=None)
    try:
        number, older_than = age(days)
        estimate = await board.queue.prune_estimate(older_than)
    except ValueError:
        return problem(request, 400, "days must be a number of days")
    except PyjobqError as e:
        return problem(request, 400, str(e))
    return render(request, "prune.html", allowed=allowed, days=number, estimate=estimate)


async def prune(request: Request) -> Response:
    fields = await form(request)
    if (no := refused(request, fields, "job_prune")) is not None:
        return no
    try:
        days, older_than = age(fields.get("days", ""))
    except ValueError:
        return problem(request, 400, "days must be a number of days")
    board = dashboard(request)
    deleted = 0
    try:
        while True:  # job_prune deletes at most 10000 a call: call again until it is short
            async with bulk.acting_as(board.pool, actor(request)) as queue:
                step = await queue.prune(older_than, 10_000)
            deleted += step
            if step < 10_000:
                break
    except PyjobqError as e:
        return problem(request, 400, str(e))
    acted(request, "prune", deleted, older_than=f"{days} days")
    return back_to("/audit", f"prune: {deleted} jobs")


async def metrics(request: Request) -> Response:
    """The queue's gauges for Prometheus: one ``job_counts()`` per scrape."""
    counts = await dashboard(request).queue.counts()
    return Response(queue_exposition(counts), media_type=CONTENT_TYPE_LATEST)


# Signing in ------------------------------------------------------------------------------------


async def login_form(request: Request) -> Response:
    return render(request, "login.html")


async def login(request: Request) -> Response:
    board = dashboard(request)
    fields = await form(request)
    offered = fields.get("token", "")
    if not board.guard.admits_token(offered):  # also when no token is configured
        return render(request, "login.html", status_code=403, failed=True)
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(TOKEN_COOKIE, offered, httponly=True, samesite="strict")
    return response
