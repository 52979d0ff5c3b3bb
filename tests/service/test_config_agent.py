"""`EVAL_RUNNER_AGENT=kind[:path]`: which agent `serve` runs, and the binary it means."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval_runner.engine.agents import AgentChoice, AgentKind
from eval_runner.engine.agents.install import CACHE_ENV, claude_binary
from eval_runner.service.config import Config, ConfigError

BASE = {
    "EVAL_RUNNER_CATALOG": "/ext/a",
    "CODER_DOOR_KEY": "door-key-1",
    "HOME": "/home/trainer",
    "TMPDIR": "/var/tmp",
}


def test_unset_is_the_coder_contract_as_before() -> None:
    config = Config.from_env({**BASE, "EVAL_RUNNER_CODER": "/opt/coder"})
    assert config.agent is None
    assert config.coder == Path("/opt/coder")


def test_a_real_agent_needs_no_coder_and_defaults_to_the_installed_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, "/cache/agents")
    config = Config.from_env({**BASE, "EVAL_RUNNER_AGENT": "claude-code"})
    assert config.agent == AgentChoice(AgentKind.CLAUDE_CODE)
    assert config.coder == claude_binary(Path("/cache/agents"))
    given = Config.from_env({**BASE, "EVAL_RUNNER_AGENT": "codex:/opt/codex", "EVAL_RUNNER_CODER": "/opt/coder"})
    assert given.coder == Path("/opt/codex")


def test_an_unknown_agent_is_a_configuration_problem() -> None:
    with pytest.raises(ConfigError, match="EVAL_RUNNER_AGENT"):
        Config.from_env({**BASE, "EVAL_RUNNER_CODER": "/opt/coder", "EVAL_RUNNER_AGENT": "gemini"})
