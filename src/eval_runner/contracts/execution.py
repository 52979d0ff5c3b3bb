"""The execution request `openagents.execution.v1` (wire.md §5.2, §6, §8, §11): execute and control bodies.

A `25920` is opened before anyone is answered, and every failure at open is a silent drop (nothing proves
who sent it), so these parsers decide what the runner will ever look at; they follow the reference
(`crates/nostr/src/execution.rs`) check for check (decisions.md, "The execution-side contracts"). The
`input` stays opaque JSON here: the hosted profile parses it at admission (`contracts.hosted`), where a
bad input earns a refusal answer rather than a drop. Each record keeps the decrypted JSON it came from
(`raw`), because the idempotency fingerprint is over those exact values (§8.1).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from eval_runner.contracts import shape
from eval_runner.contracts.errors import Code
from eval_runner.contracts.refs import ArtifactRef, DefinitionRef
from eval_runner.contracts.strict_json import JsonValue, canonical, digest_bytes, digest_canonical, read

EXECUTION_SCHEMA = "openagents.execution.v1"
RUN_RECORD_SCHEMA = "openagents.run-record.v1"
#: The reference drops a decrypted request larger than this.
MAX_PLAINTEXT_BYTES = 262_144
MAX_INPUT_BYTES = 131_072
MAX_ATTEMPT = 2**32 - 1
MAX_REPLAY_RECORDS = 256
MAX_REASON_BYTES = 1_024
#: A top-level key with one of these names (any case) refuses: payloads carry no credentials.
CREDENTIAL_KEYS = frozenset(
    {"key", "secret", "authorization", "credential", "credentials", "api_key", "apikey", "bearer", "token"}
)
BOUND_KEYS = ("wall_ms", "output_bytes", "jobs", "spend_microunits")
EXECUTE_REQUIRED = (
    "v",
    "requires",
    "type",
    "request",
    "attempt",
    "run",
    "target",
    "lock",
    "input",
    "context",
    "requirements",
    "bounds",
    "deadline",
    "retain_until",
)
EXECUTE_KEYS = (*EXECUTE_REQUIRED, "parent", "meta")
CONTROL_TYPES = ("status", "replay", "cancel")
CONTROL_REQUIRED = ("v", "requires", "type", "request", "attempt", "run")
CONTROL_KEYS = (*CONTROL_REQUIRED, "after_seq", "max_records", "reason", "meta")
PARENT_KEYS = ("run", "step", "iteration", "attempt")
#: Request and run ids: 1–128 bytes, each printable ASCII without space.
ID = re.compile(r"^[\x21-\x7e]{1,128}$")
_UNIX = re.compile(r"^[0-9]{1,20}$")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ident(value: JsonValue, path: str) -> str:
    """A request, run or step id: 1–128 bytes of 0x21–0x7E."""
    if not isinstance(value, str) or ID.fullmatch(value) is None:
        raise shape.fail(path, "must be 1–128 printable ASCII characters without spaces")
    return value


def attempt_number(value: JsonValue, path: str) -> int:
    """An attempt: at least 1 and fits u32 (beyond it is `malformed`, as in the reference, not a limit)."""
    found = shape.integer(value, path, low=1)
    if found > MAX_ATTEMPT:
        raise shape.fail(path, f"must be at most {MAX_ATTEMPT}")
    return found


def _count(value: JsonValue, path: str) -> int:
    """A non-negative integer (seconds, milliseconds, counters)."""
    return shape.integer(value, path, low=0)


def keys(found: dict[str, JsonValue], path: str, required: Iterable[str], allowed: Iterable[str]) -> None:
    """The reference's key order: a missing required key (`malformed`), then an unknown one (`unsupported_feature`)."""
    for key in required:
        if key not in found:
            raise shape.fail(shape.at(path, key), "is required")
    known = set(allowed)
    for key in found:
        if key not in known:
            raise shape.fail(shape.at(path, key), "is not a known field", Code.UNSUPPORTED_FEATURE)


def _opened(value: JsonValue, path: str) -> dict[str, JsonValue]:
    """What every request body passes before its type is looked at: object, version, no credentials."""
    found = shape.obj(value, path)
    # Anything but the schema string, absence included, is another version (as the reference's check_schema).
    shape.literal(found.get("v"), shape.at(path, "v"), EXECUTION_SCHEMA, Code.UNSUPPORTED_VERSION)
    for key in found:
        # ASCII case folding only, as the reference's `to_ascii_lowercase`.
        if key.translate(_ASCII_LOWER) in CREDENTIAL_KEYS:
            raise shape.fail(shape.at(path, key), "names a credential; requests never carry one")
    return found


def _meta(found: dict[str, JsonValue], path: str) -> dict[str, JsonValue] | None:
    """`meta` is inert: any object, kept verbatim; absent is not the same as `{}`."""
    if "meta" not in found:
        return None
    return shape.obj(found["meta"], shape.at(path, "meta"))


@dataclass(frozen=True, slots=True)
class Binding:
    """The logical attempt every request and answer names: request, attempt and run."""

    request: str
    attempt: int
    run: str

    @classmethod
    def parse(cls, found: dict[str, JsonValue], path: str, *, empty_run: bool = False) -> Binding:
        """From an object's members; `empty_run` admits `run: ""`, which control refusals carry (§10.4)."""
        run = found.get("run")
        return cls(
            request=ident(found.get("request"), shape.at(path, "request")),
            attempt=attempt_number(found.get("attempt"), shape.at(path, "attempt")),
            run="" if empty_run and run == "" else ident(run, shape.at(path, "run")),
        )

    def to_json(self) -> dict[str, JsonValue]:
        return {"request": self.request, "attempt": self.attempt, "run": self.run}


@dataclass(frozen=True, slots=True)
class Bounds:
    """Whole-attempt ceilings; `None` is absent, which is not a zero budget."""

    wall_ms: int | None = None
    output_bytes: int | None = None
    jobs: int | None = None
    spend_microunits: int | None = None

    @classmethod
    def parse(cls, value: JsonValue, path: str) -> Bounds:
        found = shape.obj(value, path)
        keys(found, path, (), BOUND_KEYS)
        given = {key: _count(found[key], shape.at(path, key)) for key in BOUND_KEYS if key in found}
        return cls(**given)

    def to_json(self) -> dict[str, JsonValue]:
        values = (self.wall_ms, self.output_bytes, self.jobs, self.spend_microunits)
        return {key: value for key, value in zip(BOUND_KEYS, values, strict=True) if value is not None}


@dataclass(frozen=True, slots=True)
class Parent:
    """Attribution to a parent run's step; it grants nothing."""

    run: str
    step: str
    iteration: int
    attempt: int

    @classmethod
    def parse(cls, value: JsonValue, path: str) -> Parent:
        found = shape.obj(value, path)
        # The reference checks the parent's unknown keys before its missing ones.
        keys(found, path, (), PARENT_KEYS)
        keys(found, path, PARENT_KEYS, PARENT_KEYS)
        return cls(
            run=ident(found["run"], shape.at(path, "run")),
            step=ident(found["step"], shape.at(path, "step")),
            iteration=_count(found["iteration"], shape.at(path, "iteration")),
            attempt=attempt_number(found["attempt"], shape.at(path, "attempt")),
        )

    def to_json(self) -> dict[str, JsonValue]:
        return {"run": self.run, "step": self.step, "iteration": self.iteration, "attempt": self.attempt}


def _expiration(tag: str | None, path: str) -> int:
    if tag is None:
        raise shape.fail(path, "the event carries no expiration tag to match")
    if not isinstance(tag, str) or _UNIX.fullmatch(tag) is None:
        raise shape.fail(path, f"the event's expiration tag {str(tag)[:32]!r} is not Unix seconds")
    return int(tag)


@dataclass(frozen=True, slots=True)
class ExecuteBody:
    """An opened execute body (`type: "execute"`)."""

    request: str
    attempt: int
    run: str
    target: DefinitionRef
    lock: ArtifactRef
    input: JsonValue
    context: ArtifactRef
    requirements: ArtifactRef
    bounds: Bounds
    deadline: int
    retain_until: int
    parent: Parent | None = None
    meta: dict[str, JsonValue] | None = None
    #: The decrypted body as it arrived; the fingerprint is over it.
    raw: JsonValue = field(default=None, compare=False, repr=False)
    #: `sha256:` of the JCS of `raw`, computed at parse as the reference does (so it always exists).
    body_digest: str = field(default="", compare=False, repr=False)

    @property
    def binding(self) -> Binding:
        return Binding(self.request, self.attempt, self.run)

    @property
    def input_digest(self) -> str:
        """`sha256:` of the JCS of `input`, as `accepted.input_digest` carries it."""
        return digest_canonical(self.input)

    @classmethod
    def parse(cls, value: JsonValue, path: str = "", *, expiration: str | None) -> ExecuteBody:
        """Check an execute body; `expiration` is the event's `expiration` tag value (or None when absent)."""
        found = _opened(value, path)
        shape.literal(found.get("type"), shape.at(path, "type"), "execute")
        keys(found, path, EXECUTE_REQUIRED, EXECUTE_KEYS)
        body_digest = digest_canonical(value)
        shape.empty_requires(found["requires"], shape.at(path, "requires"))
        deadline = _count(found["deadline"], shape.at(path, "deadline"))
        if _expiration(expiration, shape.at(path, "deadline")) != deadline:
            raise shape.fail(shape.at(path, "deadline"), f"must equal the event's expiration tag {expiration}")
        retain_until = _count(found["retain_until"], shape.at(path, "retain_until"))
        if retain_until <= deadline:
            raise shape.fail(shape.at(path, "retain_until"), "must be later than the deadline")
        size = len(canonical(found["input"]))
        if size > MAX_INPUT_BYTES:
            raise shape.fail(
                shape.at(path, "input"), f"is {size} bytes; at most {MAX_INPUT_BYTES}", Code.LIMIT_EXCEEDED
            )
        binding = Binding.parse(found, path)
        parent = None
        if "parent" in found:
            parent = Parent.parse(found["parent"], shape.at(path, "parent"))
        return cls(
            request=binding.request,
            attempt=binding.attempt,
            run=binding.run,
            target=DefinitionRef.parse(found["target"], shape.at(path, "target")),
            lock=ArtifactRef.parse(found["lock"], shape.at(path, "lock")),
            input=found["input"],
            context=ArtifactRef.parse(found["context"], shape.at(path, "context")),
            requirements=ArtifactRef.parse(found["requirements"], shape.at(path, "requirements")),
            bounds=Bounds.parse(found["bounds"], shape.at(path, "bounds")),
            deadline=deadline,
            retain_until=retain_until,
            parent=parent,
            meta=_meta(found, path),
            raw=value,
            body_digest=body_digest,
        )

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {
            "v": EXECUTION_SCHEMA,
            "requires": [],
            "type": "execute",
            **self.binding.to_json(),
            "target": self.target.to_json(),
            "lock": self.lock.to_json(),
            "input": self.input,
            "context": self.context.to_json(),
            "requirements": self.requirements.to_json(),
            "bounds": self.bounds.to_json(),
            "deadline": self.deadline,
            "retain_until": self.retain_until,
        }
        if self.parent is not None:
            out["parent"] = self.parent.to_json()
        if self.meta is not None:
            out["meta"] = self.meta
        return out


def _max_records(value: JsonValue, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_REPLAY_RECORDS:
        raise shape.fail(path, f"must be an integer from 1 to {MAX_REPLAY_RECORDS}")
    return value


def _reason(value: JsonValue, path: str) -> str:
    if not isinstance(value, str) or not 1 <= len(value.encode("utf-8", "surrogatepass")) <= MAX_REASON_BYTES:
        raise shape.fail(path, f"must be 1 to {MAX_REASON_BYTES} bytes of text")
    return value


@dataclass(frozen=True, slots=True)
class ControlBody:
    """An opened control (§11): `status`, `replay` (after_seq, max_records) or `cancel` (reason).

    Optional members are `None` when absent; `has_after_seq` tells `after_seq: null` (replay from the
    root) from no `after_seq` at all.
    """

    type: str
    request: str
    attempt: int
    run: str
    after_seq: int | None = None
    has_after_seq: bool = False
    max_records: int | None = None
    reason: str | None = None
    meta: dict[str, JsonValue] | None = None
    raw: JsonValue = field(default=None, compare=False, repr=False)

    @property
    def binding(self) -> Binding:
        return Binding(self.request, self.attempt, self.run)

    @classmethod
    def parse(cls, value: JsonValue, path: str = "") -> ControlBody:
        found = _opened(value, path)
        kind = shape.choice(found.get("type"), shape.at(path, "type"), CONTROL_TYPES)
        # As in the reference: unknown keys first, then what each control needs.
        keys(found, path, (), CONTROL_KEYS)
        keys(found, path, CONTROL_REQUIRED, CONTROL_KEYS)
        shape.empty_requires(found["requires"], shape.at(path, "requires"))
        binding = Binding.parse(found, path)
        if kind == "status":
            for key in ("after_seq", "reason"):
                if key in found:
                    raise shape.fail(shape.at(path, key), "a status control takes none", Code.UNSUPPORTED_FEATURE)
        if kind == "replay":
            for key in ("after_seq", "max_records"):
                if key not in found:
                    raise shape.fail(shape.at(path, key), "is required in a replay")
        if kind == "cancel" and "reason" not in found:
            raise shape.fail(shape.at(path, "reason"), "is required in a cancel")
        after_seq = None
        if found.get("after_seq") is not None:
            after_seq = _count(found["after_seq"], shape.at(path, "after_seq"))
        max_records = None
        if "max_records" in found:
            max_records = _max_records(found["max_records"], shape.at(path, "max_records"))
        reason = None
        if "reason" in found:
            reason = _reason(found["reason"], shape.at(path, "reason"))
        return cls(
            type=kind,
            request=binding.request,
            attempt=binding.attempt,
            run=binding.run,
            after_seq=after_seq,
            has_after_seq="after_seq" in found,
            max_records=max_records,
            reason=reason,
            meta=_meta(found, path),
            raw=value,
        )

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {"v": EXECUTION_SCHEMA, "requires": [], "type": self.type, **self.binding.to_json()}
        if self.has_after_seq:
            out["after_seq"] = self.after_seq
        if self.max_records is not None:
            out["max_records"] = self.max_records
        if self.reason is not None:
            out["reason"] = self.reason
        if self.meta is not None:
            out["meta"] = self.meta
        return out


def open_body(plaintext: str | bytes, expiration_tag: str | None) -> ExecuteBody | ControlBody:
    """Read a decrypted `25920` plaintext into an execute or a control body (§6 step 2.6–2.9).

    `expiration_tag` is the event's `expiration` value (None when it has none); only an execute needs it.
    """
    value = read(plaintext, max_bytes=MAX_PLAINTEXT_BYTES)
    found = _opened(value, "")
    kind = found.get("type")
    if kind == "execute":
        return ExecuteBody.parse(value, expiration=expiration_tag)
    if kind in CONTROL_TYPES:
        return ControlBody.parse(value)
    raise shape.fail("type", "must be execute, status, replay or cancel")


def fingerprint(body: ExecuteBody) -> str:
    """The idempotency fingerprint (§8.1): `sha256:` of the JCS of the whole decrypted body."""
    return body.body_digest or digest_canonical(body.to_json())


@dataclass(frozen=True, slots=True)
class RootRecord:
    """A claim's NIP-RUN root envelope: its exact bytes, their ArtifactRef, and the record's logical digest."""

    data: bytes
    ref: ArtifactRef
    digest: str


def record_digest(record: JsonValue) -> str:
    """A run record's logical digest: `sha256("openagents.run-record.v1\\n" + JCS(record))`."""
    return digest_bytes(RUN_RECORD_SCHEMA.encode() + b"\n" + canonical(record))


def root_record(body: ExecuteBody, controller: str, now: int) -> RootRecord:
    """The `created` root record a claim persists before `accepted` (§8.2), written as JCS bytes."""
    controller = shape.hex64(controller, "controller")
    now = _count(now, "now")
    record: dict[str, JsonValue] = {
        "run": body.run,
        "seq": 0,
        "previous": None,
        "controller": controller,
        "generation": 0,
        "type": "created",
        "subject": {"step": None, "iteration": None, "attempt": None},
        "time": now,
        "data": {
            "owner": controller,
            "request": body.request,
            "base": body.lock.digest,
            "program": body.target.artifact.digest,
            "lock": body.lock.digest,
            "context": body.context.digest,
            "policy": body.requirements.digest,
            "parent": None if body.parent is None else body.parent.to_json(),
            "recipients": [controller],
        },
    }
    digest = record_digest(record)
    data = canonical({"v": RUN_RECORD_SCHEMA, "requires": [], "record": record, "digest": digest})
    return RootRecord(data=data, ref=ArtifactRef.of_bytes(data, "application/json"), digest=digest)
