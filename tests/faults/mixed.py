"""The queue's features under a fault: one workload with a per-key limit, a rate limit,
schedules, dependencies and batches, while every session of the database is terminated again
and again (workers, producer, tickers alike).

Triggers on ``pyjobq.job`` record each run of a job in ``fault_runs``, on the database's clock
and in the transactions that start and end it (the claim's; the completion's, retry's or
reaper's), so that a recorded run lies within the time its job counted as RUNNING for every
claim, and a rolled-back claim leaves no run. More recorded runs of a key at once than its limit
would be the limit exceeded; more claims of the rated type within a period than its rate (by the
claim's time, which the rate windows count) would be the rate exceeded.

Schedules tick on a test clock that a driver moves on a minute every ``MINUTE_EVERY`` seconds,
starting hours in the past (the jobs they enqueue are due at once), through two ticking sessions
that die with the rest: every due tick must fire as exactly one job.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from pyjobq.worker import Worker
from tests.faults.harness import EFFECTS, MAX_ATTEMPTS, Recorder, assert_sound, drained, verify
from tests.faults.scenarios import connect_retrying, finished_on, terminate_other_sessions
from tests.sqlhelp import one
from tests.workerhelp import Running, wait_for

Conn = psycopg.Connection[Any]
Figures = dict[str, Any]

PLAIN, KEYED, RATED, CALLBACK = 1, 3, 4, 5
KEYS, KEY_LIMIT = 5, 2
RATE, RATE_PERIOD = 20, timedelta(seconds=1)
CRONS = {"every": "* * * * *", "seven": "*/7 * * * *", "half": "0,30 * * * *"}
MINUTE_EVERY = 0.05
# The test clock starts three hours ago and stops before it catches up with real time: the
# jobs its ticks enqueue are due at once.
MOST_MINUTES, LEAST_MINUTES = 150, 90
KILLS = 8

RUNS = """
create table fault_runs (
  run_id bigserial primary key,
  job_id uuid not null,
  attempt int not null,
  job_type int not null,
  concurrency_key text,
  claimed_at timestamptz not null,
  started_at timestamptz not null default clock_timestamp(),
  ended_at timestamptz
);
create index on fault_runs (job_id) where ended_at is null;
create function fault_run_started() returns trigger language plpgsql as $$
begin
  insert into public.fault_runs (job_id, attempt, job_type, concurrency_key, claimed_at)
  values (new.job_id, new.attempts, new.job_type, new.concurrency_key, new.run_started_at);
  return null;
end $$;
create function fault_run_ended() returns trigger language plpgsql as $$
begin
  update public.fault_runs set ended_at = clock_timestamp()
   where job_id = old.job_id and ended_at is null;
  return null;
end $$;
create trigger fault_run_started after update on pyjobq.job for each row
  when (new.status = 2 and old.status <> 2) execute function fault_run_started();
create trigger fault_run_ended after update on pyjobq.job for each row
  when (old.status = 2 and new.status <> 2) execute function fault_run_ended();
create trigger fault_run_ended_by_delete after delete on pyjobq.job for each row
  when (old.status = 2) execute function fault_run_ended();
create table fault_clock (at timestamptz not null);
"""

# The most recorded runs at once, of each key of the keyed type.
MOST_AT_ONCE_PER_KEY = """
with events as (
  select concurrency_key, started_at as at, 1 as step from fault_runs where job_type = %(t)s
  union all
  select concurrency_key, ended_at, -1 from fault_runs where job_type = %(t)s
)
select coalesce(max(running), 0)
  from (select sum(step) over (partition by concurrency_key order by at, step
                               rows unbounded preceding) as running
          from events) r
"""

# The most claims of the rated type within one period ending at a claim's time, counted as
# the rate windows count them: the claims at p_at and in the period before, not at its start.
MOST_IN_A_PERIOD = """
select coalesce(max((select count(*) from fault_runs b
                      where b.job_type = a.job_type
                        and b.claimed_at > a.claimed_at - %(period)s
                        and b.claimed_at <= a.claimed_at)), 0)
  from fault_runs a
 where a.job_type = %(t)s
"""

# Edges whose child started a run before its parent's last run ended.
EARLY_CHILDREN = """
select count(*)
  from pyjobq.job_edge e
 where (select min(c.started_at) from fault_runs c where c.job_id = e.child_id)
       < (select max(p.ended_at) from fault_runs p where p.job_id = e.parent_id)
"""

CALLBACKS = Jsonb(
    {
        "success": {"job_type": CALLBACK, "payload": {"on": "success"}},
        "finish": {"job_type": CALLBACK, "payload": {"on": "finish"}},
    }
)


class Session:
    """A session that reconnects after being terminated, for a loop that retries its step."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.conn: Conn | None = None
        self.errors = 0

    def run(self, step: Callable[[Conn], Any]) -> Any:
        """Run ``step`` on the session until it returns: a committed step that lost its answer
        runs again, which each caller below allows."""
        while True:
            if self.conn is None or self.conn.closed:
                self.conn = connect_retrying(self.dsn)
            try:
                return step(self.conn)
            except psycopg.OperationalError:
                self.errors += 1
                self.conn.close()

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def due_ticks(minutes: int) -> dict[str, int]:
    """The ticks of each schedule due in the ``minutes`` after a whole hour."""
    return {
        "every": minutes,
        "seven": len([m for m in range(1, minutes + 1) if (m % 60) % 7 == 0]),
        "half": minutes // 30,
    }


class Producer:
    """Rounds of every kind of enqueue: keyed jobs, rated jobs, a graph of five (one parent,
    three children, one grandchild), a child of the previous round's parent, and a batch of
    five closed at once. Each step is retried until it is acknowledged."""

    def __init__(self, dsn: str, rounds: int) -> None:
        self.session = Session(dsn)
        self.rounds = rounds
        self.acknowledged: list[UUID] = []
        self.batches: list[UUID] = []
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _ids(self, query: str, params: tuple[Any, ...]) -> list[UUID]:
        rows = self.session.run(lambda c: c.execute(query, params).fetchall())
        ids = [r[0] for r in rows]
        self.acknowledged += ids
        return ids

    def _main(self) -> None:
        parent: UUID | None = None
        many = (
            "select job_id from pyjobq.job_enqueue_many(%s, array_fill('{}'::jsonb, array[%s]),"
            " p_max_attempts => %s, p_concurrency_keys => %s, p_depends_on => %s::jsonb[],"
            " p_batch_id => %s) order by ord"
        )
        for n in range(self.rounds):
            keys = [f"k{(n + i) % KEYS}" for i in range(10)]
            self._ids(many, (KEYED, 10, MAX_ATTEMPTS, keys, None, None))
            self._ids(many, (RATED, 5, MAX_ATTEMPTS, None, None, None))
            graph = [None, Jsonb([1]), Jsonb([1]), Jsonb([1]), Jsonb([2, 3, 4])]
            ids = self._ids(many, (PLAIN, 5, MAX_ATTEMPTS, None, graph, None))
            if parent is not None:
                self._ids(
                    "select job_id from pyjobq.job_enqueue(%s, '{}', p_max_attempts => %s,"
                    " p_depends_on => array[%s]::uuid[])",
                    (PLAIN, MAX_ATTEMPTS, parent),
                )
            parent = ids[0]
            batch = self.session.run(
                lambda c: c.execute("select pyjobq.job_batch_open(%s)", (CALLBACKS,)).fetchone()
            )[0]
            self.batches.append(batch)
            self._ids(many, (PLAIN, 5, MAX_ATTEMPTS, None, None, batch))
            self.session.run(functools.partial(close_if_open, batch=batch))
            time.sleep(0.02)
        self.session.close()


def close_if_open(conn: Conn, batch: UUID) -> None:
    """Close ``batch`` unless a close of it already committed."""
    with conn.transaction():
        state = conn.execute("select state from pyjobq.job_batch_get(%s)", (batch,)).fetchone()
        if state is not None and state[0] == "open":
            conn.execute("select pyjobq.job_batch_close(%s)", (batch,))


def set_clock(conn: Conn, at: datetime) -> None:
    conn.execute("update fault_clock set at = %s", (at,))


class Clock:
    """A driver moving ``fault_clock`` on a minute every MINUTE_EVERY seconds, and two sessions
    ticking the schedules at that clock, all of them reconnecting when terminated."""

    def __init__(self, dsn: str, start: datetime) -> None:
        self.dsn = dsn
        self.start = start
        self.minutes = 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._drive, daemon=True)] + [
            threading.Thread(target=self._tick, daemon=True) for _ in range(2)
        ]

    def _drive(self) -> None:
        session = Session(self.dsn)
        while not self.stop.is_set() and self.minutes < MOST_MINUTES:
            at = self.start + timedelta(minutes=self.minutes + 1)
            session.run(functools.partial(set_clock, at=at))
            self.minutes += 1
            time.sleep(MINUTE_EVERY)
        session.close()

    def _tick(self) -> None:
        session = Session(self.dsn)

        def tick(c: Conn) -> None:
            c.execute(
                "select set_config('pyjobq.fake_now', (select at::text from fault_clock), false)"
            )
            c.execute("select count(*) from pyjobq.job_schedule_tick()")

        while not self.stop.is_set():
            session.run(tick)
            time.sleep(0.01)
        session.close()


@contextmanager
def running(dsn: str, workers: int, concurrency: int) -> Iterator[None]:
    """Workers serving every type of the workload, each run recorded in fault_effects; the
    schedules are left to the tickers of the test clock."""
    with ExitStack() as stack:
        for _ in range(workers):
            recorder = Recorder(dsn, concurrency).open()
            stack.callback(recorder.close)
            handlers = dict.fromkeys((PLAIN, KEYED, RATED, CALLBACK), recorder)
            worker = Worker(
                dsn,
                handlers,
                concurrency=concurrency,
                lease_seconds=3,
                reap_interval=0.5,
                poll_interval=0.2,
                shutdown_timeout=5.0,
                schedules=False,
            )
            stack.callback(Running(worker).start().stop)
        yield


def prepare(conn: Conn) -> datetime:
    """The tables, triggers, limits and schedules of the workload; returns the test clock's
    start, a whole hour three hours ago."""
    conn.execute(EFFECTS)
    conn.execute(RUNS)
    conn.execute("select pyjobq.job_history_maintain()")
    for job_type, name in ((KEYED, "KEYED"), (RATED, "RATED"), (CALLBACK, "CALLBACK")):
        conn.execute("select pyjobq.job_type_register(%s, %s)", (job_type, name))
    conn.execute(
        "select pyjobq.job_type_set_limits(%s, p_key_max_running => %s)", (KEYED, KEY_LIMIT)
    )
    conn.execute(
        "select pyjobq.job_type_set_limits(%s, p_rate_limit => %s, p_rate_period => %s)",
        (RATED, RATE, RATE_PERIOD),
    )
    start: datetime = one(conn, "select date_trunc('hour', now()) - interval '3 hours'")
    conn.execute("insert into fault_clock values (%s)", (start,))
    conn.execute("select set_config('pyjobq.fake_now', %s, false)", (start.isoformat(),))
    for name, cron in CRONS.items():
        conn.execute(
            "select pyjobq.job_schedule_set(%s, %s, %s, %s, p_grace_seconds => 86400,"
            " p_max_attempts => %s)",
            (name, cron, PLAIN, Jsonb({"s": name}), MAX_ATTEMPTS),
        )
    conn.execute("reset pyjobq.fake_now")
    return start


def features_under_backend_kills(dsn: str, scale: float = 1.0) -> Figures:
    """The mixed workload while every other session is terminated KILLS times, spread over
    the drain; then the clock stops, the last due ticks fire, and the queue drains."""
    rounds = int(30 * scale)
    with connect_retrying(dsn) as conn:
        start = prepare(conn)
        kills = 0
        clock = Clock(dsn, start)
        producer = Producer(dsn, rounds)
        with running(dsn, workers=2, concurrency=4):
            for t in (*clock.threads, producer.thread):
                t.start()
            expected = rounds * 26
            for k in range(1, KILLS + 1):

                def enough(k: int = k) -> bool:
                    return finished_on(conn) >= k * expected // (KILLS + 2)

                wait_for(enough, f"{k}/{KILLS + 2} of the jobs to finish", 120)
                kills += terminate_other_sessions(conn)
            producer.thread.join(120)
            assert not producer.thread.is_alive(), "the producer finished its rounds"
            wait_for(lambda: clock.minutes >= LEAST_MINUTES, "the test clock to pass its hours")
            clock.stop.set()
            for t in clock.threads:
                t.join(30)
            # Whatever a ticker had yet to fire when the clock stopped fires now, once.
            end = start + timedelta(minutes=clock.minutes)
            conn.execute("select set_config('pyjobq.fake_now', %s, false)", (end.isoformat(),))
            conn.execute("select count(*) from pyjobq.job_schedule_tick()")
            conn.execute("reset pyjobq.fake_now")
            for batch in producer.batches:
                close_if_open(conn, batch)
            wait_for(lambda: drained(dsn, producer.acknowledged), "the queue to drain", 120)
        figures = verify(dsn, producer.acknowledged)
        period = {"t": RATED, "period": RATE_PERIOD}
        per_schedule = dict(
            conn.execute(
                "select payload ->> 's', count(*) from pyjobq.job_all"
                " where payload ? 's' group by 1"
            ).fetchall()
        )
        callbacks = conn.execute(
            "select b.id, count(*) filter (where j.payload ->> 'on' = 'success'),"
            " count(*) filter (where j.payload ->> 'on' = 'finish')"
            " from unnest(%s::uuid[]) b(id)"
            " left join pyjobq.job_all j on j.job_type = %s"
            "  and j.payload -> 'batch' ->> 'batch_id' = b.id::text"
            " group by b.id",
            (producer.batches, CALLBACK),
        ).fetchall()
        figures.update(
            scenario=f"limits, a rate, schedules, dependencies and batches; backends terminated"
            f" {KILLS} times",
            backends_killed=kills,
            producer_reconnects=producer.session.errors,
            runs=one(conn, "select count(*) from fault_runs"),
            runs_not_ended=one(conn, "select count(*) from fault_runs where ended_at is null"),
            most_runs_of_a_key_at_once=one(conn, MOST_AT_ONCE_PER_KEY, {"t": KEYED}),
            key_limit=KEY_LIMIT,
            most_claims_in_a_rate_period=one(conn, MOST_IN_A_PERIOD, period),
            rate_limit=RATE,
            edges=one(conn, "select count(*) from pyjobq.job_edge"),
            children_started_before_a_parent_ended=one(conn, EARLY_CHILDREN),
            clock_minutes=clock.minutes,
            ticks_fired=per_schedule,
            ticks_due=due_ticks(clock.minutes),
            batches=len(producer.batches),
            batches_with_callbacks_other_than_one_each=sum(
                1 for _, s, f in callbacks if (s, f) != (1, 1)
            ),
        )
    return figures


def assert_held(figures: Figures) -> None:
    """The verdict: harness.assert_sound's, and no limit exceeded, every tick and callback
    once, no child before its parents."""
    assert_sound(figures)
    assert figures["runs_not_ended"] == 0, figures
    assert 0 < figures["most_runs_of_a_key_at_once"] <= KEY_LIMIT, figures
    assert 0 < figures["most_claims_in_a_rate_period"] <= RATE, figures
    assert figures["edges"] > 0, figures
    assert figures["children_started_before_a_parent_ended"] == 0, figures
    assert figures["ticks_fired"] == figures["ticks_due"], figures
    assert figures["clock_minutes"] > 60, figures
    assert figures["batches_with_callbacks_other_than_one_each"] == 0, figures
