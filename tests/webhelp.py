"""The dashboard as the tests run it: the real ``pyjobq dashboard`` process on loopback."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.workerhelp import wait_for

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def status_of(
    url: str, method: str = "GET", data: bytes | None = None, headers: dict[str, str] | None = None
) -> int:
    """The HTTP status ``url`` answers with (0 when nothing answers); ``headers`` replace the
    request's own (``Host`` too)."""
    request = urllib.request.Request(url, data, headers or {}, method=method)
    try:
        with urllib.request.urlopen(request) as answer:
            code: int = answer.status
            return code
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


@contextmanager
def dashboard(dsn: str, *flags: str) -> Iterator[str]:
    """A ``pyjobq dashboard`` process on a free loopback port; yields its base URL."""
    port = free_port()
    command = [sys.executable, "-m", "pyjobq", "dashboard", "--dsn", dsn, "--port", str(port)]
    proc = subprocess.Popen([*command, *flags], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(
            lambda: proc.poll() is not None or status_of(base + "/static/style.css") == 200,
            "the dashboard to listen",
        )
        assert proc.poll() is None, proc.communicate()[1]
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)
