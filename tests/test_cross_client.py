"""Python and Node.js workers on one queue at the same time never claim or complete a job twice."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections import Counter
from pathlib import Path
from uuid import UUID

import psycopg
from psycopg.conninfo import conninfo_to_dict

from pyjobq import JobQueue
from tests.workerhelp import wait_for

ROOT = Path(__file__).resolve().parent.parent
NODE_WORKER = ROOT / "tests" / "conformance" / "node" / "cross-client-worker.js"
JOBS = 2000
PYTHON_WORKERS = 4
NODE_CLIENTS = 4


def node_env(dsn: str) -> dict[str, str]:
    params = conninfo_to_dict(dsn)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    names = {"host": "PGHOST", "port": "PGPORT", "user": "PGUSER", "dbname": "PGDATABASE"}
    env.update({var: str(params[key]) for key, var in names.items() if key in params})
    if "password" in params:
        env["PGPASSWORD"] = str(params["password"])
    return env


def python_worker(
    dsn: str, worker_id: str, start: threading.Event, claimed: list[tuple[UUID, int]]
) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        queue = JobQueue(conn)
        start.wait()
        first = True
        while jobs := queue.claim(worker_id, limit=10):
            claimed.extend((job.job_id, job.attempt) for job in jobs)
            if first:
                # Holding these, wait for Node's first claim: however fast either side starts,
                # both get part of the work, and they claim at the same time.
                wait_for(lambda: _node_claimed(conn), "the Node.js side to claim a job")
                first = False
            for job in jobs:
                queue.complete(job.job_id, worker_id, job.attempt, {"by": worker_id})


def _node_claimed(conn: psycopg.Connection) -> bool:
    row = conn.execute("select exists (select from pyjobq.job_all where worker_id like 'node-%')")
    return row.fetchone() == (True,)


def test_python_and_node_share_a_queue(dsn: str, conn: psycopg.Connection, node: str) -> None:
    JobQueue(conn).enqueue_many(1, [{"n": n} for n in range(JOBS)])

    worker = subprocess.Popen(
        [node, NODE_WORKER, str(NODE_CLIENTS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=node_env(dsn),
        text=True,
    )
    assert worker.stdout is not None
    assert worker.stdin is not None
    assert worker.stdout.readline().strip() == "ready", (
        worker.stderr.read() if worker.stderr else ""
    )

    start = threading.Event()
    python_claims: list[list[tuple[UUID, int]]] = [[] for _ in range(PYTHON_WORKERS)]
    threads = [
        threading.Thread(target=python_worker, args=(dsn, f"py-{i}", start, python_claims[i]))
        for i in range(PYTHON_WORKERS)
    ]
    for thread in threads:
        thread.start()
    # Both sides connected; release them together.
    start.set()
    worker.stdin.write("go\n")
    worker.stdin.flush()
    out, err = worker.communicate(timeout=300)
    for thread in threads:
        thread.join(timeout=300)
    assert worker.returncode == 0, err
    node_claims = [(UUID(job_id), attempt) for job_id, attempt in json.loads(out)["claimed"]]
    python_all = [claim for claims in python_claims for claim in claims]

    # Each side did part of the work, and no job was handed out twice.
    assert python_all
    assert node_claims
    claims = Counter(job_id for job_id, _ in python_all + node_claims)
    assert len(claims) == JOBS
    assert max(claims.values()) == 1
    assert {attempt for _, attempt in python_all + node_claims} == {1}

    # The table agrees: every job DONE once, by the worker that claimed it, at attempt 1.
    rows = conn.execute(
        "select status, attempts, result->>'by' like worker_id, count(*)"
        "  from pyjobq.job_all group by 1, 2, 3"
    ).fetchall()
    assert rows == [(3, 1, True, JOBS)]
    by_client = conn.execute(
        "select split_part(worker_id, '-', 1), count(*) from pyjobq.job_all group by 1 order by 1"
    ).fetchall()
    assert dict(by_client) == {"node": len(node_claims), "py": len(python_all)}
