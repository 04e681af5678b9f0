"""The queue systems benchmarked, and how their drivers are called.

Each system is a program in bench/peers that follows the contract in
bench/peers/contract.py: it finds its database in the libpq environment, takes
one command, and prints one JSON object on its last stdout line. To add a
system, write its driver and add one entry to SYSTEMS.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cluster import Cluster

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PEERS_PYTHON = BENCH / ".venv-peers" / "bin" / "python"
# Past this a driver has hung: the run fails rather than never ending.
DRIVER_TIMEOUT_S = 900
# The name the raw-SQL ceiling's figures carry in the system column.
CEILING = "ceiling"

# "peer" systems are the ones pyjobq is compared with ("best peer" is taken over
# these), "subject" is pyjobq itself, "ceiling" is what PostgreSQL allows.
Role = Literal["peer", "subject", "ceiling"]


class DriverError(RuntimeError):
    """A driver or pgbench failed, or reported a run that did not do all its work."""


@dataclass(frozen=True, kw_only=True)
class System:
    """A queue benchmarked through a driver that follows bench/peers/contract.py."""

    name: str
    argv: tuple[str, ...]
    role: Literal["peer", "subject"] = "peer"
    # The system's job table, read by the pinned-horizon scenario's readers.
    table: str | None = None
    # Environment added to the driver's (e.g. to pick a mode of one driver).
    env: tuple[tuple[str, str], ...] = ()
    # Driver commands beyond the common contract (claimcost, sustained).
    extras: frozenset[str] = frozenset()


def peer_python(driver: str) -> tuple[str, ...]:
    """A Python driver run in bench/.venv-peers, so that no peer becomes pyjobq's dependency."""
    return (str(PEERS_PYTHON), str(BENCH / "peers" / driver))


def node(driver: str) -> tuple[str, ...]:
    """A node driver; its packages are in bench/node, pinned by package-lock.json."""
    return ("node", str(BENCH / "peers" / driver))


# pyjobq's driver runs in the interpreter of the run itself, the project's .venv.
PYJOBQ_DRIVER = (sys.executable, str(BENCH / "peers" / "pyjobq_drv.py"))

SYSTEMS: tuple[System, ...] = (
    System(
        name="procrastinate",
        argv=peer_python("procrastinate_drv.py"),
        table="procrastinate_jobs",
    ),
    System(name="pgqueuer", argv=peer_python("pgqueuer_drv.py"), table="pgqueuer"),
    System(
        name="graphile-worker",
        argv=node("graphile.mjs"),
        table="graphile_worker._private_jobs",
    ),
    System(name="pg-boss", argv=node("pgboss.mjs"), table="pgboss.job"),
    # pyjobq as shipped: pyjobq.worker.Worker(concurrency=W), its defaults.
    System(
        name="pyjobq",
        argv=PYJOBQ_DRIVER,
        role="subject",
        table="pyjobq.job_all",
        extras=frozenset({"claimcost", "sustained"}),
    ),
    # pyjobq as shipped, with claim fronts off in every session (pyjobq.claim_front_off):
    # what the front buys the pinned drain, in the same run.
    System(
        name="pyjobq-nofront",
        argv=PYJOBQ_DRIVER,
        role="subject",
        table="pyjobq.job_all",
        env=(("PGOPTIONS", "-c pyjobq.claim_front_off=on"),),
    ),
    # pyjobq as shipped, its job type keeping none of its DONE jobs (job_type_set_history):
    # what keeping them costs, beside peers that keep nothing.
    System(
        name="pyjobq-keepnone",
        argv=PYJOBQ_DRIVER,
        role="subject",
        table="pyjobq.job_all",
        env=(("PYJOBQ_KEEP_DONE", "0"),),
    ),
    # The same SQL without the Worker: W connections, claim(50) + complete_many.
    System(
        name="pyjobq-loop",
        argv=PYJOBQ_DRIVER,
        role="subject",
        table="pyjobq.job_all",
        env=(("PYJOBQ_DRAIN", "loop"),),
    ),
)


def call_driver(cluster: Cluster, system: System, dbname: str, *args: object) -> dict[str, Any]:
    """Run one driver command against ``dbname``; its answer, the JSON of its last line."""
    argv = [*system.argv, *(str(a) for a in args)]
    proc = subprocess.run(
        argv,
        env={**cluster.libpq_env(dbname), **dict(system.env)},
        capture_output=True,
        text=True,
        timeout=DRIVER_TIMEOUT_S,
        cwd=BENCH,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise DriverError(
            f"{system.name} {' '.join(map(str, args))} exited {proc.returncode}:\n"
            + proc.stderr[-3000:]
        )
    answer: dict[str, Any] = json.loads(lines[-1])
    return answer
