"""Codex as a run's agent: `codex exec --json --dangerously-bypass-approvals-and-sandbox
--skip-git-repo-check PROMPT`, inside our sandbox (its own sandbox is off: ours is the boundary).

* The door: `$CODEX_HOME/config.toml` names one model provider whose `base_url` is the in-sandbox door,
  `wire_api = "responses"` (Codex has dropped chat completions) and `env_key = "CODEX_DOOR_KEY"`, the
  variable holding the run's throwaway token, which Codex sends as a bearer token and the door proxy
  swaps. Approvals never, update checks, analytics, feedback and plugin-like features off: without them
  it tries outside hosts.
* The extension: the subject arm's skills are `$CODEX_HOME/skills/<name>/SKILL.md` (`CODEX_HOME` is in the
  run's `tmp/`); the baseline arm's has none. Codex lists them to the model, which reads a skill's file
  when it decides to use it: a command that succeeded (exit code 0) and names
  `$CODEX_HOME/skills/<name>/SKILL.md` (as the path itself, `$CODEX_HOME`, `${CODEX_HOME}`, `~/.codex`
  or `$HOME/.codex`) is also the operation `skill:<name>`; a mention elsewhere, or a command that failed,
  is not. The case's own instructions go in as `developer_instructions`.
* Its tools: Codex works through a shell (and `apply_patch`), which runs inside our sandbox: no network,
  the filesystem read-only but for the run's writable parts (the grant's write decides `cwd/`).
* The output: JSONL (`thread.started`, `turn.started`, `item.started/completed` with `command_execution`,
  `file_change`, `mcp_tool_call`, `agent_message`, `reasoning`, `error`, then `turn.completed` with usage
  or `turn.failed`) becomes the ATIF document. Codex reports tokens, not a cost.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval_runner.engine.agents.atif_document import Call, StepLog, json_lines, number
from eval_runner.engine.agents.skills import make_home, place, place_skills
from eval_runner.engine.run.turn import AgentEnd, AgentRoom, AgentStart
from eval_runner.engine.testset.foreign import toml_string

NAME = "codex"
TOKEN_VARIABLE = "CODEX_DOOR_KEY"  # noqa: S105 - a variable's name, not a credential
SHELL = "shell"
#: How a command may name `$CODEX_HOME` besides its path: HOME is the room's, CODEX_HOME its `.codex`.
_HOME_NAMES = ("$CODEX_HOME", "${CODEX_HOME}", "~/.codex", "$HOME/.codex", "${HOME}/.codex")


def skill_reads(codex_home: str | None) -> re.Pattern[str]:
    """A command naming a skill's SKILL.md under `codex_home/skills` (or one of `_HOME_NAMES`): the
    path starts a word (no other directory before it) and ends at `SKILL.md`; group 1 is the name."""
    homes: Sequence[str] = _HOME_NAMES if codex_home is None else (codex_home.rstrip("/"), *_HOME_NAMES)
    prefixes = "|".join(re.escape(home) for home in homes)
    return re.compile(rf"(?<![\w./~$-])(?:{prefixes})/skills/([a-z0-9][a-z0-9-]{{0,63}})/SKILL\.md(?![\w.-])")


def config_toml(door_url: str | None, model: str, guidance: str | None) -> str:
    """The whole `config.toml`: values as TOML basic strings (`toml_string`; JSON's surrogate escapes for
    characters beyond the BMP are not TOML)."""
    lines = [
        f"model = {toml_string(model or 'gpt-5')}",
        'model_provider = "door"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
        "check_for_update_on_startup = false",
        "hide_agent_reasoning = false",
    ]
    if guidance is not None and guidance.strip():
        lines.append(f"developer_instructions = {toml_string(guidance)}")
    lines += [
        "",
        "[model_providers.door]",
        'name = "door"',
        f"base_url = {toml_string((door_url or 'http://127.0.0.1:9') + '/v1')}",
        'wire_api = "responses"',
        f'env_key = "{TOKEN_VARIABLE}"',
        "request_max_retries = 0",
        "stream_max_retries = 0",
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[feedback]",
        "enabled = false",
        "",
        "[history]",
        'persistence = "none"',
        "",
        "[otel]",
        'exporter = "none"',
        "",
    ]
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Codex:
    """The adapter for one Codex binary."""

    program: Path

    def start(self, room: AgentRoom) -> AgentStart:
        make_home(room.home, room.owner)
        codex_home = room.home / ".codex"
        place(
            room.home, ".codex/config.toml", config_toml(room.door_url, room.model, room.guidance).encode(), room.owner
        )
        place_skills(codex_home, "skills", room.skills, room.owner)
        command = (
            str(self.program),
            "exec",
            "--json",
            "--dangerously-bypass-approvals-and-sandbox",
            "--skip-git-repo-check",
            "--color",
            "never",
            room.prompt,
        )
        env = [*room.base_env, ("CODEX_HOME", str(codex_home))]
        if room.door_token is not None:
            env.append((TOKEN_VARIABLE, room.door_token))
        return AgentStart(command, tuple(env))

    def end(self, stdout: bytes, room: AgentRoom) -> AgentEnd:
        log = read_events(stdout, room.prompt, room.model, codex_home=str(room.home / ".codex"))
        log.version = installed_version(self.program)
        return AgentEnd(log.document(), log.cost_usd)


def installed_version(program: Path) -> str:
    """The version in the npm package's `codex-package.json` beside `bin/`, else "unknown"."""
    try:
        value = json.loads((program.parent.parent / "codex-package.json").read_bytes()[:65536])
    except (OSError, ValueError):
        return "unknown"
    version = value.get("version") if isinstance(value, dict) else None
    return version if isinstance(version, str) and 0 < len(version) <= 64 else "unknown"


def read_events(stdout: bytes, prompt: str, model: str | None, *, codex_home: str | None = None) -> StepLog:
    """Codex's JSONL as ATIF steps: each completed item one step; lines it does not know are skipped.
    `codex_home` is the run's `$CODEX_HOME`, under whose `skills/` a read is a skill's use."""
    reads = skill_reads(codex_home)
    log = StepLog(NAME, "unknown", model or None)
    log.user(prompt)
    turns = 0
    for event in json_lines(stdout):
        kind = event.get("type")
        if kind == "thread.started" and isinstance(event.get("thread_id"), str):
            log.session_id = event["thread_id"]
        elif kind == "item.completed" and isinstance(event.get("item"), dict):
            _item(log, event["item"], reads)
        elif kind == "turn.completed":
            turns += 1
            usage: dict[str, Any] = event["usage"] if isinstance(event.get("usage"), dict) else {}
            log.prompt_tokens += number(usage.get("input_tokens"))
            log.completion_tokens += number(usage.get("output_tokens"))
            log.cached_tokens += number(usage.get("cached_input_tokens"))
            log.state = "ended"
        elif kind == "turn.failed":
            error = event.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            log.system(f"turn failed: {message}" if isinstance(message, str) else "turn failed")
            log.state = "failed"
        elif kind == "error" and isinstance(event.get("message"), str):
            log.system(f"error: {event['message']}")
    log.extra["turns"] = turns
    return log


def _item(log: StepLog, item: dict[str, Any], reads: re.Pattern[str]) -> None:
    kind, item_id = item.get("type"), str(item.get("id", ""))
    if kind == "agent_message" and isinstance(item.get("text"), str):
        log.agent(item["text"])
    elif kind == "reasoning" and isinstance(item.get("text"), str):
        log.extra.setdefault("reasoning", []).append(item["text"])
    elif kind == "command_execution" and isinstance(item.get("command"), str):
        command = item["command"]
        failed = item.get("status") == "failed" or number(item.get("exit_code")) != 0
        # A skill is used when the read succeeded: an exit code of 0 said, not merely none said.
        succeeded = not failed and type(item.get("exit_code")) is int
        found = reads.search(command) if succeeded else None
        log.agent("", [Call(item_id, SHELL, {"command": command}, f"skill:{found[1]}" if found else None)])
        output = item.get("aggregated_output")
        log.observe(item_id, output if isinstance(output, str) else "", failed)
    elif kind == "file_change" and isinstance(item.get("changes"), list):
        log.agent("", [Call(item_id, "apply_patch", {"changes": item["changes"]})])
        log.observe(item_id, str(item.get("status", "")), item.get("status") == "failed")
    elif kind == "mcp_tool_call":
        name = f"{item.get('server', '')}.{item.get('tool', '')}"
        log.agent("", [Call(item_id, name, item.get("arguments"))])
        log.observe(item_id, json.dumps(item.get("result"), ensure_ascii=False), item.get("status") == "failed")
    elif kind == "error" and isinstance(item.get("message"), str):
        log.system(f"error: {item['message']}")
