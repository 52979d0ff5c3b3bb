"""Moving a ledger from the SQLite file into PostgreSQL: `eval-runner ledger export | … import`.

The export is JSON lines: a header, then every row of every table of the file, every runner key's, in
the order they were written (claims and jobs by `rowid`), bytes as `{"hex": …}`. It reads one snapshot
and refuses while any runner holds the file (its per-key lock files), so nothing is written after the
snapshot and lost. The import writes every row in one PostgreSQL transaction under each key's writer
lock, after bringing the schema up to date, and refuses the whole file when a claim it holds is already
in the database (nothing is half imported, nothing overwritten). Imported claims have no holder, so the
first runner to connect recovers the open ones exactly as the SQLite ledger does at open: a dispatched
claim becomes `unknown`, a never-dispatched one is dropped.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import psycopg

from eval_runner.contracts.errors import Code
from eval_runner.service.ledger.claims import CLAIM_COLUMNS, LedgerError
from eval_runner.service.ledger.postgres import PostgresTables

FORMAT: Final = "eval-runner.ledger.v1"
#: The columns moved, by table, in the order the tables are written (a row's parents first).
TABLES: Final[dict[str, tuple[str, ...]]] = {
    "claims": CLAIM_COLUMNS,
    "aliases": ("key", "position", "event_id"),
    "progress": ("key", "seq", "status"),
    "revoked": ("worker", "digest"),
    "controllers": ("worker", "pubkey"),
    "jobs": (
        "key",
        "worker",
        "action",
        "principal",
        "request",
        "status",
        "check_id",
        "validates",
        "results",
        "report",
        "report_digest",
        "sealed",
        "published",
        "publishing",
    ),
}
_ORDER: Final = {"claims": "rowid", "jobs": "rowid", "aliases": "key, position", "progress": "key, seq"}


@dataclass
class Moved:
    """How many rows of each table went."""

    rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TABLES, 0))

    def line(self) -> str:
        return ", ".join(f"{count} {table}" for table, count in self.rows.items())


def _plain(value: Any) -> Any:
    return {"hex": bytes(value).hex()} if isinstance(value, bytes | memoryview) else value


def _stored(value: Any) -> Any:
    if isinstance(value, dict):
        try:
            return bytes.fromhex(str(value["hex"]))
        except (KeyError, ValueError):
            raise LedgerError("a value in the export is not a row value", Code.MALFORMED) from None
    return value


def _refuse_if_held(path: Path) -> None:
    """Refuse while a runner holds any key's lock on this file (it would write after the snapshot)."""
    for lock in path.parent.glob(f"{path.name}.*.lock"):
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LedgerError("a runner has this ledger open; stop it before exporting") from None
        finally:
            os.close(fd)


def export_file(path: Path) -> Iterator[str]:
    """The ledger file at `path` as JSON lines (header first); refuses a file a runner holds."""
    if not path.exists():
        raise LedgerError(f"there is no ledger at {path}")
    _refuse_if_held(path)
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as error:
        raise LedgerError(f"the ledger at {path.name} could not be opened: {error}") from error
    with contextlib.closing(db):
        try:
            db.row_factory = sqlite3.Row
            db.execute("BEGIN")
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            yield json.dumps({"format": FORMAT, "schema": version})
            for table, columns in TABLES.items():
                present = {row["name"] for row in db.execute(f"PRAGMA table_info({table})")}
                order = _ORDER.get(table, ", ".join(columns[:2]))
                for row in db.execute(f"SELECT * FROM {table} ORDER BY {order}"):  # noqa: S608 - fixed names
                    values = {name: _plain(row[name]) if name in present else None for name in columns}
                    yield json.dumps({"table": table, "row": values}, sort_keys=True)
            db.execute("COMMIT")
        except sqlite3.Error as error:
            raise LedgerError(f"the ledger at {path.name} could not be read: {error}") from error


def _rows(lines: Iterable[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    header = True
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError:
            raise LedgerError(f"line {number} of the export is not JSON", Code.MALFORMED) from None
        if header:
            if not isinstance(item, dict) or item.get("format") != FORMAT:
                raise LedgerError(f"the export does not start with the {FORMAT} header", Code.MALFORMED)
            header = False
            continue
        table = item.get("table") if isinstance(item, dict) else None
        row = item.get("row") if isinstance(item, dict) else None
        if table not in TABLES or not isinstance(row, dict) or set(row) != set(TABLES[str(table)]):
            raise LedgerError(f"line {number} of the export is not a ledger row", Code.MALFORMED)
        yield str(table), row
    if header:
        raise LedgerError("the export is empty", Code.MALFORMED)


def import_lines(url: str, lines: Iterable[str], state: Path) -> Moved:
    """Write an export into the PostgreSQL database at `url`, all or nothing."""
    rows = list(_rows(lines))
    tables = PostgresTables(url, "0" * 64, state, 1, "import")
    moved = Moved()
    try:
        tables._migrate()
        db = tables._connection()
        with db.transaction():
            for worker in sorted({row["worker"] for table, row in rows if "worker" in row}):
                db.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (worker,))
            for table, row in rows:
                columns = TABLES[table]
                names = ", ".join(columns)
                marks = ", ".join(["%s"] * len(columns))
                keep = " ON CONFLICT DO NOTHING" if table in ("revoked", "controllers") else ""
                db.execute(
                    f"INSERT INTO {table} ({names}) VALUES ({marks}){keep}",  # noqa: S608 - fixed names
                    tuple(_stored(row[name]) for name in columns),
                )
                moved.rows[table] += 1
    except psycopg.errors.UniqueViolation as error:
        raise LedgerError("a claim in the export is already in the database; nothing was imported") from error
    except psycopg.Error as error:
        raise LedgerError(f"the import failed and nothing was imported: {str(error).splitlines()[0]}") from error
    finally:
        tables.close()
    return moved
