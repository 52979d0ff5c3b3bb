"""The ledger in PostgreSQL, shared by a fleet of runners with one key (`EVAL_RUNNER_DATABASE`).

The rules are `store.Ledger`'s, unchanged; this module gives them a database several processes on several
machines write at once, and keeps the guarantees the SQLite file gets from its one writer:

* **One writer at a time per runner key.** Every write transaction first takes a transaction-scoped
  advisory lock on the key (`pg_advisory_xact_lock`), so the rules run on the latest rows exactly as
  under SQLite's `BEGIN IMMEDIATE`: a request is claimed once across the fleet (its claim and root in one
  transaction; the primary key backs it), the 16 claim slots are counted fleet-wide, and a failed write
  rolls back whole. Reads are one `REPEATABLE READ` snapshot. A commit returns once PostgreSQL has made
  it durable (the server's `synchronous_commit`, on by default).
* **Who holds a claim.** Each open ledger is a *holder* (a random id) with a lease in `leases`, renewed by
  `heartbeat`; a claim records the holder that reserved it. The lease's expiry is the database's clock
  (`clock_timestamp()`), never a runner's, so machines whose clocks differ agree on who has lapsed.
* **Recovery is per holder.** Where the SQLite ledger recovers every open claim at open (the file lock
  admits one process), here only the claims whose holder's lease lapsed (or that have no holder, as an
  imported ledger's) are recovered — at open and at every heartbeat, by whichever runner gets there
  first: a dispatched claim becomes `unknown` with its stored result (never runnable again), a
  never-dispatched one is dropped, running jobs become `unknown`. `heartbeat` returns the claims it
  settled so that runner answers them. A runner whose own lease lapsed learns it at its next heartbeat
  (`LeaseLostError`) and must stop: its claims may already be answered `unknown`.
* **Same rows.** The tables are the SQLite file's (with `rowid` as an identity column so "oldest first"
  reads the same, `holder` on claims, and BYTEA for the root), so a row reads back as the same record.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Final

import psycopg
from psycopg.conninfo import conninfo_to_dict

from eval_runner.contracts.errors import Code, ContractError
from eval_runner.service.ledger.backend import Db, LedgerStorage, Rows, ledger_tables
from eval_runner.service.ledger.claims import Claim, LedgerError
from eval_runner.service.ledger.counts import CountRecords
from eval_runner.service.ledger.file import LEDGER_FILE
from eval_runner.service.ledger.queued import NOT_QUEUED, QUEUE_SCHEMA, QueueRecords
from eval_runner.service.ledger.store import Ledger, _hex64

#: The default lease: a runner silent for this long has its claims recovered by another.
LEASE_MS: Final = 30_000
SCHEMA_VERSION: Final = 4
#: How long a handled event id is kept so no other runner handles it again (the catch-up asks back 600 s).
TAKEN_DAYS: Final = 2
#: What only a fleet needs: the event ids a runner took (and, from schema 4, the holder that took each), and
#: each holder's lease.
_FLEET_TABLES: Final = """CREATE TABLE taken (
    worker TEXT NOT NULL,
    event_id TEXT NOT NULL,
    taken_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (worker, event_id)
);
CREATE TABLE leases (
    worker TEXT NOT NULL,
    holder TEXT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (worker, holder)
);
"""
#: The SQLite file's tables in PostgreSQL's words (`backend.ledger_tables`), and the fleet's own.
SCHEMA: Final = ledger_tables(big="BIGINT", blob="BYTEA", shared=True) + _FLEET_TABLES
#: Schema scripts by the version they bring the database to, as the SQLite file's (`file.MIGRATIONS`).
MIGRATIONS: Final[dict[int, str]] = {
    1: SCHEMA,
    2: "ALTER TABLE jobs ADD COLUMN publishing TEXT",
    3: QUEUE_SCHEMA,
    4: "ALTER TABLE taken ADD COLUMN holder TEXT",
}
#: Seconds to wait for the database to answer a connection, and keepalive probes (idle seconds, seconds
#: between probes, probes) that find a cut network; a stuck connection must not outlive the lease.
CONNECT_TIMEOUT_S: Final = 10
KEEPALIVES: Final = (5, 5, 3)
#: The least statement timeout (ms); otherwise a statement may take as long as the lease, no longer.
STATEMENT_FLOOR_MS: Final = 1_000
#: The advisory lock every runner takes while it brings the schema up to date.
_MIGRATION_LOCK: Final = 0x6576616C2D72756E  # "eval-run"
_LIVE_HOLDER: Final = (
    " AND NOT EXISTS (SELECT 1 FROM leases WHERE leases.worker = claims.worker "
    "AND leases.holder = claims.holder AND leases.expires_at > clock_timestamp())"
)


class LeaseLostError(LedgerError):
    """This runner's lease lapsed: another runner may already have answered its claims, so it must stop."""


class _Row:
    """A row readable by column name and by position, as `sqlite3.Row` is (the rules read both ways)."""

    __slots__ = ("_names", "_values")

    def __init__(self, names: dict[str, int], values: Sequence[Any]) -> None:
        self._names = names
        self._values = values

    def __getitem__(self, item: int | str) -> Any:
        return self._values[self._names[item] if isinstance(item, str) else item]


def _rows(cursor: Any) -> Callable[[Sequence[Any]], _Row]:
    names = {column.name: index for index, column in enumerate(cursor.description or ())}
    return lambda values: _Row(names, values)


class _Statements:
    """The open transaction as the rules see it: `?` placeholders become psycopg's `%s`."""

    _translated: ClassVar[dict[str, str]] = {}

    def __init__(self, connection: psycopg.Connection[Any]) -> None:
        self._connection = connection

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Rows:
        query = self._translated.get(sql)
        if query is None:
            if "%" in sql:
                raise LedgerError("a ledger statement may not contain %", Code.MALFORMED)
            query = self._translated.setdefault(sql, sql.replace("?", "%s"))
        cursor: Rows = self._connection.execute(query, tuple(parameters))
        return cursor


class PostgresTables(LedgerStorage):
    """One runner's connection to the shared database: its holder id, its lease, and the transactions."""

    SAVE_JOB: ClassVar[str] = (
        "INSERT INTO jobs (key, worker, action, principal, request, status, check_id, validates, "
        "results, report, report_digest, sealed, published, publishing) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET "
        "rowid = nextval('jobs_rowid'), worker = excluded.worker, action = excluded.action, "
        "principal = excluded.principal, request = excluded.request, status = excluded.status, "
        "check_id = excluded.check_id, validates = excluded.validates, results = excluded.results, "
        "report = excluded.report, report_digest = excluded.report_digest, sealed = excluded.sealed, "
        "published = excluded.published, publishing = excluded.publishing"
    )

    shared: ClassVar[bool] = True

    def __init__(self, url: str, worker: str, state: Path, lease_ms: int, holder: str) -> None:
        super().__init__(worker, state)
        self.url = url
        self.lease_ms = lease_ms
        self.holder = holder
        self._db: psycopg.Connection[Any] | None = None

    def close(self) -> None:
        """Give up this holder's lease (its open claims are recovered by the next runner) and disconnect."""
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            if self._db is not None and not self._db.closed:
                with contextlib.suppress(psycopg.Error):
                    self._db.execute("DELETE FROM leases WHERE worker = %s AND holder = %s", (self.worker, self.holder))
                self._db.close()

    def _connection(self) -> psycopg.Connection[Any]:
        """The open connection, made again if the last one broke (a restarted server, a cut network)."""
        if self._closed:
            raise LedgerError("the ledger is closed")
        if self._db is None or self._db.closed or self._db.broken:
            try:
                self._db = psycopg.connect(self.url, autocommit=True, row_factory=_rows, **self._bounds())
            except psycopg.Error as error:
                raise LedgerError(f"the ledger database could not be reached: {_plain(error)}") from error
        return self._db

    def _bounds(self) -> dict[str, Any]:
        """Connection parameters that bound how long a stuck database or a cut network can hold a call:
        ours where the URL sets none, and a statement timeout the URL's own `options` may override."""
        given = conninfo_to_dict(self.url)
        idle, interval, count = KEEPALIVES
        bounds: dict[str, Any] = {
            "connect_timeout": CONNECT_TIMEOUT_S,
            "keepalives": 1,
            "keepalives_idle": idle,
            "keepalives_interval": interval,
            "keepalives_count": count,
        }
        found = {name: value for name, value in bounds.items() if name not in given}
        statement = f"-c statement_timeout={max(self.lease_ms, STATEMENT_FLOOR_MS)}"
        found["options"] = f"{statement} {given['options']}" if given.get("options") else statement
        return found

    @contextlib.contextmanager
    def _write(self) -> Iterator[Db]:
        with self._mutex:
            connection = self._connection()
            try:
                with connection.transaction():
                    connection.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (self.worker,))
                    yield _Statements(connection)
            except psycopg.Error as error:
                raise LedgerError(f"the ledger write failed: {_plain(error)}") from error
            except ContractError as error:
                raise LedgerError(f"the ledger write failed: {error.detail}", Code.MALFORMED) from error

    @contextlib.contextmanager
    def _read(self) -> Iterator[Db]:
        with self._mutex:
            connection = self._connection()
            try:
                with connection.transaction():
                    connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    yield _Statements(connection)
            except psycopg.Error as error:
                raise LedgerError(f"the ledger read failed: {_plain(error)}") from error

    @contextlib.contextmanager
    def _unlocked_write(self) -> Iterator[Db]:
        with self._mutex:
            connection = self._connection()
            try:
                with connection.transaction():
                    yield _Statements(connection)
            except psycopg.Error as error:
                raise LedgerError(f"the ledger write failed: {_plain(error)}") from error

    def _unheld(self, now: int) -> tuple[str, tuple[Any, ...]]:
        return _LIVE_HOLDER + NOT_QUEUED, ()

    def take_event(self, event_id: str) -> bool:
        """Record that this holder handles `event_id`; False when a live holder of the fleet already took it.

        A holder whose lease lapsed (a runner SIGKILLed between taking an event and claiming it) loses its
        events: the next runner offered the event takes it over, so it is handled once the lease is gone
        instead of refused by everyone for `TAKEN_DAYS`. Handling an event twice is what the claim rules
        already answer (a retransmission), as after any restart. A row without a holder (written before
        schema 4) is never taken over: its taker may be an older runner still alive.
        """
        with self._mutex:
            connection = self._connection()
            try:
                taken = connection.execute(
                    "INSERT INTO taken (worker, event_id, holder) VALUES (%s, %s, %s) "
                    "ON CONFLICT (worker, event_id) DO UPDATE SET holder = excluded.holder, "
                    "taken_at = clock_timestamp() WHERE taken.holder IS NOT NULL AND NOT EXISTS "
                    "(SELECT 1 FROM leases WHERE leases.worker = taken.worker AND leases.holder = taken.holder "
                    "AND leases.expires_at > clock_timestamp())",
                    (self.worker, event_id, self.holder),
                )
            except psycopg.Error as error:
                raise LedgerError(f"the ledger write failed: {_plain(error)}") from error
            return taken.rowcount == 1

    def _held(self, db: Db, key: str) -> None:
        db.execute("UPDATE claims SET holder = ? WHERE key = ? AND worker = ?", (self.holder, key, self.worker))

    def _migrate(self) -> None:
        """Bring the database to `SCHEMA_VERSION` under a lock every runner takes; refuse a newer one."""
        connection = self._connection()
        try:
            with connection.transaction():
                connection.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                connection.execute("CREATE TABLE IF NOT EXISTS ledger_schema (version INTEGER NOT NULL)")
                found = connection.execute("SELECT MAX(version) FROM ledger_schema").fetchone()
                version = 0 if found is None or found[0] is None else int(found[0])
                if version > SCHEMA_VERSION:
                    raise LedgerError(f"the ledger database has schema {version}; this runner knows {SCHEMA_VERSION}")
                for target in range(version + 1, SCHEMA_VERSION + 1):
                    connection.execute(MIGRATIONS[target])
                    connection.execute("INSERT INTO ledger_schema (version) VALUES (%s)", (target,))
        except psycopg.Error as error:
            raise LedgerError(f"the ledger database could not be prepared: {_plain(error)}") from error

    def _take_lease(self) -> None:
        with self._write() as db:
            db.execute(
                "INSERT INTO leases (worker, holder, expires_at) "
                "VALUES (?, ?, clock_timestamp() + make_interval(secs => ? / 1000.0))",
                (self.worker, self.holder, self.lease_ms),
            )

    def _renew_lease(self) -> None:
        """Extend this holder's lease; a lease that already lapsed is never revived (`LeaseLostError`)."""
        with self._write() as db:
            renewed = db.execute(
                "UPDATE leases SET expires_at = clock_timestamp() + make_interval(secs => ? / 1000.0) "
                "WHERE worker = ? AND holder = ? AND expires_at > clock_timestamp()",
                (self.lease_ms, self.worker, self.holder),
            )
            if renewed.rowcount != 1:
                raise LeaseLostError("this runner's lease lapsed; its claims are another runner's to answer")

    def _forget_lapsed(self) -> None:
        """Drop lapsed leases that hold no open claim any more (after recovery settled them), and taken event
        ids past any relay's redelivery (`TAKEN_DAYS`)."""
        with self._write() as db:
            db.execute(
                "DELETE FROM taken WHERE worker = ? AND taken_at < clock_timestamp() - make_interval(days => ?)",
                (self.worker, TAKEN_DAYS),
            )
            db.execute(
                "DELETE FROM leases WHERE worker = ? AND expires_at <= clock_timestamp() AND NOT EXISTS "
                "(SELECT 1 FROM claims WHERE claims.worker = leases.worker AND claims.holder = leases.holder "
                "AND claims.outcome IS NULL AND claims.tombstone = 0)",
                (self.worker,),
            )


class PostgresLedger(QueueRecords, CountRecords, PostgresTables):
    """The execution ledger of one runner key in a PostgreSQL database several runners share."""

    @classmethod
    def connect(
        cls, url: str, state: Path, worker_pubkey: str, now: int, *, lease_ms: int = LEASE_MS
    ) -> PostgresLedger:
        """Connect to `url` as a new holder, bring the schema up to date, take a lease and recover the claims
        of lapsed holders. `state` is the local directory runs keep their results under."""
        worker = _hex64(worker_pubkey, "worker")
        if lease_ms < 1:
            raise LedgerError("the lease must be at least 1 ms", Code.MALFORMED)
        ledger = cls(url, worker, state, lease_ms, secrets.token_hex(16))
        try:
            ledger._migrate()
            ledger._take_lease()
            ledger._recover(now)
            ledger._forget_lapsed()
        except BaseException:
            ledger.close()
            raise
        return ledger

    def lookup_now(self, key: str) -> tuple[bool, Claim | None]:
        """Always `(False, None)`: a lookup here is a network round trip, which the event loop never waits
        for; the pipeline then looks in a thread."""
        return False, None

    def heartbeat(self, now: int) -> tuple[Claim, ...]:
        """Renew this runner's lease, then recover the claims of runners whose lease lapsed.

        Returns the claims this call settled `unknown`, for this runner to answer. Raises `LeaseLostError` when
        this runner's own lease had lapsed: the caller must stop, another runner answers its claims.
        """
        self._renew_lease()
        settled = self._recover(now)
        self._forget_lapsed()
        return settled

    def cancelled_here(self) -> tuple[str, ...]:
        """Keys of this runner's unsettled claims whose cancel was recorded (by whichever runner took the
        cancel control): the holder stops those runs."""
        with self._read() as db:
            rows = db.execute(
                "SELECT key FROM claims WHERE worker = ? AND holder = ? AND cancel_requested = 1 "
                "AND outcome IS NULL AND tombstone = 0",
                (self.worker, self.holder),
            ).fetchall()
            return tuple(row["key"] for row in rows)


def open_ledger(database: str | None, state: Path, worker_pubkey: str, now: int, *, lease_ms: int = LEASE_MS) -> Ledger:
    """The runner's ledger: the SQLite file under `state`, or with `database` (a `postgresql://` URL) the
    database a fleet shares."""
    if database is None:
        return Ledger.open(state / LEDGER_FILE, worker_pubkey, now)
    return PostgresLedger.connect(database, state, worker_pubkey, now, lease_ms=lease_ms)


def read_usage_lines(url: str, since: str | None = None) -> tuple[tuple[str, str], ...]:
    """`(day, line)` of every usage line in the database at `url` (every runner key's), from the day `since`
    on, in the order written; none when the database has no usage lines yet (an older schema)."""
    try:
        with psycopg.connect(url, autocommit=True) as connection:
            found = connection.execute("SELECT to_regclass('usage_lines')").fetchone()
            if found is None or found[0] is None:
                return ()
            rows = connection.execute(
                "SELECT day, line FROM usage_lines WHERE day >= %s ORDER BY day, rowid", (since or "",)
            ).fetchall()
    except psycopg.Error as error:
        raise LedgerError(f"the ledger database could not be read: {_plain(error)}") from error
    return tuple((str(day), str(line)) for day, line in rows)


#: libpq's words for a connection string it cannot parse quote the string's parts (a password among them).
_UNPARSED = "the database URL does not read (percent-encode a password's special characters)"


def _plain(error: psycopg.Error) -> str:
    """The first line of a database error, never the connection string (it may hold a password): a
    client-side error with no SQLSTATE (libpq parsing the URL, resolving its host) is said in fixed words."""
    if error.sqlstate is None and isinstance(error, psycopg.ProgrammingError | psycopg.InterfaceError):
        return _UNPARSED
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
