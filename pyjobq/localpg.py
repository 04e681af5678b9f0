"""A throwaway local PostgreSQL server for the test suite, the demo and the benchmarks."""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from psycopg.conninfo import make_conninfo

_INSTALL_HINT = (
    "install the PostgreSQL server binaries (Debian/Ubuntu: apt-get install postgresql) "
    "or point PYJOBQ_PG_BINDIR at the directory holding initdb and pg_ctl"
)

# initdb and postgres refuse to run as root; as root we run them as this OS user.
_OS_USER = "postgres"


def find_bindir() -> Path:
    """Return the directory holding initdb, pg_ctl, psql and pg_dump."""
    env = os.environ.get("PYJOBQ_PG_BINDIR")
    if env:
        if not (Path(env) / "initdb").is_file():
            raise RuntimeError(f"PYJOBQ_PG_BINDIR={env} has no initdb: {_INSTALL_HINT}")
        return Path(env)
    pg_config = shutil.which("pg_config")
    if pg_config:
        # pg_config may come from the client-only libpq package: check for initdb.
        result = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        bindir = Path(result.stdout.strip())
        if result.returncode == 0 and (bindir / "initdb").is_file():
            return bindir
    debian = [p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb")]
    if debian:
        return max(debian, key=lambda p: tuple(int(n) for n in p.parent.name.split(".")))
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).resolve().parent
    raise RuntimeError(f"no PostgreSQL server binaries found: {_INSTALL_HINT}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LocalPostgres:
    """A private PostgreSQL cluster on 127.0.0.1 with trust auth, removed on stop()."""

    host = "127.0.0.1"
    user = "postgres"

    def __init__(
        self, base_dir: Path | None = None, settings: Mapping[str, str] | None = None
    ) -> None:
        self.bindir = find_bindir()
        self.settings = dict(settings or {})
        self.port = 0
        self._base_dir = base_dir
        self._owns_base_dir = False
        self._as_os_user = os.geteuid() == 0

    @property
    def base_dir(self) -> Path:
        if self._base_dir is None:
            raise RuntimeError("LocalPostgres is not started")
        return self._base_dir

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def socket_dir(self) -> Path:
        return self.base_dir / "socket"

    @property
    def log_file(self) -> Path:
        return self.base_dir / "postgres.log"

    def start(self) -> None:
        if self._base_dir is None:
            self._base_dir = Path(tempfile.mkdtemp(prefix="pyjobq-pg-"))
            self._owns_base_dir = True
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(exist_ok=True)
        if self._as_os_user:
            for path in (self.base_dir, self.socket_dir):
                shutil.chown(path, _OS_USER, _OS_USER)
        self.port = _free_port()
        try:
            if not (self.data_dir / "PG_VERSION").exists():
                initdb_args = ["-U", self.user, "--auth=trust", "-E", "UTF8", "--no-locale"]
                self._run("initdb", "-D", str(self.data_dir), *initdb_args, "--no-sync")
            self._run("pg_ctl", "start", *self._ctl_args())
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self._base_dir is None:
            return
        if (self.data_dir / "postmaster.pid").exists():
            self._run("pg_ctl", "stop", "-D", str(self.data_dir), "-m", "fast", "-w")
        if self._owns_base_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            self._base_dir = None
            self._owns_base_dir = False

    def restart(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "restart", "-m", mode, *self._ctl_args())

    def dsn(self, dbname: str = "postgres") -> str:
        """Return a libpq conninfo string for ``dbname`` on this server."""
        return make_conninfo(host=self.host, port=self.port, user=self.user, dbname=dbname)

    def __enter__(self) -> LocalPostgres:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _ctl_args(self) -> list[str]:
        options = {
            "listen_addresses": self.host,
            "port": str(self.port),
            "unix_socket_directories": str(self.socket_dir),
            **self.settings,
        }
        # pg_ctl hands -o to postgres through /bin/sh, hence the quoting.
        postgres_opts = " ".join(f"-c {shlex.quote(f'{k}={v}')}" for k, v in options.items())
        return ["-D", str(self.data_dir), "-l", str(self.log_file), "-w", "-o", postgres_opts]

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.bindir / program), *args]
        if self._as_os_user:
            command = ["runuser", "-u", _OS_USER, "--", *command]
        result = subprocess.run(command, cwd=self.base_dir, capture_output=True, text=True)
        if result.returncode != 0:
            log = self.log_file.read_text(errors="replace") if self.log_file.exists() else ""
            hint = f"\n({self.base_dir} must be usable by the {_OS_USER} OS user)"
            raise RuntimeError(
                f"{shlex.join(command)} failed with exit code {result.returncode}:\n"
                f"{result.stdout}{result.stderr}{log[-2000:]}{hint if self._as_os_user else ''}"
            )
