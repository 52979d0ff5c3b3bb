"""The ledger's two backends behind one face, so its contract suite runs once against each.

`LedgerBackend` opens a ledger for a directory (the embedded SQLite file in it, or, for PostgreSQL, a
schema of the session's throwaway server that stands for that directory: the same directory reopens the
same database, another directory is another database) and runs raw statements (`?` placeholders) on it
from outside the ledger, as an operator or a crash would. `tests/conftest.py` gives it as the
`ledger_backend` fixture, parametrized over `BACKENDS`.
"""

from __future__ import annotations

import contextlib
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import psycopg

from eval_runner.service.ledger.postgres import PostgresLedger
from eval_runner.service.ledger.store import Ledger, ledger_path
from tests.support.ledger_requests import NOW, WORKER
from tests.support.postgres_server import PostgresServer

BACKENDS: Final = ("sqlite", "postgresql")


@dataclass
class LedgerBackend:
    """One backend for one test: `open` a ledger for a directory, `execute` raw SQL on its database."""

    name: str
    server: PostgresServer | None = None
    _urls: dict[Path, str] = field(default_factory=dict)

    @property
    def shared(self) -> bool:
        """Several processes may hold one runner key's ledger at once (PostgreSQL)."""
        return self.name == "postgresql"

    def url(self, directory: Path) -> str:
        """The database that stands for `directory` (PostgreSQL only)."""
        assert self.server is not None, "the SQLite backend has no URL"
        if directory not in self._urls:
            self._urls[directory] = self.server.fresh_schema()
        return self._urls[directory]

    def open(self, directory: Path, worker: str = WORKER, now: int = NOW, *, lease_ms: int = 30_000) -> Ledger:
        if self.name == "sqlite":
            return Ledger.open(ledger_path(directory), worker, now)
        return PostgresLedger.connect(self.url(directory), directory, worker, now, lease_ms=lease_ms)

    def execute(self, directory: Path, sql: str, parameters: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run one statement on the directory's database outside any ledger; its rows as tuples."""
        if self.name == "sqlite":
            with contextlib.closing(sqlite3.connect(ledger_path(directory))) as raw, raw:
                return [tuple(row) for row in raw.execute(sql, parameters).fetchall()]
        with psycopg.connect(self.url(directory), autocommit=True) as shared:
            cursor = shared.execute(sql.replace("?", "%s"), parameters)
            return [tuple(row) for row in cursor.fetchall()] if cursor.description else []
