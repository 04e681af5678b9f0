# Generated from pyjobq/aio.py by scripts/async_to_sync.py: edit that file instead.
"""``JobQueue``: the typed synchronous binding of the pyjobq SQL functions."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from psycopg.rows import class_row, tuple_row
from psycopg.types.json import Jsonb

from pyjobq import statements
from pyjobq.errors import translated
from pyjobq.params import (
    Payload,
    jsonb,
    jsonb_array,
    optional_list,
)
from pyjobq.queue_admin import QueueAdmin
from pyjobq.queue_batches import Batches
from pyjobq.queue_calls import heard, own_cursor
from pyjobq.queue_enqueue import Enqueue
from pyjobq.rows import (
    Attempt,
    Cancellation,
    ClaimBatch,
    ClaimedJob,
    Completion,
    CountRow,
    Dependency,
    Event,
    EventWait,
    FailOutcome,
    Finish,
    JobInfo,
    JobSummary,
    Outcome,
    PruneEstimate,
    ReapedJob,
    RecordedStep,
    Release,
    Renewal,
    Step,
    StepSaved,
    Watched,
)


class JobQueue(Enqueue, Batches, QueueAdmin):
    """Calls the ``pyjobq.job_*`` SQL functions, one statement per method.

    Given a :class:`psycopg.Connection`, every call runs on it inside whatever
    transaction the caller has open and commits nothing (enqueue a job in the
    same transaction as the business row it belongs to: a rollback removes
    both). Given a :class:`psycopg_pool.ConnectionPool`, every call takes a
    connection and commits on return. Defaults are the SQL functions' own:
    ``None`` means "the default". SQL errors come out as the classes in
    :mod:`pyjobq.errors`.
    """

    def claim(
        self,
        worker_id: str,
        limit: int | None = None,
        lease_seconds: int | None = None,
        job_types: Sequence[int | str] | None = None,
    ) -> list[ClaimedJob]:
        """``job_claim``: atomically lease up to ``limit`` due jobs to ``worker_id``.

        One ``UPDATE ... RETURNING`` over a ``FOR UPDATE SKIP LOCKED`` pick, so
        concurrent claimers never get the same job. An empty list means nothing
        is due.
        """
        codes = self._type_codes(job_types)
        params = (worker_id, limit, lease_seconds, codes)
        return self._rows(ClaimedJob, statements.CLAIM, params)

    def claim_with_next_due(
        self,
        worker_id: str,
        limit: int | None = None,
        lease_seconds: int | None = None,
        job_types: Sequence[int | str] | None = None,
    ) -> ClaimBatch:
        """``job_claim``, and ``job_next_due`` for the same types and ``job_next_chores`` in the
        same statement.

        Returns the jobs claimed and the seconds until the next job still to come becomes
        due (``None`` when none is scheduled), so an idle worker sleeps exactly that long for
        the one round trip a plain claim costs; and until a schedule's next tick and the next
        lease to expire, so that it ticks and reaps only then.
        """
        codes = self._type_codes(job_types)
        params = (codes, worker_id, limit, lease_seconds, codes)
        with (
            translated(),
            self._connection() as conn,
            own_cursor(conn, tuple_row) as cur,
        ):
            cur.execute(statements.CLAIM_WITH_NEXT_DUE, params, binary=True)
            rows = cur.fetchall()
        # An empty claim is one row: no job, only the times.
        jobs = [ClaimedJob(*row[:-3]) for row in rows if row[0] is not None]
        return ClaimBatch(jobs, *rows[0][-3:])

    def next_due(self, job_types: Sequence[int | str] | None = None) -> datetime | None:
        """``job_next_due``: when the earliest PENDING job not yet due becomes due (None if none
        is scheduled), among ``job_types`` (default: every type this role may work)."""
        codes = self._type_codes(job_types)
        due: datetime | None = self._scalar(statements.NEXT_DUE, (codes,))
        return due

    def next_due_in(self, job_types: Sequence[int | str] | None = None) -> float | None:
        """``job_next_due`` as seconds from the database's clock (``None`` if nothing is to
        come): how long an idle worker of ``job_types`` may sleep."""
        codes = self._type_codes(job_types)
        due_in: float | None = self._scalar(statements.NEXT_DUE_IN, (codes,))
        return due_in

    def worker_idle(self) -> bool:
        """``job_worker_idle``: mark this session as a worker asleep on LISTEN ``pyjobq_job``, so
        that every change making a job PENDING notifies from now on (producers notify only while
        some worker is marked). True once every producer that looked before the mark has
        committed: claim once more, then sleep; False: call again shortly. The mark lasts as
        long as the session: call it on the LISTEN connection, never through a pool."""
        idle: bool = self._scalar(statements.WORKER_IDLE, ())
        return idle

    def worker_busy(self) -> None:
        """``job_worker_busy``: end this session's mark (:meth:`worker_idle`): producers stop
        notifying for it."""
        self._scalar(statements.WORKER_BUSY, ())

    def complete(
        self,
        job_id: UUID,
        worker_id: str,
        attempt: int,
        result: Payload | None = None,
        lease_token: UUID | None = None,
    ) -> None:
        """``job_complete``: mark the job DONE if ``worker_id`` still holds ``attempt`` with
        ``lease_token`` (the claim's).

        Raises :class:`~pyjobq.errors.LeaseLost` when it no longer does.
        """
        params = (job_id, worker_id, attempt, jsonb(result), lease_token)
        self._scalar(statements.COMPLETE, params)

    def complete_many(
        self,
        worker_id: str,
        job_ids: Sequence[UUID],
        attempts: Sequence[int],
        results: Sequence[Payload | Jsonb | None] | None = None,
        lease_tokens: Sequence[UUID] | None = None,
    ) -> list[Completion]:
        """``job_complete_many``: complete up to 10000 held jobs in one round trip.

        Jobs no longer held are left alone and reported with ``completed=False``; an
        attempt this holder already completed (a retry after a lost reply) with ``True``.
        """
        params = (
            worker_id,
            list(job_ids),
            list(attempts),
            jsonb_array(results),
            optional_list(lease_tokens),
        )
        return self._rows(Completion, statements.COMPLETE_MANY, params)

    def fail(
        self,
        job_id: UUID,
        worker_id: str,
        attempt: int,
        error: str | None = None,
        retry_delay_seconds: float | None = None,
        dead_letter: bool | None = None,
        lease_token: UUID | None = None,
    ) -> FailOutcome:
        """``job_fail``: record a failed attempt.

        The job is PENDING again after the backoff (or ``retry_delay_seconds``)
        while attempts remain, otherwise (or with ``dead_letter``) DEAD.
        """
        params = (job_id, worker_id, attempt, error, retry_delay_seconds, dead_letter, lease_token)
        return self._one(FailOutcome, statements.FAIL, params)

    def fail_many(
        self,
        worker_id: str,
        job_ids: Sequence[UUID],
        attempts: Sequence[int],
        errors: Sequence[str | None] | None = None,
        retry_delays_seconds: Sequence[float | None] | None = None,
        dead_letters: Sequence[bool | None] | None = None,
        lease_tokens: Sequence[UUID] | None = None,
    ) -> list[Finish]:
        """``job_fail_many``: record up to 10000 failed attempts in one round trip.

        Each job is PENDING again after its delay (``None``: the backoff) while tries are
        left, else (or with its dead letter flag) DEAD. Returns one :class:`Finish` per job,
        in input order, whose status is ``None`` for a job no longer held (left alone).
        """
        params = (
            worker_id,
            list(job_ids),
            list(attempts),
            optional_list(errors),
            optional_list(retry_delays_seconds),
            optional_list(dead_letters),
            optional_list(lease_tokens),
        )
        return self._rows(Finish, statements.FAIL_MANY, params)

    def finish_many(
        self,
        worker_id: str,
        job_ids: Sequence[UUID],
        attempts: Sequence[int],
        outcomes: Sequence[Outcome],
        results: Sequence[Payload | Jsonb | None] | None = None,
        errors: Sequence[str | None] | None = None,
        retry_delays_seconds: Sequence[float | None] | None = None,
        lease_tokens: Sequence[UUID] | None = None,
    ) -> list[Finish]:
        """``job_finish_many``: end up to 10000 held attempts in one round trip and one
        transaction, each as its outcome says: ``"done"`` (with its result), ``"failed"`` (its
        error kept; retried after its delay or the backoff while tries are left), ``"dead"`` or
        ``"snoozed"`` (PENDING again after its delay, the try given back).

        Returns one :class:`Finish` per job, in input order: the new status, or ``None`` for a
        job no longer held (left alone); an attempt this holder already ended (a retry after a
        lost reply) is reported with the status it ended in.
        """
        params = (
            worker_id,
            list(job_ids),
            list(attempts),
            list(outcomes),
            jsonb_array(results),
            optional_list(errors),
            optional_list(retry_delays_seconds),
            optional_list(lease_tokens),
        )
        return self._rows(Finish, statements.FINISH_MANY, params)

    def renew_lease(
        self,
        job_id: UUID,
        worker_id: str,
        attempt: int,
        lease_seconds: int | None = None,
        lease_token: UUID | None = None,
    ) -> datetime:
        """``job_renew_lease``: extend the lease of a held attempt; returns the new lease end."""
        params = (job_id, worker_id, attempt, lease_seconds, lease_token)
        lease_until: datetime = self._scalar(statements.RENEW_LEASE, params)
        return lease_until

    def renew_lease_many(
        self,
        worker_id: str,
        job_ids: Sequence[UUID],
        attempts: Sequence[int],
        lease_seconds: int | None = None,
        lease_tokens: Sequence[UUID] | None = None,
    ) -> list[Renewal]:
        """``job_renew_lease_many``: renew up to 10000 held leases in one round trip.

        Returns one :class:`Renewal` per job, in input order; a job no longer held is left
        alone and reported with ``renewed=False``.
        """
        params = (
            worker_id,
            list(job_ids),
            list(attempts),
            lease_seconds,
            optional_list(lease_tokens),
        )
        return self._rows(Renewal, statements.RENEW_LEASE_MANY, params)

    def step_save(
        self,
        job_id: UUID,
        worker_id: str,
        attempt: int,
        name: str,
        result: Any = None,
        lease_token: UUID | None = None,
    ) -> StepSaved:
        """``job_step_save``: record that step ``name`` of a held job finished with ``result``
        (any JSON value, or a ``Jsonb`` already encoded).

        ``saved`` is false when the step was recorded before: the stored result stays and is
        returned. Called on the connection whose transaction makes the step's own writes, a
        caller that gets ``saved=False`` must roll that transaction back. Raises
        :class:`~pyjobq.errors.LeaseLost` when ``worker_id`` no longer holds ``attempt``.
        """
        params = (job_id, worker_id, attempt, name, jsonb(result), lease_token)
        return self._one(StepSaved, statements.STEP_SAVE, params)

    def steps(
        self, job_id: UUID, worker_id: str, attempt: int, lease_token: UUID | None = None
    ) -> list[Step]:
        """``job_steps``: the steps recorded for a held job, in the order they were saved."""
        params = (job_id, worker_id, attempt, lease_token)
        return self._rows(Step, statements.STEPS, params)

    def progress(
        self,
        job_id: UUID,
        worker_id: str,
        attempt: int,
        progress: Payload | Jsonb | None,
        lease_token: UUID | None = None,
    ) -> None:
        """``job_progress``: report a held job's progress (a JSON object of at most 8 KiB;
        ``None`` clears it); ``get`` shows the latest while the job is yet to end."""
        params = (job_id, worker_id, attempt, jsonb(progress), lease_token)
        self._scalar(statements.PROGRESS, params)

    def event_wait(
        self,
        job_id: UUID,
        worker_id: str,
        attempt: int,
        name: str,
        timeout_seconds: float | None = None,
        lease_token: UUID | None = None,
    ) -> EventWait:
        """``job_event_wait``: wait for event ``name`` of a held job. ``signalled`` with the
        payload when ``signal`` sent it (before or after), ``timed_out`` once the first wait
        for the name lasted ``timeout_seconds`` (a day when ``None``), else ``waiting``: the
        attempt has ended, and the job sleeps until the signal or the timeout."""
        params = (job_id, worker_id, attempt, name, timeout_seconds, lease_token)
        return self._one(EventWait, statements.EVENT_WAIT, params)

    def signal(self, job_id: UUID, name: str, payload: Any = None) -> bool:
        """``job_signal``: send event ``name`` with ``payload`` (any JSON value) to a job yet to
        end; one waiting for it is due at once. ``False`` when the job already had this event
        (the first payload stays). Raises :class:`~pyjobq.errors.JobNotFound` or
        :class:`~pyjobq.errors.JobAlreadyFinished`."""
        sent: bool = self._scalar(statements.SIGNAL, (job_id, name, jsonb(payload)))
        return sent

    def release(
        self, job_id: UUID, worker_id: str, attempt: int, lease_token: UUID | None = None
    ) -> None:
        """``job_release``: give a held, unstarted attempt back (PENDING, the try not used up)."""
        self._scalar(statements.RELEASE, (job_id, worker_id, attempt, lease_token))

    def release_many(
        self,
        worker_id: str,
        job_ids: Sequence[UUID],
        attempts: Sequence[int],
        lease_tokens: Sequence[UUID] | None = None,
    ) -> list[Release]:
        """``job_release_many``: give up to 10000 held, unstarted attempts back in one round trip.

        Returns one :class:`Release` per job, in input order; ``released=False`` for a job no
        longer held (left alone).
        """
        params = (worker_id, list(job_ids), list(attempts), optional_list(lease_tokens))
        return self._rows(Release, statements.RELEASE_MANY, params)

    def reap(self, limit: int | None = None) -> list[ReapedJob]:
        """``job_reap``: take back RUNNING jobs whose lease expired (retry later, or DEAD)."""
        return self._rows(ReapedJob, statements.REAP, (limit,))

    def counts(self) -> list[CountRow]:
        """``job_counts``: jobs per type and status, with the oldest due age and expired leases."""
        return self._rows(CountRow, statements.COUNTS, ())

    def get(self, job_id: UUID) -> JobInfo | None:
        """``job_get``: the job with its payload, result and last error; None if there is none."""
        rows = self._rows(JobInfo, statements.GET, (job_id,))
        return rows[0] if rows else None

    def attempts(self, job_id: UUID) -> list[Attempt]:
        """``job_attempts``: the story of a job's attempts, in order (each that ended otherwise
        than done, its last 25, then the one running or done)."""
        return self._rows(Attempt, statements.ATTEMPTS, (job_id,))

    def step_list(self, job_id: UUID) -> list[RecordedStep]:
        """``job_step_list``: the steps recorded for a job, in the order they were saved, with
        the attempt and worker that recorded each (for anyone who may read the job)."""
        return self._rows(RecordedStep, statements.STEP_LIST, (job_id,))

    def event_list(self, job_id: UUID) -> list[Event]:
        """``job_event_list``: what a job waits for and what was sent to it, by event name."""
        return self._rows(Event, statements.EVENT_LIST, (job_id,))

    def dependencies(self, job_id: UUID) -> list[Dependency]:
        """``job_dependencies``: the parents of ``job_id`` (in the order its enqueue named them)
        and its dependants, each with its status now and whether the edge is resolved."""
        return self._rows(Dependency, statements.DEPENDENCIES, (job_id,))

    def list_jobs(
        self,
        job_type: int | str | None = None,
        status: int | None = None,
        dedupe_key: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        oldest_first: bool | None = None,
        after: UUID | None = None,
        limit: int | None = None,
        error: str | None = None,
        batch_id: UUID | None = None,
    ) -> list[JobSummary]:
        """``job_list``: a page of jobs, newest first unless ``oldest_first``; pass the last
        ``job_id`` of a page as ``after`` for the next one. ``error`` keeps the jobs whose last
        error contains it, in any case; ``batch_id`` the members of a batch. (Not ``list``: that
        would shadow the builtin in this class's annotations.)"""
        params = (
            self._code(job_type),
            status,
            dedupe_key,
            created_after,
            created_before,
            oldest_first,
            after,
            limit,
            error,
            batch_id,
        )
        return self._rows(JobSummary, statements.LIST, params)

    def watch(self, job_ids: Sequence[UUID]) -> list[Watched]:
        """``job_watch``: announce the end of these jobs on ``pyjobq_done``; returns each one's
        status now (a job that already ended is not announced). LISTEN first."""
        return self._rows(Watched, statements.WATCH, (list(job_ids),))

    def wait(self, job_id: UUID, timeout: float) -> JobInfo | None:
        """Wait up to ``timeout`` seconds for ``job_id`` to end (DONE, DEAD or CANCELLED), without
        polling: LISTEN pyjobq_done, ``job_watch``, then the notifications until its id comes.
        Returns the job as ``job_get`` shows it once it ended, None if it has not by then (or
        does not exist). Runs outside any transaction, on the connection given (idle) or one of
        the pool's: inside a transaction a LISTEN hears nothing until the commit.
        """
        with self._listening("pyjobq_done", "wait") as conn:
            deadline = time.monotonic() + timeout
            with translated():
                with own_cursor(conn, class_row(Watched)) as cur:
                    cur.execute(statements.WATCH, ([job_id],))
                    (watched,) = cur.fetchall()
                if watched.status is None:
                    return None
                if not (watched.ended or heard(conn, str(job_id), deadline)):
                    return None
                with own_cursor(conn, class_row(JobInfo)) as cur:
                    cur.execute(statements.GET, (job_id,))
                    return cur.fetchone()

    def cancel(self, job_ids: Sequence[UUID]) -> list[Cancellation]:
        """``job_cancel``: PENDING, WAITING and RUNNING jobs become CANCELLED (a RUNNING job's
        holder is fenced out and told at its next heartbeat), and so do their dependants unless
        enqueued to run on parent failure; one :class:`Cancellation` per id, in order."""
        return self._rows(Cancellation, statements.CANCEL, (list(job_ids),))

    def redrive(
        self,
        job_ids: Sequence[UUID] | None = None,
        job_type: int | str | None = None,
        limit: int | None = None,
    ) -> list[UUID]:
        """``job_redrive``: DEAD jobs back to PENDING with a fresh budget of tries; their ids."""
        params = (optional_list(job_ids), self._code(job_type), limit)
        return self._column(statements.REDRIVE, params)

    def prune(self, older_than: timedelta, limit: int | None = None) -> int:
        """``job_prune``: delete up to ``limit`` ended jobs (DONE, DEAD, CANCELLED) older than
        ``older_than``.

        Returns how many were deleted; call again until it returns less than the limit.
        """
        deleted: int = self._scalar(statements.PRUNE, (older_than, limit))
        return deleted

    def prune_estimate(self, older_than: timedelta) -> PruneEstimate:
        """``job_prune_estimate``: about how many ended jobs ``prune(older_than)`` would delete,
        from the statistics of whole days and a count of the rest."""
        return self._one(PruneEstimate, statements.PRUNE_ESTIMATE, (older_than,))
