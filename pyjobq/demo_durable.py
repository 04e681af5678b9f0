"""The demo's durable jobs: an APPROVAL job that waits for a signal, and a CHECKPOINTED job of
ten steps whose worker the demo SIGKILLs halfway through.

The APPROVAL job records a draft as a step and waits for the event ``approval``: its attempt
ends and the job sleeps, holding nothing, until the demo sees it waiting (``job_event_list``)
and sends the signal; the attempt that wakes takes the draft from its step and completes.

Each step of the CHECKPOINTED job inserts a row into ``demo.step_effects`` and records itself in
that same transaction (``step_tx``). Its first attempt stops at step ``STOP_AT``, at the
checkpoint gate the demo holds from the start; the demo kills that worker there, lets go of the
gate, and another worker's reaper takes the job back. The attempt that runs it again reuses the
recorded steps and runs the others: the summary checks every step's row exists once, and which
attempt wrote it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg

from pyjobq.params import Payload
from pyjobq.queue import JobQueue
from pyjobq.rows import ClaimedJob
from pyjobq.worker import job_context, sync_job_context

# Where the worker processes find the demo's database.
DSN_ENV = "PYJOBQ_DEMO_DSN"
APPROVAL = 101
CHECKPOINTED = 102
STEPS = 10
STOP_AT = 5  # the step the first attempt stops at, at the checkpoint gate

SCHEMA = """
create table demo.step_effects (job_id uuid not null, step int not null, attempt int not null);
create table demo.checkpoint_gate ();
"""
# Held by the demo from the start until the worker stopped there is killed.
CHECKPOINT_GATE = "lock table demo.checkpoint_gate in exclusive mode"


async def approval(job: ClaimedJob) -> Payload:
    """Draft a refund, wait for a person's approval (a signal), then complete with it."""
    ctx = job_context()
    draft = await ctx.step("draft", lambda: {"refund": "12.50", "attempt": job.attempt})
    decision = await ctx.wait_for("approval", timeout=300)
    return {"draft": draft, "approved_by": decision["by"], "attempt": job.attempt}


def checkpointed(job: ClaimedJob) -> Payload:
    """Ten steps, each writing its row and recording itself in one transaction."""
    ctx = sync_job_context()
    with psycopg.connect(os.environ[DSN_ENV]) as conn:
        for step in range(1, STEPS + 1):
            ctx.step_tx(conn, f"step {step}", _do_step, conn, job, step)
    return {"steps": STEPS, "attempt": job.attempt}


def _do_step(conn: psycopg.Connection[Any], job: ClaimedJob, step: int) -> dict[str, int]:
    if step == STOP_AT:  # waits while the demo holds the checkpoint gate
        conn.execute("lock table demo.checkpoint_gate in row exclusive mode")
    conn.execute(
        "insert into demo.step_effects (job_id, step, attempt) values (%s, %s, %s)",
        (job.job_id, step, job.attempt),
    )
    return {"step": step}


HANDLERS = {APPROVAL: approval, CHECKPOINTED: checkpointed}


@dataclass(frozen=True)
class Durable:
    """The two durable jobs the demo enqueued."""

    approval_id: UUID
    checkpointed_id: UUID


def enqueue_durable(conn: psycopg.Connection[Any]) -> Durable:
    """Register the two types and enqueue a job of each, first in claim order."""
    q = JobQueue(conn)
    q.type_register(APPROVAL, "DEMO_APPROVAL")
    q.type_register(CHECKPOINTED, "DEMO_CHECKPOINTED")
    return Durable(
        q.enqueue(APPROVAL, {"refund": "12.50"}, priority=0).job_id,
        q.enqueue(CHECKPOINTED, {"steps": STEPS}, priority=0).job_id,
    )


def approve_when_waiting(conn: psycopg.Connection[Any], durable: Durable) -> None:
    """Send the approval once the job waits for it, as a person clicking "approve" would."""
    q = JobQueue(conn)
    if any(
        e.name == "approval" and e.state == "waiting" for e in q.event_list(durable.approval_id)
    ):
        q.signal(durable.approval_id, "approval", {"by": "the demo"})


def worker_pid(worker_id: str) -> int:
    """The process id in a worker's default id, ``host:pid:random`` (``make_worker_id``)."""
    return int(worker_id.split(":")[-2])


def checkpointed_holder(conn: psycopg.Connection[Any], durable: Durable) -> int | None:
    """The pid of the worker process that runs the CHECKPOINTED job, once it has recorded the
    steps before ``STOP_AT``; None until then."""
    q = JobQueue(conn)
    job = q.get(durable.checkpointed_id)
    if job is None or job.worker_id is None or job.status != 2:
        return None
    if len(q.step_list(durable.checkpointed_id)) < STOP_AT - 1:
        return None
    return worker_pid(job.worker_id)


def durable_finished(conn: psycopg.Connection[Any], durable: Durable) -> bool:
    """Whether both durable jobs have ended."""
    q = JobQueue(conn)
    jobs = [q.get(durable.approval_id), q.get(durable.checkpointed_id)]
    return all(j is not None and j.finished_at is not None for j in jobs)


def durable_checks(
    conn: psycopg.Connection[Any], durable: Durable, killed: bool
) -> tuple[list[str], list[tuple[bool, str]], int]:
    """The summary's lines, its checks, and how many of the two jobs are DONE."""
    q = JobQueue(conn)
    approved, steady = q.get(durable.approval_id), q.get(durable.checkpointed_id)
    assert approved is not None
    assert steady is not None
    story = [a.outcome for a in q.attempts(durable.approval_id)]
    events = {e.name: e.state for e in q.event_list(durable.approval_id)}
    effects = conn.execute(
        "select step, count(*), min(attempt), max(attempt) from demo.step_effects"
        " where job_id = %s group by step order by step",
        (durable.checkpointed_id,),
    ).fetchall()
    recorded = {s.name: s.attempt for s in q.step_list(durable.checkpointed_id)}
    once = [tuple(r[:2]) for r in effects] == [(s, 1) for s in range(1, STEPS + 1)]
    by_attempt = [recorded.get(f"step {s}") for s in range(1, STEPS + 1)]
    written_by = [int(r[2]) for r in effects]
    first, last = by_attempt[0], by_attempt[-1]
    resumed = (
        first == 1
        and last == steady.attempts
        and by_attempt == written_by
        and by_attempt == [1] * (STOP_AT - 1) + [last] * (STEPS - STOP_AT + 1)
    )
    done = sum(j.status == 3 for j in (approved, steady))
    lines = [
        f"approval          waited ({' -> '.join(story)}), approved by "
        f"{(approved.result or {}).get('approved_by')}",
        f"checkpointed job  {STEPS} steps, attempt {steady.attempts}: steps 1-{STOP_AT - 1} "
        f"recorded by attempt {first}, {STOP_AT}-{STEPS} by attempt {last}",
    ]
    checks = [
        (
            approved.status == 3
            and "waiting" in story
            and story[-1] == "done"
            and events == {"approval": "signalled"}
            and (approved.result or {}).get("draft", {}).get("attempt") == 1,
            "the approval job slept until its signal, then completed with its draft step reused",
        ),
        (
            steady.status == 3 and once and resumed and (steady.attempts > 1) == killed,
            f"the checkpointed job's {STEPS} steps each wrote once; "
            + (
                "after its worker's SIGKILL, the next attempt reused the recorded steps"
                if killed
                else "one attempt ran them all"
            ),
        ),
    ]
    return lines, checks, done
