"""Which agent a run starts, and how each is driven (issue 11): one small adapter module per agent.

An adapter answers four questions for its agent (decisions.md, "Agent adapters"): how the subject arm
receives the extension and the baseline arm does not, how the door is presented inside the sandbox, how
the agent's own output becomes the ATIF trajectory, reply, outcome and cost the graders read, and which
file the locks pin. `coder` is the child contract exactly as before (`engine/run/turn.py` with no
adapter), and so is `builtin`, our own small agent (`builtin_agent.py`) speaking that contract;
`claude-code` and `codex` drive the real npm-installed clients (`install.py` finds them).
A choice is written `kind[:path]` (`EVAL_RUNNER_AGENT`, `eval run --agent-kind`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from eval_runner.engine.agents.claude_code import ClaudeCode
from eval_runner.engine.agents.codex import Codex
from eval_runner.engine.agents.install import claude_binary, codex_binary
from eval_runner.engine.run.turn import AgentAdapter
from eval_runner.errors import EvalRunnerError


class AgentKind(StrEnum):
    CODER = "coder"
    BUILTIN = "builtin"
    CLAUDE_CODE = "claude-code"
    CODEX = "codex"


#: The built-in agent's script: it speaks the coder child contract, standard library only.
BUILTIN_AGENT = Path(__file__).with_name("builtin_agent.py")


class AgentChoiceError(EvalRunnerError):
    """An agent choice that names no agent we drive, or a path that is not there."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


@dataclass(frozen=True, slots=True)
class AgentChoice:
    """An agent kind and, when given, the path of its program (else the installed one, `install.py`)."""

    kind: AgentKind
    path: Path | None = None

    def __str__(self) -> str:
        return self.kind.value if self.path is None else f"{self.kind.value}:{self.path}"

    @property
    def anthropic_door(self) -> bool:
        """Whether this agent's door speaks Anthropic Messages (Claude Code's), which the judge must then speak
        too; every other agent's door speaks OpenAI's APIs."""
        return self.kind is AgentKind.CLAUDE_CODE

    @property
    def skills_as_files(self) -> bool:
        """Whether the subject arm's skills go to the agent as files (its own skills folder) rather than
        appended to the coder's guidance."""
        return self.kind in (AgentKind.CLAUDE_CODE, AgentKind.CODEX)

    def program(self) -> Path | None:
        """The agent's program: the path given, else the installed one for a kind that has one (None for
        `coder`, whose path is configured on its own: `EVAL_RUNNER_CODER`, `--agent`)."""
        if self.path is not None:
            return self.path
        if self.kind is AgentKind.CLAUDE_CODE:
            return claude_binary()
        if self.kind is AgentKind.CODEX:
            return codex_binary()
        return BUILTIN_AGENT if self.kind is AgentKind.BUILTIN else None


def parse_choice(text: str) -> AgentChoice:
    """`kind` or `kind:path`, e.g. `claude-code` or `coder:/opt/coder`. Raises AgentChoiceError."""
    word, colon, path = text.strip().partition(":")
    try:
        kind = AgentKind(word)
    except ValueError:
        known = ", ".join(kind.value for kind in AgentKind)
        raise AgentChoiceError("unknown_agent", f"{word!r} is not an agent kind ({known})") from None
    if colon and not path:
        raise AgentChoiceError("empty_path", f"{text!r} names no path after the colon")
    return AgentChoice(kind, Path(path) if path else None)


def adapter_for(choice: AgentChoice, program: Path) -> AgentAdapter | None:
    """The adapter that starts `program` as `choice.kind`; None for `coder` and `builtin` (the child
    contract)."""
    if choice.kind is AgentKind.CLAUDE_CODE:
        return ClaudeCode(program)
    if choice.kind is AgentKind.CODEX:
        return Codex(program)
    return None
