"""How fast the dashboard's pages answer with a long history of finished jobs in the table.

On one throwaway server it loads ``--jobs`` jobs (default 10M), as a queue that has run for
a while leaves them:

- the history, spread over the time it takes to finish them at about 1,000 jobs a minute
  (10M: about a week), written directly as the schema's owner in batches of 100 jobs that
  share a creation time, their ids drawn by ``pyjobq._new_job_ids`` for that time (the ids
  ``job_enqueue_many`` gives, which ``job_list`` pages along): 70 % type 1, 30 % type 2;
  DONE with a result, except 1 in 2,000 DEAD (3 attempts, a last error) and 1 in 10,000
  CANCELLED. Writing the rows DONE at once costs a fraction of enqueueing, claiming and
  completing them, and leaves the same rows (without the dead versions that vacuum reclaims);
- ``--pending`` PENDING jobs (``job_enqueue_many``) and ``--running`` RUNNING ones
  (``job_claim`` by four workers), made now by the functions themselves;
- the last hour of ``pyjobq.job_stat``: per minute, type, backend and worker, the four
  workers completing about 1,000 jobs a minute with some retries, a dead job now and then
  and the reaper's odd retry, so that the overview's chart and worker list have data;

then ``VACUUM`` and ``ANALYZE`` (what autovacuum would eventually do). It starts
``pyjobq dashboard`` (read-only, as a login role in ``pyjobq_admin``) on a free loopback
port, asks each page ``--warmup`` times, then ``--requests`` times one after another over one
keep-alive connection (``http.client``), and prints per page the median, p95 (nearest rank)
and max milliseconds from sending the request to reading the whole body, against the target
of 200 ms for the overview and the jobs pages. The deep keyset page and the job page use the
job at the middle of the history.

The server runs with ``shared_buffers=1GB`` and room for the load's WAL; the machine's page
cache holds the whole table afterwards, so the figures are for a warm cache. The server and
its data are removed at the end, also when the run is stopped by SIGTERM or Ctrl-C.

``.venv/bin/python bench/dashboard.py [--jobs 10000000] [--requests 50]``
(``--jobs 100000`` takes a minute)
"""

from __future__ import annotations

import argparse
import http.client
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any
from uuid import UUID

import psycopg
from psycopg.conninfo import make_conninfo

from pyjobq.localpg import LocalPostgres
from pyjobq.migrate import migrate

SETTINGS = {"shared_buffers": "1GB", "max_wal_size": "8GB", "checkpoint_timeout": "30min"}
TARGET_MS = 200.0
RATE = 1000  # jobs finished a minute, in the history and in job_stat
BATCH = 100  # jobs per enqueue in the history: one creation time and id prefix each
CHUNK = 5000  # history batches per INSERT (500,000 jobs)
DEAD_EVERY, CANCELLED_EVERY = 2000, 10000
TYPE_SHARES = {1: 0.7, 2: 0.3}
ROLE = "bench_dashboard"
# Generous: about 330 bytes a job in the table, as much again of WAL, and the slack.
DISK_PER_JOB = 1000

Conn = psycopg.Connection[Any]

HISTORY = """
insert into pyjobq.job_history as j
  (job_id, seq, job_type, status, priority, payload, result, attempts, max_attempts, run_after,
   worker_id, run_started_at, last_error, created_at, updated_at, lease_token)
select n.job_id, n.seq, b.job_type, o.status, 100,
       case b.job_type when 1 then jsonb_build_object('doc_id', n.seq, 'index', 'products')
                       else jsonb_build_object('event_id', n.seq, 'topic', 'orders.updated') end,
       case when o.status = 3 then jsonb_build_object('ok', true, 'took_ms', 3 + n.seq %% 97) end,
       case o.status when 4 then 3 when 5 then 0 else 1 end,
       3,
       b.created_at,
       case when o.status <> 5
            then (%(workers)s::text[])[1 + n.seq %% cardinality(%(workers)s::text[])] end,
       case o.status when 4 then b.created_at + interval '6 minutes'
                     when 3 then b.created_at + interval '150 ms' end,
       case o.status
         when 4 then 'TimeoutError: upstream did not answer within 30 s'
                     || E'\\nTraceback (most recent call last):\\n  File "app/tasks.py", line 88,'
                     || ' in handle\\n    resp = client.post(url, json=payload, timeout=30)'
         when 5 then 'cancelled' end,
       b.created_at,
       b.created_at + case o.status when 4 then interval '6 minutes 30 s'
                                    when 3 then interval '400 ms' else interval '2 minutes' end,
       case when o.status <> 5 then gen_random_uuid() end
  from (select g, %(t0)s::timestamptz + g * %(step)s * interval '1 second' as created_at,
               case when g %% 10 < 7 then 1 else 2 end::smallint as job_type,
               least(%(batch)s, %(history)s - g * %(batch)s)::int as jobs
          from generate_series(%(lo)s::int, %(hi)s::int - 1) as g) as b
 cross join lateral pyjobq._new_job_ids(b.created_at, b.jobs) as n
 cross join lateral (select case when n.seq %% %(dead_every)s = %(dead_every)s / 2 then 4
                                 when n.seq %% %(cancelled_every)s = 7 then 5
                                 else 3 end::smallint as status) as o
"""

# The last hour of job_stat: four workers, each on its own backend, finishing about RATE jobs
# a minute between them, shared by type as the history is; the current minute only so far.
JOB_STAT = """
insert into pyjobq.job_stat
  (minute, job_type, backend, worker_id, seen_at, completed, retried, dead)
select m.minute, t.job_type, w.backend, w.worker_id,
       least(m.minute + interval '58 s', now()),
       round(%(rate)s * t.share / cardinality(%(workers)s::text[])
             * least(1, extract(epoch from now() - m.minute) / 60) * (0.8 + 0.4 * random())),
       (random() < 0.3)::int * (1 + floor(random() * 3)),
       (random() < 0.05)::int
  from generate_series(date_trunc('minute', now()) - interval '59 minutes',
                       date_trunc('minute', now()), interval '1 minute') as m(minute)
 cross join unnest(%(types)s::int[], %(shares)s::float8[]) as t(job_type, share)
 cross join unnest(%(workers)s::text[], %(backends)s::int[]) as w(worker_id, backend)
union all
select m.minute, 1, %(reaper)s, '', m.minute + interval '20 s', 0, 1, 0
  from generate_series(date_trunc('minute', now()) - interval '57 minutes',
                       date_trunc('minute', now()) - interval '1 minute',
                       interval '13 minutes') as m(minute)
"""


@dataclass(frozen=True)
class Page:
    label: str
    path: str
    target: bool  # held to TARGET_MS


@dataclass(frozen=True)
class Timing:
    page: Page
    samples: list[float]
    size: int

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def p95(self) -> float:
        ordered = sorted(self.samples)
        return ordered[math.ceil(0.95 * len(ordered)) - 1]


@dataclass(frozen=True)
class Loaded:
    seconds: dict[str, float]
    by_status: dict[int, int]
    heap_bytes: int
    index_bytes: int
    total_bytes: int
    middle_id: UUID
    all_visible: tuple[int, int]  # pages all-visible, pages
    autovacuums: int  # autovacuum's runs on the table during the load


def worker_ids(count: int, first_pid: int) -> list[str]:
    """Ids of the shape ``make_worker_id`` gives (host:pid:random), one per worker process."""
    return [
        f"app-{n % 4 + 1}.internal:{first_pid + 37 * n}:{os.urandom(4).hex()}" for n in range(count)
    ]


def load_history(conn: Conn, history: int, workers: list[str]) -> None:
    """``history`` ended jobs, created over the last history / RATE minutes up to a minute ago."""
    batches = math.ceil(history / BATCH)
    span = timedelta(minutes=history / RATE)
    t0 = datetime.now(UTC) - timedelta(minutes=1) - span
    step = span.total_seconds() / max(batches, 1)
    started = time.monotonic()
    for lo in range(0, batches, CHUNK):
        hi = min(lo + CHUNK, batches)
        conn.execute(
            HISTORY,
            {
                "workers": workers,
                "t0": t0,
                "step": step,
                "batch": BATCH,
                "history": history,
                "lo": lo,
                "hi": hi,
                "dead_every": DEAD_EVERY,
                "cancelled_every": CANCELLED_EVERY,
            },
        )
        done = min(hi * BATCH, history)
        rate = done / (time.monotonic() - started)
        print(f"history: {done:,} of {history:,} jobs, {rate:,.0f} jobs/s", flush=True)


def load_active(conn: Conn, pending: int, running: int, workers: list[str]) -> None:
    """``pending`` + ``running`` jobs enqueued now by ``job_enqueue_many``, then ``running`` of
    them claimed by ``workers`` in turn with ``job_claim``."""
    total = pending + running
    made = 0
    while made < total:
        count = min(1000, total - made)
        job_type = 1 if (made // 1000) % 10 < 7 else 2
        conn.execute(
            "select count(*) from pyjobq.job_enqueue_many(%s::int, array(select"
            " jsonb_build_object('doc_id', g, 'index', 'products') from generate_series(1, %s) g))",
            (job_type, count),
        )
        made += count
    for n, worker in enumerate(workers):
        share = running // len(workers) + (1 if n < running % len(workers) else 0)
        if share:
            conn.execute("select count(*) from pyjobq.job_claim(%s, %s)", (worker, share))


def load_stats(conn: Conn, workers: list[str]) -> None:
    conn.execute(
        JOB_STAT,
        {
            "rate": RATE,
            "types": list(TYPE_SHARES),
            "shares": list(TYPE_SHARES.values()),
            "workers": workers,
            "backends": [40000 + 17 * n for n in range(len(workers))],
            "reaper": 39999,
        },
    )


def load(dsn: str, args: argparse.Namespace) -> Loaded:
    migrate(dsn)
    seconds: dict[str, float] = {}
    history = args.jobs - args.pending - args.running
    if history < 0:
        raise SystemExit("--jobs must be at least --pending + --running")
    current = worker_ids(4, 2101)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"create role {ROLE} login in role pyjobq_admin")
        started = time.monotonic()
        load_history(conn, history, worker_ids(12, 1201) + current)
        seconds["history insert"] = time.monotonic() - started
        started = time.monotonic()
        load_active(conn, args.pending, args.running, current)
        load_stats(conn, current)
        seconds["active jobs and job_stat"] = time.monotonic() - started
        started = time.monotonic()
        conn.execute("vacuum pyjobq.job, pyjobq.job_history")
        seconds["vacuum"] = time.monotonic() - started
        started = time.monotonic()
        conn.execute("analyze pyjobq.job, pyjobq.job_history")
        conn.execute("analyze pyjobq.job_stat")
        seconds["analyze"] = time.monotonic() - started
        conn.execute("checkpoint")
        rows = conn.execute(
            "select status::int, count(*) from pyjobq.job_all group by 1 order by 1"
        )
        by_status: dict[int, int] = {int(status): int(count) for status, count in rows}
        sizes = conn.execute(
            "select sum(pg_relation_size(relid)), sum(pg_indexes_size(relid)),"
            " sum(pg_total_relation_size(relid)) from pg_partition_tree('pyjobq.job_history')"
            " where isleaf or relid = 'pyjobq.job'::regclass"
        ).fetchone()
        assert sizes is not None
        visible = conn.execute(
            "select sum(c.relallvisible), sum(c.relpages), sum(s.autovacuum_count) from pg_class c"
            " join pg_stat_user_tables s on s.relid = c.oid"
            " where c.oid in"
            " (select relid from pg_partition_tree('pyjobq.job_history') where isleaf)"
        ).fetchone()
        assert visible is not None
        # The job created halfway through the history, found along job_pkey.
        middle = conn.execute(
            "select job_id from pyjobq.job_all where job_id >= pyjobq._job_id_floor(%s)"
            " order by job_id limit 1",
            (datetime.now(UTC) - timedelta(minutes=1 + history / RATE / 2),),
        ).fetchone()
        assert middle is not None
    return Loaded(
        seconds=seconds,
        by_status=by_status,
        heap_bytes=sizes[0],
        index_bytes=sizes[1],
        total_bytes=sizes[2],
        middle_id=middle[0],
        all_visible=(visible[0], visible[1]),
        autovacuums=visible[2],
    )


def pages(middle: UUID) -> list[Page]:
    return [
        Page("overview", "/", True),
        Page("overview, live fragment", "/overview/live", True),
        Page("jobs, newest", "/jobs", True),
        Page("jobs, DEAD", "/jobs?status=4", True),
        Page("jobs, DONE of type 1", "/jobs?status=3&type=1", True),
        Page("jobs, keyset page mid-history", f"/jobs?after={middle}", True),
        Page("one job", f"/jobs/{middle}", False),
        Page("metrics", "/metrics", False),
    ]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Client:
    """GETs over one keep-alive connection, opened again if the server closed it."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def get(self, path: str) -> tuple[int, bytes]:
        for attempt in (1, 2):
            try:
                self.conn.request("GET", path, headers={"Accept": "text/html"})
                response = self.conn.getresponse()
                return response.status, response.read()
            except (http.client.RemoteDisconnected, ConnectionError):
                self.conn.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.conn.close()


def start_dashboard(dsn: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    """``pyjobq dashboard`` (the venv's script beside this interpreter), answering /metrics."""
    script = Path(sys.executable).with_name("pyjobq")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "pyjobq"]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*command, "dashboard", "--dsn", dsn, "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the dashboard exited: {log.read_text(errors='replace')}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return process
        except OSError:
            time.sleep(0.1)
    stop(process)
    raise RuntimeError(f"the dashboard did not listen within 60 s: {log.read_text()}")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


def time_pages(port: int, todo: list[Page], warmup: int, requests: int) -> list[Timing]:
    client = Client(port)
    timings = []
    try:
        for page in todo:
            for _ in range(warmup):
                status, body = client.get(page.path)
                if status != 200:
                    raise RuntimeError(f"{page.path}: HTTP {status}: {body[:500]!r}")
            samples = []
            for _ in range(requests):
                started = time.perf_counter()
                status, body = client.get(page.path)
                samples.append((time.perf_counter() - started) * 1000)
                if status != 200:
                    raise RuntimeError(f"{page.path}: HTTP {status}: {body[:500]!r}")
            timings.append(Timing(page, samples, len(body)))
            print(f"{page.path}: median {timings[-1].median:.1f} ms", flush=True)
    finally:
        client.close()
    return timings


def report(args: argparse.Namespace, loaded: Loaded, timings: list[Timing]) -> None:
    names = {1: "PENDING", 2: "RUNNING", 3: "DONE", 4: "DEAD", 5: "CANCELLED"}
    total = sum(loaded.by_status.values())
    print()
    print(
        f"`pyjobq.job_all`: {total:,} jobs, "
        + ", ".join(f"{names[s]} {n:,}" for s, n in sorted(loaded.by_status.items()))
    )
    print(
        f"size: heap {loaded.heap_bytes / 2**30:.2f} GiB, indexes {loaded.index_bytes / 2**30:.2f}"
        f" GiB, pg_total_relation_size {loaded.total_bytes / 2**30:.2f} GiB"
    )
    print("load: " + ", ".join(f"{k} {v:.1f} s" for k, v in loaded.seconds.items()))
    print(
        f"all-visible pages {loaded.all_visible[0]:,} of {loaded.all_visible[1]:,};"
        f" autovacuum ran on the table {loaded.autovacuums} times during the load"
    )
    print()
    print(f"{args.requests} sequential requests per page after {args.warmup} to warm it up:")
    print()
    print("| page | path | median ms | p95 ms | max ms | bytes | under 200 ms (p95) |")
    print("|---|---|---:|---:|---:|---:|---|")
    for t in timings:
        path = t.page.path.replace(str(loaded.middle_id), "<mid>")
        verdict = ("yes" if t.p95 < TARGET_MS else "**no**") if t.page.target else "(no target)"
        print(
            f"| {t.page.label} | `{path}` | {t.median:.1f} | {t.p95:.1f} | {max(t.samples):.1f}"
            f" | {t.size:,} | {verdict} |"
        )


def on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds: the dashboard stopped, the server removed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10_000_000, help="jobs in the table, all told")
    parser.add_argument("--pending", type=int, default=5000, help="PENDING jobs among them")
    parser.add_argument("--running", type=int, default=32, help="RUNNING jobs among them")
    parser.add_argument("--requests", type=int, default=50, help="timed requests per page")
    parser.add_argument("--warmup", type=int, default=3, help="untimed requests per page first")
    parser.add_argument(
        "--tmp",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where the server's directory goes (removed at the end)",
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, on_sigterm)
    need = args.jobs * DISK_PER_JOB
    free = shutil.disk_usage(args.tmp).free
    print(
        f"{args.tmp}: {free / 2**30:.1f} GiB free, about {need / 2**30:.1f} GiB needed", flush=True
    )
    if free < need:
        raise SystemExit(f"not enough room in {args.tmp}: pass --tmp")
    base = Path(tempfile.mkdtemp(prefix="pyjobq-dashboard-bench-", dir=args.tmp))
    try:
        base.chmod(0o755)  # the server runs as the postgres OS user when we are root
        with LocalPostgres(base_dir=base / "pg", settings=SETTINGS) as server:
            loaded = load(server.dsn(), args)
            dsn = make_conninfo(server.dsn(), user=ROLE)
            port = free_port()
            process = start_dashboard(dsn, port, base / "dashboard.log")
            try:
                timings = time_pages(port, pages(loaded.middle_id), args.warmup, args.requests)
            finally:
                stop(process)
        report(args, loaded, timings)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
