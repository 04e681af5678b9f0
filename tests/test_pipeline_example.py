"""examples/node/pipeline.js and examples/python/pipeline_worker.py: a graph enqueued from Node.js
in one call, run by a Python worker, its batch's callback fired once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from uuid import UUID

import psycopg
from psycopg.conninfo import conninfo_to_dict

from pyjobq import JobQueue
from tests.test_cross_client import node_env

ROOT = Path(__file__).resolve().parent.parent
PIPELINE = ROOT / "examples" / "node" / "pipeline.js"
WORKER = ROOT / "examples" / "python" / "pipeline_worker.py"


def test_a_node_pipeline_runs_in_a_python_worker(
    dsn: str, conn: psycopg.Connection, node: str
) -> None:
    params = conninfo_to_dict(dsn)
    url = f"postgresql://{params['user']}@{params['host']}:{params['port']}/{params['dbname']}"
    enqueued = subprocess.run(
        [node, str(PIPELINE), url, "5"],
        capture_output=True,
        text=True,
        timeout=60,
        env=node_env(dsn),
        check=True,
    )
    batch_id, merge_id = enqueued.stdout.split()
    ran = subprocess.run(
        [sys.executable, str(WORKER), dsn], capture_output=True, text=True, timeout=60, check=True
    )
    assert ran.stdout.splitlines() == [
        "merge: 5 parts, total 150",
        "pipeline finished: 6 of 6 jobs done",
    ]
    q = JobQueue(conn)
    merge = q.get(UUID(merge_id))
    assert merge is not None
    assert merge.result == {"total": 150}
    batch = q.get_batch(UUID(batch_id))
    assert batch is not None
    assert (batch.state, batch.done, batch.finish_job is not None) == ("finished", 6, True)
