"""What one running dashboard holds: its settings, pool, guard, templates and role."""

from __future__ import annotations

from dataclasses import dataclass, field

from psycopg_pool import AsyncConnectionPool
from starlette.templating import Jinja2Templates

from pyjobq.aio import AsyncJobQueue
from pyjobq.dashboard.bulk import Previews
from pyjobq.dashboard.guard import Guard
from pyjobq.dashboard.settings import DashboardSettings

# The functions a page or an action calls, with their argument types for the catalog.
FUNCTIONS = {
    "job_counts": "",
    "job_throughput": "int",
    "job_workers": "interval",
    "job_list": "int, int, text, timestamptz, timestamptz, boolean, uuid, int, text, uuid",
    "job_get": "uuid",
    "job_attempts": "uuid",
    "job_step_list": "uuid",
    "job_event_list": "uuid",
    "job_dependencies": "uuid",
    "job_batch_get": "uuid",
    "job_audit": "bigint, int",
    "job_schedules": "",
    "job_cancel": "uuid[]",
    "job_signal": "uuid, text, jsonb",
    "job_redrive": "uuid[], int, int",
    "job_prune": "interval, int",
    "job_prune_estimate": "interval",
    "job_type_policies": "",
    "job_type_pause": "int",
    "job_type_resume": "int",
}
ACTIONS = frozenset(
    {"job_cancel", "job_redrive", "job_prune", "job_signal", "job_type_pause", "job_type_resume"}
)
# What a hot standby cannot answer besides the actions: the per-minute counts are unlogged (they
# cost no WAL per job), so only the primary has them.
PRIMARY_ONLY = ACTIONS | {"job_throughput", "job_workers", "job_prune_estimate"}

# Which of FUNCTIONS the connected role may execute, as PostgreSQL's catalog says.
MAY_EXECUTE = (
    "select f.name from unnest(%s::text[], %s::text[]) as f(name, args)"
    " where has_function_privilege(format('pyjobq.%%s(%%s)', f.name, f.args), 'execute')"
)


@dataclass
class Dashboard:
    """A dashboard's shared state; ``can`` is what its role may execute (on a hot standby,
    ``standby``, none of PRIMARY_ONLY); ``previews`` the bulk actions shown and not yet run."""

    settings: DashboardSettings
    pool: AsyncConnectionPool
    queue: AsyncJobQueue
    guard: Guard
    templates: Jinja2Templates
    role: str
    can: frozenset[str]
    standby: bool = False
    previews: Previews = field(default_factory=Previews)

    def may(self, function: str) -> bool:
        """The role may execute ``function``."""
        return function in self.can

    def acts(self, function: str) -> bool:
        """``function`` is an action the dashboard offers: allowed at start, and the role's."""
        return self.settings.allow_actions and function in ACTIONS and self.may(function)
