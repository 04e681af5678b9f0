"""Django settings on the database named by ``PYJOBQ_TEST_DSN`` (a libpq conninfo)."""

from __future__ import annotations

import os

from psycopg.conninfo import conninfo_to_dict


def databases(dsn: str) -> dict[str, dict[str, object]]:
    """``settings.DATABASES`` for a conninfo: the usual keys, the rest as OPTIONS."""
    params = {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
    default: dict[str, object] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params.pop("dbname"),
        "USER": params.pop("user", ""),
        "HOST": params.pop("host", ""),
        "PORT": params.pop("port", ""),
        "OPTIONS": params,
        # Persistent connections, as a busy application keeps them.
        "CONN_MAX_AGE": None,
    }
    return {"default": default}


SECRET_KEY = "tests-only"
USE_TZ = True
INSTALLED_APPS = ["pyjobq.contrib.django"]
# Registered by the app after every migrate: the test runner's database gets them too.
PYJOBQ_JOB_TYPES = {100: "PROCESS_ORDER"}
DATABASES = databases(os.environ.get("PYJOBQ_TEST_DSN", "dbname=unset"))
