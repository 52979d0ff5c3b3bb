"""Choosing an agent: `kind[:path]` (EVAL_RUNNER_AGENT, `eval run --agent-kind`), and the adapter it names."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eval_runner.engine.agents import (
    BUILTIN_AGENT,
    AgentChoice,
    AgentChoiceError,
    AgentKind,
    adapter_for,
    parse_choice,
)
from eval_runner.engine.agents.claude_code import ClaudeCode
from eval_runner.engine.agents.codex import Codex
from eval_runner.engine.agents.install import CACHE_ENV, claude_binary, codex_binary


@pytest.mark.parametrize(
    ("text", "choice"),
    [
        ("coder", AgentChoice(AgentKind.CODER)),
        ("claude-code", AgentChoice(AgentKind.CLAUDE_CODE)),
        ("builtin", AgentChoice(AgentKind.BUILTIN)),
        (" codex ", AgentChoice(AgentKind.CODEX)),
        ("coder:/opt/coder", AgentChoice(AgentKind.CODER, Path("/opt/coder"))),
        ("claude-code:/a:b/claude", AgentChoice(AgentKind.CLAUDE_CODE, Path("/a:b/claude"))),
    ],
)
def test_a_choice_reads_kind_and_path(text: str, choice: AgentChoice) -> None:
    assert parse_choice(text) == choice
    assert parse_choice(str(choice)) == choice


@pytest.mark.parametrize(
    ("text", "code"), [("claude", "unknown_agent"), ("", "unknown_agent"), ("codex:", "empty_path")]
)
def test_a_bad_choice_is_a_typed_error(text: str, code: str) -> None:
    with pytest.raises(AgentChoiceError) as refused:
        parse_choice(text)
    assert refused.value.code == code


@given(st.text(max_size=40))
def test_any_text_parses_or_is_refused_with_a_code(text: str) -> None:
    codes: list[str] = []
    try:
        choice = parse_choice(text)
    except AgentChoiceError as error:
        codes.append(error.code)
    else:
        assert choice.kind.value == text.strip().partition(":")[0]
    assert set(codes) <= {"unknown_agent", "empty_path"}


def test_the_coder_and_the_builtin_agent_have_no_adapter_and_the_real_agents_do() -> None:
    program = Path("/x/agent")
    assert adapter_for(AgentChoice(AgentKind.CODER), program) is None
    assert adapter_for(AgentChoice(AgentKind.BUILTIN), program) is None
    assert not AgentChoice(AgentKind.BUILTIN).skills_as_files
    assert adapter_for(AgentChoice(AgentKind.CLAUDE_CODE), program) == ClaudeCode(program)
    assert adapter_for(AgentChoice(AgentKind.CODEX), program) == Codex(program)
    assert not AgentChoice(AgentKind.CODER).skills_as_files
    assert AgentChoice(AgentKind.CODEX).skills_as_files


def test_each_kind_names_its_program(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, "/cache")
    assert AgentChoice(AgentKind.CODER).program() is None
    assert AgentChoice(AgentKind.BUILTIN).program() == BUILTIN_AGENT
    assert BUILTIN_AGENT.name == "builtin_agent.py"
    assert AgentChoice(AgentKind.CLAUDE_CODE).program() == claude_binary(Path("/cache"))
    assert AgentChoice(AgentKind.CODEX).program() == codex_binary(Path("/cache"))
    assert AgentChoice(AgentKind.CODEX, Path("/opt/codex")).program() == Path("/opt/codex")
