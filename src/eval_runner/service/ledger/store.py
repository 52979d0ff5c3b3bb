"""The durable execution ledger: one SQLite file, so a request is never run twice and no answer is lost.

The reference keeps its ledger as one JSON file (`service.json`) rewritten from memory snapshots, with
roots and job records as files beside it, and needs a generation counter so an older snapshot never
overwrites a newer one (runner.md §5, §21.4). Here every change is one SQLite transaction on the current
rows, committed before the method returns, so the same guarantees come from the database:

* **Durable before the answer.** WAL journal with `synchronous=FULL`: a commit is fsynced before
  `prepare`, `acknowledge`, `intend`, `finish` … return, so `accepted` and every result are sent only
  after the state they depend on is on disk.
* **Never back in time, never torn.** A write is a transaction on the latest rows under SQLite's write
  lock (`BEGIN IMMEDIATE`), never a stale snapshot; writers from other threads or processes serialise.
  A failed write rolls back whole and changes nothing, so the caller may simply retry it.
* **One connection, one lock.** The connection is opened with `check_same_thread=False` and every
  method holds a `threading.RLock`, so the asyncio loop and worker threads may share one `Ledger`
  (calls block briefly; run them in a thread from async code if that matters).

Layout under the state directory (replacing `service.json`, `roots/` and `jobs/*/job.json`):

    <state>/ledger.sqlite3 (+ -wal, -shm)   claims, aliases, progress, roots, jobs, revocations (0600)
    <state>/ledger.sqlite3.<worker16>.lock  held with flock while a runner has the ledger open
    <state>/jobs/<key_name>/results/<stamp>/ the engine's results directory for a run (`results_base`)

Roots are stored in the claim row (the exact envelope bytes, written in the same transaction as the
reservation, checked against `record` at `acknowledge`); job records are rows of `jobs`.

Decisions where the spec is silent (runner.md §5, §6, §9.7; wire.md §8):

* **Other runner keys.** Every row names its worker and every read and write is scoped to the key the
  ledger was opened with, so a file shared with, or left by, another runner key is never mixed with
  ours and its claims are left untouched (the reference starts a fresh ledger and loses them). The
  lock file is per key: one process per key at a time, so a second runner with our key cannot mark our
  live claims unknown; another key may share the file.
* **Crash recovery at open** (runner.md §6 step 5): a claim with dispatch intent and no outcome becomes
  outcome `unknown`, phase `unknown`, dispatched true, spend null, with a stored `unknown` result
  (wire.md §10.6) for retransmissions, and releases its slot; it is never runnable again. A claim
  *without* dispatch intent and no outcome was never dispatched and never answered `accepted` (the
  service sends `accepted` after `intend` commits), so it is rolled back; otherwise it would hold a slot
  forever. Running jobs become `unknown` (step 6).
* **`finish`** stores the payload as JCS text, so every alias gets the same bytes; it refuses a payload
  that is not a valid result for this claim (binding, record, outcome) and the `refused` outcome (a
  reserved claim is never refused). Every outcome releases the slot, `unknown` included: a finished
  claim has no live run. An equal repeat returns the stored text; a different one keeps the stored one,
  records both digests, commits, and raises `ResultConflictError`.
* **Progress** is recorded only on a dispatched, unsettled claim, seq strictly +1 from 0.
* **Jobs**: a job belongs to a dispatched claim of ours with the same principal; its action, principal and request
  never change, and once its status leaves `running` it stays.
* **`prepare` answers three ways**: a new `Claim` (reserved, root stored), a `Retransmission` (same key
  and fingerprint: the event was added as an alias, nothing reserved) or a `Refusal`. It takes the
  execute event's `created_at`, kept for the relay catch-up (`newest_request_created_at`).
  `acknowledge(key)` checks the stored root bytes against `record` rather than taking them again.
* **Every failure is a `LedgerError`** whose `code` names the cause (`unavailable` for storage and unknown
  claims); the service answers `unavailable` unless it prefers the code.
* `sweep(now)` tombstones claims past `retain_until` (the reference runner never sweeps; the service
  need not call it). A tombstone keeps the fingerprint and outcome and drops the stored result.
"""

from __future__ import annotations

import time
from pathlib import Path

from eval_runner.contracts import shape
from eval_runner.contracts.answers import (
    OUTCOMES,
    PROGRESS_STATUSES,
    AcceptedBody,
    CancelResult,
    ReplayResult,
    ResultBody,
    StatusResult,
)
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.execution import MAX_REPLAY_RECORDS, ExecuteBody, fingerprint, root_record
from eval_runner.contracts.strict_json import digest_bytes, read
from eval_runner.service.ledger.backend import Db
from eval_runner.service.ledger.claims import (
    CAPACITY,
    CONFLICT_MESSAGE,
    Claim,
    Job,
    LedgerError,
    ProgressNote,
    Refusal,
    ResultConflictError,
    Retransmission,
    conflicts_text,
    horizon,
    json_text,
    key_name,
    key_of,
)
from eval_runner.service.ledger.file import LEDGER_FILE, LedgerFile, connect
from eval_runner.service.ledger.jobs import JobRecords


def ledger_path(state: Path) -> Path:
    """Where the ledger lives in a state directory."""
    return state / LEDGER_FILE


def _hex64(value: str, what: str) -> str:
    try:
        return shape.hex64(value, what)
    except ContractError as error:
        raise LedgerError(f"{what} must be 64 lowercase hex characters", Code.MALFORMED) from error


class Ledger(JobRecords):
    """The execution ledger of one runner key: the rules, over the backend a subclass gives.

    `Ledger.open` opens the embedded SQLite file (`SqliteLedger`); `postgres.PostgresLedger` is the same
    ledger in a PostgreSQL database that several runners share.
    """

    # -- opening, recovery, closing ------------------------------------------------------------

    @classmethod
    def open(cls, path: Path | str, worker_pubkey: str, now: int, *, busy_timeout_ms: int = 10_000) -> Ledger:
        """Open (creating or migrating) the ledger file at `path` for `worker_pubkey`, and recover from a crash.

        Raises `LedgerError` when the file is not a ledger, is newer than this code, is held by another
        process for the same key, or cannot be written; the service treats that as fatal.
        """
        worker = _hex64(worker_pubkey, "worker")
        path = Path(path)
        db, lock_fd = connect(path, worker, busy_timeout_ms)
        ledger = SqliteLedger(path, worker, db, lock_fd)
        try:
            ledger._recover(now)
        except BaseException:
            ledger.close()
            raise
        return ledger

    def _recover(self, now: int) -> tuple[Claim, ...]:
        """runner.md §6 steps 5–6 for the claims no live process holds (`_unheld`): interrupted runs become
        unknown, never-dispatched claims go. Returns the claims settled unknown here, so they can be answered."""
        unheld, params = self._unheld(now)
        open_claims = "FROM claims WHERE worker = ? AND outcome IS NULL AND tombstone = 0" + unheld
        settled: list[Claim] = []
        with self._write() as db:
            db.execute(f"DELETE {open_claims} AND dispatch_intent = 0", (self.worker, *params))
            if unheld:
                db.execute(
                    f"UPDATE jobs SET status = 'unknown' WHERE worker = ? AND status = 'running' "  # noqa: S608
                    f"AND key IN (SELECT key {open_claims})",
                    (self.worker, self.worker, *params),
                )
            rows = db.execute(f"SELECT key {open_claims} AND dispatch_intent = 1", (self.worker, *params)).fetchall()
            for row in rows:
                claim = self._require(db, row["key"])
                payload = json_text(ResultBody.unknown(claim.binding, claim.record).to_json())
                self._set(
                    db,
                    claim.key,
                    outcome="unknown",
                    phase="unknown",
                    dispatched=1,
                    effect_started=1,
                    observed=0,
                    result=payload,
                    result_digest=digest_bytes(payload.encode("utf-8")),
                    holds_slot=0,
                    settled_at=now,
                )
                settled.append(self._require(db, claim.key))
            if not unheld:
                db.execute("UPDATE jobs SET status = 'unknown' WHERE worker = ? AND status = 'running'", (self.worker,))
        return tuple(settled)

    # -- keys and lookups ----------------------------------------------------------------------

    def key(self, principal: str, request: str, attempt: int) -> str:
        """This runner's idempotency key for a principal's request attempt."""
        return key_of(self.worker, principal, request, attempt)

    def lookup(self, key: str) -> Claim | None:
        """The claim for `key`, or None (another runner key's claims are never returned)."""
        with self._read() as db:
            return self._claim(db, key)

    def lookup_now(self, key: str) -> tuple[bool, Claim | None]:
        """`(True, lookup(key))` if no other thread holds the ledger, else `(False, None)` at once.

        A lookup takes microseconds, less than handing it to a thread; but a write holds the ledger through
        its fsync, so the event loop asks this first and hands the lookup to a thread only when it would wait.
        """
        if not self._mutex.acquire(blocking=False):
            return False, None
        try:
            return True, self.lookup(key)
        finally:
            self._mutex.release()

    def claims(self) -> tuple[Claim, ...]:
        """Every claim of this runner key, oldest first."""
        with self._read() as db:
            keys = [
                row["key"]
                for row in db.execute("SELECT key FROM claims WHERE worker = ? ORDER BY rowid", (self.worker,))
            ]
            return tuple(self._require(db, key) for key in keys)

    def active_slots(self) -> int:
        """Claims holding a slot: reserved, accepted, queued and running work."""
        with self._read() as db:
            return int(
                db.execute(
                    "SELECT COUNT(*) FROM claims WHERE worker = ? AND holds_slot = 1", (self.worker,)
                ).fetchone()[0]
            )

    def newest_request_created_at(self) -> int | None:
        """`created_at` of the newest execute event that created a claim, for the relay catch-up."""
        with self._read() as db:
            found = db.execute("SELECT MAX(created_at) FROM claims WHERE worker = ?", (self.worker,)).fetchone()[0]
            return None if found is None else int(found)

    def find_for_control(
        self, request: str, attempt: int, run: str, execute_event_id: str, principal: str
    ) -> Claim | None:
        """The claim a control names (wire.md §11): same request, attempt, run and original execute event,
        signed by its principal or by a controller of this runner."""
        with self._read() as db:
            row = db.execute(
                "SELECT key FROM claims WHERE worker = ? AND request = ? AND attempt = ? AND run = ? "
                "AND execute_event = ? AND (principal = ? OR EXISTS "
                "(SELECT 1 FROM controllers WHERE worker = ? AND pubkey = ?))",
                (self.worker, request, attempt, run, execute_event_id, principal, self.worker, principal),
            ).fetchone()
            return None if row is None else self._require(db, row["key"])

    # -- operator sets -------------------------------------------------------------------------

    def revoke_target(self, digest: str) -> None:
        """Refuse new claims whose target program has this digest (`revoked`)."""
        with self._write() as db:
            db.execute(
                "INSERT INTO revoked (worker, digest) VALUES (?, ?) ON CONFLICT DO NOTHING", (self.worker, digest)
            )

    def add_controller(self, pubkey: str) -> None:
        """Let `pubkey` control runs it did not sign."""
        pubkey = _hex64(pubkey, "controller")
        with self._write() as db:
            db.execute(
                "INSERT INTO controllers (worker, pubkey) VALUES (?, ?) ON CONFLICT DO NOTHING", (self.worker, pubkey)
            )

    # -- the claim's life ----------------------------------------------------------------------

    def prepare(
        self, body: ExecuteBody, event_id: str, principal: str, now: int, mailbox: str, *, created_at: int
    ) -> Claim | Retransmission | Refusal:
        """Reserve a claim for an admitted execute, in the reference's order (runner.md §9.7 step 2).

        Same key, other fingerprint → `idempotency_conflict`; same fingerprint → `Retransmission` (this
        event becomes an alias); `retain_until` past the horizon → `limit_exceeded`; revoked target →
        `revoked`; `now ≥ deadline` → `stale`; attempt n > 1 needs attempt n−1 here, settled and not
        unknown (`cannot_enforce`; tombstoned: `content_unavailable`); 16 slots held → `busy`. Otherwise
        the claim and its root envelope are committed in phase `reserved`, holding a slot.
        `created_at` is the execute event's.
        """
        event_id = _hex64(event_id, "event id")
        principal = _hex64(principal, "principal")
        mailbox = _hex64(mailbox, "mailbox")
        digest = fingerprint(body)
        key = self.key(principal, body.request, body.attempt)
        try:
            root = root_record(body, self.worker, now)
        except ContractError as error:
            raise LedgerError(f"the root record could not be built: {error.detail}", Code.MALFORMED) from error
        with self._write() as db:
            existing = self._claim(db, key)
            if existing is not None:
                if existing.fingerprint != digest:
                    return Refusal(Code.IDEMPOTENCY_CONFLICT, CONFLICT_MESSAGE)
                self._alias(db, key, event_id)
                return Retransmission(self._require(db, key))
            refusal = self._admission(db, body, principal, now)
            if refusal is not None:
                return refusal
            db.execute(
                "INSERT INTO claims (key, worker, principal, request, attempt, run, fingerprint, execute_event, "
                "created_at, deadline, retain_until, input_digest, lock_digest, mailbox, controller, record, root, "
                "root_digest, phase, dispatched, holds_slot) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'reserved', 0, 1)",
                (
                    key,
                    self.worker,
                    principal,
                    body.request,
                    body.attempt,
                    body.run,
                    digest,
                    event_id,
                    created_at,
                    body.deadline,
                    body.retain_until,
                    body.input_digest,
                    body.lock.digest,
                    mailbox,
                    self.worker,
                    json_text(root.ref.to_json()),
                    root.data,
                    root.digest,
                ),
            )
            self._held(db, key)
            self._alias(db, key, event_id)
            return self._require(db, key)

    def _admission(self, db: Db, body: ExecuteBody, principal: str, now: int) -> Refusal | None:
        promised = horizon(now)
        if body.retain_until > promised:
            return Refusal(
                Code.LIMIT_EXCEEDED, f"retain_until {body.retain_until} is later than this runner keeps ({promised})"
            )
        revoked = db.execute(
            "SELECT 1 FROM revoked WHERE worker = ? AND digest = ?", (self.worker, body.target.artifact.digest)
        ).fetchone()
        if revoked is not None:
            return Refusal(Code.REVOKED, "the operator revoked this target")
        if now >= body.deadline:
            return Refusal(Code.STALE, "the request's deadline has passed")
        if body.attempt > 1:
            previous = self._claim(db, self.key(principal, body.request, body.attempt - 1))
            if previous is None:
                return Refusal(Code.CANNOT_ENFORCE, "the preceding attempt is not on this runner")
            if previous.tombstone:
                return Refusal(Code.CONTENT_UNAVAILABLE, "the preceding attempt's record is past retention")
            if previous.winner in (None, "unknown"):
                return Refusal(Code.CANNOT_ENFORCE, "reconcile the preceding attempt's outcome before another attempt")
        active = db.execute(
            "SELECT COUNT(*) FROM claims WHERE worker = ? AND holds_slot = 1", (self.worker,)
        ).fetchone()
        if int(active[0]) >= CAPACITY:
            return Refusal(Code.BUSY, f"all {CAPACITY} of the runner's claim slots are taken; try again later")
        return None

    def add_alias(self, key: str, event_id: str) -> Claim:
        """Record another execute event carrying this claim's body (a retransmission); idempotent."""
        event_id = _hex64(event_id, "event id")
        with self._write() as db:
            self._require(db, key)
            self._alias(db, key, event_id)
            return self._require(db, key)

    def acknowledge(self, key: str) -> AcceptedBody:
        """Phase `accepted` after checking the stored root bytes against `record`; the `accepted` body."""
        with self._write() as db:
            claim = self._require(db, key)
            if claim.tombstone:
                raise LedgerError(f"claim {claim.key_name} is past retention", Code.CONTENT_UNAVAILABLE)
            if not claim.record.matches(claim.root):
                raise LedgerError(f"claim {claim.key_name}'s root is not its record", Code.IDENTITY_MISMATCH)
            if claim.acknowledged:
                return claim.accepted()
            if claim.outcome is not None:
                raise LedgerError(f"claim {claim.key_name} is already settled {claim.outcome}")
            self._set(db, key, acknowledged=1, phase="accepted")
            return claim.accepted()

    def intend(self, key: str) -> Claim:
        """Record dispatch intent (phase `intended`): from here a crash makes the outcome unknown."""
        with self._write() as db:
            claim = self._require(db, key)
            if claim.tombstone:
                raise LedgerError(f"claim {claim.key_name} is past retention", Code.CONTENT_UNAVAILABLE)
            if not claim.acknowledged:
                raise LedgerError(f"claim {claim.key_name} was not acknowledged")
            if claim.dispatch_intent:
                return claim
            if claim.cancel_requested and not claim.effect_started:
                raise LedgerError(f"claim {claim.key_name} was cancelled before dispatch", Code.CANNOT_ENFORCE)
            if claim.outcome is not None:
                raise LedgerError(f"claim {claim.key_name} is already settled {claim.outcome}")
            self._set(db, key, dispatch_intent=1, phase="intended", dispatched=None)
            return self._require(db, key)

    def rollback(self, key: str) -> bool:
        """Drop a reservation that was neither acknowledged nor intended nor settled; True if it went."""
        with self._write() as db:
            claim = self._claim(db, key)
            if claim is None or claim.acknowledged or claim.dispatch_intent or claim.outcome is not None:
                return False
            db.execute("DELETE FROM claims WHERE key = ? AND worker = ?", (key, self.worker))
            return True

    def record_progress(self, key: str, seq: int, status: str) -> Claim:
        """A progress note: `seq` must be the next (0, 1, 2, …); the claim enters phase `running`."""
        if status not in PROGRESS_STATUSES:
            raise LedgerError(f"progress status {status!r} is not one of {PROGRESS_STATUSES}", Code.MALFORMED)
        with self._write() as db:
            claim = self._require(db, key)
            if claim.tombstone:
                raise LedgerError(f"claim {claim.key_name} is past retention", Code.CONTENT_UNAVAILABLE)
            if not claim.dispatch_intent or claim.outcome is not None:
                raise LedgerError(f"claim {claim.key_name} is not a dispatched, unsettled claim")
            expected = len(claim.progress)
            if seq != expected:
                raise LedgerError(f"progress seq {seq} is not the next one ({expected})", Code.MALFORMED)
            db.execute("INSERT INTO progress (key, seq, status) VALUES (?, ?, ?)", (key, seq, status))
            self._set(db, key, phase="running")
            return self._require(db, key)

    def request_cancel(self, key: str, reason: str | None = None, *, now: int | None = None) -> CancelResult:
        """Persist `cancel_requested`; a claim not yet dispatched settles `cancelled` (dispatched false) at once.

        The answer acknowledges the control; stopping a live run is the service's (its stop switch).
        """
        with self._write() as db:
            claim = self._require(db, key)
            if claim.tombstone:
                raise LedgerError(f"claim {claim.key_name} is past retention", Code.CONTENT_UNAVAILABLE)
            if not claim.cancel_requested:
                self._set(db, key, cancel_requested=1, cancel_reason=reason)
            if not claim.dispatch_intent and not claim.effect_started and claim.outcome is None:
                result = ResultBody(claim.binding, "cancelled", False, None, claim.record, has_code=False)
                payload = json_text(result.to_json())
                self._set(
                    db,
                    key,
                    outcome="cancelled",
                    dispatched=0,
                    observed=1,
                    phase="terminal",
                    result=payload,
                    result_digest=digest_bytes(payload.encode("utf-8")),
                    holds_slot=0,
                    settled_at=_now(now),
                )
            return self._require(db, key).cancel_result()

    def finish(self, key: str, outcome: str, result_payload_json: str | bytes, *, now: int | None = None) -> str:
        """Record the terminal result and release the slot; returns the stored payload (JCS text).

        An equal repeat returns what is stored; a different one raises `ResultConflictError` after recording
        both digests (the stored result stands, no winner is picked).
        """
        if outcome not in OUTCOMES or outcome == "refused":
            raise LedgerError(f"{outcome!r} is not an outcome a claim settles with", Code.MALFORMED)
        try:
            value = read(result_payload_json)
            result = ResultBody.parse(value)
        except ContractError as error:
            raise LedgerError(f"the result is not a result: {error.detail}", Code.MALFORMED) from error
        if result.outcome != outcome:
            raise LedgerError(f"the result says {result.outcome}, not {outcome}", Code.MALFORMED)
        payload = json_text(value)
        digest = digest_bytes(payload.encode("utf-8"))
        with self._write() as db:
            claim = self._require(db, key)
            if claim.tombstone:
                raise LedgerError(f"claim {claim.key_name} is past retention", Code.CONTENT_UNAVAILABLE)
            if result.binding != claim.binding or result.record != claim.record:
                raise LedgerError(f"the result names another attempt than claim {claim.key_name}", Code.MALFORMED)
            if claim.result is not None and claim.result_digest is not None:
                if claim.result_digest == digest:
                    return claim.result
                self._set(db, key, conflicts=conflicts_text(claim.conflicts, claim.result_digest, digest))
                conflict = f"claim {claim.key_name} already settled {claim.outcome}; a different result was refused"
            else:
                self._set(
                    db,
                    key,
                    outcome=outcome,
                    dispatched=int(result.dispatched),
                    effect_started=int(claim.effect_started or result.dispatched),
                    dispatch_intent=int(claim.dispatch_intent or result.dispatched),
                    observed=int(outcome != "unknown"),
                    phase="unknown" if outcome == "unknown" else "terminal",
                    result=payload,
                    result_digest=digest,
                    code=result.code,
                    message=result.message,
                    holds_slot=0,
                    settled_at=_now(now),
                )
                return payload
        raise ResultConflictError(conflict)

    def sweep(self, now: int) -> int:
        """Tombstone claims past `retain_until`: fingerprint and outcome stay, the stored result goes."""
        with self._write() as db:
            cursor = db.execute(
                "UPDATE claims SET tombstone = 1, phase = 'tombstone', result = NULL, holds_slot = 0 "
                "WHERE worker = ? AND tombstone = 0 AND retain_until <= ?",
                (self.worker, now),
            )
            return int(cursor.rowcount)

    # -- control answers -----------------------------------------------------------------------

    def status(self, key: str) -> StatusResult:
        """The `status_result` for a claim a control found."""
        return self._live(key).status()

    def replay(self, key: str, after_seq: int | None, max_records: int) -> ReplayResult:
        """The `replay_result` for a claim a control found."""
        if not 1 <= max_records <= MAX_REPLAY_RECORDS:
            raise LedgerError(f"max_records must be 1 to {MAX_REPLAY_RECORDS}", Code.MALFORMED)
        return self._live(key).replay(after_seq, max_records)

    def _live(self, key: str) -> Claim:
        with self._read() as db:
            claim = self._require(db, key)
        if claim.tombstone:
            raise LedgerError(f"claim {claim.key_name} is past retention", Code.CONTENT_UNAVAILABLE)
        return claim


class SqliteLedger(Ledger, LedgerFile):
    """The ledger in one SQLite file under the state directory (the default). Open with `Ledger.open`."""


def _now(now: int | None) -> int:
    return int(time.time()) if now is None else now


__all__ = [
    "CAPACITY",
    "LEDGER_FILE",
    "Claim",
    "Job",
    "Ledger",
    "LedgerError",
    "ProgressNote",
    "Refusal",
    "ResultConflictError",
    "Retransmission",
    "SqliteLedger",
    "key_name",
    "key_of",
    "ledger_path",
]
