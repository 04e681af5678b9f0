"""What the dashboard is started with, checked before it listens."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass


class UnsafeListen(ValueError):
    """The dashboard was asked to listen beyond loopback without a flag and a token."""


@dataclass(frozen=True)
class DashboardSettings:
    """``dsn``: the database, reached with whatever role it names. ``allow_actions``: show
    and accept cancel, redrive and prune (the role must also hold them). ``token``: when set,
    every request must carry it (``Authorization: Bearer``, or the cookie ``/login`` sets).
    ``actor_header``: a request header an authenticating proxy sets to its user (e.g.
    ``X-Forwarded-User``), named in audit lines; trusted only when given. ``refresh_seconds``:
    how often the overview updates itself."""

    dsn: str
    allow_actions: bool = False
    token: str | None = None
    actor_header: str | None = None
    refresh_seconds: float = 2.0


def is_loopback(host: str) -> bool:
    """True for an address or name that only this machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_listen(host: str, allow_remote: bool, token: str | None) -> None:
    """Refuse to listen beyond loopback unless asked to with ``allow_remote`` and a token.

    A socket on loopback is reached by this machine's users only; anything wider needs both an
    explicit flag (so that no typo in ``--host`` exposes the queue) and a credential.
    """
    if is_loopback(host):
        return
    if not allow_remote:
        raise UnsafeListen(
            f"{host} is reachable beyond this machine: pass --allow-remote, with a --token"
        )
    if not token:
        raise UnsafeListen(
            f"listening on {host} needs a token (--token or $PYJOBQ_DASHBOARD_TOKEN)"
        )
    if len(token) < 16:
        raise UnsafeListen("the token must have at least 16 characters")
