"""Who may use the dashboard, and which POSTs come from its own pages.

A token, when configured, is checked on every request with a constant-time comparison: from
``Authorization: Bearer <token>`` (scripts, Prometheus) or the ``pyjobq_token`` cookie that
the login form sets (browsers; HttpOnly, SameSite=Strict).

Each browser gets a random ``pyjobq_csrf`` cookie; every form carries an HMAC of it under a
secret drawn when the process starts. A POST whose field is not the HMAC of its cookie is
refused before anything runs: another site can make a browser send the cookie, but cannot
read it to compute the field.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from starlette.requests import Request

TOKEN_COOKIE = "pyjobq_token"
CSRF_COOKIE = "pyjobq_csrf"
CSRF_FIELD = "csrf"


class Guard:
    """The token and the CSRF secret of one dashboard process."""

    def __init__(self, token: str | None) -> None:
        self.token = token
        self._secret = secrets.token_bytes(32)

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
