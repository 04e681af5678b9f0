"""The dashboard as an ASGI application: routes, the request guard, the pool's lifetime."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from pyjobq.aio import AsyncJobQueue
from pyjobq.dashboard import views
from pyjobq.dashboard.guard import CSRF_COOKIE, Guard, new_nonce
from pyjobq.dashboard.settings import DashboardSettings
from pyjobq.dashboard.state import FUNCTIONS, MAY_EXECUTE, PRIMARY_ONLY, Dashboard

HERE = Path(__file__).resolve().parent
OPEN_PATHS = ("/static/", "/login")
SAFE_METHODS = ("GET", "HEAD")
# Nothing but this origin's own files: no inline script, no frame, no referrer sent away (to
# its own pages it goes, so that a form's POST carries this origin rather than "null").
HEADERS = {
    "content-security-policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "x-content-type-options": "nosniff",
}


async def guard_requests(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """The dashboard's own host before anything else, then a same-origin POST, then the
    token; a CSRF cookie for every browser that has none."""
    board: Dashboard = request.app.state.dashboard
    if not board.guard.serves(request):
        return PlainTextResponse(
            "this dashboard does not answer to that Host (--allowed-host names more)",
            status_code=421,
            headers=HEADERS,
        )
    if request.method not in SAFE_METHODS and not board.guard.same_origin(request):
        return PlainTextResponse(
            "a request from another site is refused (behind a proxy that passes another Host,"
            " name the site with --allowed-host)",
            status_code=403,
            headers=HEADERS,
        )
    nonce = request.cookies.get(CSRF_COOKIE)
    request.state.csrf_nonce = nonce or new_nonce()
    response: Response
    if request.url.path.startswith(OPEN_PATHS) or board.guard.admits(request):
        response = await call_next(request)
    elif request.method == "GET" and "text/html" in request.headers.get("accept", ""):
        response = RedirectResponse("/login", status_code=303)
    else:
        response = PlainTextResponse("a token is required", status_code=401)
    if nonce is None:
        response.set_cookie(CSRF_COOKIE, request.state.csrf_nonce, httponly=True, samesite="strict")
    response.headers.update(HEADERS)
    return response


async def in_utc(conn: psycopg.AsyncConnection[Any]) -> None:
    """Times come back in UTC, as every page labels them, whatever the server's TimeZone."""
    await conn.execute("set time zone 'UTC'")
    await conn.commit()


def create_app(settings: DashboardSettings) -> Starlette:
    """The dashboard for ``settings``; its pool opens when the server starts it."""
    templates = Jinja2Templates(directory=HERE / "templates")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        pool = AsyncConnectionPool(
            settings.dsn, min_size=1, max_size=4, open=False, configure=in_utc
        )
        await pool.open(wait=True, timeout=30)
        try:
            async with pool.connection() as conn:
                role = await (await conn.execute("select current_user")).fetchone()
                names = list(FUNCTIONS)
                rows = await conn.execute(MAY_EXECUTE, (names, [FUNCTIONS[n] for n in names]))
                can = frozenset(r[0] for r in await rows.fetchall())
                recovery = await (await conn.execute("select pg_is_in_recovery()")).fetchone()
                standby = bool(recovery and recovery[0])
                if standby:  # a hot standby: pages that read, from what it replays
                    can -= PRIMARY_ONLY
            app.state.dashboard = Dashboard(
                settings=settings,
                pool=pool,
                queue=AsyncJobQueue(pool),
                guard=Guard(settings.token, settings.hosts, settings.origins),
                templates=templates,
                role=str(role[0]) if role else "?",
                can=can,
                standby=standby,
            )
            yield
        finally:
            await pool.close()

    async def denied(request: Request, error: Exception) -> Response:
        return views.problem(request, 403, f"the database refused: {error}")

    async def unreachable(request: Request, error: Exception) -> Response:
        return PlainTextResponse(f"the database cannot be used now: {error}", status_code=503)

    routes = [
        Route("/", views.overview),
        Route("/overview/live", views.overview_live),
        Route("/jobs", views.jobs),
        Route("/find", views.find),
        Route("/jobs/{job_id}", views.job),
        Route("/jobs/{job_id}/signal", views.job_signal, methods=["POST"]),
        Route("/jobs/{job_id}/{action}", views.job_action, methods=["POST"]),
        Route("/types/{job_type}/{action}", views.type_action, methods=["POST"]),
        Route("/actions/preview", views.bulk_preview),
        Route("/actions/run", views.bulk_run, methods=["POST"]),
        Route("/prune", views.prune_form),
        Route("/prune", views.prune, methods=["POST"]),
        Route("/schedules", views.schedules),
        Route("/audit", views.audit),
        Route("/metrics", views.metrics),
        Route("/login", views.login_form),
        Route("/login", views.login, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[Middleware(BaseHTTPMiddleware, dispatch=guard_requests)],
        exception_handlers={
            psycopg.errors.InsufficientPrivilege: denied,
            psycopg.OperationalError: unreachable,
        },
    )


def serve(settings: DashboardSettings, host: str, port: int) -> None:
    """Serve the dashboard on ``host:port`` until Ctrl-C or SIGTERM, then return."""
    import uvicorn

    config = uvicorn.Config(create_app(settings), host=host, port=port, log_level="warning")
    # uvicorn stops gracefully on either signal, then raises it again for the handler it
    # found; this one returns, so that a stop ends the call instead of a KeyboardInterrupt
    # thrown into the pool's shutdown.
    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, lambda *_: None) for s in stops}
    try:
        uvicorn.Server(config).run()
    finally:
        for stop, handler in previous.items():
            signal.signal(stop, handler)
