"""The oldest PostgreSQL pyjobq installs on, checked before migrate writes anything."""

from __future__ import annotations

import pytest

from pyjobq import ServerTooOld
from pyjobq.migrate import MIN_SERVER_VERSION, check_server_version


@pytest.mark.parametrize(
    ("server_version", "named"),
    [(140013, "PostgreSQL 14"), (130020, "PostgreSQL 13"), (90624, "PostgreSQL 9.6")],
)
def test_a_server_older_than_the_minimum_is_refused_by_name(
    server_version: int, named: str
) -> None:
    # No older server is at hand to migrate; the check migrate() runs first is tested alone,
    # and the suite's own server (15, or 18) passes it on every migration the suite makes.
    with pytest.raises(ServerTooOld) as refused:
        check_server_version(server_version)
    assert str(refused.value).endswith(f"this server is {named}")
    assert refused.value.hint
    check_server_version(MIN_SERVER_VERSION)
