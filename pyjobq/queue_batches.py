# Generated from pyjobq/aio_batches.py by scripts/async_to_sync.py: edit that file instead.
"""``Batches``: the synchronous binding of the batch functions."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from uuid import UUID

from psycopg.rows import class_row

from pyjobq import statements
from pyjobq.errors import translated
from pyjobq.params import Payload, jsonb
from pyjobq.queue_calls import Calls, heard, own_cursor
from pyjobq.rows import BatchInfo

Callback = tuple[int | str, Payload | None]


class Batches(Calls):
    """The batch calls of :class:`pyjobq.aio.JobQueue`."""

    def open_batch(
        self,
        on_success: Callback | None = None,
        on_finish: Callback | None = None,
        on_dead: Callback | None = None,
    ) -> UUID:
        """``job_batch_open``: a new batch's id, for ``enqueue(..., batch_id=...)``. Each
        callback, a ``(job type, payload)`` pair, is a job the queue enqueues exactly once: on
        success when the closed batch's jobs are all DONE, on finish when they have all ended,
        on dead at the first that ends DEAD; its payload gets ``"batch"`` with the counts."""
        callbacks = {}
        for name, callback in (("success", on_success), ("finish", on_finish), ("dead", on_dead)):
            if callback is not None:
                job_type, payload = callback
                spec = {"job_type": self._code(job_type)}
                callbacks[name] = spec if payload is None else {**spec, "payload": dict(payload)}
        batch_id: UUID = self._scalar(statements.BATCH_OPEN, (jsonb(callbacks),))
        return batch_id

    def close_batch(self, batch_id: UUID) -> None:
        """``job_batch_close``: no job joins the batch any more (:class:`BatchClosed`); once its
        jobs have all ended it is finished and its callbacks are enqueued."""
        self._scalar(statements.BATCH_CLOSE, (batch_id,))

    def get_batch(self, batch_id: UUID) -> BatchInfo | None:
        """``job_batch_get``: the batch's state and counts; None if there is no such batch."""
        rows = self._rows(BatchInfo, statements.BATCH_GET, (batch_id,))
        return rows[0] if rows else None

    @contextmanager
    def batch(
        self,
        on_success: Callback | None = None,
        on_finish: Callback | None = None,
        on_dead: Callback | None = None,
    ) -> Iterator[UUID]:
        """A batch open for the ``with`` block (its id, for ``enqueue(..., batch_id=...)``) and
        closed when the block ends normally; a block that raises leaves it open, its callbacks
        not due, as a transaction that failed commits nothing."""
        batch_id = self.open_batch(on_success, on_finish, on_dead)
        yield batch_id
        self.close_batch(batch_id)

    def wait_batch(self, batch_id: UUID, timeout: float) -> BatchInfo | None:
        """Wait up to ``timeout`` seconds for the batch to finish, without polling: LISTEN
        pyjobq_batch, read the batch, then the notifications until its id comes. Returns the
        finished batch, or None if it has not finished by then (or does not exist). Runs
        outside any transaction, as :meth:`JobQueue.wait` does."""
        with self._listening("pyjobq_batch", "wait_batch") as conn:
            deadline = time.monotonic() + timeout
            with translated():
                while True:
                    with own_cursor(conn, class_row(BatchInfo)) as cur:
                        cur.execute(statements.BATCH_GET, (batch_id,))
                        batch = cur.fetchone()
                    if batch is None or batch.finished:
                        return batch
                    # A batch finishes once, but a redrive may reopen it: read it again after
                    # each announcement of it.
                    if not heard(conn, str(batch_id), deadline):
                        return None
