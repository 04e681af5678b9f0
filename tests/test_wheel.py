"""The release files: the sdist built from the checkout, the wheel built from that sdist (as
``python -m build`` does), installed in a fresh venv with no checkout on the path, migrates a new
database and drains jobs (what a user who runs ``pip install pyjobq`` gets)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import venv
import zipfile
from email.parser import Parser
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pyjobq.localpg import LocalPostgres

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent

DRAIN = """
import sys
from pathlib import Path

import pyjobq
from pyjobq import JobQueue, JobType
import psycopg

assert Path(sys.prefix) in Path(pyjobq.__file__).parents, pyjobq.__file__
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    q = JobQueue(conn)
    q.enqueue_many(JobType.SEARCH, [{"n": n} for n in range(200)])
    done = 0
    while jobs := q.claim("wheel", 50):
        rows = q.complete_many("wheel", [j.job_id for j in jobs], [j.attempt for j in jobs],
                               [{"n": j.payload["n"]} for j in jobs])
        done += sum(r.completed for r in rows)
    print(done)
"""


def run(args: list[str], cwd: Path) -> str:
    # No PYTHONPATH and a working directory outside the checkout: only the installed package.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_wheel_installs_migrates_and_drains(pg_server: LocalPostgres, tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], tmp_path)
    (sdist,) = dist.glob("pyjobq-*.tar.gz")
    (wheel,) = dist.glob("pyjobq-*.whl")
    with tarfile.open(sdist) as archive:
        in_sdist = {Path(*Path(name).parts[1:]).as_posix() for name in archive.getnames()}
    assert {"LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml", "sql/pyjobq.sql"} <= in_sdist
    assert {f"migrations/{m.name}" for m in (ROOT / "migrations").glob("*.sql")} <= in_sdist
    # What PyPI would refuse or render badly: the metadata, and the README as the description.
    run([sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)], tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        in_wheel = set(archive.namelist())
        (metadata_file,) = [n for n in in_wheel if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(metadata_file).decode())
    # True to what is tested: the Python the suite runs on, the licence shipped.
    tested = f"Programming Language :: Python :: {sys.version_info.major}.{sys.version_info.minor}"
    assert tested in metadata.get_all("Classifier", [])
    assert metadata["Requires-Python"] == ">=3.11"
    assert "MIT" in (metadata["License"] or metadata["License-Expression"] or "")
    assert "License :: OSI Approved :: MIT License" in metadata.get_all("Classifier", [])
    assert {"pyjobq/sql/pyjobq.sql", "pyjobq/py.typed"} <= in_wheel
    assert "pyjobq/contrib/django/management/commands/pyjobq.py" in in_wheel
    assert "pyjobq/contrib/django/migrations/0001_pyjobq_schema.py" in in_wheel
    dashboard = ROOT / "pyjobq" / "dashboard"
    pages = {str(f.relative_to(ROOT)) for f in dashboard.rglob("*.*") if f.suffix != ".pyc"}
    assert pages <= in_wheel  # the templates and the static files ship with the code
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    run([str(bin_dir / "pip"), "install", "-q", f"{wheel}[binary]"], tmp_path)

    name = "wheel_install"
    with psycopg.connect(pg_server.dsn(), autocommit=True) as admin:
        admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    dsn = pg_server.dsn(name)
    assert "pyjobq, version" in run([str(bin_dir / "pyjobq"), "--version"], tmp_path)
    assert "applied" in run([str(bin_dir / "pyjobq"), "migrate", "--dsn", dsn], tmp_path)
    assert run([str(bin_dir / "python"), "-c", DRAIN, dsn], tmp_path).strip() == "200"
    with psycopg.connect(dsn) as conn:
        assert conn.execute("select count(*) from pyjobq.job_all where status = 3").fetchone() == (
            200,
        )
