"""Django's task framework on pyjobq, in a Django project made from scratch: Django 6.1's
``django.tasks``, and Django 5.2 with the ``django-tasks`` backport (``django_tasks``).

Django 6.1 lives in its own virtualenv, ``.venv-django`` (a Python 3.12 or newer;
``./scripts/setup`` makes it where there is one); Django 5.2 and the backport are in the
project's own ``.venv``. Each project is made and run as a user would: the test's own
``django-admin startproject`` and ``startapp``, the settings docs/integrations.md gives,
``manage.py migrate``, tasks enqueued inside ``transaction.atomic()`` (committed and rolled
back), a real worker (``manage.py pyjobq worker``), and results read back with ``get_result``.
This process only reads the database.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from tests.sqlhelp import one
from tests.workerhelp import wait_for

ROOT = Path(__file__).resolve().parent.parent
# Each framework's module, and the Python of the virtualenv that has it.
PYTHONS = {
    "django.tasks": ROOT / ".venv-django" / "bin" / "python",
    "django_tasks": ROOT / ".venv" / "bin" / "python",
}


@dataclass(frozen=True)
class Project:
    root: Path
    python: Path
    framework: str  # django.tasks, or the backport's django_tasks

    def code(self, text: str) -> str:
        """``text`` for this project's framework, dedented."""
        return textwrap.dedent(text).replace("django.tasks", self.framework)


Conn = psycopg.Connection[Any]

TASKS = """
    import os

    from django.tasks import task

    from orders.models import Order


    @task
    def send_receipt(order_id: int, email: str) -> dict:
        return {"sent_to": email, "order": order_id}


    @task(queue_name="emails", priority=50)
    def bounce(n: int) -> None:
        raise ValueError(f"mailbox {n} is full")


    @task(takes_context=True)
    def which_attempt(context, tag: str) -> int:
        return context.attempt


    @task
    async def add(a: int, b: int) -> int:
        return a + b


    @task
    def count_orders() -> dict:
        return {"orders": Order.objects.count(), "pid": os.getpid()}
"""

MODELS = """
    from django.db import models


    class Order(models.Model):
        email = models.CharField(max_length=200)
"""

# What docs/integrations.md tells a Django project to add to its settings.
SETTINGS = """
    INSTALLED_APPS += {apps!r}
    DATABASES = {{"default": {{
        "ENGINE": "django.db.backends.postgresql",
        "NAME": {dbname!r}, "USER": {user!r}, "HOST": {host!r}, "PORT": {port!r},
    }}}}
    TASKS = {{
        "default": {{
            "BACKEND": "pyjobq.contrib.django.tasks.PyjobqBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {{
                "QUEUE_POLICIES": {{"emails": {{"max_attempts": {emails_attempts},
                                               "backoff_base_seconds": 0.01}}}},
            }},
        }}
    }}
"""

ENQUEUE = """
    import json
    from datetime import timedelta

    from django.db import transaction
    from django.utils import timezone

    from orders.models import Order
    from orders.tasks import add, bounce, send_receipt, which_attempt

    ids = {}
    with transaction.atomic():
        order = Order.objects.create(email="ada@example.com")
        ids["receipt"] = send_receipt.enqueue(order.pk, "ada@example.com").id
    try:
        with transaction.atomic():
            order = Order.objects.create(email="bo@example.com")
            ids["rolled_back"] = send_receipt.enqueue(order.pk, "bo@example.com").id
            raise RuntimeError("the order is refused")
    except RuntimeError:
        pass
    ids["bounce"] = bounce.enqueue(7).id
    ids["attempt"] = which_attempt.enqueue("x").id
    ids["add"] = add.enqueue(2, 3).id
    later = timezone.now() + timedelta(hours=1)
    ids["later"] = send_receipt.using(run_after=later, priority=-100).enqueue(0, "later").id
    try:
        send_receipt.enqueue(object(), "not JSON")
    except TypeError as e:
        ids["refused"] = type(e).__name__
    print(json.dumps(ids))
"""

RESULTS = """
    import asyncio
    import json
    import sys

    from django.tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch

    from orders.tasks import add, bounce, send_receipt, which_attempt

    ids = json.loads(sys.stdin.read())
    out = {}
    for name, task in [("receipt", send_receipt), ("bounce", bounce), ("attempt", which_attempt),
                       ("later", send_receipt)]:
        r = task.get_result(ids[name])
        out[name] = {
            "status": r.status, "finished": r.is_finished, "attempts": r.attempts,
            "value": r.return_value if r.status == "SUCCESSFUL" else None,
            "errors": [e.exception_class_path for e in r.errors],
            "last_line": r.errors[-1].traceback.splitlines()[-1] if r.errors else None,
            "args": r.args,
        }
    out["add"] = asyncio.run(add.aget_result(ids["add"])).return_value
    for name, call in [("mismatch", lambda: send_receipt.get_result(ids["bounce"])),
                       ("missing", lambda: send_receipt.get_result(ids["rolled_back"])),
                       ("garbage", lambda: send_receipt.get_result("not-an-id"))]:
        try:
            call()
        except (TaskResultMismatch, TaskResultDoesNotExist) as e:
            out[name] = type(e).__name__
    print(json.dumps(out))
"""


def run(project: Project, *args: str, stdin: str | None = None) -> str:
    """``python ARGS`` in the project, with its virtualenv's Python; its stdout."""
    done = subprocess.run(
        [str(project.python), *args], cwd=project.root, input=stdin, capture_output=True, text=True,
        timeout=120, check=False, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )  # fmt: skip
    assert done.returncode == 0, f"{args}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def configure(project: Project, dsn: str, emails_attempts: int) -> None:
    """The settings docs/integrations.md gives, appended to startproject's."""
    params = conninfo_to_dict(dsn)
    settings = project.root / "shop" / "settings.py"
    base = settings.read_text().split("\n# pyjobq\n")[0]
    backport = ["django_tasks"] if project.framework == "django_tasks" else []
    extra = SETTINGS.format(
        apps=[*backport, "pyjobq.contrib.django", "orders"], dbname=params["dbname"],
        user=params.get("user", ""), host=params.get("host", ""),
        port=str(params.get("port", "")), emails_attempts=emails_attempts,
    )  # fmt: skip
    settings.write_text(base + "\n# pyjobq\n" + textwrap.dedent(extra))


@pytest.fixture(params=sorted(PYTHONS))
def project(request: pytest.FixtureRequest, tmp_path: Path, dsn: str) -> Project:
    """A new project ``shop`` with an app ``orders`` (a model, five tasks), migrated, on each
    framework."""
    framework: str = request.param
    python = PYTHONS[framework]
    if not python.exists():
        pytest.skip(f"no {python.parent.parent.name}: ./scripts/setup makes it (Python 3.12+)")
    root = tmp_path / "site"
    root.mkdir()  # Django 5.2 wants it there
    run(Project(tmp_path, python, framework), "-m", "django", "startproject", "shop", str(root))
    project = Project(root, python, framework)
    run(project, "manage.py", "startapp", "orders")
    (project.root / "orders" / "models.py").write_text(textwrap.dedent(MODELS))
    (project.root / "orders" / "tasks.py").write_text(project.code(TASKS))
    configure(project, dsn, emails_attempts=2)
    run(project, "manage.py", "makemigrations", "orders")
    run(project, "manage.py", "migrate")
    return project


def worker(project: Project, *args: str) -> subprocess.Popen[str]:
    command = [
        "manage.py", "pyjobq", "worker", "pyjobq.contrib.django.tasks:handlers", "-c", "2", *args
    ]  # fmt: skip
    return subprocess.Popen(
        [str(project.python), *command], cwd=project.root, stderr=subprocess.PIPE, text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )  # fmt: skip


def test_a_django_project_enqueues_in_its_transactions_and_reads_results_back(
    project: Project, conn: Conn
) -> None:
    ids = json.loads(run(project, "manage.py", "shell", "-v", "0", "-c", project.code(ENQUEUE)))
    assert ids["refused"] == "TypeError"  # arguments that are not JSON enqueue nothing
    jobs = {
        str(job_id): (name, status, priority)
        for job_id, name, status, priority in conn.execute(
            "select j.job_id, t.name, j.status, j.priority from pyjobq.job_all j"
            " join pyjobq.job_type t using (job_type)"
        )
    }
    assert ids["rolled_back"] not in jobs  # rolled back with its order
    assert jobs[ids["receipt"]] == ("default", 1, 100)  # Django's priority 0 is pyjobq's 100
    assert jobs[ids["bounce"]] == ("emails", 1, 50)
    assert jobs[ids["later"]] == ("default", 1, 200)
    assert len(jobs) == 5
    assert one(conn, "select count(*) from orders_order") == 1

    proc = worker(project)
    try:
        ended = "select count(*) from pyjobq.job_all where status in (3, 4)"
        wait_for(lambda: one(conn, ended) == 4, "the four due tasks to end")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    finally:
        proc.kill()

    results = json.loads(
        run(
            project,
            "manage.py",
            "shell",
            "-v",
            "0",
            "-c",
            project.code(RESULTS),
            stdin=json.dumps(ids),
        )
    )
    assert results["receipt"] == {
        "status": "SUCCESSFUL", "finished": True, "attempts": 1,
        "value": {"sent_to": "ada@example.com", "order": 1}, "errors": [], "last_line": None,
        "args": [1, "ada@example.com"],
    }  # fmt: skip
    assert results["bounce"] == {
        "status": "FAILED",
        "finished": True,
        "attempts": 2,
        "value": None,
        "errors": ["builtins.ValueError", "builtins.ValueError"],
        "last_line": "ValueError: mailbox 7 is full",
        "args": [7],
    }  # fmt: skip  (the queue's policy: two tries)
    assert results["attempt"]["value"] == 1
    assert results["later"]["status"] == "READY"
    assert results["add"] == 5
    assert results["mismatch"] == "TaskResultMismatch"
    assert results["missing"] == "TaskResultDoesNotExist"
    assert results["garbage"] == "TaskResultDoesNotExist"


def test_a_queue_policy_that_never_reached_the_database_stops_the_worker_at_start(
    project: Project, dsn: str, conn: Conn
) -> None:
    configure(project, dsn, emails_attempts=5)  # changed, and not migrated
    proc = worker(project)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert "the policy of job type 'emails' did not reach the database" in err
    assert "max_attempts is 2 there, 5 declared" in err
    run(project, "manage.py", "migrate")
    policy = "select max_attempts from pyjobq.job_type where name = 'emails'"
    assert one(conn, policy) == 5


COUNT = """
    import json

    from django.db import transaction

    from orders.models import Order
    from orders.tasks import count_orders

    with transaction.atomic():
        Order.objects.create(email="cy@example.com")
        print(json.dumps(count_orders.enqueue().id))
"""

RESULT = """
    import json
    import sys

    from orders.tasks import count_orders

    print(json.dumps(count_orders.get_result(json.loads(sys.stdin.read())).return_value))
"""


def test_a_django_worker_runs_its_tasks_in_child_processes(project: Project, conn: Conn) -> None:
    """``manage.py pyjobq worker --processes``: each child sets Django up before it imports the
    tasks module (which imports models), and runs the task's query on its own connection."""
    shell = ["manage.py", "shell", "-v", "0", "-c"]
    job_id = json.loads(run(project, *shell, project.code(COUNT)))
    proc = worker(project, "--processes")
    try:
        wait_for(lambda: one(conn, "select count(*) from pyjobq.job_all where status = 3"), "DONE")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    finally:
        proc.kill()
    result = json.loads(run(project, *shell, project.code(RESULT), stdin=json.dumps(job_id)))
    assert result["orders"] == 1
    assert result["pid"] != proc.pid


JOBS = """
    import os

    from orders.models import Order
    from pyjobq.tasks import Tasks

    tasks = Tasks()


    @tasks.task(1, "SEARCH")
    def count(extra: int) -> dict:
        return {"orders": Order.objects.count() + extra, "pid": os.getpid()}
"""


def test_a_tasks_table_importing_models_runs_in_child_processes(
    project: Project, conn: Conn
) -> None:
    """``manage.py pyjobq worker orders.jobs:tasks --processes``, the tasks' module importing
    models at its top: each child sets Django up before it imports it."""
    (project.root / "orders" / "jobs.py").write_text(textwrap.dedent(JOBS))
    enqueue = "from pyjobq.contrib.django import job_queue; from orders.jobs import count; "
    run(project, "manage.py", "shell", "-v", "0", "-c", enqueue + "count.enqueue(job_queue(), 2)")
    proc = subprocess.Popen(
        [str(project.python), "manage.py", "pyjobq", "worker", "orders.jobs:tasks", "--processes"],
        cwd=project.root, stderr=subprocess.PIPE, text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )  # fmt: skip
    try:
        done = "select count(*) from pyjobq.job_all where job_type = 1 and status = 3"
        wait_for(lambda: one(conn, done), "the job DONE")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    finally:
        proc.kill()
    result = one(conn, "select result from pyjobq.job_all where job_type = 1")
    assert result["orders"] == 2
    assert result["pid"] != proc.pid
