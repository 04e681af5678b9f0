"""Enqueue COUNT jobs of type 1 (SEARCH) with the pyjobq binding.  Usage: producer.py DSN [COUNT]"""

from __future__ import annotations

import sys

import psycopg

from pyjobq import JobQueue


def main() -> None:
    dsn = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    # One transaction: in an application, the business rows go in the same one.
    with psycopg.connect(dsn) as conn:
        queue = JobQueue(conn)
        for job in queue.enqueue_many(1, [{"query": f"item {n}"} for n in range(1, count + 1)]):
            print(job.job_id)


if __name__ == "__main__":
    main()
