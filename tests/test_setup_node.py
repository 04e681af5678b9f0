"""scripts/setup-node installs the Node.js clients' packages with one `npm ci`, says so, and
runs npm again only when the lock file changed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKSPACES = ("tests/conformance/node", "examples/node")
IMPORT_PG = "import pg from 'pg'; console.log(typeof pg.Client)"


def test_one_npm_ci_installs_every_client_and_says_so(tmp_path: Path) -> None:
    npm = shutil.which("npm")
    node = shutil.which("node")
    if npm is None or node is None:
        pytest.skip("Node.js is not installed")
    checkout = tmp_path / "checkout"
    for name in ("package.json", "package-lock.json", "scripts/setup-node"):
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, checkout / name)
    for workspace in WORKSPACES:
        (checkout / workspace).mkdir(parents=True)
        shutil.copy2(ROOT / workspace / "package.json", checkout / workspace)
    # npm as the script finds it: the real one, each call written down first.
    calls = tmp_path / "npm-calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "npm").write_text(f'#!/bin/sh\necho "$*" >>{calls}\nexec {npm} "$@"\n')
    (bin_dir / "npm").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}

    def setup() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [checkout / "scripts" / "setup-node"], capture_output=True, text=True, env=env,
            timeout=300, check=False,
        )  # fmt: skip

    first = setup()
    assert first.returncode == 0, first.stderr
    assert "setup-node: installing the Node.js clients' packages (pg) with npm ci" in first.stderr
    assert calls.read_text().splitlines() == ["ci --no-audit --no-fund --loglevel=error"]
    for workspace in WORKSPACES:  # each client finds the one installation
        found = subprocess.run(
            [node, "--input-type=module", "-e", IMPORT_PG],
            cwd=checkout / workspace, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert found.stdout == "function\n", found.stderr

    again = setup()
    assert again.returncode == 0, again.stderr
    assert again.stderr == ""
    assert len(calls.read_text().splitlines()) == 1
