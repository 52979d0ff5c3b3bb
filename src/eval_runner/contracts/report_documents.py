"""The documents a report points at by ArtifactRef: partition, limitations, runs, and the arm locks.

A report names these by the digest of their exact bytes (the engine's pretty JSON, wire.md §13.4), so
each record has a parser a checker can run over fetched bytes and a writer (`to_bytes`, `ref`) that
produces the bytes and the ArtifactRef. A lock is what a check compares: two results are a check only
when their subject locks' digests are equal, so a lock's bytes must be reproducible from its record. The
spec gives no limits or codes for these; ours are in decisions.md ("Report-side contracts").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from eval_runner.contracts import shape
from eval_runner.contracts.case_id import case_id
from eval_runner.contracts.errors import Code
from eval_runner.contracts.ext_eval import MAX_CASES
from eval_runner.contracts.refs import SLUG, ArtifactRef, DefinitionRef
from eval_runner.contracts.strict_json import JsonValue, pretty, read

PARTITION_SCHEMA = "openagents.eval-partition.v1"
LIMITATIONS_SCHEMA = "openagents.eval-limitations.v1"
RUNS_SCHEMA = "openagents.ext-eval-runs.v1"
LOCK_SCHEMA = "openagents.ext-eval-lock.v1"

MAX_LIMITATIONS = 256
MAX_TEXT_BYTES = 4_096
#: cases × runs × arms at the case manifest's bounds.
MAX_RUN_ENTRIES = MAX_CASES * 10 * 2
MAX_LOCKED_FILES = 1_024


def _head(
    value: JsonValue, path: str, schema: str, keys: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict[str, JsonValue]:
    """The common `{v, requires: [], …, meta?}` frame of an engine document."""
    found = shape.closed(value, path, ("v", "requires", *keys), ("meta", *optional), unknown=Code.UNSUPPORTED_FEATURE)
    shape.version(found["v"], shape.at(path, "v"), schema)
    shape.empty_requires(found["requires"], shape.at(path, "requires"))
    if "meta" in found:
        shape.obj(found["meta"], shape.at(path, "meta"))
    return found


def _frame(schema: str, body: dict[str, JsonValue], meta: dict[str, JsonValue] | None) -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {"v": schema, "requires": [], **body}
    if meta is not None:
        out["meta"] = meta
    return out


def document_ref(value: JsonValue, schema: str) -> tuple[bytes, ArtifactRef]:
    """The engine's bytes for a document (pretty JSON) and the ArtifactRef a report names them by."""
    data = pretty(value)
    return data, ArtifactRef.of_bytes(data, "application/json", schema)


def _text(value: JsonValue, path: str) -> str:
    return shape.string(value, path, min_bytes=1, max_bytes=MAX_TEXT_BYTES)


@dataclass(frozen=True, slots=True)
class Partition:
    """Which cases are development, held out, or excluded; no case in two places.

    `calibration` appears only in decision-service records (NIP-EVAL), so it is kept only when present.
    """

    development: tuple[str, ...]
    held_out: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()
    calibration: tuple[str, ...] | None = None
    meta: dict[str, JsonValue] | None = field(default=None, hash=False)

    @classmethod
    def parse(cls, value: JsonValue, path: str = "") -> Partition:
        found = _head(value, path, PARTITION_SCHEMA, ("development", "held_out", "excluded"), ("calibration",))
        seen: set[str] = set()

        def ids(key: str) -> tuple[str, ...]:
            out: list[str] = []
            for item_path, item in shape.indexed(found[key], shape.at(path, key), max_items=MAX_CASES):
                identifier = case_id(item, item_path)
                if identifier in seen:
                    raise shape.fail(item_path, f"case {identifier!r} is listed twice", Code.CONFLICT)
                seen.add(identifier)
                out.append(identifier)
            return tuple(out)

        development, held_out, excluded = ids("development"), ids("held_out"), ids("excluded")
        calibration = None
        if "calibration" in found:
            # Rows a calibration map was fitted on sit beside development; they may repeat its ids.
            seen.clear()
            calibration = ids("calibration")
        return cls(
            development=development,
            held_out=held_out,
            excluded=excluded,
            calibration=calibration,
            meta=found.get("meta"),
        )

    def to_json(self) -> dict[str, JsonValue]:
        body: dict[str, JsonValue] = {
            "development": list(self.development),
            "held_out": list(self.held_out),
            "excluded": list(self.excluded),
        }
        if self.calibration is not None:
            body["calibration"] = list(self.calibration)
        return _frame(PARTITION_SCHEMA, body, self.meta)

    def ref(self) -> tuple[bytes, ArtifactRef]:
        """The partition's bytes, checked by the parser, and its ArtifactRef."""
        return document_ref(Partition.parse(self.to_json()).to_json(), PARTITION_SCHEMA)


@dataclass(frozen=True, slots=True)
class Limitations:
    """Bounded, explicit limitations, and why the run is partial (None when it finished)."""

    limitations: tuple[str, ...]
    partial: str | None = None
    meta: dict[str, JsonValue] | None = field(default=None, hash=False)

    @classmethod
    def parse(cls, value: JsonValue, path: str = "") -> Limitations:
        found = _head(value, path, LIMITATIONS_SCHEMA, ("limitations", "partial"))
        items = shape.indexed(found["limitations"], shape.at(path, "limitations"), max_items=MAX_LIMITATIONS)
        partial = found["partial"]
        return cls(
            limitations=tuple(_text(item, item_path) for item_path, item in items),
            partial=None if partial is None else _text(partial, shape.at(path, "partial")),
            meta=found.get("meta"),
        )

    def to_json(self) -> dict[str, JsonValue]:
        return _frame(LIMITATIONS_SCHEMA, {"limitations": list(self.limitations), "partial": self.partial}, self.meta)

    def ref(self) -> tuple[bytes, ArtifactRef]:
        """The limitations' bytes, checked by the parser, and their ArtifactRef."""
        return document_ref(Limitations.parse(self.to_json()).to_json(), LIMITATIONS_SCHEMA)


class RunArm(StrEnum):
    SUBJECT = "subject"
    BASELINE = "baseline"


class Outcome(StrEnum):
    """The shared execution outcomes; a run's coverage word."""

    COMPLETED = "completed"
    REFUSED = "refused"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"


def _refs(value: JsonValue, path: str) -> tuple[ArtifactRef, ...]:
    return tuple(ArtifactRef.parse(item, at) for at, item in shape.indexed(value, path, max_items=MAX_LOCKED_FILES))


@dataclass(frozen=True, slots=True)
class RunEntry:
    """One attempt: failures, refusals and unknowns included, so the coverage can be recounted."""

    arm: RunArm
    case: str
    attempt: int
    outcome: Outcome
    receipts: tuple[ArtifactRef, ...]
    #: The ATIF log (schema `ATIF-v1.8`) when there is one, then the grades document.
    artifacts: tuple[ArtifactRef, ...]

    @classmethod
    def parse(cls, value: JsonValue, path: str) -> RunEntry:
        keys = ("arm", "case", "attempt", "outcome", "receipts", "artifacts")
        found = shape.closed(value, path, keys, unknown=Code.UNSUPPORTED_FEATURE)
        arm = found["arm"]
        outcome = found["outcome"]
        for key, item in (("arm", arm), ("outcome", outcome)):
            if not isinstance(item, str):
                raise shape.fail(shape.at(path, key), "must be a string")
        return cls(
            arm=RunArm(shape.choice(arm, shape.at(path, "arm"), tuple(RunArm), Code.UNSUPPORTED_FEATURE)),
            case=case_id(found["case"], shape.at(path, "case")),
            attempt=shape.integer(found["attempt"], shape.at(path, "attempt"), low=1),
            outcome=Outcome(shape.choice(outcome, shape.at(path, "outcome"), tuple(Outcome), Code.UNSUPPORTED_FEATURE)),
            receipts=_refs(found["receipts"], shape.at(path, "receipts")),
            artifacts=_refs(found["artifacts"], shape.at(path, "artifacts")),
        )

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "arm": self.arm.value,
            "case": self.case,
            "attempt": self.attempt,
            "outcome": self.outcome.value,
            "receipts": [item.to_json() for item in self.receipts],
            "artifacts": [item.to_json() for item in self.artifacts],
        }


@dataclass(frozen=True, slots=True)
class RunsDocument:
    """`openagents.ext-eval-runs.v1`: every attempt in plan order."""

    runs: tuple[RunEntry, ...]
    meta: dict[str, JsonValue] | None = field(default=None, hash=False)

    @classmethod
    def parse(cls, value: JsonValue, path: str = "") -> RunsDocument:
        found = _head(value, path, RUNS_SCHEMA, ("runs",))
        items = shape.indexed(found["runs"], shape.at(path, "runs"), max_items=MAX_RUN_ENTRIES)
        seen: set[tuple[str, str, int]] = set()
        runs: list[RunEntry] = []
        for item_path, item in items:
            entry = RunEntry.parse(item, item_path)
            key = (entry.arm.value, entry.case, entry.attempt)
            if key in seen:
                raise shape.fail(item_path, "repeats an attempt of this case and arm", Code.CONFLICT)
            seen.add(key)
            runs.append(entry)
        return cls(runs=tuple(runs), meta=found.get("meta"))

    def to_json(self) -> dict[str, JsonValue]:
        return _frame(RUNS_SCHEMA, {"runs": [entry.to_json() for entry in self.runs]}, self.meta)

    def ref(self) -> tuple[bytes, ArtifactRef]:
        """The runs document's bytes, checked by the parser, and its ArtifactRef."""
        return document_ref(RunsDocument.parse(self.to_json()).to_json(), RUNS_SCHEMA)


@dataclass(frozen=True, slots=True)
class LockedFile:
    """A program (`slug`) or skill (`name`) an arm admitted, by the digest and size of its file."""

    name: str
    digest: str
    size: int

    @classmethod
    def parse(cls, value: JsonValue, path: str, label: str) -> LockedFile:
        found = shape.closed(value, path, (label, "digest", "size"), unknown=Code.UNSUPPORTED_FEATURE)
        name_path = shape.at(path, label)
        if label == "slug":
            name = shape.string(found[label], name_path, pattern=SLUG, what="a slug")
        else:
            name = _text(found[label], name_path)
        return cls(
            name=name,
            digest=shape.digest(found["digest"], shape.at(path, "digest")),
            size=shape.integer(found["size"], shape.at(path, "size"), low=0),
        )

    def to_json(self, label: str) -> dict[str, JsonValue]:
        return {label: self.name, "digest": self.digest, "size": self.size}


@dataclass(frozen=True, slots=True)
class Question:
    name: str
    digest: str


@dataclass(frozen=True, slots=True)
class AgentPin:
    """The agent binary both arms ran, and the question sets it asks its decision door."""

    digest: str
    size: int
    questions: tuple[Question, ...] = ()

    @classmethod
    def parse(cls, value: JsonValue, path: str) -> AgentPin:
        found = shape.closed(value, path, ("digest", "size", "questions"), unknown=Code.UNSUPPORTED_FEATURE)
        questions = []
        for item_path, item in shape.indexed(found["questions"], shape.at(path, "questions"), max_items=256):
            entry = shape.closed(item, item_path, ("name", "digest"), unknown=Code.UNSUPPORTED_FEATURE)
            questions.append(
                Question(
                    name=_text(entry["name"], shape.at(item_path, "name")),
                    digest=shape.digest(entry["digest"], shape.at(item_path, "digest")),
                )
            )
        return cls(
            digest=shape.digest(found["digest"], shape.at(path, "digest")),
            size=shape.integer(found["size"], shape.at(path, "size"), low=0),
            questions=tuple(questions),
        )

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "digest": self.digest,
            "size": self.size,
            "questions": [{"name": question.name, "digest": question.digest} for question in self.questions],
        }


@dataclass(frozen=True, slots=True)
class ArmLock:
    """`openagents.ext-eval-lock.v1`: what one arm held. The subject names its definition and package lock;
    the baseline admits nothing. `package` and `defaults` are kept as the JSON the resolver wrote: their
    inner layout belongs to the resolver (wire.md §24 q11), and only their bytes matter to a check.
    """

    arm: RunArm
    agent: AgentPin
    definition: DefinitionRef | None = None
    package: JsonValue = field(default=None, hash=False)
    programs: tuple[LockedFile, ...] = ()
    skills: tuple[LockedFile, ...] = ()
    defaults: JsonValue = field(default=None, hash=False)
    meta: dict[str, JsonValue] | None = field(default=None, hash=False)

    @classmethod
    def parse(cls, value: JsonValue, path: str = "") -> ArmLock:
        frame = shape.obj(value, path)
        arm_word = frame.get("arm")
        subject = arm_word == RunArm.SUBJECT.value
        keys = (
            ("arm", "definition", "package", "programs", "skills", "agent")
            if subject
            else ("arm", "programs", "skills", "agent")
        )
        found = shape.closed(
            value, path, ("v", "requires", *keys), ("meta", "defaults"), unknown=Code.UNSUPPORTED_FEATURE
        )
        shape.version(found["v"], shape.at(path, "v"), LOCK_SCHEMA)
        shape.empty_requires(found["requires"], shape.at(path, "requires"))
        if not isinstance(arm_word, str):
            raise shape.fail(shape.at(path, "arm"), "must be a string")
        arm = RunArm(shape.choice(arm_word, shape.at(path, "arm"), tuple(RunArm), Code.UNSUPPORTED_FEATURE))
        programs = tuple(
            LockedFile.parse(item, at, "slug")
            for at, item in shape.indexed(found["programs"], shape.at(path, "programs"), max_items=MAX_LOCKED_FILES)
        )
        skills = tuple(
            LockedFile.parse(item, at, "name")
            for at, item in shape.indexed(found["skills"], shape.at(path, "skills"), max_items=MAX_LOCKED_FILES)
        )
        if arm is RunArm.BASELINE and (programs or skills):
            raise shape.fail(path, "a baseline lock admits no programs or skills")
        meta = None
        if "meta" in found:
            meta = shape.obj(found["meta"], shape.at(path, "meta"))
        defaults = None
        if "defaults" in found:
            defaults = shape.obj(found["defaults"], shape.at(path, "defaults"))
        return cls(
            arm=arm,
            agent=AgentPin.parse(found["agent"], shape.at(path, "agent")),
            definition=DefinitionRef.parse(found["definition"], shape.at(path, "definition")) if subject else None,
            package=found.get("package"),
            programs=programs,
            skills=skills,
            defaults=defaults,
            meta=meta,
        )

    @classmethod
    def parse_bytes(cls, data: bytes) -> ArmLock:
        return cls.parse(read(data))

    def to_json(self) -> dict[str, JsonValue]:
        body: dict[str, JsonValue] = {"arm": self.arm.value}
        if self.arm is RunArm.SUBJECT:
            body["definition"] = None if self.definition is None else self.definition.to_json()
            body["package"] = self.package
        body["programs"] = [item.to_json("slug") for item in self.programs]
        body["skills"] = [item.to_json("name") for item in self.skills]
        body["agent"] = self.agent.to_json()
        if self.defaults is not None:
            body["defaults"] = self.defaults
        return _frame(LOCK_SCHEMA, body, self.meta)

    def ref(self) -> tuple[bytes, ArtifactRef]:
        """The lock's bytes, checked by the parser, and its ArtifactRef."""
        return document_ref(ArmLock.parse(self.to_json()).to_json(), LOCK_SCHEMA)
