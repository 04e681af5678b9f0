"""Periodic jobs in SQL: cron parsed and evaluated in the database, ticks fired exactly once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.sqlhelp import freeze, one, one_row, raises_sqlstate, run_threads, table_snapshot
from tests.workerhelp import wait_for

Conn = psycopg.Connection[Any]

UTC = ZoneInfo("UTC")
BERLIN = ZoneInfo("Europe/Berlin")
START = datetime(2030, 1, 1, tzinfo=UTC)


def tick(conn: Conn, at: datetime) -> list[tuple[Any, ...]]:
    """job_schedule_tick() at ``at``: (name, tick, created, catch_up) per job enqueued."""
    freeze(conn, at)
    return conn.execute(
        "select name, tick, created, catch_up from pyjobq.job_schedule_tick() order by name, tick"
    ).fetchall()


def schedule(conn: Conn, name: str) -> dict[str, Any]:
    cur = conn.execute("select * from pyjobq.job_schedules() where name = %s", (name,))
    row = cur.fetchone()
    assert row is not None
    assert cur.description is not None
    return dict(zip([c.name for c in cur.description], row, strict=True))


@pytest.mark.parametrize(
    ("cron", "field"),
    [
        ("61 * * * *", "minute"),
        ("* 24 * * *", "hour"),
        ("* * 0 * *", "day of month"),
        ("* * * 13 *", "month"),
        ("* * * foo *", "month"),
        ("* * * * 8", "day of week"),
        ("* * * * mon-sun/x", "day of week"),
        ("*/0 * * * *", "minute"),
        ("5-1 * * * *", "minute"),
        ("1-2-3 * * * *", "minute"),
        (", * * * *", "minute"),
    ],
)
def test_a_bad_field_is_refused_by_name_and_changes_nothing(
    conn: Conn, cron: str, field: str
) -> None:
    with pytest.raises(psycopg.Error) as caught:
        conn.execute("select pyjobq.job_schedule_set('s', %s, 1)", (cron,))
    assert caught.value.sqlstate == "22023"
    assert f"p_cron's {field} field" in str(caught.value)
    assert conn.execute("select * from pyjobq.job_schedules()").fetchall() == []


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ({"p_cron": "* * * *"}, "p_cron must have 5 fields"),
        ({"p_cron": "@fortnightly"}, "unknown alias"),
        ({"p_cron": "0 0 30 2 *"}, "matches no date"),
        ({"p_time_zone": "Mars/Olympus"}, "p_time_zone"),
        ({"p_on_miss": "retry"}, "p_on_miss"),
        ({"p_grace_seconds": 0}, "p_grace_seconds"),
        ({"p_priority": -1}, "p_priority"),
        ({"p_max_attempts": 0}, "p_max_attempts"),
        ({"p_name": " "}, "p_name"),
        ({"p_payload": "[1]"}, "p_payload"),
        ({"p_start_at": "2300-01-01 00:00:00+00"}, "p_start_at"),
    ],
)
def test_bad_arguments_get_22023_naming_them(conn: Conn, args: dict[str, Any], named: str) -> None:
    full: dict[str, Any] = {"p_name": "s", "p_cron": "* * * * *", "p_job_type": 1, **args}
    call = ", ".join(f"{k} => %({k})s" for k in full)
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(f"select pyjobq.job_schedule_set({call})", full)
    assert caught.value.sqlstate == "22023", caught.value
    assert named in str(caught.value)


def test_names_lists_steps_and_aliases_mean_what_cron_means(conn: Conn) -> None:
    freeze(conn, START)  # a Tuesday
    cases = {
        "*/20 9-10 * jan tue": ["09:00", "09:20", "09:40", "10:00"],
        "15 6 1,15 * sun": ["01-01 06:15", "01-06 06:15", "01-13 06:15", "01-15 06:15"],
        "@hourly": ["00:00", "01:00", "02:00", "03:00"],
        "0 12 * * 7": ["01-06 12:00", "01-13 12:00", "01-20 12:00", "01-27 12:00"],
        "0 0 29 2 *": ["2032-02-29", "2036-02-29", "2040-02-29", "2044-02-29"],
    }
    for cron, want in cases.items():
        got = []
        at = START - timedelta(microseconds=1)
        for _ in want:
            at = one(
                conn,
                "select pyjobq._cron_next(pyjobq._cron_parse(%s), 'UTC', %s)",
                (cron, at),
            )
            stamp = at.astimezone(UTC)
            got.append(
                stamp.strftime("%Y-%m-%d")
                if "29" in cron
                else stamp.strftime("%m-%d %H:%M" if " " in want[0] else "%H:%M")
            )
        assert got == want, cron


def walk(conn: Conn, name: str, start: datetime, end: datetime, step: timedelta) -> list[str]:
    """Tick every ``step`` from ``start`` to ``end``; the local wall-clock times fired."""
    fired = []
    at = start
    while at <= end:
        for _, tick_at, _, _ in tick(conn, at):
            fired.append(tick_at.astimezone(BERLIN).strftime("%m-%d %H:%M %Z"))
        at += step
    return fired


def test_0230_in_berlin_fires_once_on_both_daylight_saving_days(conn: Conn) -> None:
    """Spring forward (29 March 2026, 02:00 -> 03:00): 02:30 does not exist, and fires at 03:30
    CEST, the instant PostgreSQL maps it to. Fall back (25 October 2026, 03:00 -> 02:00): 02:30
    happens twice, and fires at the first only."""
    begin = datetime(2026, 3, 27, 12, tzinfo=UTC)
    freeze(conn, begin)
    conn.execute(
        "select pyjobq.job_schedule_set('nightly', '30 2 * * *', 1, p_time_zone => 'Europe/Berlin')"
    )
    step = timedelta(minutes=10)
    spring = walk(conn, "nightly", begin, datetime(2026, 3, 31, 12, tzinfo=UTC), step)
    assert spring == ["03-28 02:30 CET", "03-29 03:30 CEST", "03-30 02:30 CEST", "03-31 02:30 CEST"]
    autumn_begin = datetime(2026, 10, 23, 12, tzinfo=UTC)
    freeze(conn, autumn_begin)
    conn.execute(
        "select pyjobq.job_schedule_set('nightly', '30 2 * * *', 1, p_time_zone => 'Europe/Berlin')"
    )
    autumn = walk(conn, "nightly", autumn_begin, datetime(2026, 10, 27, 12, tzinfo=UTC), step)
    assert autumn == ["10-24 02:30 CEST", "10-25 02:30 CEST", "10-26 02:30 CET", "10-27 02:30 CET"]


def test_an_hourly_schedule_follows_real_time_through_both_changes(conn: Conn) -> None:
    begin = datetime(2026, 10, 24, 23, tzinfo=UTC)
    freeze(conn, begin)
    conn.execute(
        "select pyjobq.job_schedule_set('h', '30 * * * *', 1, p_time_zone => 'Europe/Berlin')"
    )
    fired = walk(conn, "h", begin, datetime(2026, 10, 25, 3, tzinfo=UTC), timedelta(minutes=5))
    # 02:30 happens twice, an hour apart in real time: both fire.
    assert fired == ["10-25 01:30 CEST", "10-25 02:30 CEST", "10-25 02:30 CET", "10-25 03:30 CET"]
    begin = datetime(2026, 3, 28, 23, tzinfo=UTC)
    freeze(conn, begin)
    conn.execute(
        "select pyjobq.job_schedule_set('h', '30 * * * *', 1, p_time_zone => 'Europe/Berlin')"
    )
    fired = walk(conn, "h", begin, datetime(2026, 3, 29, 2, 45, tzinfo=UTC), timedelta(minutes=5))
    # 02:30 does not exist: its instant is 03:30 CEST's, fired once.
    assert fired == ["03-29 00:30 CET", "03-29 01:30 CET", "03-29 03:30 CEST", "03-29 04:30 CEST"]


def test_each_due_tick_enqueues_one_job_however_often_it_is_ticked(conn: Conn) -> None:
    freeze(conn, START)
    (name, first) = one_row(
        conn,
        "select * from pyjobq.job_schedule_set('every5', '*/5 * * * *', 2, '{\"report\": 1}',"
        " p_priority => 7, p_max_attempts => 2)",
    )
    assert (name, first) == ("every5", START + timedelta(minutes=5))
    fired = []
    for minute in range(1, 61):
        for _ in range(3):
            fired += tick(conn, START + timedelta(minutes=minute))
    assert [t for _, t, _, _ in fired] == [START + timedelta(minutes=m) for m in range(5, 61, 5)]
    jobs = conn.execute(
        "select job_type, payload, priority, max_attempts, created_at"
        " from pyjobq.job_all order by seq"
    ).fetchall()
    assert [j[:4] for j in jobs] == [(2, {"report": 1}, 7, 2)] * 12
    s = schedule(conn, "every5")
    assert (s["fired"], s["misses"], s["last_fire_at"]) == (12, 0, START + timedelta(minutes=60))
    assert s["next_fire_at"] == START + timedelta(minutes=65)
    assert s["last_job_id"] == one(
        conn, "select job_id from pyjobq.job_all order by seq desc limit 1"
    )


def test_late_ticks_are_skipped_or_caught_up_once(conn: Conn) -> None:
    freeze(conn, START)
    conn.execute("select pyjobq.job_schedule_set('skip', '0 * * * *', 1)")
    conn.execute(
        "select pyjobq.job_schedule_set('catch', '0 * * * *', 1, p_on_miss => 'catch_up',"
        " p_grace_seconds => 600)"
    )
    # Nothing ticked for five hours; the 05:00 tick is 5 minutes old, within both graces.
    got = tick(conn, START + timedelta(hours=5, minutes=5))
    assert got == [
        ("catch", START + timedelta(hours=1), True, True),
        ("catch", START + timedelta(hours=5), True, False),
    ]
    # 'skip' has a 60 s grace: 05:00 is late too, so nothing fires until 06:00.
    assert schedule(conn, "skip")["next_fire_at"] == START + timedelta(hours=6)
    assert (schedule(conn, "skip")["misses"], schedule(conn, "catch")["misses"]) == (1, 1)
    assert [n for n, *_ in tick(conn, START + timedelta(hours=6))] == ["catch", "skip"]


def test_ticks_count_from_the_start_given(conn: Conn) -> None:
    """A start in the past makes the ticks since due at once, under the schedule's grace; a
    start to come holds the first tick until after it."""
    freeze(conn, START + timedelta(seconds=30))
    (_, first) = one_row(
        conn,
        "select * from pyjobq.job_schedule_set('now', '* * * * *', 1, p_start_at => %s)",
        (START - timedelta(seconds=30),),
    )
    assert first == START
    assert tick(conn, START + timedelta(seconds=30)) == [("now", START, True, False)]
    (_, later) = one_row(
        conn,
        "select * from pyjobq.job_schedule_set('later', '0 9 * * *', 1, p_start_at => %s)",
        (START + timedelta(days=3),),
    )
    assert later == START + timedelta(days=3, hours=9)


def test_a_dedupe_key_keeps_one_active_job_per_schedule(conn: Conn) -> None:
    freeze(conn, START)
    conn.execute("select pyjobq.job_schedule_set('sync', '* * * * *', 1, p_dedupe_key => 'sync')")
    first = tick(conn, START + timedelta(minutes=1))
    second = tick(conn, START + timedelta(minutes=2))
    assert [(c, u) for _, _, c, u in first + second] == [(True, False), (False, False)]
    assert one(conn, "select count(*) from pyjobq.job_all") == 1
    assert schedule(conn, "sync")["fired"] == 2


def test_pause_resume_and_delete(conn: Conn) -> None:
    freeze(conn, START)
    conn.execute("select pyjobq.job_schedule_set('p', '*/10 * * * *', 1)")
    assert one(conn, "select pyjobq.job_schedule_pause('p')") is True
    assert tick(conn, START + timedelta(minutes=30)) == []
    # Ticks that passed while paused are not fired: the next is the first after the resume.
    freeze(conn, START + timedelta(minutes=35))
    assert one(conn, "select pyjobq.job_schedule_resume('p')") is True
    assert schedule(conn, "p")["next_fire_at"] == START + timedelta(minutes=40)
    assert len(tick(conn, START + timedelta(minutes=40))) == 1
    assert one(conn, "select pyjobq.job_schedule_delete('p')") is True
    assert one(conn, "select pyjobq.job_schedule_delete('p')") is False
    assert one(conn, "select pyjobq.job_schedule_pause('p')") is False
    assert tick(conn, START + timedelta(minutes=50)) == []
    assert one(conn, "select count(*) from pyjobq.job_all") == 1


def test_only_admins_set_schedules_and_workers_tick_them(
    conn: Conn, login_role: Callable[..., str]
) -> None:
    freeze(conn, START)
    conn.execute("select pyjobq.job_schedule_set('s', '* * * * *', 1)")
    before = conn.execute("select * from pyjobq.job_schedules()").fetchall()
    for group in ("pyjobq_producer", "pyjobq_worker", "pyjobq_observer"):
        with psycopg.connect(login_role(group), autocommit=True) as other:
            for call in (
                "select pyjobq.job_schedule_set('s', '0 0 * * *', 1)",
                "select pyjobq.job_schedule_delete('s')",
                "select pyjobq.job_schedule_pause('s')",
                "select * from pyjobq.job_schedules()",
            ):
                with raises_sqlstate("42501"):
                    other.execute(call)
            if group != "pyjobq_worker":
                with raises_sqlstate("42501"):
                    other.execute("select * from pyjobq.job_schedule_tick()")
    assert conn.execute("select * from pyjobq.job_schedules()").fetchall() == before
    # A worker ticks on the real clock (only the owner may set the test clock): the
    # schedule was set at 2030, so its first tick is long past and skipped by the grace.
    with psycopg.connect(login_role("pyjobq_worker"), autocommit=True) as worker:
        assert worker.execute("select * from pyjobq.job_schedule_tick()").fetchall() == []
    assert table_snapshot(conn) == []


def test_six_tickers_and_killed_ones_fire_every_tick_exactly_once(
    conn: Conn, make_conn: Callable[[], Conn]
) -> None:
    """Six sessions tick in a loop while a driver moves a shared test clock over three hours,
    minute by minute, once the tickers have fired what is due, and other sessions are killed
    holding a tick's transaction open. The tickers fire every due tick of every schedule, each
    as one job, none lost, none twice."""
    minutes = 180
    conn.execute("create table public.test_clock (at timestamptz not null)")
    conn.execute("insert into public.test_clock values (%s)", (START,))
    freeze(conn, START)
    crons = {"every": "* * * * *", "seven": "*/7 * * * *", "half": "0,30 * * * *"}
    for name, cron in crons.items():
        conn.execute(
            "select pyjobq.job_schedule_set(%s, %s, 1, %s, p_grace_seconds => 86400)",
            (name, cron, Jsonb({"s": name})),
        )

    def due(through: int) -> dict[str, int]:
        """The ticks of each schedule due in the first ``through`` minutes."""
        return {
            "every": through,
            "seven": len([m for m in range(1, through + 1) if (m % 60) % 7 == 0]),
            "half": through // 30,
        }

    done = threading.Event()

    def ticker() -> None:
        with make_conn() as c:
            while not done.is_set():
                c.execute(
                    "select set_config('pyjobq.fake_now', (select at::text from public.test_clock),"
                    " false)"
                )
                c.execute("select count(*) from pyjobq.job_schedule_tick()")

    def driver() -> None:
        try:
            with make_conn() as c, make_conn() as killer:
                for minute in range(1, minutes + 1):
                    c.execute(
                        "update public.test_clock set at = %s",
                        (START + timedelta(minutes=minute),),
                    )
                    if minute % 20 == 0:
                        # A ticker that dies inside its transaction: its enqueues roll back.
                        victim = make_conn()
                        victim.execute("begin")
                        freeze(victim, START + timedelta(minutes=minute))
                        victim.execute("select count(*) from pyjobq.job_schedule_tick()")
                        killer.execute(
                            "select pg_terminate_backend(%s)", (victim.info.backend_pid,)
                        )
                    # The clock moves on once the tickers have fired what is due: at least
                    # that many jobs (more would be a tick fired twice, counted below).
                    wanted = sum(due(minute).values())

                    def fired(wanted: int = wanted) -> bool:
                        return bool(one(c, "select count(*) from pyjobq.job_all") >= wanted)

                    wait_for(fired, f"the tickers to fire minute {minute}'s ticks")
        finally:
            done.set()

    run_threads([ticker] * 6 + [driver])
    end = START + timedelta(minutes=minutes)
    assert tick(conn, end) == [], "the tickers fired every tick"
    want = due(minutes)
    per_schedule = dict(
        conn.execute("select payload->>'s', count(*) from pyjobq.job_all group by 1").fetchall()
    )
    assert per_schedule == want
    fired = dict(conn.execute("select name, fired from pyjobq.job_schedules()").fetchall())
    assert fired == want
    assert one(conn, "select count(*) from pyjobq.job_all") == sum(want.values())
