# Generated from pyjobq/aio_enqueue.py by scripts/async_to_sync.py: edit that file instead.
"""``Enqueue``: the synchronous binding of the calls that add jobs and change pending ones."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from uuid import UUID

from pyjobq import statements
from pyjobq.params import (
    OnDuplicate,
    Parents,
    Payload,
    due,
    jsonb,
    jsonb_document,
    optional_list,
    parents_document,
)
from pyjobq.queue_calls import Calls
from pyjobq.rows import Enqueued
from pyjobq.tracing import with_trace_context


class Enqueue(Calls):
    """The calls of :class:`pyjobq.aio.JobQueue` that add jobs and change pending ones."""

    def enqueue(
        self,
        job_type: int | str,
        payload: Payload | None = None,
        priority: int | None = None,
        run_after: datetime | timedelta | None = None,
        dedupe_key: str | None = None,
        max_attempts: int | None = None,
        unique_for: timedelta | None = None,
        concurrency_key: str | None = None,
        metadata: Payload | None = None,
        depends_on: Sequence[UUID] | None = None,
        on_parent_failure: str | None = None,
        batch_id: UUID | None = None,
        on_duplicate: OnDuplicate | None = None,
    ) -> Enqueued:
        """``job_enqueue``: add one PENDING job, or return the active job of its type holding
        ``dedupe_key`` (with ``unique_for``, also one with the key that ended within that
        window). ``job_type`` is a code or a registered name (see :meth:`type_code`);
        ``concurrency_key`` counts the job against its type's per-key limit. ``metadata`` is
        kept with the job; with OpenTelemetry installed, the current span's W3C context is
        added to it (:mod:`pyjobq.tracing`). With ``depends_on`` (existing job ids) the job is
        WAITING until they have all ended, then PENDING, its handler seeing their results in
        :attr:`ClaimedJob.parent_results`; a parent that ends DEAD or CANCELLED cancels it,
        unless ``on_parent_failure`` is ``"run"`` (default ``"cancel"``). With ``batch_id``
        (:meth:`open_batch`) the job joins that open batch. ``run_after`` is a time, or a
        ``timedelta``: a delay from now on the database's clock.

        ``on_duplicate`` says what becomes of the job holding ``dedupe_key``: ``"keep"`` (the
        default) returns it; ``"replace"`` gives it this call's payload, priority, run_after,
        max_attempts, concurrency key and metadata; ``"debounce"`` moves its run_after out to
        this call's. Either changes only a PENDING job never claimed (``replaced`` True); a
        claimed one, which a handler has seen, is returned unchanged."""
        code = self._code(job_type)
        params = (
            code,
            jsonb(payload),
            priority,
            *due(run_after),
            dedupe_key,
            max_attempts,
            unique_for,
            concurrency_key,
            jsonb(with_trace_context(metadata)),
            optional_list(depends_on),
            on_parent_failure,
            batch_id,
            on_duplicate,
        )
        return self._one(Enqueued, statements.ENQUEUE, params)

    def enqueue_many(
        self,
        job_type: int | str,
        payloads: Sequence[Payload],
        dedupe_keys: Sequence[str | None] | None = None,
        priority: int | None = None,
        run_after: datetime | timedelta | None = None,
        max_attempts: int | None = None,
        unique_for: timedelta | None = None,
        concurrency_keys: Sequence[str | None] | None = None,
        metadata: Payload | None = None,
        depends_on: Sequence[Parents | None] | None = None,
        on_parent_failure: str | None = None,
        batch_id: UUID | None = None,
        on_duplicate: OnDuplicate | None = None,
    ) -> list[Enqueued]:
        """``job_enqueue_many``: add up to 100000 jobs of one type in one round trip
        (``unique_for`` applies to the jobs with a key, as :meth:`enqueue` applies it;
        ``concurrency_keys`` pairs a concurrency key, or ``None``, with each payload;
        ``metadata``, with the trace context as :meth:`enqueue` adds it, goes with every job).
        ``depends_on`` pairs each payload with its parents (or ``None``): job ids, or the
        1-based positions of earlier payloads of the same call, so one call enqueues a graph;
        ``on_parent_failure``, ``batch_id`` and ``on_duplicate`` apply to every job, as in
        :meth:`enqueue` (a later payload with the key of an earlier one replaces its job).

        Returns one :class:`Enqueued` per payload, in input order.
        """
        keys = optional_list(dedupe_keys)
        code = self._code(job_type)
        params = (
            code,
            jsonb_document(payloads),
            keys,
            priority,
            *due(run_after),
            max_attempts,
            unique_for,
            optional_list(concurrency_keys),
            jsonb(with_trace_context(metadata)),
            parents_document(depends_on),
            on_parent_failure,
            batch_id,
            on_duplicate,
        )
        return self._rows(Enqueued, statements.ENQUEUE_MANY, params)

    def update(
        self,
        job_id: UUID,
        payload: Payload | None = None,
        priority: int | None = None,
        run_after: datetime | timedelta | None = None,
    ) -> str:
        """``job_update``: change a PENDING job's payload (only while it was never claimed),
        priority or run_after (a time, or a delay from now on the database's clock); what is
        None stays. Returns ``"updated"``, or, having changed nothing, ``"claimed"`` (RUNNING,
        or a payload asked of a job claimed before), ``"waiting"`` (for its parents),
        ``"finished"`` or ``"not_found"``. An update is written to the audit log."""
        outcome: str = self._scalar(
            statements.UPDATE, (job_id, jsonb(payload), priority, *due(run_after))
        )
        return outcome
