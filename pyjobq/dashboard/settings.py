"""What the dashboard is started with, checked before it listens."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

# The names this machine's own browsers reach a loopback dashboard by.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
# Addresses that listen on every interface: no one name is the dashboard's own.
WILDCARDS = frozenset({"0.0.0.0", "::", ""})


class UnsafeListen(ValueError):
    """The dashboard was asked to listen beyond loopback without a flag and a token."""


@dataclass(frozen=True)
class DashboardSettings:
    """``dsn``: the database, reached with whatever role it names. ``allow_actions``: show
    and accept cancel, redrive, prune, signals, pause and resume (the role must also hold
    them). ``token``: when set, every request must carry it (``Authorization: Bearer``, or the
    cookie ``/login`` sets).
    ``actor_header``: a request header an authenticating proxy sets to its user (e.g.
    ``X-Forwarded-User``), named in audit lines; trusted only when given. ``refresh_seconds``:
    how often the overview updates itself. ``hosts``: the names a request's ``Host`` may
    carry (any port); any other is refused, so that a page of another site whose name was made
    to resolve to this address (DNS rebinding) reads and does nothing. ``origins``: the names
    named with ``--allowed-host``, whose pages may POST even when the ``Host`` the dashboard
    sees is another (a proxy that passes its upstream's address as the Host)."""

    dsn: str
    allow_actions: bool = False
    token: str | None = None
    actor_header: str | None = None
    refresh_seconds: float = 2.0
    hosts: tuple[str, ...] = LOOPBACK_HOSTS
    origins: tuple[str, ...] = ()


def is_loopback(host: str) -> bool:
    """True for an address or name that only this machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def own_hosts(listen: str, named: Sequence[str] = ()) -> tuple[str, ...]:
    """The names the dashboard answers to: those ``named`` (``--allowed-host``), the address
    it listens on unless that is a wildcard, and on loopback this machine's own names."""
    hosts = [name.lower() for name in named]
    if listen not in WILDCARDS:
        hosts.append(listen.lower())
    if is_loopback(listen):
        hosts += LOOPBACK_HOSTS
    return tuple(dict.fromkeys(hosts))


def check_listen(
    host: str, allow_remote: bool, token: str | None, named_hosts: Sequence[str] = ()
) -> None:
    """Refuse to listen beyond loopback unless asked to with ``allow_remote`` and a token, and
    on every interface unless told which names are the dashboard's own.

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
    if host in WILDCARDS and not named_hosts:
        raise UnsafeListen(
            f"listening on {host or 'every address'} answers to any name: pass --allowed-host"
            " for each name its users reach it by"
        )
