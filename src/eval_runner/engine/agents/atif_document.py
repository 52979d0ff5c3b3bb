"""An ATIF-v1.8 document built from an agent's own event stream (Claude Code's stream-json, Codex's JSONL).

The coder writes an ATIF log; the real agents print their own events, so their adapters build the
document the graders read directly: a user step with the prompt, an agent step per model message with
its tool calls, each call's result as that step's observation, the final reply as the last agent
message, and the run's totals in `final_metrics`. A call's `extra.step` names the operation graders see
beyond the tool's own name (a skill invoked through the Skill tool is `skill:<name>`), because
`ToolCall.operations` reads the function name and `extra.step` (decisions.md, "Agent adapters").
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from eval_runner.engine.run.atif_log import SCHEMA_VERSION

#: Characters of one observation kept: the rest is cut, with a note.
OBSERVATION_CHARS = 64 * 1024


@dataclass(frozen=True, slots=True)
class Call:
    call_id: str
    name: str
    arguments: Any
    operation: str | None = None


@dataclass
class StepLog:
    """Steps appended in order; `document()` gives the ATIF document as bytes."""

    agent_name: str
    version: str
    model: str | None
    session_id: str = "unknown"
    steps: list[dict[str, Any]] = field(default_factory=list)
    _by_call: dict[str, dict[str, Any]] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float | None = None
    state: str = "interrupted"
    extra: dict[str, Any] = field(default_factory=dict)

    def user(self, text: str) -> None:
        self.steps.append({"step_id": len(self.steps) + 1, "source": "user", "message": text})

    def system(self, text: str) -> None:
        self.steps.append({"step_id": len(self.steps) + 1, "source": "system", "message": text})

    def agent(self, text: str, calls: Sequence[Call] = (), model: str | None = None) -> None:
        step: dict[str, Any] = {"step_id": len(self.steps) + 1, "source": "agent", "message": text}
        if model or self.model:
            step["model_name"] = model or self.model
        if calls:
            step["tool_calls"] = [_call(call) for call in calls]
            for call in calls:
                self._by_call[call.call_id] = step
        self.steps.append(step)

    def observe(self, call_id: str, content: str, failed: bool = False) -> None:
        """A call's result, kept on the step that made the call (or a system step when none did)."""
        if len(content) > OBSERVATION_CHARS:
            content = content[:OBSERVATION_CHARS] + f"\n[cut: {len(content) - OBSERVATION_CHARS} characters more]"
        result = {
            "source_call_id": call_id,
            "content": content,
            "extra": {"status": "failed" if failed else "completed"},
        }
        step = self._by_call.get(call_id)
        if step is None:
            self.system(content)
            return
        step.setdefault("observation", {"results": []})["results"].append(result)

    @property
    def final_message(self) -> str | None:
        for step in reversed(self.steps):
            if step["source"] == "agent" and step["message"].strip():
                return str(step["message"])
        return None

    @property
    def calls(self) -> int:
        return sum(len(step.get("tool_calls", ())) for step in self.steps)

    def document(self) -> bytes:
        final: dict[str, Any] = {
            "total_prompt_tokens": self.prompt_tokens,
            "total_completion_tokens": self.completion_tokens,
            "total_cached_tokens": self.cached_tokens,
            "total_steps": len(self.steps),
            "extra": {"tool_calls_total": self.calls},
        }
        if self.cost_usd is not None:
            final["total_cost_usd"] = self.cost_usd
        document = {
            "schema_version": SCHEMA_VERSION,
            "session_id": self.session_id,
            "agent": {"name": self.agent_name, "version": self.version, "model_name": self.model},
            "steps": self.steps,
            "final_metrics": final,
            "extra": {**self.extra, "state": self.state},
        }
        return json.dumps(document, ensure_ascii=False, sort_keys=True).encode()


def _call(call: Call) -> dict[str, Any]:
    out: dict[str, Any] = {"tool_call_id": call.call_id, "function_name": call.name, "arguments": call.arguments}
    if call.operation is not None:
        out["extra"] = {"step": call.operation}
    return out


def json_lines(data: bytes) -> list[dict[str, Any]]:
    """Every line of `data` that is a JSON object; anything else (a warning, a torn last line, a NaN or
    a number beyond a float) is skipped."""
    found: list[dict[str, Any]] = []
    for line in data.splitlines():
        line = line.strip()
        if not line.startswith(b"{"):
            continue
        try:
            value = json.loads(line, parse_constant=_no_constant, parse_int=_safe_int, parse_float=_finite)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


def _no_constant(word: str) -> Any:
    """NaN and Infinity are not JSON: a line holding one is skipped, so the document stays strict JSON."""
    raise ValueError(f"{word} is not JSON")


def _finite(digits: str) -> float:
    """A number past a float's range (`1e400`) reads as infinity, which is not JSON either: its line is skipped."""
    value = float(digits)
    if not math.isfinite(value):
        raise ValueError(f"{digits} is beyond a float")
    return value


def _safe_int(digits: str) -> int | str:
    """An integer past ±(2^53 − 1), which strict JSON refuses, is kept as its digits."""
    value = int(digits)
    return value if abs(value) < 2**53 else digits


def number(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def text(value: Any) -> str:
    """A tool result's content as text: a string, or the texts of content blocks joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [item.get("text") for item in value if isinstance(item, dict)]
        return "\n".join(part for part in parts if isinstance(part, str))
    return "" if value is None else json.dumps(value, ensure_ascii=False)
