"""``Worker``: wires the duties together (claiming, running, completing, leases, shutdown) and
runs them on one event loop."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import secrets
import socket
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from pyjobq.aio import AsyncJobQueue
from pyjobq.metrics import WorkerHooks, WorkerMetrics
from pyjobq.migrate import check_schema_version
from pyjobq.worker.claiming import MAX_FLUSHES, Claimer, Listener
from pyjobq.worker.completing import Completer
from pyjobq.worker.config import WorkerConfig
from pyjobq.worker.handlers import Handlers, policy_mismatches
from pyjobq.worker.leases import Heartbeat, Reaper
from pyjobq.worker.outcomes import Outcomes
from pyjobq.worker.processes import InProcess, in_processes
from pyjobq.worker.running import Handler, Runner, is_async, lingering_limit
from pyjobq.worker.schedules import Ticker
from pyjobq.worker.shutdown import EXIT_DRAINED, EXIT_UNFINISHED, Drain, with_signals
from pyjobq.worker.state import WorkerState

log = logging.getLogger("pyjobq.worker")


def make_worker_id() -> str:
    """``host:pid:random``, unique per process and at most 80 characters (the SQL limit)."""
    suffix = f":{os.getpid()}:{secrets.token_hex(4)}"
    return socket.gethostname()[: 80 - len(suffix)] + suffix


class Worker:
    """Claims jobs of the handled types and runs them; see :mod:`pyjobq.worker`.

    ``source`` is a libpq conninfo/URL (the worker opens a small pool and, unless
    ``listen`` is false, one LISTEN connection) or an :class:`AsyncConnectionPool`
    whose connections are in autocommit mode. ``handlers`` maps job types (codes, or
    registered names, resolved when the worker starts) to
    functions taking the :class:`ClaimedJob` and returning a JSON object (the
    job's result) or ``None``; raising :class:`Retry` or :class:`DeadLetter`
    chooses what happens next, any other exception fails the attempt with the
    default backoff. ``config`` holds every setting (:class:`WorkerConfig`); keyword
    ``options`` name its fields and override it (``Worker(dsn, handlers, concurrency=16)``).
    ``job_types`` takes only some of the handled types (codes or names; default: all).
    ``listen_dsn`` opens the LISTEN connection elsewhere than ``source``: LISTEN needs a
    session, so when ``source`` goes through a pooler in transaction mode, point
    ``listen_dsn`` at the server itself (and, before PgBouncer 1.21, set
    ``prepared_statements=False`` with a conninfo ``source``).
    """

    def __init__(
        self,
        source: str | AsyncConnectionPool,
        handlers: Mapping[Any, Handler],
        config: WorkerConfig | None = None,
        *,
        job_types: Sequence[int | str] | None = None,
        hooks: WorkerHooks | None = None,
        **options: Any,
    ) -> None:
        if not handlers:
            raise ValueError("handlers must map at least one job type to a function")
        self.config = replace(config or WorkerConfig(), **options)
        self.source = source
        self._given: dict[int | str, Handler] = in_processes(handlers, self.config)
        # The child processes of handlers that run in them, ended when the worker stops.
        self._pools = {h.pool for h in self._given.values() if isinstance(h, InProcess)}
        # The policies the handlers were declared with (Handlers), checked at start.
        self._declared = handlers.policies if isinstance(handlers, Handlers) else {}
        self._only = None if job_types is None else list(job_types)
        # By code, once the worker has started (see _probe): the handlers it runs, for its types.
        self.handlers: dict[int, Handler] = {}
        self.job_types: list[int] = []
        self.worker_id = self.config.worker_id or make_worker_id()
        self.hooks = hooks or WorkerHooks()
        self.metrics = WorkerMetrics()
        # Set once the worker is connected and claiming (tests and supervisors wait on it).
        self.ready = asyncio.Event()
        # With a conninfo source: PgBouncer < 1.21 in transaction mode does not track
        # prepared statements, so psycopg must not prepare any (prepare_threshold=None).
        self._own_kwargs: dict[str, Any] = {"autocommit": True}
        if not self.config.prepared_statements:
            self._own_kwargs["prepare_threshold"] = None
        for pool in self._pools:
            pool.metrics = self.metrics
        self._state = WorkerState(self.config, self.worker_id, self.hooks, self.metrics)
        self._async_types: set[int] = set()
        self._claimer = Claimer(self._state, self.job_types)
        self._outcomes = Outcomes(self._state, self._async_types)
        self._drain = Drain(self._state, self._claimer)
        self._runner: Runner | None = None
        self._timeouts: dict[int, float] = {}

    # -- what a caller reads -------------------------------------------------

    @property
    def abandoned(self) -> int:
        """Jobs still running when the drain's ``shutdown_timeout`` ran out."""
        return self._drain.abandoned

    @property
    def crashed(self) -> BaseException | None:
        """The defect that stopped the worker, if an internal task failed."""
        return self._state.crashed

    @property
    def lingering_threads(self) -> int:
        """Threads still held by sync handlers that ran past their timeout."""
        return 0 if self._runner is None else self._runner.lingering

    @property
    def exit_code(self) -> int:
        """0 after a drain that accounted for every job, 1 when jobs were abandoned or the
        worker stopped on an internal error."""
        return EXIT_DRAINED if not self.abandoned and self.crashed is None else EXIT_UNFINISHED

    @property
    def asleep(self) -> bool:
        """True while the worker waits for work with nothing pending: its last claim came back
        short, its LISTEN session is marked asleep (``job_worker_idle``) and fenced, and no
        wake-up has come since. Only a NOTIFY, a job falling due or the poll ends it."""
        s = self._state
        return s.marked and not s.notified.is_set() and s.next_claim_at != math.inf

    @property
    def queue(self) -> AsyncJobQueue:
        return self._state.queue

    @property
    def max_prefetch(self) -> int:
        return self._claimer.max_prefetch

    @property
    def job_seconds(self) -> float | None:
        """The running average of how long a runner is busy with one job."""
        return self._claimer.job_seconds

    @job_seconds.setter
    def job_seconds(self, seconds: float | None) -> None:
        self._claimer.job_seconds = seconds

    def _prefetch_now(self) -> int:
        return self._claimer.prefetch_now()

    # -- control -------------------------------------------------------------

    def stop(self, graceful: bool = True) -> None:
        """Ask the worker to stop: drain (default) or stop at once. Safe from any thread."""
        self._state.stop(graceful)

    def run(self) -> WorkerMetrics:
        """Run until SIGTERM/SIGINT (a second signal stops at once), or until :meth:`stop`;
        returns the metrics. In a thread other than the main one there are no signals: the
        thread that started it calls :meth:`stop`."""
        return asyncio.run(with_signals(self._state, self.serve))

    async def serve(self) -> WorkerMetrics:
        """Run until :meth:`stop`; returns the metrics. The coroutine form of :meth:`run`."""
        s, config = self._state, self.config
        s.loop = asyncio.get_running_loop()
        if not await self._probe():
            return self.metrics  # asked to stop while it waited for the migration
        pool: AsyncConnectionPool
        if isinstance(self.source, str):
            pool = AsyncConnectionPool(
                self.source,
                min_size=1,
                max_size=MAX_FLUSHES + 3,  # claimer, flushes, heartbeat and one more
                kwargs=self._own_kwargs,
                timeout=5.0,
                open=False,
                name=f"pyjobq-{self.worker_id}",
            )
            await pool.open(wait=True, timeout=10.0)
        else:
            pool = self.source
        s.queue = AsyncJobQueue(pool)
        executor = None
        if len(self._async_types) < len(self.handlers):
            # One thread per runner, and spares for handlers lingering past their timeout.
            threads = config.concurrency + lingering_limit(config)
            executor = ThreadPoolExecutor(threads, thread_name_prefix="pyjobq-job")
        for processes in self._pools:
            await processes.start()
        self._runner = runner = Runner(
            s, self._claimer, self._outcomes, self.handlers, executor, self._timeouts
        )
        tasks = {
            "claimer": s.spawn(self._claimer.run()),
            "completer": s.spawn(Completer(s, self._outcomes).run()),
            "heartbeat": s.spawn(Heartbeat(s, self._claimer, self._outcomes).run()),
            "reaper": s.spawn(Reaper(s).run()),
        }
        if config.schedules:
            tasks["ticker"] = s.spawn(Ticker(s).run())
        if config.listen:
            if config.listen_dsn is not None:
                conninfo, kwargs = config.listen_dsn, self._own_kwargs
            else:
                conninfo, kwargs = self._conninfo()
            listener = Listener(s, set(self.handlers), conninfo, kwargs)
            tasks["listener"] = s.spawn(listener.run())
        tasks["deadlines"] = s.spawn(runner.watch_deadlines())
        runners = [s.spawn(runner.run()) for _ in range(config.concurrency)]
        log.info(
            "worker started",
            extra=s.extra(job_types=self.job_types, concurrency=config.concurrency),
        )
        self.ready.set()
        try:
            await s.stop_requested.wait()
            await self._drain.run(tasks, runners)
        finally:
            for task in [*tasks.values(), *runners]:
                task.cancel()
            await asyncio.gather(*tasks.values(), *runners, return_exceptions=True)
            if executor is not None:
                executor.shutdown(wait=False, cancel_futures=True)
            for processes in self._pools:
                processes.close()
            if pool is not self.source:
                await pool.close(timeout=1.0)
        log.info("worker stopped", extra=s.extra(metrics=self.metrics.as_dict()))
        return self.metrics

    async def _probe(self) -> bool:
        """Fail fast, with the real error, when the database is unreachable, not migrated,
        newer than this package (:class:`~pyjobq.errors.SchemaTooNew`), lacks a job type
        the handlers are for (``ValueError``; :class:`~pyjobq.errors.InvalidArgument` for a
        name no type has), or has another policy than :class:`Handlers` declare
        (``ValueError``). Resolves the handlers' and ``job_types``' names to codes.

        On a schema older than this package's, it waits for ``pyjobq migrate`` (reading
        ``schema_version()`` every poll interval), so that workers can be started ahead of
        an upgrade; False when asked to stop before it came."""
        conninfo, kwargs = self._conninfo()
        async with await psycopg.AsyncConnection.connect(conninfo, **kwargs) as conn:
            queue = AsyncJobQueue(conn)
            if not await self._migrated(queue):
                return False
            registered = {t.job_type for t in await queue.types()}
            handlers: dict[int, Handler] = {}
            codes: dict[int | str, int] = {}
            for key, handler in self._given.items():
                if isinstance(key, bool) or not isinstance(key, int | str):
                    raise ValueError(f"handler key {key!r} is neither a job type code nor a name")
                code = codes[key] = await queue.type_code(key) if isinstance(key, str) else int(key)
                if code in handlers:
                    raise ValueError(f"job type {code} has two handlers ({key!r} is one)")
                handlers[code] = handler
            policies = await queue.type_policies()
            limits = await queue.type_limits()
            wanted = set(handlers)
            if self._only is not None:
                wanted = {await queue.type_code(t) if isinstance(t, str) else t for t in self._only}
        # A configuration error stops the worker before its first claim; later, every claim
        # would be refused (22023) and retried for ever.
        unknown = sorted(set(handlers) - registered)
        if unknown:
            raise ValueError(f"handlers for job types that are not registered: {unknown}")
        missing = sorted(wanted - set(handlers))
        if missing:
            raise ValueError(f"job_types without a handler: {missing}")
        for key, declared in self._declared.items():
            actual = [p for p in policies if p.job_type == codes.get(key)]
            wrong = policy_mismatches(declared, actual[0]) if actual else []
            if wrong:
                raise ValueError(
                    f"the policy of job type {key!r} did not reach the database: "
                    f"{'; '.join(wrong)} (install it before starting workers: Tasks.install,"
                    " or manage.py migrate)"
                )
        self.handlers = {t: h for t, h in handlers.items() if t in wanted}
        self.job_types = self._claimer.job_types = sorted(self.handlers)
        self._async_types = {t for t, h in self.handlers.items() if is_async(h)}
        self._outcomes.async_types = self._async_types
        self._timeouts = {
            p.job_type: p.timeout_seconds for p in policies if p.job_type in self.handlers
        }
        handled = [t for t in limits if t.job_type in self.handlers]
        self._state.limited = any(t.max_running or t.key_max_running for t in handled)
        self._state.rate_limited = any(t.rate_limit or t.key_rate_limit for t in handled)
        return True

    async def _migrated(self, queue: AsyncJobQueue) -> bool:
        """Wait until the schema is this package's; False when asked to stop first."""
        s = self._state
        waiting = check_schema_version(await queue.schema_version())
        if waiting is None:
            return True
        log.warning(f"{waiting}; waiting for it", extra=s.extra())
        while waiting is not None:
            try:
                await asyncio.wait_for(s.stop_requested.wait(), self.config.poll_interval)
                return False
            except TimeoutError:
                waiting = check_schema_version(await queue.schema_version())
        log.info("the database's schema is now this package's: starting", extra=s.extra())
        return True

    def _conninfo(self) -> tuple[str, dict[str, Any]]:
        if isinstance(self.source, str):
            return self.source, self._own_kwargs
        conninfo, kwargs = self.source.conninfo, self.source.kwargs
        if not isinstance(conninfo, str) or not isinstance(kwargs, dict):
            raise TypeError("the worker needs a pool whose conninfo and kwargs are plain values")
        return conninfo, {**kwargs, "autocommit": True}
