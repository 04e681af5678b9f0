"""An ORM model and its outbox job, committed or rolled back together (SQLAlchemy 2).

Usage: sqlalchemy_outbox.py DSN

Places one order that commits and one that fails after its job was enqueued, then prints
what the database holds: the committed order with exactly one OUTBOX job, and nothing of
the failed one.
"""

from __future__ import annotations

import sys

from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import URL, Engine, create_engine, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from pyjobq import JobType
from pyjobq.contrib.sqlalchemy import job_queue


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "shop_order"

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str]
    total_cents: Mapped[int]


def place_order(session: Session, email: str, total_cents: int) -> Order:
    """Insert the order and enqueue its confirmation mail in the session's transaction."""
    order = Order(email=email, total_cents=total_cents)
    session.add(order)
    session.flush()  # the order's id, for the payload
    job_queue(session).enqueue(
        JobType.OUTBOX,
        {"kind": "order_confirmation", "order_id": order.id, "email": email},
        dedupe_key=f"order-confirmation:{order.id}",
    )
    return order


def engine_for(dsn: str) -> Engine:
    """An engine on the psycopg 3 driver, from a libpq conninfo string or URL."""
    params = {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
    url = URL.create(
        "postgresql+psycopg",
        username=params.pop("user", None),
        password=params.pop("password", None),
        database=params.pop("dbname", None),
        query=params,  # host, port and the rest go to psycopg as they are
    )
    return create_engine(url)


def main() -> None:
    engine = engine_for(sys.argv[1])
    Base.metadata.create_all(engine)

    with Session(engine) as session, session.begin():
        place_order(session, "ada@example.com", 4200)

    try:
        with Session(engine) as session, session.begin():
            place_order(session, "bob@example.com", 999)
            raise RuntimeError("payment declined")  # the order and its job roll back
    except RuntimeError as e:
        print(f"second order failed: {e}")

    with Session(engine) as session:
        for order in session.scalars(select(Order).order_by(Order.id)):
            print(f"order {order.id} {order.email}")
    with engine.connect() as connection:
        for job in job_queue(connection).list_jobs(job_type=JobType.OUTBOX):
            print(f"job {job.job_id} {job.status_name} {job.dedupe_key}")


if __name__ == "__main__":
    main()
