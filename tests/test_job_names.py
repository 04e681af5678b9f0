"""Jobs by name: job_type_code in SQL, and every binding call that takes a job type."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from pyjobq import ClaimedJob, InvalidArgument, JobQueue, JobType
from pyjobq.worker import Worker
from tests.sqlhelp import one, raises_sqlstate
from tests.workerhelp import running, statuses, wait_for

Conn = psycopg.Connection[Any]


def test_job_type_code_names_a_type_for_any_client(
    conn: Conn, login_role: Callable[..., str]
) -> None:
    for code, name in [(20, "send_email"), (21, "Report"), (22, "REPORT")]:
        conn.execute("select pyjobq.job_type_register(%s, %s)", (code, name))
    with psycopg.connect(login_role("pyjobq_producer"), autocommit=True) as producer:
        # As registered; else the one name equal but for case; null for null.
        assert one(producer, "select pyjobq.job_type_code('SEARCH')") == 1
        assert one(producer, "select pyjobq.job_type_code('SEND_EMAIL')") == 20
        assert one(producer, "select pyjobq.job_type_code('REPORT')") == 22
        assert one(producer, "select pyjobq.job_type_code(null)") is None
        created = one(
            producer,
            "select created from pyjobq.job_enqueue(pyjobq.job_type_code('send_email'), '{}')",
        )
        assert created is True
        for name in ("report", "NO_SUCH_TYPE"):  # two names match 'report' ignoring case
            with raises_sqlstate("22023"):
                producer.execute("select pyjobq.job_type_code(%s)", (name,))


def test_every_binding_call_that_takes_a_type_takes_its_name(conn: Conn) -> None:
    q = JobQueue(conn)
    first = q.enqueue("SEARCH", {"n": 1})
    q.enqueue_many("outbox", [{"n": 2}, {"n": 3}])
    assert [j.job_type for j in q.list_jobs(job_type="OUTBOX")] == [2, 2]
    (claimed,) = q.claim("w", 10, job_types=["SEARCH"])
    assert claimed.job_id == first.job_id
    q.fail(claimed.job_id, "w", claimed.attempt, "boom", dead_letter=True)
    assert q.redrive(job_type="SEARCH") == [first.job_id]
    with pytest.raises(InvalidArgument) as refused:
        q.enqueue("NO_SUCH_TYPE")
    assert refused.value.sqlstate == "22023"
    assert one(conn, "select count(*) from pyjobq.job_all") == 3


def test_a_worker_takes_handlers_by_name(dsn: str, conn: Conn) -> None:
    def ok(job: ClaimedJob) -> dict[str, Any]:
        return {"type": job.job_type}

    JobQueue(conn).enqueue_many(JobType.SEARCH, [{}, {}])
    JobQueue(conn).enqueue(JobType.OUTBOX)
    worker = Worker(dsn, {"SEARCH": ok, "OUTBOX": ok}, job_types=["search"])
    with running(worker) as r:
        wait_for(lambda: statuses(conn) == {1: 1, 3: 2}, "the SEARCH jobs DONE")
        r.stop()
    assert worker.job_types == [JobType.SEARCH]
    with pytest.raises(InvalidArgument), running(Worker(dsn, {"NO_SUCH_TYPE": ok})) as r:
        r.stop()
