"""The dashboard in a real headless browser (Debian's chromium, driven by Playwright).

Each dashboard is the real ``pyjobq dashboard`` process, connected as a real LOGIN role; the
queue is arranged through the SQL API and every outcome is read back from the database.
``PYJOBQ_REGEN_SCREENSHOTS=1`` writes the pages' screenshots to docs/img for the README.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from tests.sqlhelp import one, raises_sqlstate
from tests.webhelp import dashboard, status_of
from tests.workerhelp import prepare, spawn_worker, statuses, wait_for

playwright = pytest.importorskip("playwright.sync_api")

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path(os.environ.get("PYJOBQ_CHROMIUM", "/usr/bin/chromium"))
SHOTS = ROOT / "docs" / "img" if os.environ.get("PYJOBQ_REGEN_SCREENSHOTS") == "1" else None
# What the machine's closed network needs: no background connections, no sandbox as root.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

Conn = psycopg.Connection[Any]
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"no chromium at {CHROMIUM}: ./scripts/setup installs it"
)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Playwright's launcher of Chromium browsers."""
    with playwright.sync_playwright() as p:
        yield p.chromium


@pytest.fixture(scope="module")
def browser(chromium: Any) -> Iterator[Any]:
    launched = chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    yield launched
    launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    yield context.new_page()
    context.close()


def shoot(page: Any, name: str, tmp_path: Path) -> None:
    """A full-page screenshot: to docs/img when regenerating them, else beside the test."""
    page.screenshot(path=str((SHOTS or tmp_path) / f"dashboard-{name}.png"), full_page=True)


def fail_for_good(conn: Conn, worker: str, error: str, jobs: int) -> list[Any]:
    """Enqueue ``jobs`` one-try SEARCH jobs, claim them as ``worker`` and fail them: DEAD."""
    ids = []
    for _ in range(jobs):
        conn.execute('select pyjobq.job_enqueue(1, \'{"kind": "flaky"}\', p_max_attempts => 1)')
        job_id, attempt, token = conn.execute(
            "select job_id, attempt, lease_token from pyjobq.job_claim(%s, 1, null, array[1])",
            (worker,),
        ).fetchone() or (None, None, None)
        conn.execute(
            "select * from pyjobq.job_fail(%s, %s, %s, %s, null, null, %s)",
            (job_id, worker, attempt, error, token),
        )
        ids.append(job_id)
    return ids


def arrange(conn: Conn) -> dict[str, Any]:
    """A queue with something in every state: done, dead of two causes, running, pending."""
    conn.execute(
        'select * from pyjobq.job_enqueue_many(1, array_fill(\'{"kind": "ok"}\'::jsonb, array[6]))'
    )
    done = conn.execute("select job_id, attempt, lease_token from pyjobq.job_claim('w-1', 6)")
    rows = done.fetchall()
    conn.execute(
        "select * from pyjobq.job_complete_many('w-1', %s, %s, array_fill('{\"ok\": true}'::jsonb,"
        " array[6]), %s)",
        ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]),
    )
    timeouts = fail_for_good(
        conn, "w-1", "Traceback (most recent call last):\nTimeoutError: upstream", 3
    )
    others = fail_for_good(conn, "w-2", "ValueError: bad input", 2)
    conn.execute('select pyjobq.job_enqueue(2, \'{"kind": "long"}\')')
    running = conn.execute(
        "select job_id, attempt, lease_token from pyjobq.job_claim('w-2', 1)"
    ).fetchone()
    conn.execute('select pyjobq.job_enqueue(2, \'{"kind": "later"}\')')
    return {"timeouts": timeouts, "others": others, "running": running}


def counts(conn: Conn) -> dict[tuple[str, str], str]:
    """job_counts() as the overview prints each figure."""
    return {
        (name, status): (str(jobs) if exact else f"~{jobs}")
        for name, status, jobs, exact in conn.execute(
            "select job_type_name, status_name, jobs, exact from pyjobq.job_counts()"
        )
    }


def shown_counts(page: Any) -> dict[tuple[str, str], str]:
    cells = page.locator("#counts td[data-status]")
    return {
        (
            cell.evaluate("c => c.parentElement.dataset.type"),
            cell.get_attribute("data-status"),
        ): cell.inner_text().strip()
        for cell in cells.all()
    }


def test_an_operator_watches_follows_redrives_and_cancels(
    conn: Conn, login_role: Callable[..., str], page: Any, tmp_path: Path
) -> None:
    jobs = arrange(conn)
    admin = login_role("pyjobq_admin")
    role = conninfo_to_dict(admin)["user"]
    with dashboard(admin, "--allow-actions") as base:
        # The overview shows what job_counts() returns, and keeps up without a reload.
        page.goto(base + "/")
        assert shown_counts(page) == counts(conn)
        page.evaluate("window.notReloaded = true")
        conn.execute("select pyjobq.job_enqueue(2, '{}')")
        cell = page.locator('#counts tr[data-type="OUTBOX"] td[data-status="PENDING"]')
        playwright.expect(cell).to_have_text("2", timeout=30_000)
        assert page.evaluate("window.notReloaded") is True
        assert page.locator("#workers").inner_text().count("w-") == 2
        shoot(page, "overview", tmp_path)

        # From the jobs page to one job's page.
        page.click("nav >> text=Jobs")
        page.select_option("select[name=status]", "4")
        page.fill("input[name=error]", "timeouterror")
        page.click("#filters button")
        listed = page.locator("#jobs tr[data-job]")
        # The click navigates: wait for the new page and its rows before reading them.
        page.wait_for_url("**error=timeouterror*")
        playwright.expect(listed).to_have_count(len(jobs["timeouts"]))
        assert sorted(r.get_attribute("data-job") for r in listed.all()) == sorted(
            str(i) for i in jobs["timeouts"]
        )
        shoot(page, "jobs", tmp_path)
        page.click(f'#jobs a[href="/jobs/{jobs["timeouts"][0]}"]')
        assert page.locator("#job-id").inner_text() == str(jobs["timeouts"][0])
        assert page.locator("#job-status").inner_text() == "DEAD"
        assert "TimeoutError: upstream" in page.locator("#last-error").inner_text()
        assert '"kind": "flaky"' in page.locator("#payload").inner_text()
        shoot(page, "job", tmp_path)

        # Redrive the filtered set: a preview first, then the change.
        page.go_back()
        page.click("#preview-redrive")
        assert page.locator("#count").inner_text() == "3"
        shoot(page, "preview", tmp_path)
        page.click("#run")
        page.wait_for_url("**/audit?notice=*")
        assert page.locator("#notice").inner_text() == "redrive: 3 jobs"
        statuses = conn.execute(
            "select job_id, status from pyjobq.job_all where status in (1, 4) and job_type = 1"
        ).fetchall()
        assert {i for i, s in statuses if s == 1} == set(jobs["timeouts"])
        assert {i for i, s in statuses if s == 4} == set(jobs["others"])
        # ... and the operator sees them PENDING.
        page.goto(f"{base}/jobs?type=1&status=1")
        listed = page.locator("#jobs tr[data-job]")
        assert sorted(r.get_attribute("data-job") for r in listed.all()) == sorted(
            str(i) for i in jobs["timeouts"]
        )

        # Cancel the running job from its page: its holder is fenced out.
        running_id, attempt, token = jobs["running"]
        page.goto(f"{base}/jobs/{running_id}")
        assert page.locator("#holder").inner_text() == "w-2"
        page.click("#cancel")
        playwright.expect(page.locator("#job-status")).to_have_text("CANCELLED")
        with raises_sqlstate("JQ005"):
            conn.execute(
                "select pyjobq.job_complete(%s, 'w-2', %s, null, %s)", (running_id, attempt, token)
            )

        # Both actions are in the audit log, in the role's and the dashboard's name.
        page.click("nav >> text=Audit")
        lines = page.locator("#audit tbody tr")
        playwright.expect(lines).to_have_count(2)
        assert [line.get_attribute("data-action") for line in lines.all()] == ["cancel", "redrive"]
        assert all(role in line.inner_text() for line in lines.all())
        assert "dashboard 127.0.0.1" in lines.first.inner_text()
        shoot(page, "audit", tmp_path)
    assert one(conn, "select count(*) from pyjobq.audit_log where role = %s", (role,)) == 2


def forged_post(page: Any, url: str, headers: dict[str, str] | None = None, **fields: str) -> int:
    """A POST from the page's browser context (its cookies), as another site could make it."""
    answer = page.request.post(url, form=fields, headers=headers, max_redirects=0)
    code: int = answer.status
    return code


def unchanged(conn: Conn) -> list[tuple[Any, ...]]:
    """Every job's id, status and last change, to compare before and after."""
    return conn.execute(
        "select job_id, status, updated_at from pyjobq.job_all order by 1"
    ).fetchall()


def test_a_read_only_dashboard_offers_nothing_and_refuses_forged_posts(
    conn: Conn, login_role: Callable[..., str], page: Any, tmp_path: Path
) -> None:
    jobs = arrange(conn)
    dead = jobs["others"][0]
    before = unchanged(conn)
    admin = login_role("pyjobq_admin")
    with dashboard(admin) as base:  # an admin's role, but no --allow-actions
        page.goto(f"{base}/jobs/{dead}")
        assert page.locator("#redrive").count() == 0
        assert "read-only" in page.locator("#who").inner_text()
        page.goto(f"{base}/jobs?status=4")
        assert page.locator("#bulk").count() == 0
        assert page.locator("nav >> text=Prune").count() == 0
        # Even with this dashboard's own CSRF token the POST is refused: it is read-only.
        csrf = page.locator("meta[name=csrf]").get_attribute("content")
        assert forged_post(page, f"{base}/jobs/{dead}/redrive", csrf=csrf) == 403
        assert forged_post(page, f"{base}/actions/run", csrf=csrf, action="redrive") == 403
        assert forged_post(page, f"{base}/prune", csrf=csrf, days="0") == 403
    with dashboard(admin, "--allow-actions") as base:
        page.goto(f"{base}/jobs/{dead}")
        assert page.locator("#redrive").count() == 1
        # Without the token, or with one of another browser, nothing runs.
        assert forged_post(page, f"{base}/jobs/{dead}/redrive") == 403
        assert forged_post(page, f"{base}/jobs/{dead}/redrive", csrf="0" * 64) == 403
        assert forged_post(page, f"{base}/actions/run", action="redrive", status="4") == 403
        assert forged_post(page, f"{base}/prune", days="0") == 403
        csrf = page.locator("meta[name=csrf]").get_attribute("content")
        assert forged_post(page, f"{base}/jobs/not-a-job/cancel", csrf=csrf) == 400
        assert forged_post(page, f"{base}/prune", csrf=csrf, days="inf") == 400
    assert unchanged(conn) == before
    assert one(conn, "select count(*) from pyjobq.audit_log") == 0


def test_an_observer_sees_the_overview_and_the_limits_only(
    conn: Conn, login_role: Callable[..., str], page: Any, tmp_path: Path
) -> None:
    arrange(conn)
    with dashboard(login_role("pyjobq_observer"), "--allow-actions") as base:
        page.goto(base + "/")
        assert shown_counts(page) == counts(conn)
        assert page.locator("nav a").all_inner_texts() == ["Overview", "Schedules"]
        page.goto(base + "/jobs")
        assert "may not list jobs" in page.locator("#problem").inner_text()


def test_a_token_guards_every_page(conn: Conn, dsn: str, page: Any) -> None:
    token = "t0ken-for-this-test-only"
    with dashboard(dsn, "--token", token) as base:
        assert status_of(base + "/jobs") == 401
        page.goto(base + "/")
        assert page.url == base + "/login"
        page.fill("input[name=token]", "wrong-token-wrong-token")
        page.click("button[type=submit]")
        assert page.locator(".problem").count() == 1
        page.fill("input[name=token]", token)
        page.click("button[type=submit]")
        assert page.url == base + "/"
        assert page.locator("#counts").count() == 1
        request = urllib.request.Request(
            base + "/jobs", headers={"authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(request) as answer:
            assert answer.status == 200


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--host", "0.0.0.0"], "--allow-remote"),
        (["--host", "0.0.0.0", "--allow-remote"], "needs a token"),
        (["--host", "0.0.0.0", "--allow-remote", "--token", "short"], "16 characters"),
        (["--host", "0.0.0.0", "--allow-remote", "--token", "t" * 16], "--allowed-host"),
    ],
)
def test_it_will_not_listen_beyond_loopback_unguarded(
    dsn: str, flags: list[str], message: str
) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pyjobq", "dashboard", "--dsn", dsn, *flags],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2
    assert message in run.stderr


def test_a_worker_log_line_leads_to_its_job_page(
    conn: Conn, dsn: str, page: Any, tmp_path: Path
) -> None:
    prepare(conn)
    job_id = one(
        conn, "select job_id from pyjobq.job_enqueue(1, '{\"fail\": true}', p_max_attempts => 1)"
    )
    worker = spawn_worker(dsn, tmp_path, "logs")
    try:
        wait_for(lambda: statuses(conn) == {4: 1}, "the job to go DEAD")
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    (line,) = [
        text
        for text in (tmp_path / "logs.log").read_text().splitlines()
        if f"job_id={job_id}" in text
    ]
    with dashboard(dsn) as base:
        page.goto(base + "/")
        page.fill("#find input[name=q]", line)
        page.press("#find input[name=q]", "Enter")
        page.wait_for_url(f"{base}/jobs/{job_id}")
        fields = page.locator("#log-fields").inner_text()
    # The page names the job with the log line's own words.
    for pair in fields.split():
        if not pair.startswith("worker_id="):
            assert pair in line, (pair, line)
    assert "[" + fields.split("worker_id=")[1] + "]" in line


def test_schedules_and_limits_are_shown_as_their_functions_return_them(
    conn: Conn, login_role: Callable[..., str], page: Any, tmp_path: Path
) -> None:
    conn.execute(
        "select * from pyjobq.job_schedule_set('nightly', '0 3 * * *', 1, '{}', 'Europe/Paris')"
    )
    conn.execute("select * from pyjobq.job_type_set_limits(2, 5, 1, 100, '1 minute')")
    with dashboard(login_role("pyjobq_admin")) as base:
        page.goto(base + "/")
        page.click("nav >> text=Schedules")
        row = page.locator('#schedules tr[data-schedule="nightly"]').inner_text()
        next_tick = one(conn, "select next_fire_at from pyjobq.job_schedules()")
        assert "0 3 * * *" in row
        assert "Europe/Paris" in row
        assert next_tick.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") in row
        limits = page.locator('#limits tr[data-type="OUTBOX"]').inner_text().split("\t")
        assert limits[1:4] == ["5", "1", "100 per 0:01:00"]
        shoot(page, "schedules", tmp_path)
    with dashboard(login_role("pyjobq_observer")) as base:  # limits yes, schedules no
        page.goto(base + "/schedules")
        assert "may not read the schedules" in page.locator("main").inner_text()
        assert page.locator("#limits").count() == 1


def test_a_job_page_shows_its_parents_dependants_and_batch(
    conn: Conn, login_role: Callable[..., str], page: Any, tmp_path: Path
) -> None:
    batch = one(
        conn,
        'select pyjobq.job_batch_open(\'{"finish": {"job_type": 2, "payload": {}}}\')',
    )

    def add(parents: list[Any] | None = None, in_batch: bool = True) -> Any:
        return one(
            conn,
            "select job_id from pyjobq.job_enqueue(1, p_depends_on => %s, p_batch_id => %s)",
            (parents, batch if in_batch else None),
        )

    def run(job_id: Any) -> None:
        ((attempt, token),) = conn.execute(
            "select attempt, lease_token from pyjobq.job_claim('w-1', 1)"
        ).fetchall()
        conn.execute(
            "select pyjobq.job_complete(%s, 'w-1', %s, null, %s)", (job_id, attempt, token)
        )

    a = add()
    run(a)
    b = add()
    c = add([a, b])
    d = add([c], in_batch=False)
    with dashboard(login_role("pyjobq_admin"), "--allow-actions") as base:
        page.goto(f"{base}/jobs/{c}")
        assert page.locator("#job-status").inner_text() == "WAITING"
        assert page.locator("#waiting-on").inner_text().startswith("Waits for 1 of its 2 parents")

        def rows(table: str) -> list[list[str]]:
            return [
                [r.get_attribute("data-job"), *r.inner_text().split("\t")[1:]]
                for r in page.locator(f"#{table} tbody tr").all()
            ]

        assert rows("parents") == [
            [str(a), "SEARCH", "DONE", "resolved"],
            [str(b), "SEARCH", "PENDING", "waiting"],
        ]
        assert rows("dependants") == [[str(d), "SEARCH", "WAITING", "waiting"]]
        assert page.locator("#batch-state").inner_text() == "open"
        assert page.locator("#batch-counts").inner_text() == (
            "3 jobs, 2 active, 1 done, 0 dead, 0 cancelled"
        )
        shoot(page, "graph", tmp_path)

        page.click("#batch-members")
        page.wait_for_url("**/jobs?*")
        members = page.locator("#jobs tr[data-job]")
        playwright.expect(members).to_have_count(3)
        assert sorted(r.get_attribute("data-job") for r in members.all()) == sorted(
            str(j) for j in (a, b, c)
        )

        # Cancelling the waiting job from its page cancels its dependant too.
        page.goto(f"{base}/jobs/{c}")
        page.click("#cancel")
        playwright.expect(page.locator("#job-status")).to_have_text("CANCELLED")
        assert rows("dependants") == [[str(d), "SEARCH", "CANCELLED", "resolved"]]
        assert one(conn, "select status from pyjobq.job_all where job_id = %s", (d,)) == 5

        # The batch closes and its last member ends: the page links its finish callback.
        conn.execute("select pyjobq.job_batch_close(%s)", (batch,))
        run(b)
        finish = one(conn, "select finish_job from pyjobq.job_batch_get(%s)", (batch,))
        page.goto(f"{base}/jobs/{b}")
        assert page.locator("#batch-state").inner_text() == "finished"
        page.click(f'#callbacks a[href="/jobs/{finish}"]')
        assert page.locator("#job-id").inner_text() == str(finish)
        assert page.locator("#job-status").inner_text() == "PENDING"


def test_a_job_page_tells_each_attempt_and_the_progress_of_the_one_running(
    conn: Conn, login_role: Callable[..., str], page: Any, tmp_path: Path
) -> None:
    job_id = one(conn, "select job_id from pyjobq.job_enqueue(1, '{\"report\": 7}')")
    error = 'Traceback (most recent call last):\n  File "report.py", line 9\nTimeoutError: {}'
    for worker, why in [("w-1", "export took too long"), ("w-2", "export took too long again")]:
        ((attempt, token),) = conn.execute(
            "select attempt, lease_token from pyjobq.job_claim(%s, 1)", (worker,)
        ).fetchall()
        conn.execute(
            "select pyjobq.job_fail(%s, %s, %s, %s, 0, false, %s)",
            (job_id, worker, attempt, error.format(why), token),
        )
    ((attempt, token),) = conn.execute(
        "select attempt, lease_token from pyjobq.job_claim('w-3', 1)"
    ).fetchall()
    conn.execute(
        "select pyjobq.job_progress(%s, 'w-3', %s, '{\"rows\": 4200, \"of\": 10000}', %s)",
        (job_id, attempt, token),
    )
    with dashboard(login_role("pyjobq_admin")) as base:
        page.goto(f"{base}/jobs/{job_id}")
        rows = [r.inner_text().split("\t") for r in page.locator("#attempts tbody tr").all()]
        assert [(r[0], r[1], r[4], r[5].strip()) for r in rows] == [
            ("1", "w-1", "failed", "TimeoutError: export took too long"),
            ("2", "w-2", "failed", "TimeoutError: export took too long again"),
            ("3", "w-3", "running", ""),
        ]
        assert json.loads(page.locator("#progress").inner_text()) == {"rows": 4200, "of": 10000}
        page.click("#attempts tr[data-attempt='2'] summary")
        expanded = page.locator("#attempts tr[data-attempt='2'] pre")
        playwright.expect(expanded).to_contain_text('File "report.py", line 9')
        shoot(page, "attempts", tmp_path)


def test_a_job_page_shows_its_steps_and_waits_and_sends_the_signal_it_waits_for(
    conn: Conn, login_role: Callable[..., str], page: Any, tmp_path: Path
) -> None:
    job_id = one(conn, "select job_id from pyjobq.job_enqueue(1, '{\"post\": 12}')")
    ((attempt, token),) = conn.execute(
        "select attempt, lease_token from pyjobq.job_claim('w-1', 1)"
    ).fetchall()
    conn.execute(
        "select * from pyjobq.job_step_save(%s, 'w-1', %s, 'draft', '{\"words\": 640}', %s)",
        (job_id, attempt, token),
    )
    waited = "select outcome from pyjobq.job_event_wait(%s, 'w-1', %s, 'approval', 86400, %s)"
    assert one(conn, waited, (job_id, attempt, token)) == "waiting"
    # Read-only, the page shows the wait and offers no signal; a forged one changes nothing.
    with dashboard(login_role("pyjobq_admin")) as base:
        page.goto(f"{base}/jobs/{job_id}")
        assert page.locator("#events tr[data-event='approval']").inner_text().split("\t")[:2] == [
            "approval",
            "waiting",
        ]
        assert page.locator("#signal").count() == 0
        csrf = page.locator("meta[name=csrf]").get_attribute("content")
        assert forged_post(page, f"{base}/jobs/{job_id}/signal", csrf=csrf, name="approval") == 403
    assert one(conn, "select count(*) from pyjobq.job_event where signalled_at is not null") == 0
    with dashboard(login_role("pyjobq_admin"), "--allow-actions") as base:
        page.goto(f"{base}/jobs/{job_id}")
        step = page.locator("#steps tr[data-step='draft']").inner_text().split("\t")
        assert step[:3] == ["draft", "1", "w-1"]
        assert json.loads(step[4]) == {"words": 640}
        assert page.locator("#waits-for").inner_text() == "approval"
        assert page.locator("#signal-name").input_value() == "approval"
        page.fill("#signal-payload", '{"by": "ana"}')
        shoot(page, "waits", tmp_path)
        page.click("#signal-send")
        playwright.expect(page.locator("#notice")).to_contain_text("approval sent")
        row = page.locator("#events tr[data-event='approval']").inner_text().split("\t")
        assert (row[1], json.loads(row[4])) == ("signalled", {"by": "ana"})
        page.fill("#signal-name", "edits")
        page.fill("#signal-payload", "{not json")
        page.click("#signal-send")
        assert "not JSON" in page.locator("#problem").inner_text()
    assert one(
        conn,
        "select payload from pyjobq.job_event where job_id = %s and name = 'approval'",
        (job_id,),
    ) == {"by": "ana"}
    # Due at once: the next claim takes it.
    assert one(conn, "select job_id from pyjobq.job_claim('w-2', 1)") == job_id


def test_an_admin_pauses_and_resumes_a_type_from_the_overview(
    conn: Conn, login_role: Callable[..., str], page: Any, tmp_path: Path
) -> None:
    """The overview says which types the claims take; with actions allowed, an admin pauses and
    resumes one there, audited in the dashboard's name. A read-only dashboard and an observer's
    offer neither, and refuse the POST."""
    conn.execute("select pyjobq.job_enqueue_many(1, array_fill('{}'::jsonb, array[3]))")
    conn.execute("select pyjobq.job_enqueue(2, '{}')")
    paused = "select paused_at is not null from pyjobq.job_type where job_type = 1"
    admin = login_role("pyjobq_admin")
    for role, flags in ((admin, ()), (login_role("pyjobq_observer"), ("--allow-actions",))):
        with dashboard(role, *flags) as base:
            page.goto(base)
            assert (
                page.locator("#counts tr[data-type='SEARCH'] td.claims .claim-state").inner_text()
                == "taken"
            )
            assert page.locator("[data-pause]").count() == 0
            csrf = page.locator("meta[name=csrf]").get_attribute("content")
            assert forged_post(page, f"{base}/types/1/pause", csrf=csrf) == 403
    assert one(conn, paused) is False
    with dashboard(admin, "--allow-actions") as base:
        page.goto(base)
        csrf = page.locator("meta[name=csrf]").get_attribute("content")
        assert forged_post(page, f"{base}/types/1/pause") == 403  # no CSRF proof
        assert forged_post(page, f"{base}/types/999/pause", csrf=csrf) == 400
        page.click("[data-pause='SEARCH']")
        playwright.expect(page.locator("#notice")).to_contain_text("type 1 paused")
        cell = page.locator("#counts tr[data-type='SEARCH'] td.claims .claim-state")
        assert cell.inner_text().startswith("paused since ")
        assert (
            page.locator("#counts tr[data-type='OUTBOX'] td.claims .claim-state").inner_text()
            == "taken"
        )
        shoot(page, "pause", tmp_path)
        assert one(conn, paused) is True
        assert conn.execute("select job_type from pyjobq.job_claim('w', 10)").fetchall() == [(2,)]
        page.click("[data-resume='SEARCH']")
        playwright.expect(page.locator("#notice")).to_contain_text("type 1 resumed")
    assert one(conn, paused) is False
    assert one(conn, "select count(*) from pyjobq.job_claim('w', 10)") == 3
    audit = conn.execute("select action, actor, detail from pyjobq.audit_log order by audit_id")
    assert audit.fetchall() == [
        ("pause", "dashboard 127.0.0.1", {"job_type": 1}),
        ("resume", "dashboard 127.0.0.1", {"job_type": 1}),
    ]


def test_the_jobs_list_takes_names_and_shows_each_error_s_last_line(
    conn: Conn, login_role: Callable[..., str], page: Any
) -> None:
    """?status=dead&type=SEARCH filters as ?status=4&type=1 does (names as the CLI takes them),
    and each error shows as its last line, a traceback as its exception; a name that is neither
    is refused, naming what it may be."""
    jobs = arrange(conn)
    dead = {*jobs["timeouts"], *jobs["others"]}
    with dashboard(login_role("pyjobq_admin")) as base:
        shown = []
        for query in ("status=dead&type=SEARCH", "status=4&type=1", "status=DEAD"):
            page.goto(f"{base}/jobs?{query}")
            shown.append(
                {r.get_attribute("data-job") for r in page.locator("#jobs tbody tr").all()}
            )
        assert shown == [{str(j) for j in dead}] * 3
        errors = {
            r.get_attribute("data-job"): r.locator("td.error").inner_text()
            for r in page.locator("#jobs tbody tr").all()
        }
        assert errors == {
            **{str(j): "TimeoutError: upstream" for j in jobs["timeouts"]},
            **{str(j): "ValueError: bad input" for j in jobs["others"]},
        }
        tries = {r.locator("td.num").inner_text() for r in page.locator("#jobs tbody tr").all()}
        assert tries == {"1/1"}
        page.goto(f"{base}/jobs?status=asleep")
        assert "status must be 1 to 6 or a name (PENDING," in page.locator("#problem").inner_text()
        page.goto(f"{base}/jobs?type=MAILS")
        assert (
            "a type's name (OUTBOX, SEARCH), not 'MAILS'" in page.locator("#problem").inner_text()
        )


def test_a_page_under_another_name_gets_nothing(
    conn: Conn, login_role: Callable[..., str], chromium: Any
) -> None:
    jobs = arrange(conn)
    dead = jobs["others"][0]
    before = unchanged(conn)
    with dashboard(login_role("pyjobq_admin"), "--allow-actions") as base:
        port = base.rsplit(":", 1)[1]
        for own in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LocalHost"):
            assert status_of(f"{base}/jobs/{dead}", headers={"host": own}) == 200, own
        for other in (f"attacker.example:{port}", "attacker.example", f"localhost.example:{port}"):
            assert status_of(f"{base}/jobs/{dead}", headers={"host": other}) == 421, other
            assert status_of(f"{base}/prune", "POST", b"days=0", {"host": other}) == 421, other
        # A real browser on a page whose name resolves to loopback, as DNS rebinding makes it.
        rebound = chromium.launch(
            executable_path=str(CHROMIUM),
            args=[*CHROMIUM_ARGS, "--host-resolver-rules=MAP attacker.example 127.0.0.1"],
        )
        try:
            page = rebound.new_page()
            answer = page.goto(f"http://attacker.example:{port}/jobs/{dead}")
            assert answer is not None
            assert answer.status == 421
            assert "flaky" not in page.content()
            assert (
                page.evaluate(
                    f"fetch('/jobs/{dead}/redrive', {{method: 'POST'}}).then(r => r.status)"
                )
                == 421
            )
        finally:
            rebound.close()
    assert unchanged(conn) == before
    assert one(conn, "select count(*) from pyjobq.audit_log") == 0


def test_a_post_from_another_origin_is_refused_whatever_it_carries(
    conn: Conn, login_role: Callable[..., str], page: Any
) -> None:
    jobs = arrange(conn)
    dead = jobs["others"][0]
    before = unchanged(conn)
    with dashboard(login_role("pyjobq_admin"), "--allow-actions") as base:
        port = base.rsplit(":", 1)[1]
        page.goto(f"{base}/jobs/{dead}")
        csrf = page.locator("meta[name=csrf]").get_attribute("content")
        url = f"{base}/jobs/{dead}/redrive"
        for headers in (
            {"origin": "http://attacker.example"},
            {"origin": f"http://localhost:{port}"},  # another origin on this machine
            {"origin": "null"},
            {"sec-fetch-site": "same-site"},
            {"sec-fetch-site": "cross-site"},
        ):
            assert forged_post(page, url, headers, csrf=csrf) == 403, headers
        assert unchanged(conn) == before
        # The same POST from the dashboard's own origin runs.
        own = {"origin": base, "sec-fetch-site": "same-origin"}
        assert forged_post(page, url, own, csrf=csrf) == 303
    assert one(conn, "select status from pyjobq.job where job_id = %s", (dead,)) == 1
    # Behind a proxy that passes its upstream's address as the Host, the site's own pages POST
    # from the name it was given with --allowed-host, and from no other.
    other = jobs["others"][1]
    proxied = {"origin": "https://dash.example.com", "sec-fetch-site": "same-origin"}
    with dashboard(login_role("pyjobq_admin"), "--allow-actions") as base:
        page.goto(f"{base}/jobs/{other}")
        csrf = page.locator("meta[name=csrf]").get_attribute("content")
        assert forged_post(page, f"{base}/jobs/{other}/redrive", proxied, csrf=csrf) == 403
    with dashboard(
        login_role("pyjobq_admin"), "--allow-actions", "--allowed-host", "dash.example.com"
    ) as base:
        page.goto(f"{base}/jobs/{other}")
        csrf = page.locator("meta[name=csrf]").get_attribute("content")
        assert forged_post(page, f"{base}/jobs/{other}/redrive", proxied, csrf=csrf) == 303
    assert one(conn, "select status from pyjobq.job where job_id = %s", (other,)) == 1


def test_a_role_without_the_grant_changes_nothing(
    conn: Conn, login_role: Callable[..., str], page: Any
) -> None:
    jobs = arrange(conn)
    dead = jobs["others"][0]
    running = jobs["running"][0]
    before = unchanged(conn)
    # A producer may cancel, but neither redrive nor prune: the dashboard offers neither.
    with dashboard(login_role("pyjobq_producer"), "--allow-actions") as base:
        page.goto(f"{base}/jobs/{dead}")
        assert page.locator("#redrive").count() == 0
        csrf = page.locator("meta[name=csrf]").get_attribute("content")
        assert forged_post(page, f"{base}/jobs/{dead}/redrive", csrf=csrf) == 403
        assert forged_post(page, f"{base}/prune", csrf=csrf, days="0") == 403
        assert forged_post(page, f"{base}/actions/run", csrf=csrf, action="redrive") == 403
    # An admin's grant taken away while its dashboard runs: the database refuses.
    admin = login_role("pyjobq_admin")
    with dashboard(admin, "--allow-actions") as base:
        page.goto(f"{base}/jobs/{dead}")
        assert page.locator("#redrive").count() == 1
        csrf = page.locator("meta[name=csrf]").get_attribute("content")
        role = conninfo_to_dict(admin)["user"]
        conn.execute(f'revoke pyjobq_admin from "{role}"')
        page.click("#redrive")
        assert "the database refused" in page.locator("#problem").inner_text()
        assert forged_post(page, f"{base}/jobs/{running}/cancel", csrf=csrf) == 403
        assert forged_post(page, f"{base}/prune", csrf=csrf, days="0") == 403
    assert unchanged(conn) == before
    assert one(conn, "select count(*) from pyjobq.audit_log") == 0


def test_a_bulk_action_changes_only_the_jobs_its_preview_counted(
    conn: Conn, login_role: Callable[..., str], page: Any
) -> None:
    jobs = arrange(conn)
    previewed = {*jobs["timeouts"], *jobs["others"]}
    with dashboard(login_role("pyjobq_admin"), "--allow-actions") as base:
        page.goto(f"{base}/actions/preview?action=redrive&status=4")
        assert page.locator("#count").inner_text() == "5"
        csrf = page.locator("meta[name=csrf]").get_attribute("content")
        key = page.locator("input[name=preview]").get_attribute("value")
        # After the preview: one more job goes DEAD, and a previewed one is redriven elsewhere.
        (late,) = fail_for_good(conn, "w-3", "ValueError: late", 1)
        conn.execute("select * from pyjobq.job_redrive(%s)", ([jobs["others"][0]],))
        page.click("#run")
        page.wait_for_url("**/audit?notice=*")
        assert page.locator("#notice").inner_text() == (
            "redrive: 4 jobs (1 of those previewed had moved on)"
        )
        # A preview runs once.
        run = {"csrf": csrf, "action": "redrive", "preview": key}
        assert forged_post(page, f"{base}/actions/run", **run) == 410
    assert one(conn, "select status from pyjobq.job_all where job_id = %s", (late,)) == 4
    pending = conn.execute("select job_id from pyjobq.job where status = 1 and job_type = 1")
    assert {r[0] for r in pending} == previewed


def test_prune_shows_what_it_deletes_before_it_deletes(
    conn: Conn, login_role: Callable[..., str], page: Any, tmp_path: Path
) -> None:
    arrange(conn)
    conn.execute("update pyjobq.job_history set updated_at = updated_at - interval '10 days'")
    ended = one(conn, "select count(*) from pyjobq.job_history")
    with dashboard(login_role("pyjobq_admin"), "--allow-actions") as base:
        page.goto(base + "/")
        page.click("nav >> text=Prune")
        assert page.locator("#prune").count() == 0, "no prune before its estimate"
        page.fill("input[name=days]", "5")
        page.click("#estimate")
        assert page.locator("#jobs").inner_text() == str(ended)
        assert one(conn, "select count(*) from pyjobq.job_history") == ended
        shoot(page, "prune", tmp_path)
        page.click("#prune")
        page.wait_for_url("**/audit?notice=*")
        assert page.locator("#notice").inner_text() == f"prune: {ended} jobs"
    assert one(conn, "select count(*) from pyjobq.job_history") == 0
