"""The execution ledger's records: claims, jobs, refusals and errors, and the pure rules over them.

What needs no database lives here (the idempotency key and its file-safe name, runner.md §5; the typed
records; the control answers built from a claim, wire.md §11), so the storage module stays about storage.
A claim's row is derived from the `Claim` record's own fields (`CLAIM_COLUMNS`, `claim_from_row`,
`claim_row`), so the two cannot drift apart.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Final, get_type_hints

from eval_runner.contracts.answers import (
    AcceptedBody,
    CancelResult,
    ReplayRecord,
    ReplayResult,
    StatusResult,
)
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.execution import Binding
from eval_runner.contracts.outputs import PublishOutput
from eval_runner.contracts.refs import ArtifactRef, EventRef
from eval_runner.contracts.strict_json import JsonValue, canonical, read
from eval_runner.errors import EvalRunnerError

#: Claims holding a slot at once: running and queued suites and publishes (runner.md §22).
CAPACITY = 16
#: The latest `retain_until` the runner promises, past `now` (runner.md §9.7, §22).
HORIZON_SECONDS = 3600 + 604_800 + 86_400
#: A claim's phases (wire.md §11).
PHASES = ("reserved", "accepted", "intended", "running", "terminal", "unknown", "tombstone")
#: A job's statuses (runner.md §5).
JOB_STATUSES = ("running", "completed", "failed", "cancelled", "unknown")
JOB_ACTIONS = ("run", "publish")
KEY_NAME_CHARS = 32
CONFLICT_MESSAGE = "this request ID was used for a different request"


class LedgerError(EvalRunnerError):
    """The ledger could not do what was asked; nothing was changed by the failed call.

    `code` says why in the wire vocabulary: `unavailable` for storage failures and unknown claims (the
    service answers `unavailable`), `identity_mismatch` for a root whose bytes changed,
    `content_unavailable` for a tombstoned claim, `cannot_enforce` for a dispatch the requester already
    cancelled, `malformed` for a bad argument, `conflict` for a second, different terminal result.
    """

    def __init__(self, message: str, code: Code = Code.UNAVAILABLE) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


class ResultConflictError(LedgerError):
    """A terminal result that differs from the one already stored; the stored one stands, both digests are kept."""

    def __init__(self, message: str) -> None:
        super().__init__(message, Code.CONFLICT)


@dataclass(frozen=True, slots=True)
class Refusal:
    """`prepare` declined to reserve: the refusal code and plain message the requester is answered with."""

    code: Code
    message: str


@dataclass(frozen=True, slots=True)
class Retransmission:
    """`prepare` met the same key and fingerprint: the event became one of `claim.aliases`, nothing was reserved."""

    claim: Claim


def key_of(worker: str, principal: str, request: str, attempt: int) -> str:
    """The idempotency key `<worker>|<principal>|<request>|<attempt>` (wire.md §8.1)."""
    return f"{worker}|{principal}|{request}|{attempt}"


def key_name(key: str) -> str:
    """First 32 hex characters of SHA-256 of the key: its name in file names and logs."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:KEY_NAME_CHARS]


def horizon(now: int) -> int:
    """The latest `retain_until` the runner will promise at `now`."""
    return now + HORIZON_SECONDS


@dataclass(frozen=True, slots=True)
class ProgressNote:
    """One progress note of a claim: `seq` counts 0, 1, 2, … and `status` is queued, running or reconciling."""

    seq: int
    status: str


@dataclass(frozen=True, slots=True)
class Claim:
    """One `(worker, principal, request, attempt)`: what was asked, how far it got, and its one result.

    `dispatched` is `None` while unknown (between dispatch intent and a result), which answers as `true`.
    `result` is the stored `26920` payload as JCS text, sent byte for byte to every alias.
    """

    key: str
    worker: str
    principal: str
    request: str
    attempt: int
    run: str
    fingerprint: str
    execute_event: str
    created_at: int
    deadline: int
    retain_until: int
    input_digest: str
    lock_digest: str
    mailbox: str
    controller: str
    record: ArtifactRef
    root: bytes
    root_digest: str
    phase: str
    acknowledged: bool
    dispatch_intent: bool
    effect_started: bool
    observed: bool
    outcome: str | None
    dispatched: bool | None
    result: str | None
    result_digest: str | None
    conflicts: tuple[str, ...]
    code: str | None
    message: str | None
    cancel_requested: bool
    cancel_confirmed: bool
    cancel_reason: str | None
    tombstone: bool
    holds_slot: bool
    settled_at: int | None
    aliases: tuple[str, ...]
    progress: tuple[ProgressNote, ...]

    @property
    def binding(self) -> Binding:
        return Binding(self.request, self.attempt, self.run)

    @property
    def key_name(self) -> str:
        return key_name(self.key)

    @property
    def conflict(self) -> bool:
        """Two different terminal results were offered; no winner is picked."""
        return bool(self.conflicts)

    @property
    def winner(self) -> str | None:
        """The outcome a reader may treat as settled: none while open or in conflict."""
        return None if self.conflict else self.outcome

    @property
    def runnable(self) -> bool:
        """Dispatched in this process's lifetime and not settled: the only claims a run may work on."""
        return self.dispatch_intent and self.outcome is None and not self.tombstone

    @property
    def answers_dispatched(self) -> bool:
        """`dispatched` as answers carry it: unknown is `true` (the effect may have started)."""
        return True if self.dispatched is None else self.dispatched

    @property
    def records(self) -> tuple[ReplayRecord, ...]:
        """The retained journal references: the hosted runner's claims hold only the root (seq 0)."""
        return (ReplayRecord(0, self.root_digest),)

    def accepted(self) -> AcceptedBody:
        """The `27020 accepted` body for this claim (wire.md §9.1)."""
        return AcceptedBody(
            binding=self.binding,
            input_digest=self.input_digest,
            lock_digest=self.lock_digest,
            record=self.record,
            mailbox=self.mailbox,
            retain_until=self.retain_until,
            controller=self.controller,
        )

    def status(self) -> StatusResult:
        """The `status_result` of a status control (wire.md §11)."""
        return StatusResult(self.binding, self.phase, self.record, self.outcome, self.answers_dispatched)

    def replay(self, after_seq: int | None, max_records: int) -> ReplayResult:
        """The `replay_result` of a replay control: records after `after_seq`, gaps explicit, as the reference."""
        ordered = [record for record in self.records if after_seq is None or record.seq > after_seq]
        gap = False
        previous = after_seq
        for record in ordered:
            expected = 0 if previous is None else previous + 1
            gap = gap or record.seq != expected
            previous = record.seq
        truncated = len(ordered) > max_records
        ordered = ordered[:max_records]
        next_seq = ordered[-1].seq + 1 if ordered else (after_seq or 0)
        return ReplayResult(self.binding, tuple(ordered), next_seq, not gap and not truncated, gap)

    def cancel_result(self) -> CancelResult:
        """The `cancel_result` of a cancel control: acknowledged, which is not a confirmed stop."""
        return CancelResult(self.binding, self.cancel_confirmed, self.outcome, self.answers_dispatched)


@dataclass(frozen=True, slots=True)
class Job:
    """A run's job record (runner.md §5 `job.json`); a publish updates its run's job, it has none of its own.

    `request` is the signed `25920` event JSON exactly as it arrived; `results` the engine's results
    directory; `published` the suite release and `3189` a publish sent. `publishing` is a publish's
    progress: the signed `3189` (JSON text), recorded before it goes to the relay, so a publish cut off
    by a crash sends that very event again instead of signing a second one.
    """

    key: str
    action: str
    principal: str
    request: str
    status: str
    check: str | None = None
    validates: str | None = None
    results: str | None = None
    report: ArtifactRef | None = None
    sealed: EventRef | None = None
    published: PublishOutput | None = None
    publishing: str | None = None

    @property
    def key_name(self) -> str:
        return key_name(self.key)


def json_text(value: JsonValue) -> str:
    """The JCS text a JSON column holds."""
    return canonical(value).decode("utf-8")


# --- a claim's row -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Column:
    """One `claims` column: its name (the field's) and how a value goes from the row and back."""

    name: str
    load: Callable[[Any], Any]
    store: Callable[[Any], Any]


def _same(value: Any) -> Any:
    return value


def _load_flag(value: Any) -> bool:
    return bool(value)


def _store_flag(value: bool) -> int:
    return int(value)


def _load_maybe_flag(value: Any) -> bool | None:
    return None if value is None else bool(value)


def _store_maybe_flag(value: bool | None) -> int | None:
    return None if value is None else int(value)


def _load_blob(value: Any) -> bytes:
    return bytes(value)


def _load_strings(value: Any) -> tuple[str, ...]:
    return tuple(str(item) for item in read(value))


def _store_strings(value: tuple[str, ...]) -> str:
    return json.dumps(list(value))


def _store_ref(value: ArtifactRef) -> str:
    return json_text(value.to_json())


def _column(name: str, hint: object) -> _Column:
    """How a field of this type is stored: flags as 0/1 (an unknown `dispatched` as NULL), a reference as
    its JCS text, a list of strings as a JSON array, bytes as a blob, text and numbers as they are."""
    if hint is bool:
        return _Column(name, _load_flag, _store_flag)
    if hint == bool | None:
        return _Column(name, _load_maybe_flag, _store_maybe_flag)
    if hint is bytes:
        return _Column(name, _load_blob, _same)
    if hint is ArtifactRef:
        return _Column(name, lambda value: ArtifactRef.parse(read(value), name), _store_ref)
    if hint == tuple[str, ...]:
        return _Column(name, _load_strings, _store_strings)
    if hint in (str, int, str | None, int | None):
        return _Column(name, _same, _same)
    raise TypeError(f"Claim.{name} has a type the ledger cannot store: {hint}")


#: `Claim` fields kept in tables of their own (`aliases`, `progress`), not in the claim's row.
_OWN_TABLES: Final = ("aliases", "progress")
_HINTS: Final = get_type_hints(Claim)
_COLUMNS: Final = tuple(_column(spec.name, _HINTS[spec.name]) for spec in fields(Claim) if spec.name not in _OWN_TABLES)
#: The `claims` table's columns, in the table's order: every other field of `Claim`, in field order.
CLAIM_COLUMNS: Final = tuple(column.name for column in _COLUMNS)


def claim_from_row(row: sqlite3.Row, aliases: tuple[str, ...], progress: tuple[ProgressNote, ...]) -> Claim:
    """A stored claim row as a record; a row the contracts refuse raises `LedgerError`."""
    try:
        values = {column.name: column.load(row[column.name]) for column in _COLUMNS}
    except ContractError as error:
        raise LedgerError(f"the stored claim {key_name(row['key'])} is unreadable: {error.detail}") from error
    return Claim(**values, aliases=aliases, progress=progress)


def claim_row(claim: Claim) -> dict[str, Any]:
    """The `claims` row `claim` is stored as, by column name (the inverse of `claim_from_row`)."""
    return {column.name: column.store(getattr(claim, column.name)) for column in _COLUMNS}


def job_from_row(row: sqlite3.Row) -> Job:
    """A stored job row as a record."""
    try:
        report = None if row["report"] is None else ArtifactRef.parse(read(row["report"]), "report")
        sealed = None if row["sealed"] is None else EventRef.parse(read(row["sealed"]), "sealed")
        published = None if row["published"] is None else PublishOutput.parse(read(row["published"]), "published")
    except ContractError as error:
        raise LedgerError(f"the stored job {key_name(row['key'])} is unreadable: {error.detail}") from error
    return Job(
        key=row["key"],
        action=row["action"],
        principal=row["principal"],
        request=row["request"],
        status=row["status"],
        check=row["check_id"],
        validates=row["validates"],
        results=row["results"],
        report=report,
        sealed=sealed,
        published=published,
        publishing=row["publishing"],
    )


def conflicts_text(previous: tuple[str, ...], *digests: str) -> str:
    """The conflict list with `digests` added once each, in order."""
    merged = list(previous)
    for digest in digests:
        if digest not in merged:
            merged.append(digest)
    return json.dumps(merged)
