"""What the runner answers (wire.md §9–§11): `accepted`, `progress`, results, and control results.

The runner builds these and a trainer client binds them, so both directions live here: builders that
produce exactly the key sets the reference emits (a result's JCS digest is how a client tells one logical
terminal result from a conflicting one, §8.3), and closed parsers that refuse anything else (decisions.md,
"The execution-side contracts"). Request/attempt equality with the pending request, and the event-level
binding (signer, `e`, `p`), are the caller's job.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from eval_runner.contracts import shape
from eval_runner.contracts.errors import Code
from eval_runner.contracts.execution import EXECUTION_SCHEMA, MAX_PLAINTEXT_BYTES, Binding
from eval_runner.contracts.outputs import Output, PublishOutput, RunOutput, parse_output
from eval_runner.contracts.refs import ArtifactRef
from eval_runner.contracts.strict_json import JsonValue, read

COMMON = ("v", "requires", "type", "request", "attempt", "run")
PROGRESS_STATUSES = ("queued", "running", "reconciling")
OUTCOMES = ("completed", "refused", "failed", "cancelled", "unknown")
CLAIM_STATES = ("reserved", "accepted", "intended", "running", "terminal", "unknown", "tombstone")
RESULT_KEYS = (
    *COMMON,
    "outcome",
    "dispatched",
    "output",
    "artifacts",
    "receipts",
    "verification",
    "integration",
    "record",
    "spend",
)
ACCEPTED_KEYS = ("input_digest", "lock_digest", "record", "mailbox", "retain_until", "controller")
#: The `code` of a run that failed after acceptance; not a refusal code.
FAILED = "failed"
MAX_FAILED_MESSAGE_CHARS = 400
CANCELLED_MESSAGE = "the requester stopped the run"
#: A result's `code`: a refusal code, or `failed`.
RESULT_CODES = (*(code.value for code in Code), FAILED)


def _answer(
    value: JsonValue,
    path: str,
    kind: str,
    keys: tuple[str, ...],
    optional: tuple[str, ...] = (),
    *,
    empty_run: bool = False,
) -> tuple[dict[str, JsonValue], Binding]:
    """The common head of every answer: version, no features, its type, and the logical attempt."""
    found = shape.obj(value, path)
    shape.literal(found.get("v"), shape.at(path, "v"), EXECUTION_SCHEMA, Code.UNSUPPORTED_VERSION)
    found = shape.closed(value, path, (*COMMON, *keys), optional, unknown=Code.UNSUPPORTED_FEATURE)
    shape.empty_requires(found["requires"], shape.at(path, "requires"))
    shape.literal(found["type"], shape.at(path, "type"), kind)
    return found, Binding.parse(found, path, empty_run=empty_run)


def _head(kind: str, binding: Binding) -> dict[str, JsonValue]:
    return {"v": EXECUTION_SCHEMA, "requires": [], "type": kind, **binding.to_json()}


def _outcome(value: JsonValue, path: str) -> str | None:
    return None if value is None else shape.choice(value, path, OUTCOMES, Code.UNSUPPORTED_FEATURE)


def _record(value: JsonValue, path: str) -> ArtifactRef:
    return ArtifactRef.parse(value, path)


@dataclass(frozen=True, slots=True)
class AcceptedBody:
    """`27020 accepted`: the claim and its root are durable; sent once, to the original execute event."""

    binding: Binding
    input_digest: str
    lock_digest: str
    record: ArtifactRef
    mailbox: str
    retain_until: int
    controller: str

    @classmethod
    def parse(cls, value: JsonValue, path: str = "") -> AcceptedBody:
        found, binding = _answer(value, path, "accepted", ACCEPTED_KEYS)
        return cls(
            binding=binding,
            input_digest=shape.digest(found["input_digest"], shape.at(path, "input_digest")),
            lock_digest=shape.digest(found["lock_digest"], shape.at(path, "lock_digest")),
            record=_record(found["record"], shape.at(path, "record")),
            mailbox=shape.hex64(found["mailbox"], shape.at(path, "mailbox")),
            retain_until=shape.integer(found["retain_until"], shape.at(path, "retain_until"), low=0),
            controller=shape.hex64(found["controller"], shape.at(path, "controller")),
        )

    def to_json(self) -> dict[str, JsonValue]:
        return {
            **_head("accepted", self.binding),
            "input_digest": self.input_digest,
            "lock_digest": self.lock_digest,
            "record": self.record.to_json(),
            "mailbox": self.mailbox,
            "retain_until": self.retain_until,
            "controller": self.controller,
        }


@dataclass(frozen=True, slots=True)
class ProgressBody:
    """`27020 progress`: the claim's next `seq`, its status, and case runs finished of those planned.

    `meta.ext_eval` is the hosted profile's closed `{completed, planned}`; any other `meta` member is
    inert and kept verbatim in `other_meta`.
    """

    binding: Binding
    seq: int
    status: str
    completed: int
    planned: int
    other_meta: dict[str, JsonValue] = field(default_factory=dict)

    @classmethod
    def parse(cls, value: JsonValue, path: str = "") -> ProgressBody:
        found, binding = _answer(value, path, "progress", ("seq", "status", "meta"))
        meta_path = shape.at(path, "meta")
        meta = shape.obj(found["meta"], meta_path)
        counts_path = shape.at(meta_path, "ext_eval")
        if "ext_eval" not in meta:
            raise shape.fail(counts_path, "is required")
        counts = shape.closed(meta["ext_eval"], counts_path, ("completed", "planned"), unknown=Code.UNSUPPORTED_FEATURE)
        completed = shape.integer(counts["completed"], shape.at(counts_path, "completed"), low=0)
        planned = shape.integer(counts["planned"], shape.at(counts_path, "planned"), low=1)
        if completed > planned:
            raise shape.fail(counts_path, "completed is at most planned")
        return cls(
            binding=binding,
            seq=shape.integer(found["seq"], shape.at(path, "seq"), low=0),
            status=shape.choice(found["status"], shape.at(path, "status"), PROGRESS_STATUSES, Code.UNSUPPORTED_FEATURE),
            completed=completed,
            planned=planned,
            other_meta={key: item for key, item in meta.items() if key != "ext_eval"},
        )

    def to_json(self) -> dict[str, JsonValue]:
        meta: dict[str, JsonValue] = {
            **self.other_meta,
            "ext_eval": {"completed": self.completed, "planned": self.planned},
        }
        return {**_head("progress", self.binding), "seq": self.seq, "status": self.status, "meta": meta}


@dataclass(frozen=True, slots=True)
class ResultBody:
    """`26920 result`: one logical terminal result of an attempt (§10).

    `has_code` says whether the `code` and `message` keys are present; they are on every outcome but
    `unknown` (and a cancel settled before dispatch, which the hosted runner never produces).
    """

    binding: Binding
    outcome: str
    dispatched: bool
    output: Output | None
    record: ArtifactRef | None
    artifacts: tuple[ArtifactRef, ...] = ()
    spend: int | None = None
    code: str | None = None
    message: str | None = None
    has_code: bool = True

    @classmethod
    def completed(cls, binding: Binding, record: ArtifactRef, output: Output) -> ResultBody:
        """A finished run (its report is the one artifact) or publish (no artifacts)."""
        artifacts = (output.report,) if isinstance(output, RunOutput) else ()
        return cls(binding, "completed", True, output, record, artifacts)

    @classmethod
    def refused(cls, binding: Binding, code: Code, message: str) -> ResultBody:
        """A refusal before anything was reserved or run: nothing dispatched, no record."""
        return cls(binding, "refused", False, None, None, code=code.value, message=message)

    @classmethod
    def failed(cls, binding: Binding, record: ArtifactRef, message: str, code: str = FAILED) -> ResultBody:
        """A run (code `failed`, first 400 characters of why) or a publish (its refusal code) that failed."""
        text = message[:MAX_FAILED_MESSAGE_CHARS] if code == FAILED else message
        return cls(binding, "failed", True, None, record, code=code, message=text)

    @classmethod
    def cancelled(cls, binding: Binding, record: ArtifactRef) -> ResultBody:
        """A run the requester stopped after it was dispatched."""
        return cls(binding, "cancelled", True, None, record, message=CANCELLED_MESSAGE)

    @classmethod
    def unknown(cls, binding: Binding, record: ArtifactRef) -> ResultBody:
        """A run the runner was restarted under: its outcome is unknown and it is never run again."""
        return cls(binding, "unknown", True, None, record, has_code=False)

    @classmethod
    def parse(cls, value: JsonValue, path: str = "") -> ResultBody:
        found, binding = _answer(value, path, "result", RESULT_KEYS[len(COMMON) :], ("code", "message"), empty_run=True)
        outcome = shape.choice(found["outcome"], shape.at(path, "outcome"), OUTCOMES, Code.UNSUPPORTED_FEATURE)
        dispatched = shape.boolean(found["dispatched"], shape.at(path, "dispatched"))
        output = None if found["output"] is None else parse_output(found["output"], shape.at(path, "output"))
        artifacts = tuple(
            ArtifactRef.parse(item, item_path)
            for item_path, item in shape.indexed(found["artifacts"], shape.at(path, "artifacts"))
        )
        if shape.array(found["receipts"], shape.at(path, "receipts")):
            raise shape.fail(shape.at(path, "receipts"), "the hosted runner sends no receipts")
        shape.literal(found["verification"], shape.at(path, "verification"), "not_run", Code.UNSUPPORTED_FEATURE)
        shape.literal(found["integration"], shape.at(path, "integration"), "not_requested", Code.UNSUPPORTED_FEATURE)
        record = None if found["record"] is None else _record(found["record"], shape.at(path, "record"))
        spend = None if found["spend"] is None else shape.integer(found["spend"], shape.at(path, "spend"), low=0)
        has_code = "code" in found
        if has_code != ("message" in found):
            raise shape.fail(path, "code and message come together")
        code = message = None
        if has_code:
            if found["code"] is not None:
                code = shape.choice(found["code"], shape.at(path, "code"), RESULT_CODES, Code.UNSUPPORTED_FEATURE)
            if found["message"] is not None:
                message = shape.string(found["message"], shape.at(path, "message"))
        result = cls(binding, outcome, dispatched, output, record, artifacts, spend, code, message, has_code)
        result.check(path)
        return result

    def check(self, path: str = "") -> None:
        """The rules of each outcome (§10.2–10.6) on top of the shape."""
        want_output = self.outcome == "completed"
        if (self.output is not None) != want_output:
            raise shape.fail(shape.at(path, "output"), f"must be {'set' if want_output else 'null'} on {self.outcome}")
        expected = (self.output.report,) if isinstance(self.output, RunOutput) else ()
        if self.artifacts != expected:
            raise shape.fail(shape.at(path, "artifacts"), "must be the run's report, or empty")
        if (self.record is None) != (self.outcome == "refused"):
            raise shape.fail(shape.at(path, "record"), "is null exactly on a refusal")
        if self.dispatched != (self.outcome != "refused") and self.outcome != "cancelled":
            raise shape.fail(shape.at(path, "dispatched"), "is false exactly on a refusal")
        if self.outcome == "unknown" and self.has_code:
            raise shape.fail(path, "an unknown outcome carries no code or message")
        if self.outcome in ("completed", "refused", "failed") and not self.has_code:
            raise shape.fail(shape.at(path, "code"), "is required")
        if self.outcome in ("refused", "failed") and (self.code is None or self.message is None):
            raise shape.fail(shape.at(path, "code"), f"a {self.outcome} result names its code and message")
        if self.outcome == "refused" and self.code == FAILED:
            raise shape.fail(shape.at(path, "code"), "a refusal names a refusal code")
        if self.outcome in ("completed", "cancelled") and self.code is not None:
            raise shape.fail(shape.at(path, "code"), f"must be null on {self.outcome}")
        if self.outcome == "completed" and self.message is not None:
            raise shape.fail(shape.at(path, "message"), "must be null on completed")
        if self.code == FAILED and self.message is not None and len(self.message) > MAX_FAILED_MESSAGE_CHARS:
            raise shape.fail(shape.at(path, "message"), f"at most {MAX_FAILED_MESSAGE_CHARS} characters")

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {
            **_head("result", self.binding),
            "outcome": self.outcome,
            "dispatched": self.dispatched,
            "output": None if self.output is None else self.output.to_json(),
            "artifacts": [artifact.to_json() for artifact in self.artifacts],
            "receipts": [],
            "verification": "not_run",
            "integration": "not_requested",
            "record": None if self.record is None else self.record.to_json(),
            "spend": self.spend,
        }
        if self.has_code:
            out["code"] = self.code
            out["message"] = self.message
        return out


@dataclass(frozen=True, slots=True)
class StatusResult:
    """`status_result`: the claim's phase, its root record, and the outcome once terminal."""

    binding: Binding
    state: str
    record: ArtifactRef
    outcome: str | None
    dispatched: bool

    @classmethod
    def parse(cls, value: JsonValue, path: str = "") -> StatusResult:
        found, binding = _answer(value, path, "status_result", ("state", "record", "outcome", "dispatched"))
        return cls(
            binding=binding,
            state=shape.choice(found["state"], shape.at(path, "state"), CLAIM_STATES, Code.UNSUPPORTED_FEATURE),
            record=_record(found["record"], shape.at(path, "record")),
            outcome=_outcome(found["outcome"], shape.at(path, "outcome")),
            dispatched=shape.boolean(found["dispatched"], shape.at(path, "dispatched")),
        )

    def to_json(self) -> dict[str, JsonValue]:
        return {
            **_head("status_result", self.binding),
            "state": self.state,
            "record": self.record.to_json(),
            "outcome": self.outcome,
            "dispatched": self.dispatched,
        }


@dataclass(frozen=True, slots=True)
class ReplayRecord:
    seq: int
    digest: str

    @classmethod
    def parse(cls, value: JsonValue, path: str) -> ReplayRecord:
        found = shape.closed(value, path, ("seq", "digest"), unknown=Code.UNSUPPORTED_FEATURE)
        return cls(
            seq=shape.integer(found["seq"], shape.at(path, "seq"), low=0),
            digest=shape.digest(found["digest"], shape.at(path, "digest")),
        )

    def to_json(self) -> dict[str, JsonValue]:
        return {"seq": self.seq, "digest": self.digest}


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """`replay_result`: retained record references after `after_seq`; a gap is explicit, never hidden."""

    binding: Binding
    records: tuple[ReplayRecord, ...]
    next_seq: int
    complete: bool
    gap: bool

    @property
    def code(self) -> str | None:
        return Code.CONTENT_UNAVAILABLE.value if self.gap else None

    @classmethod
    def parse(cls, value: JsonValue, path: str = "") -> ReplayResult:
        found, binding = _answer(value, path, "replay_result", ("records", "next_seq", "complete", "gap", "code"))
        gap = shape.boolean(found["gap"], shape.at(path, "gap"))
        complete = shape.boolean(found["complete"], shape.at(path, "complete"))
        if found["code"] != (Code.CONTENT_UNAVAILABLE.value if gap else None):
            raise shape.fail(shape.at(path, "code"), "is 'content_unavailable' exactly when there is a gap")
        if gap and complete:
            raise shape.fail(shape.at(path, "complete"), "a replay with a gap is not complete")
        return cls(
            binding=binding,
            records=tuple(
                ReplayRecord.parse(item, item_path)
                for item_path, item in shape.indexed(found["records"], shape.at(path, "records"))
            ),
            next_seq=shape.integer(found["next_seq"], shape.at(path, "next_seq"), low=0),
            complete=complete,
            gap=gap,
        )

    def to_json(self) -> dict[str, JsonValue]:
        return {
            **_head("replay_result", self.binding),
            "records": [record.to_json() for record in self.records],
            "next_seq": self.next_seq,
            "complete": self.complete,
            "gap": self.gap,
            "code": self.code,
        }


@dataclass(frozen=True, slots=True)
class CancelResult:
    """`cancel_result`: the cancel was recorded (`acknowledged`), which is not a confirmed stop."""

    binding: Binding
    confirmed: bool
    outcome: str | None
    dispatched: bool

    @classmethod
    def parse(cls, value: JsonValue, path: str = "") -> CancelResult:
        found, binding = _answer(value, path, "cancel_result", ("acknowledged", "confirmed", "outcome", "dispatched"))
        if found["acknowledged"] is not True:
            raise shape.fail(shape.at(path, "acknowledged"), "must be true")
        return cls(
            binding=binding,
            confirmed=shape.boolean(found["confirmed"], shape.at(path, "confirmed")),
            outcome=_outcome(found["outcome"], shape.at(path, "outcome")),
            dispatched=shape.boolean(found["dispatched"], shape.at(path, "dispatched")),
        )

    def to_json(self) -> dict[str, JsonValue]:
        return {
            **_head("cancel_result", self.binding),
            "acknowledged": True,
            "confirmed": self.confirmed,
            "outcome": self.outcome,
            "dispatched": self.dispatched,
        }


Answer = AcceptedBody | ProgressBody | ResultBody | StatusResult | ReplayResult | CancelResult
ANSWERS: dict[str, type[Answer]] = {
    "accepted": AcceptedBody,
    "progress": ProgressBody,
    "result": ResultBody,
    "status_result": StatusResult,
    "replay_result": ReplayResult,
    "cancel_result": CancelResult,
}


def parse_answer(value: JsonValue, path: str = "") -> Answer:
    """Any answer body, by its `type`."""
    found = shape.obj(value, path)
    shape.literal(found.get("v"), shape.at(path, "v"), EXECUTION_SCHEMA, Code.UNSUPPORTED_VERSION)
    kind = shape.choice(found.get("type"), shape.at(path, "type"), tuple(ANSWERS), Code.UNSUPPORTED_FEATURE)
    return ANSWERS[kind].parse(value, path)


def read_answer(plaintext: str | bytes) -> Answer:
    """A decrypted `26920`/`27020` plaintext, strictly read and parsed."""
    return parse_answer(read(plaintext, max_bytes=MAX_PLAINTEXT_BYTES))


__all__ = [
    "CANCELLED_MESSAGE",
    "FAILED",
    "AcceptedBody",
    "Answer",
    "CancelResult",
    "Output",
    "ProgressBody",
    "PublishOutput",
    "ReplayRecord",
    "ReplayResult",
    "ResultBody",
    "RunOutput",
    "StatusResult",
    "parse_answer",
    "read_answer",
]
