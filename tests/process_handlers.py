"""Handlers the child processes of the process tests import (``in_process`` sends them by
reference). Each answers with the pid of the process it ran in; ``payload.pidfile`` makes the
first attempt write it there as it starts, so a test can see that process killed."""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path

from pyjobq.params import Payload
from pyjobq.rows import ClaimedJob
from pyjobq.tasks import Tasks
from pyjobq.worker import Retry

tasks = Tasks()


def busy(n: int) -> int:
    """CPU-bound Python: holds the GIL of the process it runs in."""
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def started(job: ClaimedJob) -> None:
    """The first attempt to start writes its pid to ``payload.pidfile``."""
    if (pidfile := job.payload.get("pidfile")) and not Path(pidfile).exists():
        Path(pidfile).write_text(str(os.getpid()))


def compute(job: ClaimedJob) -> Payload:
    started(job)
    return {"pid": os.getpid(), "total": busy(int(job.payload.get("n", 1000)))}


def hang_first(job: ClaimedJob) -> Payload:
    """The first attempt never ends by itself: it sleeps, or spins on the CPU, as
    ``payload.how`` says (without it, it returns)."""
    started(job)
    if job.attempt == 1 and "how" in job.payload:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if job.payload["how"] == "sleep":
                time.sleep(1)
            else:
                busy(100_000)
    return {"pid": os.getpid()}


def allocate(job: ClaimedJob) -> Payload:
    started(job)
    block = bytearray(int(job.payload["mb"]) * 1024 * 1024)
    return {"pid": os.getpid(), "size": len(block)}


class Unpicklable(Exception):
    """An exception that pickles but cannot be made again from its arguments."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"{code}: {text}")


def misbehave(job: ClaimedJob) -> Payload:
    """What ``payload.do`` says: every way a handler can end other than returning."""
    started(job)
    do = job.payload["do"]
    if do == "raise":
        raise ValueError("bad input from the child")
    if do == "retry" and job.attempt == 1:
        raise Retry(0.01, "once more")
    if do == "exit":
        os._exit(3)
    if do == "unpicklable result":
        return {"f": pickle}  # a module does not pickle
    if do == "unreadable exception":
        raise Unpicklable(7, "lost on the way")
    if do == "interrupt":
        raise KeyboardInterrupt
    return {"pid": os.getpid()}


@tasks.task(1, "SEARCH")
def search(n: int) -> Payload:
    """A task: its handler (a TaskHandler) goes to the child by the task's module and name."""
    return {"pid": os.getpid(), "total": busy(n)}


def hold(job: ClaimedJob) -> Payload:
    """Writes its pid to ``payload.dir``/<job id>, then waits (a minute at most) until a file
    ``go`` is there: as many run at once as the worker can run."""
    folder = Path(job.payload["dir"])
    (folder / str(job.job_id)).write_text(str(os.getpid()))
    deadline = time.monotonic() + 60
    while not (folder / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return {"pid": os.getpid()}
