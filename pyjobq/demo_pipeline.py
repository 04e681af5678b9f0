"""The demo's small pipeline: four SEARCH parts and a merge that waits for them, in a batch whose
``success`` callback (an OUTBOX job) the queue enqueues once they are all DONE.

Enqueued with the orders, run by the same workers and handlers (the payloads carry order 0, which
no handler fails), and checked in the summary: the merge ran only once every part had ended DONE,
the batch finished with its five jobs DONE, and its callback was enqueued once and ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg

from pyjobq.queue import JobQueue
from pyjobq.rows import JobType

PARTS = 4


@dataclass(frozen=True)
class Pipeline:
    """What the demo enqueued: the batch and the merge job."""

    batch_id: UUID
    merge_id: UUID


def enqueue_pipeline(conn: psycopg.Connection[Any]) -> Pipeline:
    """One transaction: the batch, its parts and the merge naming them by position."""
    q = JobQueue(conn)
    with conn.transaction():
        batch_id = q.open_batch(
            on_success=(JobType.OUTBOX, {"order_id": 0, "event": "pipeline done"})
        )
        rows = q.enqueue_many(
            JobType.SEARCH,
            [
                *({"order_id": 0, "part": i} for i in range(1, PARTS + 1)),
                {"order_id": 0, "merge": 1},
            ],
            depends_on=[*([None] * PARTS), list(range(1, PARTS + 1))],
            batch_id=batch_id,
        )
        q.close_batch(batch_id)
    return Pipeline(batch_id, rows[-1].job_id)


def pipeline_finished(conn: psycopg.Connection[Any], pipeline: Pipeline) -> bool:
    """Whether the batch finished and its callback ran."""
    batch = JobQueue(conn).get_batch(pipeline.batch_id)
    if batch is None or not batch.finished or batch.success_job is None:
        return False
    callback = JobQueue(conn).get(batch.success_job)
    return callback is not None and callback.finished_at is not None


def pipeline_checks(
    conn: psycopg.Connection[Any], pipeline: Pipeline
) -> tuple[str, list[tuple[bool, str]], int]:
    """The summary's line for the pipeline, its checks, and how many of its jobs (the callback
    included) are DONE."""
    q = JobQueue(conn)
    batch = q.get_batch(pipeline.batch_id)
    merge = q.get(pipeline.merge_id)
    parts = [d for d in q.dependencies(pipeline.merge_id) if d.relation == "parent"]
    part_jobs = [q.get(p.job_id) for p in parts]
    callbacks = conn.execute(
        "select count(*) from pyjobq.job_all where payload @> %s::jsonb",
        ('{"event": "pipeline done"}',),
    ).fetchone()
    # What the merge's own claim saw of its parents, as its handler recorded it: each DONE.
    # (Its run_started_at is no witness: each call's clock reads its own statement's start,
    # which does not order what concurrent sessions commit.)
    after = (
        merge is not None
        and isinstance(merge.result, dict)
        and merge.result.get("parents") == ["DONE"] * PARTS
        and all(p is not None and p.finished_at is not None for p in part_jobs)
    )
    done = batch is not None and batch.state == "finished" and batch.done == PARTS + 1
    line = (
        f"pipeline          {PARTS} parts -> merge, batch of {PARTS + 1}: "
        f"{batch.state if batch else 'missing'}, {batch.done if batch else 0} DONE, "
        f"success callback {'enqueued' if batch and batch.success_job else 'not enqueued'}"
    )
    callback = q.get(batch.success_job) if batch and batch.success_job else None
    done_jobs = (batch.done if batch else 0) + (1 if callback and callback.status == 3 else 0)
    return (
        line,
        [
            (len(parts) == PARTS and after, f"the merge ran after its {PARTS} parts ended DONE"),
            (done and callbacks == (1,), "the batch finished and its callback was enqueued once"),
        ],
        done_jobs,
    )
