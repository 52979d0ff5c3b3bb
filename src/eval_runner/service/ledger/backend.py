"""Where a ledger keeps its rows: the one surface the rules (`store.Ledger`) need from a database.

The ledger's rules are written once, over SQL both backends speak: the embedded SQLite file
(`file.LedgerFile`, the default) and a PostgreSQL database shared by a fleet of runners
(`postgres.PostgresTables`). A backend gives the rules a write transaction (`_write`: serialised with
every other writer of the same runner key, durable when it returns, rolled back whole on any error), a
consistent read (`_read`), and says which unsettled claims no live process holds (`_unheld`: in SQLite
all of them, since the per-key file lock admits one process; in PostgreSQL those whose holder's lease
has lapsed). Statements use `?` placeholders and name columns, so a row reads the same from either.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol, Self

from eval_runner.contracts.errors import Code
from eval_runner.service.ledger.claims import Claim, LedgerError, ProgressNote, claim_from_row, key_name


class Rows(Protocol):
    """What a statement gives back: rows readable by column name and by position."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Db(Protocol):
    """One open transaction: run a statement with `?` placeholders."""

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Rows: ...


#: The claim phases a `claims` row may be in.
PHASES = "'reserved','accepted','intended','running','terminal','unknown','tombstone'"


def ledger_tables(*, big: str, blob: str, shared: bool) -> str:
    """The ledger's tables as one backend creates them, so both read back the same rows: `big` is its word for a
    64-bit integer and `blob` for bytes. A `shared` database (several runners) adds what SQLite has without
    asking or does not need: a `rowid` on claims and jobs (so "oldest first" reads the same), the `holder` of a
    claim and an index of open claims by holder."""
    claims_rowid = f"\n    rowid {big} GENERATED ALWAYS AS IDENTITY UNIQUE," if shared else ""
    holder = "\n    holder TEXT," if shared else ""
    open_claims = "\nCREATE INDEX claims_open ON claims (worker, holder) WHERE outcome IS NULL;" if shared else ""
    jobs_sequence = "\nCREATE SEQUENCE jobs_rowid;" if shared else ""
    jobs_rowid = f"\n    rowid {big} NOT NULL DEFAULT nextval('jobs_rowid')," if shared else ""
    return f"""
CREATE TABLE claims ({claims_rowid}
    key TEXT PRIMARY KEY,
    worker TEXT NOT NULL,
    principal TEXT NOT NULL,
    request TEXT NOT NULL,
    attempt {big} NOT NULL,
    run TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    execute_event TEXT NOT NULL,
    created_at {big} NOT NULL,
    deadline {big} NOT NULL,
    retain_until {big} NOT NULL,
    input_digest TEXT NOT NULL,
    lock_digest TEXT NOT NULL,
    mailbox TEXT NOT NULL,
    controller TEXT NOT NULL,
    record TEXT NOT NULL,
    root {blob} NOT NULL,
    root_digest TEXT NOT NULL,
    phase TEXT NOT NULL CHECK (phase IN ({PHASES})),
    acknowledged INTEGER NOT NULL DEFAULT 0,
    dispatch_intent INTEGER NOT NULL DEFAULT 0,
    effect_started INTEGER NOT NULL DEFAULT 0,
    observed INTEGER NOT NULL DEFAULT 0,
    outcome TEXT CHECK (outcome IN ('completed','failed','cancelled','unknown')),
    dispatched INTEGER,
    result TEXT,
    result_digest TEXT,
    conflicts TEXT NOT NULL DEFAULT '[]',
    code TEXT,
    message TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    cancel_confirmed INTEGER NOT NULL DEFAULT 0,
    cancel_reason TEXT,
    tombstone INTEGER NOT NULL DEFAULT 0,
    holds_slot INTEGER NOT NULL,
    settled_at {big},{holder}
    CHECK (holds_slot = 0 OR outcome IS NULL),
    CHECK (result IS NULL OR outcome IS NOT NULL),
    CHECK (outcome IS NULL OR result IS NOT NULL OR tombstone = 1)
);
CREATE INDEX claims_slots ON claims (worker, holds_slot);
CREATE INDEX claims_control ON claims (worker, request, attempt, run, execute_event);{open_claims}
CREATE TABLE aliases (
    key TEXT NOT NULL REFERENCES claims (key) ON DELETE CASCADE,
    position {big} NOT NULL,
    event_id TEXT NOT NULL,
    PRIMARY KEY (key, event_id)
);
CREATE TABLE progress (
    key TEXT NOT NULL REFERENCES claims (key) ON DELETE CASCADE,
    seq {big} NOT NULL,
    status TEXT NOT NULL,
    PRIMARY KEY (key, seq)
);
CREATE TABLE revoked (worker TEXT NOT NULL, digest TEXT NOT NULL, PRIMARY KEY (worker, digest));
CREATE TABLE controllers (worker TEXT NOT NULL, pubkey TEXT NOT NULL, PRIMARY KEY (worker, pubkey));{jobs_sequence}
CREATE TABLE jobs ({jobs_rowid}
    key TEXT PRIMARY KEY REFERENCES claims (key),
    worker TEXT NOT NULL,
    action TEXT NOT NULL CHECK (action IN ('run','publish')),
    principal TEXT NOT NULL,
    request TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('running','completed','failed','cancelled','unknown')),
    check_id TEXT,
    validates TEXT,
    results TEXT,
    report TEXT,
    report_digest TEXT,
    sealed TEXT,
    published TEXT
);
CREATE INDEX jobs_report ON jobs (worker, principal, report_digest);
"""


#: Columns `_set` may write: a whitelist, so no caller text ever reaches SQL.
_CLAIM_COLUMNS = frozenset(
    {
        "phase",
        "acknowledged",
        "dispatch_intent",
        "effect_started",
        "observed",
        "outcome",
        "dispatched",
        "result",
        "result_digest",
        "conflicts",
        "code",
        "message",
        "cancel_requested",
        "cancel_reason",
        "tombstone",
        "holds_slot",
        "settled_at",
    }
)


class LedgerStorage:
    """The rows of one runner key's ledger and the transactions over them; a backend fills in the I/O.

    One connection serves every thread, guarded by one `RLock`, so the asyncio loop and worker threads
    can share a ledger. `results_root` is the local directory under which runs keep their results.
    """

    #: Insert or replace a job row (columns as `jobs.save_job` passes them); the backend's dialect.
    SAVE_JOB: ClassVar[str]
    #: Several processes hold this key's ledger at once (a fleet on one database).
    shared: ClassVar[bool] = False

    def __init__(self, worker: str, results_root: Path) -> None:
        self.worker = worker
        self.results_root = results_root
        self._mutex = threading.RLock()
        self._closed = False

    def close(self) -> None:
        """Close the database and give up what this process holds. Idempotent."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _write(self) -> Iterator[Db]:
        """One write transaction: committed (and durable) on normal exit, rolled back whole on any error."""
        raise NotImplementedError
        yield  # pragma: no cover

    @contextlib.contextmanager
    def _unlocked_write(self) -> Iterator[Db]:
        """A write transaction that need not wait for the key's other writers (rows lock one by one, where
        the backend can); by default the ordinary write."""
        with self._write() as db:
            yield db

    @contextlib.contextmanager
    def _read(self) -> Iterator[Db]:
        """A consistent read (one snapshot across statements)."""
        raise NotImplementedError
        yield  # pragma: no cover

    def _unheld(self, now: int) -> tuple[str, tuple[Any, ...]]:
        """An SQL condition (`" AND …"`, on `claims` columns) and its parameters: the claims no live process holds."""
        raise NotImplementedError

    def take_event(self, event_id: str) -> bool:
        """True for the one process of the fleet that handles this delivered event (every runner of a fleet
        receives every event); a ledger no other process shares handles all of them, and writes nothing."""
        return True

    def _held(self, db: Db, key: str) -> None:
        """Mark a new claim as this process's (a backend shared by several processes records who holds it)."""

    # -- rows ----------------------------------------------------------------------------------

    def _claim(self, db: Db, key: str) -> Claim | None:
        row = db.execute("SELECT * FROM claims WHERE key = ? AND worker = ?", (key, self.worker)).fetchone()
        if row is None:
            return None
        aliases = tuple(
            item["event_id"]
            for item in db.execute("SELECT event_id FROM aliases WHERE key = ? ORDER BY position", (key,))
        )
        progress = tuple(
            ProgressNote(item["seq"], item["status"])
            for item in db.execute("SELECT seq, status FROM progress WHERE key = ? ORDER BY seq", (key,))
        )
        return claim_from_row(row, aliases, progress)

    def _require(self, db: Db, key: str) -> Claim:
        claim = self._claim(db, key)
        if claim is None:
            raise LedgerError(f"no claim {key_name(key)} on this runner")
        return claim

    def _set(self, db: Db, key: str, **columns: Any) -> None:
        unknown = set(columns) - _CLAIM_COLUMNS
        if unknown:
            raise LedgerError(f"not a claim column: {sorted(unknown)}", Code.MALFORMED)
        assignments = ", ".join(f"{column} = ?" for column in columns)
        db.execute(
            f"UPDATE claims SET {assignments} WHERE key = ? AND worker = ?",  # noqa: S608 - whitelisted names
            (*columns.values(), key, self.worker),
        )

    def _alias(self, db: Db, key: str, event_id: str) -> None:
        db.execute(
            "INSERT INTO aliases (key, position, event_id) "
            "SELECT ?, COALESCE(MAX(position), -1) + 1, ? FROM aliases WHERE key = ? ON CONFLICT DO NOTHING",
            (key, event_id, key),
        )
