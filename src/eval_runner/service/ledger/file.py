"""The ledger's SQLite file: the per-key lock, the connection's pragmas, the schema and its migrations.

`service.ledger` holds the rules; this module only makes a file safe to hold them. The connection runs in
autocommit mode (`isolation_level=None`) so the ledger writes its own `BEGIN IMMEDIATE … COMMIT`; the
journal is WAL with `synchronous=FULL`, so each commit is on disk when it returns; foreign keys are on, so
aliases and progress notes never outlive their claim. The schema version is SQLite's `user_version`:
each step in `MIGRATIONS` brings a file one version up, and a file newer than this code is refused
rather than misread.

The lock file (`<ledger>.<first 16 hex of the key>.lock`, flock, exclusive) is held for as long as a
ledger is open, so two processes never run crash recovery under each other for the same runner key; the
kernel drops it when the holder dies, SIGKILL included.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from eval_runner.contracts.errors import Code, ContractError
from eval_runner.service.ledger.backend import LedgerStorage, ledger_tables
from eval_runner.service.ledger.claims import LedgerError

LEDGER_FILE = "ledger.sqlite3"
SCHEMA_VERSION = 2
#: Version 1: the ledger's tables (`backend.ledger_tables`, the same as PostgreSQL's) in SQLite's words.
SCHEMA = ledger_tables(big="INTEGER", blob="BLOB", shared=False)
#: Version 2: a publish's progress on its run's job (the signed 3189, kept before it is sent).
PUBLISHING = "ALTER TABLE jobs ADD COLUMN publishing TEXT"
#: Schema scripts by the version they bring the file to; a file at a later version is refused.
MIGRATIONS: dict[int, str] = {1: SCHEMA, 2: PUBLISHING}


class LedgerFile(LedgerStorage):
    """An open ledger file for one runner key: its connection, its lock, and the transactions over them.

    A write is `BEGIN IMMEDIATE … COMMIT` on the current rows, durable when it returns and rolled back
    whole on any error, so nothing ever writes a stale snapshot over a newer one and a failed write can
    simply be retried. The key's lock admits one process, so every unsettled claim is this process's.
    """

    SAVE_JOB: ClassVar[str] = (
        "INSERT OR REPLACE INTO jobs (key, worker, action, principal, request, status, check_id, validates, "
        "results, report, report_digest, sealed, published, publishing) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )

    def __init__(self, path: Path, worker: str, db: sqlite3.Connection, lock_fd: int) -> None:
        super().__init__(worker, path.parent)
        self.path = path
        self._db = db
        self._lock_fd = lock_fd

    def close(self) -> None:
        """Close the database and give up the key's lock. Idempotent."""
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            release(self._db, self._lock_fd)

    def _unheld(self, now: int) -> tuple[str, tuple[Any, ...]]:
        return "", ()

    # -- transactions --------------------------------------------------------------------------

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: committed (and fsynced) on normal exit, rolled back whole on any error."""
        with self._mutex:
            if self._closed:
                raise LedgerError("the ledger is closed")
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as error:
                raise LedgerError(f"the ledger could not start a write: {error}") from error
            try:
                yield self._db
            except BaseException as error:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                if isinstance(error, sqlite3.Error):
                    raise LedgerError(f"the ledger write failed: {error}") from error
                if isinstance(error, ContractError):
                    raise LedgerError(f"the ledger write failed: {error.detail}", Code.MALFORMED) from error
                raise
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error as error:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                raise LedgerError(f"the ledger could not commit: {error}") from error

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A consistent read (one snapshot across statements)."""
        with self._mutex:
            if self._closed:
                raise LedgerError("the ledger is closed")
            try:
                self._db.execute("BEGIN")
                try:
                    yield self._db
                finally:
                    self._db.execute("COMMIT")
            except sqlite3.Error as error:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                raise LedgerError(f"the ledger read failed: {error}") from error


def connect(path: Path, worker: str, busy_timeout_ms: int) -> tuple[sqlite3.Connection, int]:
    """Take the key's lock, then open `path` (created 0600) with the ledger's pragmas and current schema."""
    lock_fd = -1
    db: sqlite3.Connection | None = None
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock_fd = _hold_lock(path.with_name(f"{path.name}.{worker[:16]}.lock"))
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        db = sqlite3.connect(path, timeout=busy_timeout_ms / 1000, isolation_level=None, check_same_thread=False)
        db.row_factory = sqlite3.Row
        mode = _use_wal(db, busy_timeout_ms)
        if mode != "wal":
            raise LedgerError(f"the ledger file cannot use a WAL journal (got {mode})")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA foreign_keys=ON")
        db.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        migrate(db)
    except LedgerError:
        release(db, lock_fd)
        raise
    except (sqlite3.Error, OSError) as error:
        release(db, lock_fd)
        raise LedgerError(f"the ledger at {path.name} could not be opened: {error}") from error
    return db, lock_fd


def _use_wal(db: sqlite3.Connection, busy_timeout_ms: int) -> str:
    """Switch the file to WAL, retrying within the busy timeout.

    Switching a fresh file's journal needs an exclusive lock, and SQLite answers `database is locked` at once
    (without its busy handler) when another process opening the same new file holds a lock; a pause and a
    retry settles it (measured: 1 in ~60 six-process races before this loop).
    """
    deadline = time.monotonic() + busy_timeout_ms / 1000
    pause = 0.005
    while True:
        try:
            return str(db.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def migrate(db: sqlite3.Connection) -> None:
    """Bring the file to `SCHEMA_VERSION` in one transaction; refuse a newer file."""
    db.execute("BEGIN IMMEDIATE")
    try:
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise LedgerError(f"the ledger file has schema {version}; this runner knows up to {SCHEMA_VERSION}")
        for target in range(version + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[target].split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version={target}")
        db.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise


def _hold_lock(path: Path) -> int:
    """Take the key's lock file (flock, exclusive, non-blocking); the kernel drops it when the process dies."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as error:
        os.close(fd)
        raise LedgerError("another process has this runner key's ledger open") from error
    return fd


def release(db: sqlite3.Connection | None, lock_fd: int) -> None:
    if db is not None:
        with contextlib.suppress(sqlite3.Error):
            db.close()
    if lock_fd >= 0:
        with contextlib.suppress(OSError):
            os.close(lock_fd)
