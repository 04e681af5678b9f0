"""The pyjobq dashboard: a server-rendered page over the same SQL functions any client calls.

``pyjobq dashboard`` serves it (the ``dashboard`` extra: Starlette, Jinja2, uvicorn). It reads
``job_counts``, ``job_throughput``, ``job_workers``, ``job_list``, ``job_get``, ``job_attempts``,
``job_schedules``, ``job_type_limits`` and ``job_audit``, and acts through ``job_cancel``,
``job_redrive`` and ``job_prune``, with the role it connects as: it shows what that role may
call, and acts only when started with actions allowed. Modules: ``settings`` (what it is
started with), ``guard`` (the token and CSRF), ``filters`` (a filtered set of jobs), ``bulk``
(preview and run an action on one), ``charts`` (SVG), ``state`` (what a running dashboard
holds), ``views`` (the pages) and ``app`` (the ASGI application).
"""

from pyjobq.dashboard.app import create_app, serve
from pyjobq.dashboard.settings import DashboardSettings

__all__ = ["DashboardSettings", "create_app", "serve"]
