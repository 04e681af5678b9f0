"""The ``pinned`` scenario's other sessions: the xmin horizon held, as long queries hold it."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
from psycopg import sql

from cluster import Cluster


class PinnedHorizon:
    """Another session's snapshot held open, plus REPEATABLE READ readers scanning the table.

    The idle transaction pins the xmin horizon of the database: no row version
    that any queue writes from then on can be removed, by vacuum or by index
    scans marking entries dead, until it ends. The readers loop without pause;
    ``scans`` counts the scans they finished.
    """

    def __init__(self, cluster: Cluster, dbname: str, table: str, readers: int) -> None:
        self.cluster, self.dbname, self.readers = cluster, dbname, readers
        self.table = sql.SQL(".").join(sql.Identifier(p) for p in table.split("."))
        self.stop = threading.Event()
        self.scans = 0
        self.threads: list[threading.Thread] = []
        self.pin: psycopg.Connection[Any] | None = None

    def __enter__(self) -> PinnedHorizon:
        self.pin = psycopg.connect(self.cluster.dsn(self.dbname))
        self.pin.execute("begin isolation level repeatable read")
        self.pin.execute(sql.SQL("select 1 from {} limit 1").format(self.table))
        for _ in range(self.readers):
            t = threading.Thread(target=self._read, daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def _read(self) -> None:
        with psycopg.connect(self.cluster.dsn(self.dbname)) as conn:
            while not self.stop.is_set():
                with conn.transaction():
                    conn.execute("set transaction isolation level repeatable read")
                    conn.execute(sql.SQL("select count(*) from {}").format(self.table))
                self.scans += 1

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)
        if self.pin is not None:
            self.pin.close()
