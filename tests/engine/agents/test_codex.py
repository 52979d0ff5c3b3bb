"""Codex's adapter: its config.toml (the door as a Responses provider, nothing outside), the skills under
$CODEX_HOME in the with arm only, and its JSONL as an ATIF trajectory."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from eval_runner.engine.agents.codex import TOKEN_VARIABLE, Codex, config_toml, read_events
from eval_runner.engine.run.trajectory import parse_trajectory
from eval_runner.engine.run.turn import AgentRoom
from eval_runner.engine.testset.cases import Operation
from eval_runner.engine.testset.catalog import Skill

PROMPT = "Give me a short overview of the repository."
# A trimmed recording of Codex 0.171.0's `exec --json` against the scripted stand-in door.
EVENTS = b"\n".join(
    json.dumps(line).encode()
    for line in [
        {"type": "thread.started", "thread_id": "th-1"},
        {"type": "turn.started"},
        {
            "type": "item.started",
            "item": {"id": "item_1", "type": "command_execution", "command": "cat x", "status": "in_progress"},
        },
        {
            "type": "item.completed",
            "item": {
                "id": "item_1",
                "type": "command_execution",
                "command": "/bin/sh -lc 'cat \"$CODEX_HOME/skills/brief/SKILL.md\"'",
                "aggregated_output": "---\nname: brief\n",
                "exit_code": 0,
                "status": "completed",
            },
        },
        {
            "type": "item.completed",
            "item": {
                "id": "item_2",
                "type": "command_execution",
                "command": "false",
                "aggregated_output": "",
                "exit_code": 1,
                "status": "failed",
            },
        },
        {"type": "item.completed", "item": {"id": "item_3", "type": "agent_message", "text": "A Rust crate."}},
        {"type": "turn.completed", "usage": {"input_tokens": 900, "cached_input_tokens": 10, "output_tokens": 31}},
    ]
)


def test_the_events_become_a_trajectory_with_the_skill_read_as_an_operation() -> None:
    log = read_events(EVENTS, PROMPT, "gpt-5")
    trajectory = parse_trajectory(log.document())
    assert trajectory.whole
    assert trajectory.session_id == "th-1"
    assert trajectory.final_message == "A Rust crate."
    assert [call.function_name for call in trajectory.calls] == ["shell", "shell"]
    assert [call.input_text for call in trajectory.calls_to("skill:brief")] == [
        "/bin/sh -lc 'cat \"$CODEX_HOME/skills/brief/SKILL.md\"'"
    ]
    statuses = [step.observations for step in trajectory.steps if step.observations]
    assert len(statuses) == 2
    metrics = trajectory.document["final_metrics"]
    assert (metrics["total_prompt_tokens"], metrics["total_completion_tokens"]) == (900, 31)
    assert log.cost_usd is None


def test_a_failed_turn_is_a_failed_trajectory() -> None:
    data = b'{"type":"thread.started","thread_id":"t"}\n{"type":"turn.failed","error":{"message":"door said no"}}\n'
    trajectory = parse_trajectory(read_events(data, PROMPT, None).document())
    assert trajectory.state == "failed"
    assert "door said no" in trajectory.steps[-1].message


@given(st.lists(st.one_of(st.binary(max_size=60), st.dictionaries(st.text(max_size=8), st.text(max_size=8)))))
def test_any_output_reads_as_a_trajectory(lines: list[bytes | dict[str, str]]) -> None:
    data = b"\n".join(line if isinstance(line, bytes) else json.dumps(line).encode() for line in lines)
    parse_trajectory(read_events(data, PROMPT, None).document())


def test_the_config_names_the_door_as_a_responses_provider_and_nothing_outside() -> None:
    config = tomllib.loads(config_toml("http://127.0.0.1:8401", "gpt-5", 'Say "hi".\n'))
    assert config["model_provider"] == "door"
    provider = config["model_providers"]["door"]
    assert provider["base_url"] == "http://127.0.0.1:8401/v1"
    assert provider["wire_api"] == "responses"
    assert provider["env_key"] == TOKEN_VARIABLE
    assert config["approval_policy"] == "never"
    assert config["check_for_update_on_startup"] is False
    assert config["analytics"]["enabled"] is False
    assert config["developer_instructions"] == 'Say "hi".\n'


def _room(tmp_path: Path, skills: tuple[Skill, ...]) -> AgentRoom:
    return AgentRoom(
        root=tmp_path,
        home=tmp_path / "tmp" / "home",
        cwd=tmp_path,
        tmp=tmp_path / "tmp",
        out=tmp_path,
        door_url="http://127.0.0.1:8401",
        door_token="t0ken",
        model="gpt-5",
        prompt=PROMPT,
        guidance=None,
        skills=skills,
        grants=frozenset({Operation.READ}),
        owner=None,
        base_env=(("HOME", str(tmp_path / "tmp" / "home")),),
    )


def test_the_skills_go_under_codex_home_in_the_with_arm_only(tmp_path: Path) -> None:
    (tmp_path / "tmp").mkdir()
    started = Codex(Path("/opt/codex")).start(_room(tmp_path, (Skill("brief", b"Survey first.\n"),)))
    env = dict(started.env)
    assert env[TOKEN_VARIABLE] == "t0ken"
    codex_home = Path(env["CODEX_HOME"])
    assert (codex_home / "skills" / "brief" / "SKILL.md").is_file()
    assert started.command[-1] == PROMPT
    assert "--dangerously-bypass-approvals-and-sandbox" in started.command
    other = tmp_path / "other"
    (other / "tmp").mkdir(parents=True)
    Codex(Path("/opt/codex")).start(_room(other, ()))
    assert not (other / "tmp" / "home" / ".codex" / "skills").exists()


def _command(item_id: str, command: str, exit_code: int | None, status: str = "completed") -> bytes:
    item: dict[str, object] = {
        "id": item_id,
        "type": "command_execution",
        "command": command,
        "aggregated_output": "",
        "status": status,
    }
    if exit_code is not None:
        item["exit_code"] = exit_code
    return json.dumps({"type": "item.completed", "item": item}).encode()


def test_a_skill_counts_only_when_read_under_codex_home_and_the_read_succeeded() -> None:
    home = "/tmp/oa-eval-1/tmp/home/.codex"
    commands = [
        ("ok-path", f"/bin/sh -lc 'cat {home}/skills/brief/SKILL.md'", 0, "skill:brief"),
        ("ok-tilde", "sed -n 1,80p ~/.codex/skills/tidy/SKILL.md", 0, "skill:tidy"),
        ("ok-braces", 'cat "${CODEX_HOME}/skills/map/SKILL.md"', 0, "skill:map"),
        ("failed", f"cat {home}/skills/brief/SKILL.md", 1, None),
        ("failed-status", f"cat {home}/skills/brief/SKILL.md", 0, None),
        ("no-exit-code", f"cat {home}/skills/brief/SKILL.md", None, None),
        ("elsewhere", "cat /work/skills/brief/SKILL.md", 0, None),
        ("relative", "cat skills/brief/SKILL.md", 0, None),
        ("inside-another", f"cat /evil{home}/skills/brief/SKILL.md", 0, None),
        ("mentioned", "echo 'see $CODEX_HOME/skills/brief/SKILL.md.bak'", 0, None),
    ]
    data = b"\n".join(
        _command(item_id, command, code, "failed" if item_id == "failed-status" else "completed")
        for item_id, command, code, _ in commands
    )
    trajectory = parse_trajectory(read_events(data, PROMPT, None, codex_home=home).document())
    skills = {call.call_id: [op for op in call.operations if op.startswith("skill:")] for call in trajectory.calls}
    assert skills == {item_id: [] if operation is None else [operation] for item_id, _, _, operation in commands}


def test_instructions_beyond_the_bmp_round_trip_through_toml() -> None:
    guidance = 'Reply with 🦀 and "quotes", a tab\tand a \\ backslash; 𝔘𝔫𝔦𝔠𝔬𝔡𝔢.\n'
    config = tomllib.loads(config_toml("http://127.0.0.1:8401", "gpt-5-🦀", guidance))
    assert config["developer_instructions"] == guidance
    assert config["model"] == "gpt-5-🦀"
    assert config["model_providers"]["door"]["base_url"] == "http://127.0.0.1:8401/v1"


@given(st.text(), st.text(min_size=1))
def test_any_instructions_and_model_round_trip_through_toml(guidance: str, model: str) -> None:
    config = tomllib.loads(config_toml("http://127.0.0.1:8401", model, guidance))
    assert config.get("developer_instructions", "") == (guidance if guidance.strip() else "")
    assert config["model"] == model
