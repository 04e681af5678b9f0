"""One version everywhere a user reads it, and a changelog in the Keep a Changelog form."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

from click.testing import CliRunner

from pyjobq.cli import main

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def test_pyproject_the_installed_package_the_command_and_the_changelog_agree() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert version("pyjobq") == declared  # scripts/setup reinstalls when pyproject changes
    said = CliRunner().invoke(main, ["--version"], prog_name="pyjobq")
    assert said.output == f"pyjobq, version {declared}\n"
    changelog = (ROOT / "CHANGELOG.md").read_text()
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", changelog, re.M)
    assert released, "no released version in CHANGELOG.md"
    assert released[0][0] == declared  # the newest release is this version


def test_the_changelog_has_the_keep_a_changelog_form() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert changelog.startswith("# Changelog\n")
    assert "[Keep a Changelog](https://keepachangelog.com/" in changelog
    versions = re.findall(r"^## \[(.+?)\]", changelog, re.M)
    released = [v for v in versions if v != "Unreleased"]
    assert versions[: len(versions) - len(released)] in ([], ["Unreleased"])  # Unreleased first
    as_tuples = [tuple(int(n) for n in v.split(".")) for v in released]
    assert as_tuples == sorted(as_tuples, reverse=True)  # newest first
    assert set(re.findall(r"^### (.+)$", changelog, re.M)) <= SECTIONS
