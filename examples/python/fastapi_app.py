"""FastAPI on a psycopg pool: an order, its stock reservations and its confirmation job commit
together or not at all.

Run (with uvicorn installed: pip install uvicorn):
PYJOBQ_DSN=postgresql://… uvicorn --app-dir examples/python fastapi_app:app

``POST /orders`` takes ``{"email": …, "items": {"sku": quantity, …}}``; an item out of stock
answers 409, and neither the order nor its confirmation job remain. ``GET /jobs/{id}`` shows
a job as ``job_get`` does. The tables are created at startup if missing.
"""

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from uuid import UUID

from fastapi import FastAPI, HTTPException
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel

from pyjobq import JobType
from pyjobq.aio import AsyncJobQueue

SCHEMA = """
create table if not exists stock (sku text primary key, available int not null);
create table if not exists shop_order (id bigserial primary key, email text not null);
create table if not exists order_item (
  order_id bigint not null references shop_order, sku text not null references stock,
  quantity int not null, primary key (order_id, sku)
);
"""


class OrderIn(BaseModel):
    email: str
    items: dict[str, int]


class OrderOut(BaseModel):
    order_id: int
    confirmation_job_id: UUID


def create_app(dsn: str) -> FastAPI:
    """The application on a pool of connections to ``dsn`` (opened at startup)."""
    pool = AsyncConnectionPool(dsn, open=False)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await pool.open()
        async with pool.connection() as conn:
            await conn.execute(SCHEMA)
        yield
        await pool.close()

    app = FastAPI(lifespan=lifespan)

    @app.post("/orders", status_code=201)
    async def place_order(order: OrderIn) -> OrderOut:
        # One connection, one transaction: pool.connection() commits when the block ends
        # and rolls back when it raises, the job with the rows.
        async with pool.connection() as conn:
            cur = await conn.execute(
                "insert into shop_order (email) values (%s) returning id", (order.email,)
            )
            row = await cur.fetchone()
            assert row is not None
            order_id: int = row[0]
            job = await AsyncJobQueue(conn).enqueue(
                JobType.OUTBOX,
                {"kind": "order_confirmation", "order_id": order_id, "email": order.email},
                dedupe_key=f"order-confirmation:{order_id}",
            )
            for sku, quantity in order.items.items():
                reserved = await conn.execute(
                    "update stock set available = available - %s"
                    " where sku = %s and available >= %s",
                    (quantity, sku, quantity),
                )
                if reserved.rowcount != 1:
                    raise HTTPException(409, f"{sku}: not enough in stock")
                await conn.execute(
                    "insert into order_item values (%s, %s, %s)", (order_id, sku, quantity)
                )
        return OrderOut(order_id=order_id, confirmation_job_id=job.job_id)

    @app.get("/jobs/{job_id}")
    async def job(job_id: UUID) -> dict[str, Any]:
        # The pool form of the binding: one connection per call, committed on return.
        info = await AsyncJobQueue(pool).get(job_id)
        if info is None:
            raise HTTPException(404, "no such job")
        return {"status": info.status_name, "attempts": info.attempts, "result": info.result}

    return app


if "PYJOBQ_DSN" in os.environ:
    app = create_app(os.environ["PYJOBQ_DSN"])
