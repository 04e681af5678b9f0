"""Who may use the dashboard, and which POSTs come from its own pages.

A request whose ``Host`` is not one of the dashboard's own names is refused before anything
else: a page of another site can make its own name resolve to this address (DNS rebinding)
and then talk to the dashboard as same-origin, but its requests still carry its name.

A token, when configured, is checked on every request with a constant-time comparison: from
``Authorization: Bearer <token>`` (scripts, Prometheus) or the ``pyjobq_token`` cookie that
the login form sets (browsers; HttpOnly, SameSite=Strict).

Each browser gets a random ``pyjobq_csrf`` cookie; every form carries an HMAC of it under a
secret drawn when the process starts. A POST whose field is not the HMAC of its cookie is
refused before anything runs: another site can make a browser send the cookie, but cannot
read it to compute the field. A POST that a browser marks as coming from another origin
(``Origin`` other than the ``Host`` it was sent to and not a name given with ``--allowed-host``,
``Sec-Fetch-Site`` other than same-origin) is refused as well, whatever it carries.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from starlette.requests import Request

TOKEN_COOKIE = "pyjobq_token"
CSRF_COOKIE = "pyjobq_csrf"
CSRF_FIELD = "csrf"
DEFAULT_PORTS = {"http": 80, "https": 443}
# What a browser says of a request its user made on this origin, or typed in (none).
OWN_FETCH_SITES = ("same-origin", "none")


def _host_and_port(netloc: str, default_port: int | None) -> tuple[str, int | None] | None:
    """``netloc``'s lower-cased name and port (``default_port`` when it names none), or None
    when it is not a host[:port]."""
    try:
        split = urlsplit(f"//{netloc}")
        port = split.port
    except ValueError:
        return None
    if not split.hostname or split.username is not None or split.password is not None:
        return None
    return split.hostname, port if port is not None else default_port


class Guard:
    """The token and the CSRF secret of one dashboard process."""

    def __init__(
        self, token: str | None, hosts: tuple[str, ...], origins: tuple[str, ...] = ()
    ) -> None:
        self.token = token
        self.hosts = frozenset(hosts)
        self.origins = frozenset(origins)
        self._secret = secrets.token_bytes(32)

    def serves(self, request: Request) -> bool:
        """True when the request's ``Host`` names one of the dashboard's own hosts."""
        found = _host_and_port(request.headers.get("host", ""), None)
        return found is not None and found[0] in self.hosts

    def same_origin(self, request: Request) -> bool:
        """False when the browser says the request comes from another origin than the one it
        was sent to, unless that origin's name is one of ``origins``; True for clients that say
        nothing (scripts, curl)."""
        if request.headers.get("sec-fetch-site", "same-origin") not in OWN_FETCH_SITES:
            return False
        origin = request.headers.get("origin")
        if origin is None:
            return True
        split = urlsplit(origin)
        default = DEFAULT_PORTS.get(split.scheme)
        if default is None or split.path or split.query:
            return False  # "null", or not an origin at all
        sent_from = _host_and_port(split.netloc, default)
        if sent_from is None:
            return False
        return sent_from[0] in self.origins or sent_from == _host_and_port(
            request.headers.get("host", ""), default
        )

    def admits(self, request: Request) -> bool:
        """True when no token is configured or the request carries it."""
        if self.token is None:
            return True
        header = request.headers.get("authorization", "")
        offered = header[7:] if header.lower().startswith("bearer ") else None
        return self.admits_token(offered or request.cookies.get(TOKEN_COOKIE))

    def admits_token(self, offered: str | None) -> bool:
        """True when ``offered`` is the token (compared in constant time)."""
        if self.token is None or offered is None:
            return False
        return hmac.compare_digest(offered.encode(), self.token.encode())

    def csrf_for(self, nonce: str) -> str:
        """The form field that goes with the browser's ``pyjobq_csrf`` cookie ``nonce``."""
        return hmac.new(self._secret, nonce.encode(), hashlib.sha256).hexdigest()

    def csrf_valid(self, request: Request, field: str | None) -> bool:
        """True when ``field`` is the HMAC of the request's CSRF cookie."""
        nonce = request.cookies.get(CSRF_COOKIE)
        if not nonce or not field:
            return False
        return hmac.compare_digest(self.csrf_for(nonce), field)


def new_nonce() -> str:
    """A fresh value for a browser's CSRF cookie."""
    return secrets.token_urlsafe(24)
