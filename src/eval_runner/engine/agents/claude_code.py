"""Claude Code as a run's agent: `claude -p PROMPT --output-format stream-json --verbose`, stdin closed.

* The door: `ANTHROPIC_BASE_URL` is the in-sandbox door and `ANTHROPIC_API_KEY` the run's throwaway token,
  which Claude Code sends as `x-api-key` and the door proxy swaps for the real key in the same header.
  Nonessential traffic, telemetry, error reports and the auto-updater are off (the sandbox has no network
  anyway; these keep it from trying).
* The extension: the subject arm's skills are `~/.claude/skills/<name>/SKILL.md` in a HOME that lives in
  the run's `tmp/`; the baseline arm's HOME has none. Claude Code lists them to the model and sends a
  skill's body only when the model calls its `Skill` tool: that call is the operation `skill:<name>`.
  The case's own instructions (the coder's guidance) are appended to the system prompt.
* The grant: only the tools the grant allows are offered and pre-approved (`--tools`, `--allowedTools`):
  Read, Glob, Grep and Skill; Write and Edit with write; Bash only with exec, which the hosted runner
  never grants. The sandbox runs it as an unprivileged uid, so no permission bypass is needed.
* The output: stream-json lines (`system/init`, `assistant` messages with `tool_use`, `user` messages
  with `tool_result`, a last `result` with the final text, turns, usage, cost and duration) become the
  ATIF document (`atif_document.py`); the cost is the `result` line's `total_cost_usd`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval_runner.engine.agents.atif_document import Call, StepLog, json_lines, number, text
from eval_runner.engine.agents.skills import make_home, place_skills
from eval_runner.engine.run.turn import AgentEnd, AgentRoom, AgentStart
from eval_runner.engine.testset.cases import Operation

NAME = "claude-code"
SKILL_TOOL = "Skill"
_READ_TOOLS = ("Read", "Glob", "Grep", SKILL_TOOL)
_WRITE_TOOLS = ("Write", "Edit")
_QUIET = (
    ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
    ("DISABLE_TELEMETRY", "1"),
    ("DISABLE_AUTOUPDATER", "1"),
    ("DISABLE_ERROR_REPORTING", "1"),
    ("DISABLE_BUG_COMMAND", "1"),
    ("CLAUDE_CODE_DISABLE_TERMINAL_TITLE", "1"),
)


def tools(grants: frozenset[Operation]) -> tuple[str, ...]:
    """The tools a grant allows Claude Code."""
    offered = list(_READ_TOOLS)
    if Operation.WRITE in grants:
        offered += _WRITE_TOOLS
    if Operation.EXEC in grants:
        offered.append("Bash")
    return tuple(offered)


@dataclass(frozen=True, slots=True)
class ClaudeCode:
    """The adapter for one Claude Code binary."""

    program: Path

    def start(self, room: AgentRoom) -> AgentStart:
        make_home(room.home, room.owner)
        place_skills(room.home, ".claude/skills", room.skills, room.owner)
        offered = ",".join(tools(room.grants))
        command = [str(self.program), "-p", room.prompt, "--output-format", "stream-json", "--verbose"]
        command += ["--tools", offered, "--allowedTools", offered, "--strict-mcp-config"]
        if room.model:
            command += ["--model", room.model]
        if room.guidance is not None and room.guidance.strip():
            command += ["--append-system-prompt", room.guidance]
        env = list(room.base_env)
        if room.door_url is not None and room.door_token is not None:
            env += [("ANTHROPIC_BASE_URL", room.door_url), ("ANTHROPIC_API_KEY", room.door_token)]
        env += [*_QUIET, ("CLAUDE_CONFIG_DIR", str(room.home / ".claude"))]
        return AgentStart(tuple(command), tuple(env))

    def end(self, stdout: bytes, room: AgentRoom) -> AgentEnd:
        log = read_stream(stdout, room.prompt, room.model)
        return AgentEnd(log.document(), log.cost_usd)


def read_stream(stdout: bytes, prompt: str, model: str | None) -> StepLog:
    """Claude Code's stream-json as ATIF steps; lines it does not know are skipped."""
    log = StepLog(NAME, "unknown", model or None)
    log.user(prompt)
    result: dict[str, Any] | None = None
    for event in json_lines(stdout):
        kind = event.get("type")
        if isinstance(event.get("session_id"), str):
            log.session_id = event["session_id"]
        if kind == "system" and event.get("subtype") == "init":
            if isinstance(event.get("claude_code_version"), str):
                log.version = event["claude_code_version"]
            if isinstance(event.get("model"), str):
                log.model = event["model"]
            skills = event.get("skills")
            if isinstance(skills, list):
                log.extra["skills"] = [skill for skill in skills if isinstance(skill, str)]
        elif kind == "assistant":
            _assistant(log, event.get("message"))
        elif kind == "user":
            _results(log, event.get("message"))
        elif kind == "result":
            result = event
    if result is not None:
        _result(log, result)
    return log


def _assistant(log: StepLog, message: Any) -> None:
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return
    texts: list[str] = []
    calls: list[Call] = []
    for block in message["content"]:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use" and isinstance(block.get("name"), str):
            arguments: dict[str, Any] = block["input"] if isinstance(block.get("input"), dict) else {}
            calls.append(Call(str(block.get("id", "")), block["name"], arguments, _operation(block["name"], arguments)))
    if texts or calls:
        model = message.get("model") if isinstance(message.get("model"), str) else None
        log.agent("\n".join(texts), calls, model)


def _operation(name: str, arguments: dict[str, Any]) -> str | None:
    """`skill:<name>` for a Skill call (its `skill` argument, without a plugin prefix)."""
    skill = arguments.get("skill") if name == SKILL_TOOL else None
    if not isinstance(skill, str) or not skill:
        return None
    return f"skill:{skill.rpartition(':')[2]}"


def _results(log: StepLog, message: Any) -> None:
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return
    for block in message["content"]:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            log.observe(str(block.get("tool_use_id", "")), text(block.get("content")), block.get("is_error") is True)


def _result(log: StepLog, result: dict[str, Any]) -> None:
    final = result.get("result")
    if isinstance(final, str) and final.strip() and log.final_message != final:
        log.agent(final)
    usage: dict[str, Any] = result["usage"] if isinstance(result.get("usage"), dict) else {}
    log.prompt_tokens = number(usage.get("input_tokens"))
    log.completion_tokens = number(usage.get("output_tokens"))
    log.cached_tokens = number(usage.get("cache_read_input_tokens"))
    cost = result.get("total_cost_usd")
    if isinstance(cost, int | float) and not isinstance(cost, bool) and math.isfinite(cost) and cost >= 0:
        log.cost_usd = float(cost)
    log.state = "ended" if result.get("subtype") == "success" and result.get("is_error") is not True else "failed"
    log.extra["turns"] = number(result.get("num_turns"))
    log.extra["duration_ms"] = number(result.get("duration_ms"))
