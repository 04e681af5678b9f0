"""Claim, "process" and complete jobs until none is due (or forever with --forever).

Usage: worker.py DSN [--forever]
"""

from __future__ import annotations

import os
import socket
import sys
import time

import psycopg

from pyjobq import ClaimedJob, JobQueue, LeaseLost


def process(worker_id: str, job: ClaimedJob) -> dict[str, object]:
    """The application's work; here it only prints the job."""
    print(f"{worker_id}: job {job.job_id} attempt {job.attempt}: {job.payload}")
    return {"ok": True}


def main() -> None:
    dsn = sys.argv[1]
    forever = "--forever" in sys.argv[2:]
    worker_id = f"py-{socket.gethostname()}-{os.getpid()}"
    # Autocommit: each call is its own transaction, so a claim is visible at once.
    with psycopg.connect(dsn, autocommit=True) as conn:
        queue = JobQueue(conn)
        while True:
            jobs = queue.claim(worker_id, limit=10, lease_seconds=60)
            if not jobs:
                if not forever:
                    break
                time.sleep(1)
                continue
            for job in jobs:
                try:
                    result = process(worker_id, job)
                except Exception as error:
                    # Recorded on the job; it is retried after a backoff, or DEAD.
                    queue.fail(job.job_id, worker_id, job.attempt, repr(error))
                    continue
                try:
                    queue.complete(job.job_id, worker_id, job.attempt, result)
                except LeaseLost:
                    print(f"{worker_id}: lost {job.job_id}; it runs elsewhere", file=sys.stderr)


if __name__ == "__main__":
    main()
