# Generated from pyjobq/aio_admin.py by scripts/async_to_sync.py: edit that file instead.
"""``QueueAdmin``: the synchronous binding of the set-up and administration functions."""

from __future__ import annotations

from datetime import datetime, timedelta

from pyjobq import statements
from pyjobq.params import Payload, jsonb
from pyjobq.queue_calls import Calls
from pyjobq.rows import (
    AuditLine,
    Fired,
    JobTypeInfo,
    MinuteCount,
    RegisteredType,
    Schedule,
    Settings,
    TypeGrant,
    TypeLimit,
    TypePolicy,
    WorkerSeen,
)


class QueueAdmin(Calls):
    """Job types, grants, policies, limits, settings, schedules and activity; see JobQueue."""

    def type_register(self, job_type: int, name: str) -> RegisteredType:
        """``job_type_register``: register an application job type code (1..32767) and its name."""
        return self._one(RegisteredType, statements.TYPE_REGISTER, (job_type, name))

    def type_allocate(self, name: str) -> RegisteredType:
        """``job_type_allocate``: the type registered as ``name``, registered first under the
        smallest free code from 1000 on when there is none (``created``); safe when two
        deploys allocate at once."""
        return self._one(RegisteredType, statements.TYPE_ALLOCATE, (name,))

    def type_grant(self, job_type: int | str, role: str, privilege: str) -> bool:
        """``job_type_grant``: let the members of ``role`` enqueue, work or observe (``privilege``)
        the jobs of ``job_type``; from a type's first grant of a privilege, only the roles
        granted it hold it. True when newly granted."""
        code = self._code(job_type)
        granted: bool = self._scalar(statements.TYPE_GRANT, (code, role, privilege))
        return granted

    def type_revoke(self, job_type: int | str, role: str, privilege: str) -> bool:
        """``job_type_revoke``: take ``privilege`` on ``job_type`` back from ``role``; with no
        grant of it left, the type is open to the group roles again. True when one was removed."""
        code = self._code(job_type)
        revoked: bool = self._scalar(statements.TYPE_REVOKE, (code, role, privilege))
        return revoked

    def type_grants(self) -> list[TypeGrant]:
        """``job_type_grants``: every per-type grant."""
        return self._rows(TypeGrant, statements.TYPE_GRANTS, ())

    def types(self) -> list[JobTypeInfo]:
        """``job_types``: the registered job type codes and names."""
        return self._rows(JobTypeInfo, statements.TYPES, ())

    def type_set_policy(
        self,
        job_type: int | str,
        max_attempts: int | None = None,
        backoff_base_seconds: float | None = None,
        backoff_cap_seconds: float | None = None,
        backoff_jitter: float | None = None,
        timeout_seconds: float | None = None,
    ) -> None:
        """``job_type_set_policy``: the type's retry policy, each ``None`` the default (3 tries,
        2 s doubling to an hour, 25% jitter, a deadline of an hour from the claim). Admins only."""
        params = (
            self._code(job_type),
            max_attempts,
            backoff_base_seconds,
            backoff_cap_seconds,
            backoff_jitter,
            timeout_seconds,
        )
        self._scalar(statements.TYPE_SET_POLICY, params)

    def type_set_history(self, job_type: int | str, keep_done: bool) -> None:
        """``job_type_set_history``: whether the type's DONE jobs go to the history (``True``, the
        default) or end with their delete, unseen by ``get`` and the history from then on; DONE
        jobs with dependants, in a batch, with a dedupe key or watched are kept all the same.
        Admins only."""
        self._scalar(statements.TYPE_SET_HISTORY, (self._code(job_type), keep_done))

    def type_set_snoozes(self, job_type: int | str, max_snoozes: int) -> None:
        """``job_type_set_snoozes``: how many times a job of the type may snooze (0..10000, 1000
        by default); the snooze past that makes it DEAD. Admins only."""
        self._scalar(statements.TYPE_SET_SNOOZES, (self._code(job_type), max_snoozes))

    def type_pause(self, job_type: int | str) -> bool:
        """``job_type_pause``: no claim that starts from now on takes the type's jobs, which stay
        PENDING (enqueues go on); the running ones finish. False when it was paused already.
        Admins only; audited."""
        paused: bool = self._scalar(statements.TYPE_PAUSE, (self._code(job_type),))
        return paused

    def type_resume(self, job_type: int | str) -> bool:
        """``job_type_resume``: claims take the type's jobs again, and the workers asleep are
        told they are due. False when it was not paused. Admins only; audited."""
        resumed: bool = self._scalar(statements.TYPE_RESUME, (self._code(job_type),))
        return resumed

    def type_set_limits(
        self,
        job_type: int | str,
        max_running: int | None = None,
        key_max_running: int | None = None,
        rate_limit: int | None = None,
        rate_period: timedelta | None = None,
        key_rate_limit: int | None = None,
        key_rate_period: timedelta | None = None,
        fair_share: bool = False,
    ) -> None:
        """``job_type_set_limits``, all of the type's limits at once: at most ``max_running`` jobs
        of the type RUNNING at once and ``key_max_running`` per concurrency key; at most
        ``rate_limit`` claims in any ``rate_period`` (default a second) and ``key_rate_limit`` per
        key in any ``key_rate_period``. Every claim keeps them exactly; ``None`` removes a limit.
        With ``fair_share``, jobs enqueued from now on are claimed round robin across their
        concurrency keys. Admins only."""
        code = self._code(job_type)
        params = (
            code,
            max_running,
            key_max_running,
            rate_limit,
            rate_period,
            key_rate_limit,
            key_rate_period,
            fair_share,
        )
        self._scalar(statements.TYPE_SET_LIMITS, params)

    def type_limits(self) -> list[TypeLimit]:
        """``job_type_limits``: the types with a concurrency or rate limit or fair share, their
        limits, and when each type's rate next lets a claim in."""
        return self._rows(TypeLimit, statements.TYPE_LIMITS, ())

    def type_policies(self) -> list[TypePolicy]:
        """``job_type_policies``: every type's retry policy, defaults filled in, and whether it
        keeps its DONE jobs."""
        return self._rows(TypePolicy, statements.TYPE_POLICIES, ())

    def settings(self) -> Settings:
        """``job_settings``: the install's settings."""
        return self._one(Settings, statements.SETTINGS, ())

    def settings_set(
        self, require_lease_token: bool | None = None, audit_retention: timedelta | None = None
    ) -> Settings:
        """``job_settings_set``: change the install's settings (``None`` leaves one as it is);
        ``audit_retention`` from a day to 100 years (``InvalidArgument`` otherwise)."""
        return self._one(Settings, statements.SETTINGS_SET, (require_lease_token, audit_retention))

    def schedule_set(
        self,
        name: str,
        cron: str,
        job_type: int | str,
        payload: Payload | None = None,
        time_zone: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        dedupe_key: str | None = None,
        on_miss: str | None = None,
        grace_seconds: int | None = None,
        start_at: datetime | None = None,
    ) -> datetime:
        """``job_schedule_set``: create or replace the periodic job ``name``: at each tick of
        ``cron`` (five fields or an @alias) in ``time_zone`` (default UTC), a job as
        :meth:`enqueue` takes it. Ticks found more than ``grace_seconds`` (60) late are skipped
        (``on_miss="skip"``) or enqueue one job for all (``"catch_up"``). Ticks count from
        ``start_at`` (default now; a start in the past makes the ticks since due). Returns the
        next tick. Admins only."""
        params = (
            name,
            cron,
            self._code(job_type),
            jsonb(payload),
            time_zone,
            priority,
            max_attempts,
            dedupe_key,
            on_miss,
            grace_seconds,
            start_at,
        )
        next_fire_at: datetime = self._scalar(statements.SCHEDULE_SET, params)
        return next_fire_at

    def schedule_delete(self, name: str) -> bool:
        """``job_schedule_delete``: delete a schedule (its jobs stay); False if there was none."""
        found: bool = self._scalar(statements.SCHEDULE_DELETE, (name,))
        return found

    def schedule_pause(self, name: str) -> bool:
        """``job_schedule_pause``: stop a schedule firing; False if there is none."""
        found: bool = self._scalar(statements.SCHEDULE_PAUSE, (name,))
        return found

    def schedule_resume(self, name: str) -> bool:
        """``job_schedule_resume``: let a paused schedule fire again from its first tick after now
        (ticks while paused are not fired); False if there is none."""
        found: bool = self._scalar(statements.SCHEDULE_RESUME, (name,))
        return found

    def schedules(self) -> list[Schedule]:
        """``job_schedules``: every schedule, its next tick and what it fired."""
        return self._rows(Schedule, statements.SCHEDULES, ())

    def schedule_tick(self) -> list[Fired]:
        """``job_schedule_tick``: enqueue every due tick of every schedule exactly once, however
        many call it at once; one :class:`Fired` per job enqueued."""
        return self._rows(Fired, statements.SCHEDULE_TICK, ())

    def throughput(self, minutes: int | None = None) -> list[MinuteCount]:
        """``job_throughput``: jobs completed, retried and dead in each of the last ``minutes``
        minutes (default 60) per type; minutes with none are left out."""
        return self._rows(MinuteCount, statements.THROUGHPUT, (minutes,))

    def workers(self, within: timedelta | None = None) -> list[WorkerSeen]:
        """``job_workers``: the workers that finished a job within ``within`` (default 5
        minutes) or hold one now."""
        return self._rows(WorkerSeen, statements.WORKERS, (within,))

    def audit(self, before: int | None = None, limit: int | None = None) -> list[AuditLine]:
        """``job_audit``: the audit log of cancels, redrives and prunes, newest first; pass the
        last ``audit_id`` of a page as ``before`` for the next."""
        return self._rows(AuditLine, statements.AUDIT, (before, limit))

    def schema_version(self) -> int:
        """``schema_version``: the version of the pyjobq schema in this database."""
        version: int = self._scalar(statements.SCHEMA_VERSION, ())
        return version
