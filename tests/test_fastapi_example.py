"""examples/python/fastapi_app.py: the pool-based pattern keeps an order and its job together."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest

pytest.importorskip("fastapi", reason="FastAPI is not installed")
pytest.importorskip("httpx2", reason="httpx2 (the TestClient of FastAPI) is not installed")

from fastapi.testclient import TestClient

from tests.sqlhelp import one

Connection = psycopg.Connection[tuple[Any, ...]]
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "python" / "fastapi_app.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fastapi_app", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def client(dsn: str, conn: Connection) -> Iterator[TestClient]:
    with TestClient(load_example().create_app(dsn)) as client:  # runs the lifespan
        conn.execute("insert into stock values ('tea', 5), ('cup', 1)")
        yield client


def test_a_placed_order_commits_with_exactly_one_job(client: TestClient, conn: Connection) -> None:
    response = client.post("/orders", json={"email": "ada@example.com", "items": {"tea": 2}})
    assert response.status_code == 201, response.text
    placed = response.json()
    assert one(conn, "select count(*) from pyjobq.job_all") == 1
    payload = one(
        conn,
        "select payload from pyjobq.job_all where job_id = %s",
        (placed["confirmation_job_id"],),
    )
    assert payload["order_id"] == placed["order_id"]
    assert one(conn, "select available from stock where sku = 'tea'") == 3
    status = client.get(f"/jobs/{placed['confirmation_job_id']}")
    assert status.json() == {"status": "PENDING", "attempts": 0, "result": None}


def test_an_order_that_fails_after_its_enqueue_leaves_no_job(
    client: TestClient, conn: Connection
) -> None:
    response = client.post(
        "/orders", json={"email": "bob@example.com", "items": {"tea": 1, "cup": 2}}
    )
    assert response.status_code == 409
    assert response.json() == {"detail": "cup: not enough in stock"}
    assert one(conn, "select count(*) from pyjobq.job_all") == 0
    assert one(conn, "select count(*) from shop_order") == 0
    assert one(conn, "select available from stock where sku = 'tea'") == 5
