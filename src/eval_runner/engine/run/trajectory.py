"""ATIF trajectories: the agent's log in; a typed record and an ATIF-v1.8 document out.

Graders never watch the agent; they read what it wrote down. The agent writes an ATIF *log*
(`engine/run/atif_log.py`); the runner keeps the *document* form (Harbor RFC 0001, ATIF-v1.8) as
`trajectory.json`, and graders read from this module: the final agent message, every call with its
operation names and input, the document's JSON text and the bounded view a door grader is shown. A log
line that does not read is a `LogFault` and the rest still reads, unless `whole=True` (any fault, or no
`end` record, refuses it). Any 1.x version is accepted and relabelled ATIF-v1.8 (every 1.x revision is
additive; the declared one is kept). Rendering follows the reference (decisions.md, "The door proxy, the
stand-ins and ATIF reading"); the only exception that leaves this module is `TrajectoryError`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from eval_runner.contracts import strict_json
from eval_runner.engine.run.atif_log import (
    DECISION_CALL_SCHEMA,
    INTERRUPTED,
    MAX_TRAJECTORY_BYTES,
    SUPPORTED_VERSIONS,
    U64,
    JsonValue,
    LogFault,
    check_size,
    iso,
    loads,
    read_log,
    render,
)
from eval_runner.engine.run.atif_log import SCHEMA_VERSION as SCHEMA_VERSION
from eval_runner.engine.run.atif_log import TrajectoryError as TrajectoryError

#: Steps a door grader sees from each end of a long trajectory.
DOOR_STEPS = 12
_AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")


class Source(StrEnum):
    SYSTEM = "system"
    USER = "user"
    AGENT = "agent"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call a step made: a tool, a program step, a decision-door question."""

    step_id: int
    call_id: str
    function_name: str
    arguments: JsonValue
    extra: JsonValue = None

    @property
    def operations(self) -> tuple[str, ...]:
        """The names this call answers to: its function name, a Wasm guest's `operation` argument, and the
        program step (`extra.step`) and program slug (`extra.program`) it ran — bounded fields only, never
        prose (runner.md §13.2 lists slugs, step names and module operations as extension operations)."""
        names = [self.function_name]
        if isinstance(self.arguments, dict) and isinstance(self.arguments.get("operation"), str):
            names.append(self.arguments["operation"])
        if isinstance(self.extra, dict):
            names.extend(self.extra[key] for key in ("step", "program") if isinstance(self.extra.get(key), str))
        return tuple(dict.fromkeys(name for name in names if name))

    def is_operation(self, operation: str) -> bool:
        return operation in self.operations

    @property
    def input_text(self) -> str:
        """What an `input_match` pattern reads: a shell call's command, else the arguments as compact JSON
        with sorted keys (the reference's serde_json default map order)."""
        if isinstance(self.arguments, dict) and isinstance(self.arguments.get("command"), str):
            return str(self.arguments["command"])
        return json.dumps(self.arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @property
    def is_decision(self) -> bool:
        return isinstance(self.extra, dict) and self.extra.get("schema") == DECISION_CALL_SCHEMA


@dataclass(frozen=True, slots=True)
class ObservationResult:
    source_call_id: str | None
    content: str | None


@dataclass(frozen=True, slots=True)
class Step:
    """One step. `message` is the text (content parts' texts joined by newlines); `multimodal` says the
    document held content parts rather than a string."""

    step_id: int
    source: Source
    message: str
    multimodal: bool = False
    timestamp: str | None = None
    model_name: str | None = None
    reasoning_content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    observations: tuple[ObservationResult, ...] = ()


@dataclass(frozen=True, slots=True)
class AgentInfo:
    name: str
    version: str
    model_name: str | None


@dataclass(frozen=True, slots=True)
class Trajectory:
    """A parsed trajectory and its ATIF-v1.8 document (what is kept as `trajectory.json`)."""

    session_id: str
    declared_version: str
    agent: AgentInfo
    steps: tuple[Step, ...]
    state: str | None
    faults: tuple[LogFault, ...] = ()
    document: dict[str, JsonValue] = field(default_factory=dict, repr=False, compare=False)

    @property
    def whole(self) -> bool:
        """Fit for evidence: every log line read and the session was not interrupted."""
        return not self.faults and self.state != INTERRUPTED

    @property
    def final_message(self) -> str | None:
        """The last agent step's text message that is not blank (what `last_message` graders read). As in
        the reference, a step whose message is content parts does not count."""
        for step in reversed(self.steps):
            if step.source is Source.AGENT and not step.multimodal and step.message.strip():
                return step.message
        return None

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        """Every call in step order: each step's `tool_calls`, then a call kept under a non-agent step's
        `extra.call` (where the reference's renderer puts one)."""
        found: list[ToolCall] = []
        for step, raw in zip(self.steps, self.document.get("steps", ()), strict=False):
            found.extend(step.tool_calls)
            extra = raw.get("extra") if isinstance(raw, dict) else None
            call = extra.get("call") if isinstance(extra, dict) else None
            if isinstance(call, dict):
                found.append(_loose_call(step.step_id, call))
        return tuple(found)

    def calls_to(self, operation: str) -> tuple[ToolCall, ...]:
        return tuple(call for call in self.calls if call.is_operation(operation))

    def door_view(self) -> dict[str, JsonValue]:
        """What a door grader sees: the first and last twelve steps and the final message."""
        steps = list(self.document.get("steps", ()))
        if len(steps) <= DOOR_STEPS * 2:
            first, last, omitted = steps, [], 0
        else:
            first, last, omitted = steps[:DOOR_STEPS], steps[-DOOR_STEPS:], len(steps) - DOOR_STEPS * 2
        return {"first_steps": first, "omitted_steps": omitted, "last_steps": last, "final_message": self.final_message}

    def document_text(self) -> str:
        """The document as compact JSON text (the `trajectory` focus of a regex grader)."""
        return json.dumps(self.document, ensure_ascii=False, separators=(",", ":"))

    def document_bytes(self) -> bytes:
        """The document as kept, in the engine's document form: pretty, sorted keys, trailing newline."""
        return strict_json.pretty(self.document)


# ---------------------------------------------------------------------------------------------- entry points


def read_trajectory(path: Path, *, whole: bool = False, max_bytes: int = MAX_TRAJECTORY_BYTES) -> Trajectory:
    """Reads either form from a file; errors name the file."""
    try:
        with path.open("rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise TrajectoryError(path.name, f"cannot be read ({exc.strerror or type(exc).__name__})") from None
    try:
        return parse_trajectory(data, whole=whole, max_bytes=max_bytes)
    except TrajectoryError as exc:
        raise TrajectoryError(f"{path.name}: {exc.where}" if exc.where else path.name, exc.message) from None


def parse_trajectory(data: bytes, *, whole: bool = False, max_bytes: int = MAX_TRAJECTORY_BYTES) -> Trajectory:
    """Either form: a first line that is an object with a `record` key makes it a log."""
    first = data.split(b"\n", 1)[0].strip()
    if first.startswith(b"{") and b'"record"' in first:
        try:
            head = loads(first, "line 1")
        except TrajectoryError:
            head = None
        if isinstance(head, dict) and "record" in head:
            return parse_log(data, whole=whole, max_bytes=max_bytes)
    return parse_document(data, max_bytes=max_bytes)


def parse_document(data: bytes, *, max_bytes: int = MAX_TRAJECTORY_BYTES) -> Trajectory:
    """An ATIF document (any 1.x), relabelled ATIF-v1.8."""
    check_size(data, max_bytes)
    return _from_document(loads(data, ""), ())


def parse_log(
    data: bytes, *, whole: bool = False, max_bytes: int = MAX_TRAJECTORY_BYTES, exported_at_ms: int | None = None
) -> Trajectory:
    """An ATIF log rendered as a document. `exported_at_ms` defaults to the log's own last time, so the same
    bytes always render the same document."""
    check_size(data, max_bytes)
    session, steps, end, faults, declared = read_log(data)
    if whole and faults:
        raise TrajectoryError(f"line {faults[0].line}", f"the log is damaged ({faults[0].kind})")
    if whole and end is None:
        raise TrajectoryError("", "the log holds no end record: the session was interrupted")
    started = session["at"]
    last = end[0] if end is not None else (steps[-1]["at"] if steps else started)
    state = end[1] if end is not None else INTERRUPTED
    directive = session["directive"] or next((s["message"] for s in steps if s["source"] == "user"), "")
    document = render(session, steps, faults, state, directive, max(last - started, 0) // 1000)
    document["extra"]["exported_at"] = iso(last if exported_at_ms is None else exported_at_ms)
    return _from_document(document, tuple(faults), declared=declared)


def atif_digest(value: JsonValue) -> str:
    """The reference's ATIF digest: object keys sorted at every depth, compact JSON, SHA-256 hex. (Float
    spelling may differ from serde's for some values; step digests hold no floats.)"""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -------------------------------------------------------------------------------------------- document form


def _from_document(value: JsonValue, faults: tuple[LogFault, ...], *, declared: str | None = None) -> Trajectory:
    doc = _object(value, "")
    version = doc.get("schema_version")
    if not isinstance(version, str):
        raise TrajectoryError("schema_version", "missing or not a string")
    if version not in SUPPORTED_VERSIONS:
        raise TrajectoryError("schema_version", f"unsupported ATIF version {version[:40]!r}")
    session_id = _required(doc, "session_id", "")
    agent = _object(doc.get("agent"), "agent")
    info = AgentInfo(
        _required(agent, "name", "agent"),
        _required(agent, "version", "agent"),
        _text(agent, "model_name", "agent"),
    )
    raw_steps = doc.get("steps")
    if not isinstance(raw_steps, list):
        raise TrajectoryError("steps", "missing or not an array")
    steps = tuple(_step(raw, f"steps[{index}]") for index, raw in enumerate(raw_steps))
    _text(doc, "notes", "")
    for key in ("final_metrics", "extra"):
        if doc.get(key) is not None:
            _object(doc[key], key)
    extra = doc.get("extra")
    state = extra.get("state") if isinstance(extra, dict) and isinstance(extra.get("state"), str) else None
    document = dict(doc)
    document["schema_version"] = SCHEMA_VERSION
    return Trajectory(session_id, declared or version, info, steps, state or None, faults, document)


def _object(value: JsonValue, where: str) -> dict[str, JsonValue]:
    if not isinstance(value, dict):
        raise TrajectoryError(where, "not an object")
    return value


def _text(obj: dict[str, JsonValue], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise TrajectoryError(f"{where}.{key}" if where else key, "not a string")
    return value


def _required(obj: dict[str, JsonValue], key: str, where: str) -> str:
    value = _text(obj, key, where)
    if value is None:
        raise TrajectoryError(f"{where}.{key}" if where else key, "missing")
    return value


def _step(value: JsonValue, where: str) -> Step:
    raw = _object(value, where)
    step_id = raw.get("step_id")
    if not isinstance(step_id, int) or isinstance(step_id, bool) or not 1 <= step_id <= U64:
        raise TrajectoryError(f"{where}.step_id", "not an integer from 1")
    source_word = raw.get("source")
    if source_word not in ("system", "user", "agent"):
        raise TrajectoryError(f"{where}.source", "not one of system, user, agent")
    source = Source(source_word)
    if source is not Source.AGENT:
        for key in _AGENT_ONLY:
            if raw.get(key) is not None:
                raise TrajectoryError(f"{where}.{key}", "only an agent step may carry it")
    if "message" not in raw:
        raise TrajectoryError(f"{where}.message", "missing")
    message, multimodal = _content(raw["message"], f"{where}.message", nullable=False)
    effort = raw.get("reasoning_effort")
    if effort is not None and (isinstance(effort, bool) or not isinstance(effort, str | int | float)):
        raise TrajectoryError(f"{where}.reasoning_effort", "not a string or a number")
    for key in ("metrics", "extra"):
        if raw.get(key) is not None:
            _object(raw[key], f"{where}.{key}")
    return Step(
        step_id=step_id,
        source=source,
        message=message or "",
        multimodal=multimodal,
        timestamp=_text(raw, "timestamp", where),
        model_name=_text(raw, "model_name", where),
        reasoning_content=_text(raw, "reasoning_content", where),
        tool_calls=_tool_calls(raw.get("tool_calls"), step_id, f"{where}.tool_calls"),
        observations=_observation(raw.get("observation"), f"{where}.observation"),
    )


def _tool_calls(value: JsonValue, step_id: int, where: str) -> tuple[ToolCall, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise TrajectoryError(where, "not an array")
    calls = []
    for index, item in enumerate(value):
        at = f"{where}[{index}]"
        call = _object(item, at)
        if "arguments" not in call:
            raise TrajectoryError(f"{at}.arguments", "missing")
        if call.get("extra") is not None:
            _object(call["extra"], f"{at}.extra")
        calls.append(
            ToolCall(
                step_id,
                _required(call, "tool_call_id", at),
                _required(call, "function_name", at),
                call["arguments"],
                call.get("extra"),
            )
        )
    return tuple(calls)


def _loose_call(step_id: int, call: dict[str, JsonValue]) -> ToolCall:
    """A call kept under `extra`: custom data, so read leniently."""
    call_id, name = call.get("tool_call_id"), call.get("function_name")
    return ToolCall(
        step_id,
        call_id if isinstance(call_id, str) else "",
        name if isinstance(name, str) else "",
        call.get("arguments"),
        call.get("extra"),
    )


def _observation(value: JsonValue, where: str) -> tuple[ObservationResult, ...]:
    if value is None:
        return ()
    results = _object(value, where).get("results")
    if not isinstance(results, list):
        raise TrajectoryError(f"{where}.results", "missing or not an array")
    out = []
    for index, item in enumerate(results):
        at = f"{where}.results[{index}]"
        result = _object(item, at)
        content, _ = _content(result.get("content"), f"{at}.content", nullable=True)
        refs = result.get("subagent_trajectory_ref")
        if refs is not None and not isinstance(refs, list):
            raise TrajectoryError(f"{at}.subagent_trajectory_ref", "not an array")
        out.append(ObservationResult(_text(result, "source_call_id", at), content))
    return tuple(out)


def _content(value: JsonValue, where: str, *, nullable: bool) -> tuple[str | None, bool]:
    """A message or observation content: a string, or (v1.6+) an array of closed content parts."""
    if isinstance(value, str):
        return value, False
    if value is None and nullable:
        return None, False
    if not isinstance(value, list):
        raise TrajectoryError(where, "not a string or an array of content parts")
    texts = []
    for index, part in enumerate(value):
        at = f"{where}[{index}]"
        obj = _object(part, at)
        if set(obj) - {"type", "text", "source"}:
            raise TrajectoryError(at, "a content part holds a field it does not allow")
        kind, text, source = obj.get("type"), obj.get("text"), obj.get("source")
        if kind == "text":
            if not isinstance(text, str) or source is not None:
                raise TrajectoryError(at, "a text part needs a string 'text' and no 'source'")
            texts.append(text)
        elif kind in ("image", "audio"):
            if not isinstance(source, dict) or text is not None:
                raise TrajectoryError(at, f"an {kind} part needs a 'source' object and no 'text'")
        else:
            raise TrajectoryError(f"{at}.type", "not one of text, image, audio")
    return "\n".join(texts), True
