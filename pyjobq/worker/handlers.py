"""``Handlers``: a handler table that also says what policy each job type's handler expects."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pyjobq.rows import TypePolicy
from pyjobq.worker.running import Handler


class Handlers(dict[int | str, Handler]):
    """Job type (code or name) to handler, as any handler table, with ``policies``: the
    ``job_type_set_policy`` arguments each type's handler was declared with
    (:meth:`pyjobq.tasks.Tasks.handlers`, the Django tasks backend's). The worker refuses to
    start while a declared value differs from the database's: the policy was never
    installed, and its jobs would run under another."""

    def __init__(
        self,
        handlers: Mapping[int | str, Handler],
        policies: Mapping[int | str, Mapping[str, Any]] | None = None,
    ) -> None:
        super().__init__(handlers)
        self.policies = {
            key: {k: v for k, v in policy.items() if v is not None}
            for key, policy in (policies or {}).items()
        }

    def wrapped(self, wrap: Callable[[Handler], Handler]) -> Handlers:
        """Every handler wrapped in ``wrap``, the policies kept."""
        return Handlers({key: wrap(h) for key, h in self.items()}, self.policies)


def policy_mismatches(declared: Mapping[str, Any], actual: TypePolicy) -> list[str]:
    """What of ``declared`` the database's policy ``actual`` says otherwise, in words."""
    return [
        f"{key} is {getattr(actual, key)} there, {value} declared"
        for key, value in declared.items()
        if getattr(actual, key) != value
    ]
