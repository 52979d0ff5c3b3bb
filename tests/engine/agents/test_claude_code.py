"""Claude Code's adapter: how it is started (the door, the tools the grant allows, the skills in the with arm
only) and how its stream-json becomes an ATIF trajectory graders read (`skill:<name>` for a Skill call)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from eval_runner.engine.agents.atif_document import StepLog, json_lines
from eval_runner.engine.agents.claude_code import ClaudeCode, _result, read_stream, tools
from eval_runner.engine.run.trajectory import parse_trajectory
from eval_runner.engine.run.turn import AgentRoom
from eval_runner.engine.testset.cases import Operation
from eval_runner.engine.testset.catalog import Skill

PROMPT = "Give me a short overview of the repository."
TOKEN = "throwaway-token-0123"
# A trimmed recording of Claude Code 2.1.332's stream-json against the scripted stand-in door.
STREAM = (
    b"\n".join(
        json.dumps(line).encode()
        for line in [
            {
                "type": "system",
                "subtype": "init",
                "session_id": "s-1",
                "model": "m",
                "claude_code_version": "2.1.332",
                "tools": ["Read", "Skill"],
                "skills": ["brief"],
            },
            {
                "type": "assistant",
                "session_id": "s-1",
                "message": {
                    "model": "m",
                    "content": [{"type": "tool_use", "id": "t1", "name": "Skill", "input": {"skill": "brief"}}],
                },
            },
            {
                "type": "user",
                "message": {
                    "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "Launching skill: brief"}]
                },
            },
            {"type": "user", "message": {"content": [{"type": "text", "text": "Base directory for this skill: ..."}]}},
            {
                "type": "assistant",
                "message": {
                    "content": [
                        {"type": "text", "text": "Looking."},
                        {"type": "tool_use", "id": "t2", "name": "Read", "input": {"file_path": "src/tables.rs"}},
                    ]
                },
            },
            {
                "type": "user",
                "message": {
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t2",
                            "content": [{"type": "text", "text": "pub const"}],
                            "is_error": False,
                        }
                    ]
                },
            },
            {"type": "assistant", "message": {"content": [{"type": "text", "text": "It is a Rust crate."}]}},
            {
                "type": "result",
                "subtype": "success",
                "is_error": False,
                "result": "It is a Rust crate.",
                "num_turns": 3,
                "total_cost_usd": 0.0123,
                "duration_ms": 1240,
                "usage": {"input_tokens": 600, "output_tokens": 23, "cache_read_input_tokens": 5},
            },
        ]
    )
    + b"\nnot json at all\n{torn"
)


def room(tmp_path: Path, grants: frozenset[Operation], skills: tuple[Skill, ...] = ()) -> AgentRoom:
    (tmp_path / "tmp").mkdir()
    return AgentRoom(
        root=tmp_path,
        home=tmp_path / "tmp" / "home",
        cwd=tmp_path / "home" / "cwd",
        tmp=tmp_path / "tmp",
        out=tmp_path / "out",
        door_url="http://127.0.0.1:8401",
        door_token=TOKEN,
        model="claude-sonnet-4-5",
        prompt=PROMPT,
        guidance="## Case instructions\n\nBe brief.\n",
        skills=skills,
        grants=grants,
        owner=None,
        base_env=(("HOME", str(tmp_path / "tmp" / "home")), ("PATH", "/usr/bin")),
    )


def test_the_stream_becomes_a_trajectory_with_the_skill_as_an_operation() -> None:
    log = read_stream(STREAM, PROMPT, "claude-sonnet-4-5")
    trajectory = parse_trajectory(log.document())
    assert trajectory.whole
    assert trajectory.session_id == "s-1"
    assert (trajectory.agent.name, trajectory.agent.version) == ("claude-code", "2.1.332")
    assert trajectory.final_message == "It is a Rust crate."
    assert [call.function_name for call in trajectory.calls] == ["Skill", "Read"]
    assert trajectory.calls_to("skill:brief") == trajectory.calls_to("Skill")
    assert len(trajectory.calls_to("Read")) == 1
    results = [step.observations for step in trajectory.steps if step.observations]
    assert [[result.content for result in found] for found in results] == [["Launching skill: brief"], ["pub const"]]
    assert log.cost_usd == 0.0123
    metrics = trajectory.document["final_metrics"]
    assert (metrics["total_prompt_tokens"], metrics["total_completion_tokens"]) == (600, 23)
    assert trajectory.document["extra"]["turns"] == 3


def test_a_line_that_is_not_strict_json_is_skipped() -> None:
    odd = b'{"type": "assistant", "message": {"content": [{"type": "text", "text": "x", "n": NaN}]}}\n'
    trajectory = parse_trajectory(read_stream(odd + STREAM, PROMPT, None).document())
    assert all(step.message != "x" for step in trajectory.steps)
    assert trajectory.final_message == "It is a Rust crate."


def test_a_run_cut_short_is_an_interrupted_trajectory_without_a_cost() -> None:
    cut = STREAM.split(b'{"type": "result"')[0]
    log = read_stream(cut, PROMPT, None)
    trajectory = parse_trajectory(log.document())
    assert trajectory.state == "interrupted"
    assert not trajectory.whole
    assert log.cost_usd is None


@given(st.lists(st.one_of(st.binary(max_size=60), st.dictionaries(st.text(max_size=8), st.text(max_size=8)))))
def test_any_output_reads_as_a_trajectory(lines: list[bytes | dict[str, str]]) -> None:
    data = b"\n".join(line if isinstance(line, bytes) else json.dumps(line).encode() for line in lines)
    parse_trajectory(read_stream(data, PROMPT, None).document())


def test_the_door_the_tools_and_the_skills_as_started(tmp_path: Path) -> None:
    program = Path("/opt/claude")
    skill = Skill("brief", b"Survey first.\n")
    started = ClaudeCode(program).start(room(tmp_path, frozenset({Operation.READ, Operation.WRITE}), (skill,)))
    assert started.command[:6] == (str(program), "-p", PROMPT, "--output-format", "stream-json", "--verbose")
    offered = started.command[started.command.index("--tools") + 1]
    assert offered.split(",") == ["Read", "Glob", "Grep", "Skill", "Write", "Edit"]
    assert "Bash" not in offered
    assert started.command[started.command.index("--append-system-prompt") + 1].startswith("## Case instructions")
    env = dict(started.env)
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8401"
    assert env["ANTHROPIC_API_KEY"] == TOKEN
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == env["DISABLE_TELEMETRY"] == "1"
    assert env["DISABLE_AUTOUPDATER"] == "1"
    assert (tmp_path / "tmp" / "home" / ".claude" / "skills" / "brief" / "SKILL.md").is_file()


def test_the_without_arm_gets_no_skill_and_bash_only_with_exec(tmp_path: Path) -> None:
    ClaudeCode(Path("/opt/claude")).start(room(tmp_path, frozenset({Operation.READ})))
    assert not (tmp_path / "tmp" / "home" / ".claude" / "skills").exists()
    assert tools(frozenset({Operation.READ})) == ("Read", "Glob", "Grep", "Skill")
    assert "Bash" in tools(frozenset({Operation.READ, Operation.EXEC}))


def test_a_cost_beyond_a_float_is_never_kept() -> None:
    """`1e400` reads as infinity in Python's json: the line is refused, so no `Infinity` reaches the document."""
    beyond = STREAM.replace(b'"total_cost_usd": 0.0123', b'"total_cost_usd": 1e400')
    assert beyond != STREAM
    log = read_stream(beyond, PROMPT, None)
    assert log.cost_usd is None
    document = log.document()
    assert b"Infinity" not in document
    parse_trajectory(document)


def test_a_result_whose_cost_is_not_finite_has_no_cost() -> None:
    for cost in (math.inf, math.nan, -1.0):
        log = StepLog("claude-code", "1", None)
        _result(log, {"type": "result", "subtype": "success", "total_cost_usd": cost})
        assert log.cost_usd is None
    log = StepLog("claude-code", "1", None)
    _result(log, {"type": "result", "subtype": "success", "total_cost_usd": 0.5})
    assert log.cost_usd == 0.5


def test_json_lines_refuses_numbers_beyond_a_float_and_words_that_are_not_json() -> None:
    data = b'{"a": 1e400}\n{"b": -1e999}\n{"c": NaN}\n{"d": Infinity}\n{"e": 1.5, "f": 9007199254740993}\n'
    assert json_lines(data) == [{"e": 1.5, "f": "9007199254740993"}]
