"""ATIF logs: the agent's `trajectory.atif.jsonl` read line by line and rendered as an ATIF-v1.8 document.

The agent writes a log (a `session` record, `step` records, at most one `end` record, one JSON object a
line) because a killed process loses at most the line it was writing. Reading recovers as the reference's
reader does: a line that does not read is a `LogFault` and the rest still reads. Rendering follows the
reference's `crates/atif` exactly where a digest depends on it (decisions.md, "The door proxy, the
stand-ins and ATIF reading"). `engine/run/trajectory.py` is the typed record read from either form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eval_runner.contracts import strict_json
from eval_runner.contracts.errors import ContractError
from eval_runner.errors import EvalRunnerError

#: A decoded JSON value; readers narrow it at once.
JsonValue = Any

SCHEMA_VERSION = "ATIF-v1.8"
SUPPORTED_VERSIONS = tuple(f"ATIF-v1.{minor}" for minor in range(9))
#: What the reference's renderer names the agent and itself in a document.
AGENT_NAME = "openagents-coder"
EXPORTER = "openagents.atif.v1"
#: A call whose `extra.schema` says this is a question put to a decision door, not work done.
DECISION_CALL_SCHEMA = "openagents.decision-call.v1"
ENDED = "ended"
INTERRUPTED = "interrupted"
MAX_TRAJECTORY_BYTES = 64 * 1024 * 1024

U64 = 2**64 - 1
_LOG_SOURCES = {"System": "system", "User": "user", "Agent": "agent"}
_OUTCOMES = {"Completed": "completed", "Failed": "failed", "Cancelled": "cancelled"}
_AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")


class TrajectoryError(EvalRunnerError):
    """Bytes that are not an ATIF trajectory. `where` names the line or the field (`steps[2].source`)."""

    def __init__(self, where: str, message: str) -> None:
        self.where = where
        self.message = message
        super().__init__(f"{where}: {message}" if where else message)


@dataclass(frozen=True, slots=True)
class LogFault:
    """One log line that contributed nothing, with the reference's word for why (`torn`, `not_json`…)."""

    line: int
    kind: str


# ------------------------------------------------------------------------------------------------ JSON reading


def check_size(data: bytes, max_bytes: int) -> None:
    if len(data) > max_bytes:
        raise TrajectoryError("", f"larger than {max_bytes} bytes")


def loads(data: bytes, where: str) -> JsonValue:
    """Strict JSON (duplicate keys, non-finite numbers, integers beyond ±(2^53 − 1), unpaired surrogates
    and nesting past 64 refused), so nothing downstream can meet an ambiguous or unencodable value."""
    try:
        return strict_json.read(data, max_bytes=max(len(data), 1))
    except ContractError as exc:
        raise TrajectoryError(where, f"not strict JSON ({exc.message[:120]})") from None


def is_u64(value: JsonValue) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= U64


# ------------------------------------------------------------------------------------------------- log form


def read_log(data: bytes) -> tuple[dict[str, Any], list[dict[str, Any]], tuple[int, str] | None, list[LogFault], str]:
    lines = data.split(b"\n")
    torn = lines[-1] != b""
    if not torn:
        lines.pop()
    session: dict[str, Any] | None = None
    declared = ""
    steps: list[dict[str, Any]] = []
    end: tuple[int, str] | None = None
    faults: list[LogFault] = []
    for number, raw in enumerate(lines, start=1):
        kind = _read_line(raw, torn and number == len(lines), session is not None, end is not None)
        if isinstance(kind, str):
            faults.append(LogFault(number, kind))
            continue
        if kind is None:
            continue
        record = kind
        at = record["at"] if is_u64(record.get("at")) else 0
        if record["record"] == "session":
            version = record.get("schema_version")
            if isinstance(version, str) and version not in SUPPORTED_VERSIONS:
                faults.append(LogFault(number, "unsupported_version"))
                continue
            parsed = _log_session(record.get("session"), at)
            if parsed is None:
                faults.append(LogFault(number, "bad_session"))
                continue
            session, declared = parsed, version if isinstance(version, str) else ""
        elif record["record"] == "step":
            step = _log_step(record.get("step"))
            if step is None:
                faults.append(LogFault(number, "bad_step"))
            else:
                steps.append(step)
        else:
            state = record.get("state")
            end = (at, state if isinstance(state, str) else ENDED)
    if session is None:
        raise TrajectoryError("", "the log holds no session record")
    return session, steps, end, faults, declared


def _read_line(raw: bytes, torn: bool, opened: bool, closed: bool) -> dict[str, Any] | str | None:
    """A line's record, a fault word, or None for a blank line."""
    if torn:
        return "torn"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "not_utf8"
    if not text.strip():
        return None
    try:
        record = loads(raw, "")
    except TrajectoryError:
        return "not_json"
    if not isinstance(record, dict):
        return "not_json"
    kind = record.get("record")
    if kind not in ("session", "step", "end"):
        return "unknown_record"
    if closed:
        return "repeated_end" if kind == "end" else "after_end"
    if not opened and kind != "session":
        return "before_session"
    if opened and kind == "session":
        return "repeated_session"
    return record


def _log_session(value: JsonValue, at: int) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    required = ("id", "model", "door", "repository", "version")
    if not all(isinstance(value.get(key), str) for key in required):
        return None
    for key in ("directive", "state"):
        if value.get(key) is not None and not isinstance(value[key], str):
            return None
    if value.get("seconds") is not None and not is_u64(value["seconds"]):
        return None
    session = {key: value[key] for key in required}
    session["directive"] = value.get("directive") or ""
    session["at"] = at
    return session


def _log_step(value: JsonValue) -> dict[str, Any] | None:
    """A log step in the reference's serde shape (`source: "Agent"`, `tokens: [p, c]`), or None."""
    if not isinstance(value, dict) or not is_u64(value.get("at")) or not isinstance(value.get("message"), str):
        return None
    source = value.get("source")
    if not isinstance(source, str) or source not in _LOG_SOURCES:
        return None
    step: dict[str, Any] = {"at": value["at"], "source": _LOG_SOURCES[source], "message": value["message"]}
    for key in ("reasoning", "model"):
        if value.get(key) is not None and not isinstance(value[key], str):
            return None
        step[key] = value.get(key)
    tokens = value.get("tokens")
    if tokens is not None and not (isinstance(tokens, list) and len(tokens) == 2 and all(map(is_u64, tokens))):
        return None
    step["tokens"] = tokens
    if value.get("milliseconds") is not None and not is_u64(value["milliseconds"]):
        return None
    step["milliseconds"] = value.get("milliseconds")
    extensions = value.get("extensions", {})
    if not isinstance(extensions, dict):
        return None
    step["extensions"] = extensions
    call = value.get("call")
    if call is not None:
        step["call"] = _log_call(call)
        if step["call"] is None:
            return None
    else:
        step["call"] = None
    return step


def _log_call(call: JsonValue) -> dict[str, Any] | None:
    if not isinstance(call, dict) or "arguments" not in call:
        return None
    if not all(isinstance(call.get(key), str) for key in ("id", "name", "output")):
        return None
    if call.get("outcome") not in _OUTCOMES or not is_u64(call.get("milliseconds")):
        return None
    if call.get("purpose") is not None and not isinstance(call["purpose"], str):
        return None
    extra = call.get("extra", {})
    if not isinstance(extra, dict):
        return None
    return {**call, "outcome": _OUTCOMES[call["outcome"]], "extra": extra}


def render(
    session: dict[str, Any],
    steps: list[dict[str, Any]],
    faults: list[LogFault],
    state: str,
    directive: str,
    seconds: int,
) -> dict[str, Any]:
    rendered = [_render_step(step, ordinal, session["model"]) for ordinal, step in enumerate(steps, start=1)]
    calls = [step["call"] for step in steps if step["call"] is not None]
    tool_calls = [call for call in calls if call["extra"].get("schema") != DECISION_CALL_SCHEMA]
    return {
        "schema_version": SCHEMA_VERSION,
        "session_id": session["id"],
        "trajectory_id": session["id"],
        "agent": {
            "name": AGENT_NAME,
            "version": session["version"],
            "model_name": session["model"],
            "extra": {"door": session["door"]},
        },
        "steps": rendered,
        "final_metrics": {
            "total_prompt_tokens": sum(step["tokens"][0] for step in steps if step["tokens"]),
            "total_completion_tokens": sum(step["tokens"][1] for step in steps if step["tokens"]),
            "total_steps": len(steps),
            "extra": {
                "door": session["door"],
                "calls_total": len(calls),
                "tool_calls_total": len(tool_calls),
                "tool_calls_failed": sum(1 for call in tool_calls if call["outcome"] == "failed"),
                "wall_seconds": seconds,
            },
        },
        "extra": {
            "exporter": EXPORTER,
            "exported_at": "",
            "repository": session["repository"],
            "directive": directive,
            "state": state,
            "unreadable_lines": len(faults),
            "faults": [{"line": fault.line, "fault": fault.kind} for fault in faults],
        },
    }


def _render_step(step: dict[str, Any], ordinal: int, model: str) -> dict[str, Any]:
    agent = step["source"] == "agent"
    call = step["call"]
    out: dict[str, Any] = {
        "step_id": ordinal,
        "timestamp": iso(step["at"]),
        "source": step["source"],
        "message": step["message"],
    }
    if agent:
        out["model_name"] = step["model"] if step["model"] is not None else model
        if step["reasoning"] is not None:
            out["reasoning_content"] = step["reasoning"]
    if agent and call is not None:
        tool_call: dict[str, Any] = {
            "tool_call_id": call["id"],
            "function_name": call["name"],
            "arguments": call["arguments"],
        }
        if call["extra"]:
            tool_call["extra"] = call["extra"]
        out["tool_calls"] = [tool_call]
        result = {"status": call["outcome"], "duration_ms": call["milliseconds"]}
        out["observation"] = {"results": [{"source_call_id": call["id"], "content": call["output"], "extra": result}]}
    if agent and step["tokens"] is not None:
        out["metrics"] = {"prompt_tokens": step["tokens"][0], "completion_tokens": step["tokens"][1]}
    extra = dict(step["extensions"])
    if step["milliseconds"] is not None:
        extra["duration_ms"] = step["milliseconds"]
    if call is not None and not agent:
        # ATIF keeps tool_calls for agent steps; a call on another source is still evidence.
        extra["call"] = {
            "tool_call_id": call["id"],
            "function_name": call["name"],
            "arguments": call["arguments"],
            "content": call["output"],
            "status": call["outcome"],
            "duration_ms": call["milliseconds"],
        }
    if call is not None and call.get("purpose") is not None:
        extra["purpose"] = call["purpose"]
    if extra:
        out["extra"] = extra
    return out


def iso(at_ms: int) -> str:
    """ISO 8601 UTC to the millisecond for any u64 (civil-from-days, so no datetime range limit)."""
    seconds, millis = divmod(at_ms, 1000)
    days, day_seconds = divmod(seconds, 86_400)
    shifted = days + 719_468
    era = shifted // 146_097
    day_of_era = shifted - era * 146_097
    year_of_era = (day_of_era - day_of_era // 1_460 + day_of_era // 36_524 - day_of_era // 146_096) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    month_prime = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * month_prime + 2) // 5 + 1
    month = month_prime + 3 if month_prime < 10 else month_prime - 9
    year = year_of_era + era * 400 + (1 if month <= 2 else 0)
    hours, rest = divmod(day_seconds, 3600)
    return f"{year:04}-{month:02}-{day:02}T{hours:02}:{rest // 60:02}:{rest % 60:02}.{millis:03}Z"
