"""Run the pipeline that examples/node/pipeline.js enqueued: count each slice, merge the counts
from the parents' results, and print the batch's report; stop when nothing is due.

Usage: pipeline_worker.py DSN
"""

from __future__ import annotations

import sys
from typing import Any

import psycopg

from pyjobq import ClaimedJob, JobQueue


def step(job: ClaimedJob) -> dict[str, Any]:
    """A part counts its slice (here: the slice's number times ten); the merge adds up what its
    parents returned, which the claim hands it in ``parent_results``."""
    if job.payload["step"] == "count":
        return {"count": job.payload["slice"] * 10}
    parents = job.parent_results or []
    total = sum(p["result"]["count"] for p in parents if p["status"] == "DONE")
    print(f"merge: {len(parents)} parts, total {total}")
    return {"total": total}


def report(job: ClaimedJob) -> dict[str, Any]:
    """The batch's finish callback: its payload carries the batch's counts."""
    batch = job.payload["batch"]
    print(f"{job.payload['report']} finished: {batch['done']} of {batch['total']} jobs done")
    return {}


def main() -> None:
    handlers = {1: step, 2: report}
    with psycopg.connect(sys.argv[1], autocommit=True) as conn:
        queue = JobQueue(conn)
        # A part's completion makes the merge due at once, and the merge's the report.
        while jobs := queue.claim("pipeline-worker", limit=10, lease_seconds=60):
            for job in jobs:
                result = handlers[job.job_type](job)
                queue.complete(job.job_id, "pipeline-worker", job.attempt, result, job.lease_token)


if __name__ == "__main__":
    main()
