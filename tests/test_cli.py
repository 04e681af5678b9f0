"""The pyjobq command end to end, as a subprocess: results, messages and exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pyjobq import SCHEMA_VERSION
from tests.sqlhelp import one
from tests.webhelp import free_port, status_of
from tests.workerhelp import ROOT, prepare, statuses, wait_for

Conn = psycopg.Connection[Any]


def pyjobq(
    *args: str,
    stdin: str | None = None,
    dsn: str | None = None,
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYJOBQ_DSN", "DATABASE_URL")} | (
        env or {}
    )
    if dsn is not None:
        env["PYJOBQ_DSN"] = dsn
    return subprocess.run(
        [sys.executable, "-m", "pyjobq", *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def jobs(conn: Conn) -> int:
    row = conn.execute("select count(*) from pyjobq.job_all").fetchone()
    return 0 if row is None else int(row[0])


def test_enqueue_one_and_many_then_counts_and_types(dsn: str, conn: Conn) -> None:
    one = pyjobq("enqueue", "SEARCH", '{"q": "x"}', "--priority", "5", dsn=dsn)
    assert one.returncode == 0, one.stderr
    assert one.stdout.endswith("\tcreated\n")
    lines = '{"n": 1}\n\n{"payload": {"n": 2}, "dedupe_key": "k"}\n{"n": 3}\n'
    bulk = pyjobq("enqueue", "2", "-", stdin=lines, dsn=dsn)
    assert bulk.returncode == 0, bulk.stderr
    assert len(bulk.stdout.splitlines()) == 3
    assert conn.execute("select priority from pyjobq.job_all where job_type = 1").fetchone() == (5,)
    counts = pyjobq("counts", "--dsn", dsn)
    assert counts.returncode == 0, counts.stderr
    assert [line.split()[:4] for line in counts.stdout.splitlines() if "PENDING" in line] == [
        ["1", "SEARCH", "PENDING", "1"],
        ["2", "OUTBOX", "PENDING", "3"],
    ]
    registered = pyjobq("types", "register", "42", "REPORT", dsn=dsn)
    assert registered.returncode == 0, registered.stderr
    assert "42\tREPORT" in pyjobq("types", dsn=dsn).stdout


@pytest.mark.parametrize(
    ("args", "stdin"),
    [
        (["enqueue", "SEARCH", "{not json"], None),
        (["enqueue", "SEARCH", "[1, 2]"], None),
        (["enqueue", "SEARCH", "-"], '{"n": 1}\nnope\n'),
        (["enqueue", "NO_SUCH_TYPE", "{}"], None),
        (["enqueue", "999", "{}"], None),
        (["enqueue", "SEARCH", "{}", "--max-attempts", "0"], None),
        (["enqueue", "SEARCH", "{}", "--delay", "soon"], None),
        (["redrive", "not-a-uuid"], None),
        (["prune", "--older-than", "-1d"], None),
        (["worker", "no_such_module:HANDLERS"], None),
        (["types", "register", "1", "OTHER"], None),
    ],
)
def test_bad_input_is_a_message_and_an_exit_code_and_changes_nothing(
    dsn: str, conn: Conn, args: list[str], stdin: str | None
) -> None:
    result = pyjobq(*args, stdin=stdin, dsn=dsn)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert result.stderr.strip()
    assert jobs(conn) == 0
    assert [r[0] for r in conn.execute("select name from pyjobq.job_type order by 1")] == [
        "OUTBOX",
        "SEARCH",
    ]


def test_unreachable_or_missing_database_is_a_clear_error() -> None:
    missing = pyjobq("counts")
    assert missing.returncode == 2
    assert "--dsn" in missing.stderr
    down = pyjobq("counts", "--dsn", "host=127.0.0.1 port=1 connect_timeout=2")
    assert down.returncode == 3
    assert "cannot use the database" in down.stderr
    assert "Traceback" not in down.stderr


def test_unmigrated_database_says_to_migrate(pg_server: Any, conn: Conn) -> None:
    conn.execute("create database pyjobq_cli_empty")
    try:
        empty = pg_server.dsn("pyjobq_cli_empty")
        result = pyjobq("counts", dsn=empty)
        assert result.returncode == 1
        assert "pyjobq migrate" in result.stderr
        migrated = pyjobq("migrate", dsn=empty)
        assert migrated.returncode == 0, migrated.stderr
        assert pyjobq("counts", dsn=empty).returncode == 0
    finally:
        conn.execute("drop database pyjobq_cli_empty with (force)")


def worker_until(
    done: Callable[[], bool], what: str, *args: str, dsn: str, cwd: Path = ROOT
) -> str:
    """Run ``pyjobq worker ARGS`` until ``done()``, then SIGTERM it; its stderr once it
    exited 0 (a drain that was asked for)."""
    env = {**os.environ, "PYJOBQ_DSN": dsn, "PYJOBQ_TEST_DSN": dsn, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyjobq", "worker", *args],
        cwd=cwd,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(done, what)
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    return err


def test_worker_command_runs_jobs_and_stops_on_sigterm(dsn: str, conn: Conn) -> None:
    prepare(conn)
    pyjobq("enqueue", "SEARCH", "-", stdin='{"n": 1}\n{"n": 2}\n', dsn=dsn)
    err = worker_until(
        lambda: statuses(conn) == {3: 2},
        "both jobs DONE",
        "tests.worker_handlers:HANDLERS",
        dsn=dsn,
    )
    assert "draining" in err


BAD_HANDLERS = [
    ("def broken(:\n", "SyntaxError"),
    ("raise RuntimeError('no configuration')\n", "RuntimeError: no configuration"),
    ("import no_such_module_here\n", "ModuleNotFoundError"),
    ("HANDLERS = {1: 42}\n", "not callable"),
    ("HANDLERS = {999: print}\n", "not registered"),
    ("HANDLERS = {'NO_SUCH_TYPE': print}\n", "NO_SUCH_TYPE is not the name of a registered"),
    ("HANDLERS = {1.5: print}\n", "neither a job type code nor a job type name"),
    ("HANDLERS = [print]\n", "not a non-empty mapping"),
    ("def HANDLERS():\n    raise KeyError('setting')\n", "KeyError"),
]


@pytest.mark.parametrize(("module", "says"), BAD_HANDLERS)
def test_worker_refuses_bad_handlers_in_one_line_before_claiming(
    dsn: str, conn: Conn, tmp_path: Path, module: str, says: str
) -> None:
    conn.execute("select pyjobq.job_enqueue(1, '{}')")
    (tmp_path / "handlers_under_test.py").write_text(module)
    result = pyjobq("worker", "handlers_under_test:HANDLERS", dsn=dsn, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert says in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert statuses(conn) == {1: 1}  # nothing was claimed


def test_worker_refuses_an_unknown_log_level(dsn: str) -> None:
    result = pyjobq("worker", "tests.worker_handlers:HANDLERS", "--log-level", "verbose", dsn=dsn)
    assert result.returncode == 2
    assert "--log-level" in result.stderr
    assert "Traceback" not in result.stderr


def test_worker_takes_handlers_and_types_by_registered_name(
    dsn: str, conn: Conn, tmp_path: Path
) -> None:
    prepare(conn)
    conn.execute("select pyjobq.job_enqueue(1, '{}'), pyjobq.job_enqueue(2, '{}')")
    (tmp_path / "named.py").write_text(
        "from tests.worker_handlers import record\n"
        "HANDLERS = {'SEARCH': record, 'outbox': record}\n"
    )
    worker_until(
        lambda: statuses(conn) == {1: 1, 3: 1},
        "the SEARCH job DONE",
        *("named:HANDLERS", "--types", "SEARCH"),
        dsn=dsn,
        cwd=tmp_path,
    )
    done = conn.execute("select job_type from pyjobq.job_all where status = 3").fetchall()
    assert done == [(1,)]


def test_help_everywhere() -> None:
    for command in ["", "migrate", "enqueue", "worker", "counts", "show", "reap", "redrive",
                    "prune", "types", "demo", "dashboard", "batch", "batch open"]:  # fmt: skip
        result = pyjobq(*command.split(), "--help")
        assert result.returncode == 0, command
        assert "Usage:" in result.stdout


@pytest.mark.slow
def test_demo_completes_and_verifies_on_a_throwaway_server() -> None:
    # The environment's databases are never the demo's: only --dsn points it elsewhere.
    elsewhere = "host=127.0.0.1 port=1 dbname=production"
    result = pyjobq(
        "demo", "--jobs", "300", "--workers", "2", "--concurrency", "8",
        env={"PYJOBQ_DSN": elsewhere, "DATABASE_URL": elsewhere},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "demo verified" in result.stdout
    lines = result.stdout.splitlines()
    pipeline = "4 parts -> merge, batch of 5: finished, 5 DONE, success callback enqueued"
    assert f"pipeline          {pipeline}" in lines
    assert "  ok   the merge ran after its 4 parts ended DONE" in lines
    assert "  ok   the batch finished and its callback was enqueued once" in lines
    assert "approval          waited (waiting -> done), approved by the demo" in lines
    checkpointed = "10 steps, attempt 2: steps 1-4 recorded by attempt 1, 5-10 by attempt 2"
    assert f"checkpointed job  {checkpointed}" in lines
    assert (
        "  ok   the checkpointed job's 10 steps each wrote once; after its worker's SIGKILL,"
        " the next attempt reused the recorded steps"
    ) in lines


@pytest.mark.slow
def test_the_demo_can_leave_its_dashboard_running(tmp_path: Path) -> None:
    port = free_port()
    command = [sys.executable, "-m", "pyjobq", "demo", "--jobs", "200", "--workers", "2",
               "--concurrency", "8", "--no-kill", "--dashboard", str(port)]  # fmt: skip
    log = (tmp_path / "demo.log").open("w")
    demo = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(
            lambda: demo.poll() is not None or status_of(f"http://127.0.0.1:{port}/") == 200,
            "the demo's dashboard",
            patience=180,
        )
        assert demo.poll() is None, (tmp_path / "demo.log").read_text()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as answer:
            assert b'status="DONE"' in answer.read()
    finally:
        demo.send_signal(signal.SIGINT)
        code = demo.wait(timeout=60)
    output = (tmp_path / "demo.log").read_text()
    assert code == 0, output
    assert "demo verified" in output
    assert "Traceback" not in output


def set_schema_version(conn: Conn, version: int) -> None:
    conn.execute(
        "create or replace function pyjobq.schema_version() returns int language sql immutable"
        f" set search_path = pg_catalog, pyjobq, pg_temp as $$ select {version} $$"
    )


def test_a_database_newer_than_the_package_is_refused(dsn: str, conn: Conn) -> None:
    conn.execute("select pyjobq.job_enqueue(1, '{}')")
    set_schema_version(conn, SCHEMA_VERSION + 1)
    for command in (["counts"], ["worker", "tests.worker_handlers:HANDLERS"]):
        result = pyjobq(*command, dsn=dsn)
        assert result.returncode == 1, result.stderr
        assert f"schema {SCHEMA_VERSION + 1}, newer than the {SCHEMA_VERSION}" in result.stderr
        assert "Traceback" not in result.stderr
    assert statuses(conn) == {1: 1}  # the worker claimed nothing


def test_a_database_older_than_the_package_is_a_warning(dsn: str, conn: Conn) -> None:
    set_schema_version(conn, SCHEMA_VERSION - 1)
    result = pyjobq("counts", dsn=dsn)
    assert result.returncode == 0, result.stderr
    assert "warning" in result.stderr
    assert "pyjobq migrate" in result.stderr


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_worker_log_lines_name_the_job_and_its_error(
    dsn: str, conn: Conn, tmp_path: Path, log_format: str
) -> None:
    job_id = one(conn, "select job_id from pyjobq.job_enqueue(1, '{}', p_max_attempts => 1)")
    (tmp_path / "failing.py").write_text(
        "def fail(job):\n    raise ValueError('no such index')\nHANDLERS = {'SEARCH': fail}\n"
    )
    err = worker_until(
        lambda: statuses(conn) == {4: 1},
        "the job DEAD",
        *("failing:HANDLERS", "--log-format", log_format),
        dsn=dsn,
        cwd=tmp_path,
    )
    failed = [line for line in err.splitlines() if f"job {job_id} failed on attempt 1" in line]
    assert len(failed) == 1, err
    if log_format == "json":
        entries = [json.loads(line) for line in err.splitlines()]
        (entry,) = [e for e in entries if " failed on attempt " in e["message"]]
        assert entry["job_id"] == str(job_id)
        assert (entry["job_type"], entry["attempt"], entry["level"]) == (1, 1, "WARNING")
        assert "no such index" in entry["error"]
        assert all(e["worker_id"] == entry["worker_id"] for e in entries if "worker_id" in e)
    else:
        assert f"job_id={job_id} job_type=1 attempt=1" in failed[0]
        assert 'error="no such index"' in failed[0]


def test_show_prints_a_job_for_people_and_for_scripts(dsn: str, conn: Conn) -> None:
    job_id = str(one(conn, "select job_id from pyjobq.job_enqueue(2, '{\"order\": 9}')"))
    conn.execute("select pyjobq.job_claim('w1', 1)")
    conn.execute(
        "select pyjobq.job_fail(%s, 'w1', 1, E'smtp: 550\\n  at send()', p_dead_letter => true)",
        (job_id,),
    )
    table = pyjobq("show", job_id, dsn=dsn)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert "status          DEAD" in lines
    assert "job_type        2 OUTBOX" in lines
    assert 'payload         {"order": 9}' in lines
    assert "last_error      smtp: 550" in lines
    assert any(line.strip() == "at send()" for line in lines)
    assert "attempt 1       dead by w1: at send()" in lines
    as_json = pyjobq("show", job_id, "--json", dsn=dsn)
    shown = json.loads(as_json.stdout)
    assert (shown["job_id"], shown["status_name"], shown["attempts"]) == (job_id, "DEAD", 1)
    assert shown["payload"] == {"order": 9}
    told = [(a["attempt"], a["outcome"], a["error_summary"]) for a in shown["attempt_story"]]
    assert told == [(1, "dead", "at send()")]
    missing = pyjobq("show", "00000000-0000-0000-0000-000000000000", dsn=dsn)
    assert missing.returncode == 1
    assert "no job" in missing.stderr
    assert pyjobq("show", "not-a-uuid", dsn=dsn).returncode == 2


def test_enqueue_names_parents_and_a_batch_and_show_prints_the_graph(dsn: str, conn: Conn) -> None:
    parent = pyjobq("enqueue", "SEARCH", '{"step": 1}', dsn=dsn).stdout.split()[0]
    batch = str(one(conn, "select pyjobq.job_batch_open()"))
    child = pyjobq(
        "enqueue", "SEARCH", "--depends-on", parent, "--on-parent-failure", "run",
        "--batch", batch, dsn=dsn,
    )  # fmt: skip
    assert child.returncode == 0, child.stderr
    child_id = child.stdout.split()[0]
    lines = pyjobq("show", child_id, dsn=dsn).stdout.splitlines()
    assert "status          WAITING" in lines
    assert "waiting_on      1" in lines
    assert f"batch_id        {batch}" in lines
    assert f"parent          {parent} PENDING (not ended yet)" in lines
    assert (
        f"dependant       {child_id} WAITING (not ended yet)"
        in pyjobq("show", parent, dsn=dsn).stdout.splitlines()
    )
    shown = json.loads(pyjobq("show", child_id, "--json", dsn=dsn).stdout)
    assert [(d["relation"], d["job_id"]) for d in shown["dependencies"]] == [("parent", parent)]
    many = pyjobq("enqueue", "SEARCH", "-", "--depends-on", parent, dsn=dsn, stdin="{}\n{}\n")
    assert many.returncode == 0, many.stderr
    assert one(conn, "select count(*) from pyjobq.job_all where status = 6") == 3
    refused = pyjobq("enqueue", "SEARCH", "--depends-on", str(uuid.uuid4()), dsn=dsn)
    assert refused.returncode != 0
    assert "not found" in refused.stderr


def test_batch_opens_with_callbacks_closes_shows_and_waits(dsn: str, conn: Conn) -> None:
    opened = pyjobq("batch", "open", "--on", "finish", "OUTBOX", '{"to": "ops"}', dsn=dsn)
    assert opened.returncode == 0, opened.stderr
    batch = opened.stdout.strip()
    for step in (1, 2):
        pyjobq("enqueue", "SEARCH", f'{{"step": {step}}}', "--batch", batch, dsn=dsn)
    shown = pyjobq("batch", "show", batch, dsn=dsn).stdout.splitlines()
    assert "state        open" in shown
    assert "total        2" in shown
    unfinished = pyjobq("batch", "wait", batch, "--timeout", "0.2", dsn=dsn)
    assert unfinished.returncode == 1
    assert "not finished after 0.2s" in unfinished.stderr
    assert "state        closed" in pyjobq("batch", "close", batch, dsn=dsn).stdout.splitlines()
    claimed = conn.execute("select job_id, attempt, lease_token from pyjobq.job_claim('w', 2)")
    for job_id, attempt, token in claimed.fetchall():
        conn.execute("select pyjobq.job_complete(%s, 'w', %s, null, %s)", (job_id, attempt, token))
    waited = pyjobq("batch", "wait", batch, "--json", dsn=dsn)
    assert waited.returncode == 0, waited.stderr
    finished = json.loads(waited.stdout)
    assert (finished["state"], finished["done"], finished["active"]) == ("finished", 2, 0)
    payload = one(
        conn, "select payload from pyjobq.job_all where job_id = %s", (finished["finish_job"],)
    )
    assert (payload["to"], payload["batch"]["done"]) == ("ops", 2)

    twice = pyjobq("batch", "open", "--on", "dead", "1", "{}", "--on", "dead", "2", "{}", dsn=dsn)
    assert (twice.returncode, "--on dead given twice" in twice.stderr) == (2, True)
    unknown = str(uuid.uuid4())
    for command in ("show", "close", "wait"):
        missing = pyjobq("batch", command, unknown, dsn=dsn)
        assert missing.returncode == 1, command
        assert unknown in missing.stderr, command


def test_worker_exits_1_when_jobs_outlive_the_shutdown_timeout(
    dsn: str, conn: Conn, tmp_path: Path
) -> None:
    # A supervisor must tell a clean drain (0) from one that left jobs to their leases.
    job_id = one(conn, "select job_id from pyjobq.job_enqueue(1, '{}')")
    (tmp_path / "slow.py").write_text(
        "import threading\nHANDLERS = {1: lambda job: threading.Event().wait(600)}\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyjobq", "worker", "slow:HANDLERS", "--shutdown-timeout", "0.2"],
        cwd=tmp_path,
        env={**os.environ, "PYJOBQ_DSN": dsn},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: statuses(conn) == {2: 1}, "the job RUNNING")
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 1, err
    assert "left to its lease" in err
    status = one(conn, "select status, worker_id from pyjobq.job_all where job_id = %s", (job_id,))
    assert status == 2  # still held: its lease runs out, a reaper takes it back


def test_dev_server_serves_a_migrated_database_to_an_application_role_until_interrupted() -> None:
    """dev-server listens on the --port given, prints a URL for a login role in the producer,
    worker and observer groups (not a superuser), the owner's URL on stderr, and refuses a port
    in use as usage."""
    port = free_port()
    run = subprocess.Popen(
        [sys.executable, "-m", "pyjobq", "dev-server", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert run.stdout is not None
        assert run.stderr is not None
        line = run.stdout.readline()
        url = f"postgresql://app@127.0.0.1:{port}/postgres"
        assert line == f"export PYJOBQ_DSN='{url}'\n"
        owner_line = run.stderr.readline()
        assert owner_line.endswith(
            f"the owner (a superuser): postgresql://postgres@127.0.0.1:{port}/postgres\n"
        )
        with psycopg.connect(url, autocommit=True) as served:
            assert one(served, "select pyjobq.schema_version()") == SCHEMA_VERSION
            assert (
                one(served, "select rolsuper from pg_roles where rolname = current_user") is False
            )
            job_id = one(served, "select job_id from pyjobq.job_enqueue(1, '{}')")
            (claimed,) = served.execute("select job_id from pyjobq.job_claim('w', 1)").fetchall()
            assert claimed == (job_id,)
            assert one(served, "select sum(jobs) from pyjobq.job_counts() where status = 2") == 1
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                served.execute("select pyjobq.job_type_pause(1)")
        taken = subprocess.run(
            [sys.executable, "-m", "pyjobq", "dev-server", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert taken.returncode == 2
        assert f"port {port} on 127.0.0.1 is taken" in taken.stderr
        # At once: the URL line means it is ready, and a stop from then on exits 0.
        with psycopg.connect(url.replace("app@", "postgres@")) as owner:
            data = one(owner, "select current_setting('data_directory')")
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=60)
        assert run.returncode == 0, err
        assert not Path(data).exists()  # stopped, and its data deleted
    finally:
        if run.poll() is None:
            run.kill()


def test_jobs_and_cancel_through_the_command_line_process(dsn: str, conn: Conn) -> None:
    """pyjobq jobs lists a page by type and status; pyjobq cancel says each id's outcome, exit
    0, and a bad id is usage (2) with nothing changed."""
    pending = one(conn, "select job_id from pyjobq.job_enqueue(1, '{\"n\": 1}')")
    finished = one(conn, "select job_id from pyjobq.job_enqueue(2, '{}')")
    (claimed,) = conn.execute("select job_id, attempt from pyjobq.job_claim('w', 1, 60, '{2}')")
    conn.execute("select pyjobq.job_complete(%s, 'w', %s)", claimed)
    listed = pyjobq("jobs", "--type", "search", "--status", "pending", dsn=dsn)
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[:3] for line in listed.stdout.splitlines()] == [
        [str(pending), "SEARCH", "PENDING"]
    ]
    refused = pyjobq("cancel", "not-a-uuid", dsn=dsn)
    assert refused.returncode == 2
    cancelled = pyjobq("cancel", str(pending), str(finished), dsn=dsn)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.splitlines() == [f"{pending} cancelled", f"{finished} finished"]
    statuses_now = dict(conn.execute("select job_id, status from pyjobq.job_all").fetchall())
    assert statuses_now == {pending: 5, finished: 3}


def test_schedules_are_set_listed_paused_resumed_and_deleted(dsn: str, conn: Conn) -> None:
    made = pyjobq(
        "schedule", "set", "nightly", "30 2 * * *", "SEARCH", '{"report": 1}',
        "--time-zone", "Europe/Berlin", "--on-miss", "catch_up", dsn=dsn,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("nightly\tnext ")
    listed = pyjobq("schedule", "list", dsn=dsn)
    assert listed.returncode == 0, listed.stderr
    fields = listed.stdout.strip().split("\t")
    assert fields[:4] == ["nightly", "30 2 * * *", "Europe/Berlin", "SEARCH"]
    assert fields[5:] == ["last never", "fired 0", "missed 0"]
    for verb in ("pause", "resume", "delete"):
        done = pyjobq("schedule", verb, "nightly", dsn=dsn)
        assert (done.returncode, done.stdout) == (0, f"nightly\t{verb}d\n"), done.stderr
    gone = pyjobq("schedule", "pause", "nightly", dsn=dsn)
    assert gone.returncode == 1
    assert "no schedule named 'nightly'" in gone.stderr
    bad = pyjobq("schedule", "set", "x", "61 * * * *", "SEARCH", dsn=dsn)
    assert bad.returncode == 1
    assert "minute field" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert one(conn, "select count(*) from pyjobq.job_schedules()") == 0
    later = pyjobq(
        "schedule", "set", "y", "0 9 * * *", "SEARCH", "--start-at", "2099-01-02T00:00:00+0000",
        dsn=dsn,
    )  # fmt: skip
    assert later.stdout == "y\tnext 2099-01-02T09:00:00+00:00\n", later.stderr


def test_enqueue_takes_a_uniqueness_window(dsn: str, conn: Conn) -> None:
    first = pyjobq("enqueue", "SEARCH", "--dedupe-key", "k", "--unique-for", "1h", dsn=dsn)
    assert first.returncode == 0, first.stderr
    job_id = first.stdout.split("\t")[0]
    conn.execute("select pyjobq.job_cancel(array[%s::uuid])", (job_id,))
    again = pyjobq("enqueue", "SEARCH", "--dedupe-key", "k", "--unique-for", "1h", dsn=dsn)
    assert again.stdout == f"{job_id}\texisting\n", again.stderr


def test_limits_are_set_and_listed(dsn: str, conn: Conn) -> None:
    made = pyjobq(
        "limits", "set", "SEARCH", "--max-running", "4", "--key-max-running", "1", dsn=dsn
    )
    assert made.returncode == 0, made.stderr
    listed = pyjobq("limits", dsn=dsn)
    assert listed.stdout == "SEARCH\tmax running 4\tper key 1\trate -\tper key -\n", listed.stderr
    rated = pyjobq(
        "limits", "set", "SEARCH", "--rate", "10/1m", "--key-rate", "2", "--fair-share", dsn=dsn
    )
    assert rated.stdout == (
        "SEARCH\tmax running -\tper key -\trate 10/60s\tper key 2/1s\tfair share\n"
    )
    refused = pyjobq("limits", "set", "SEARCH", "--rate", "10/2d", dsn=dsn)
    assert refused.returncode != 0
    assert "p_rate_period must be at least 1 millisecond and at most 1 day" in refused.stderr
    keyed = pyjobq("enqueue", "SEARCH", "--concurrency-key", "tenant-7", dsn=dsn)
    assert keyed.returncode == 0, keyed.stderr
    assert one(conn, "select concurrency_key from pyjobq.job_all") == "tenant-7"
    assert pyjobq("limits", "set", "SEARCH", dsn=dsn).stdout == "SEARCH\tno limits\n"
    assert pyjobq("limits", dsn=dsn).stdout == ""
