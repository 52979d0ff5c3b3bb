"""The built-in agent: its workspace tools stay inside the working directory, its loop runs the tools the model
asks for and hands their output back (Responses, and Chat Completions when the door has no Responses route),
and as a real process against the stand-in door it keeps the child contract: an ATIF log our reader takes and
a last stdout line with the outcome."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eval_runner.engine.agents import builtin_agent
from eval_runner.engine.agents.builtin_agent import (
    ChatConversation,
    NoRouteError,
    ResponsesConversation,
    TraceLog,
    Workspace,
    work,
)
from eval_runner.engine.run.trajectory import read_trajectory
from eval_runner.stand_ins.door import StandInDoor

#: The keys a door's answer is read by, so generated answers reach the readers' inner branches.
KEYS = (
    "output",
    "type",
    "content",
    "text",
    "name",
    "call_id",
    "id",
    "arguments",
    "usage",
    "input_tokens",
    "output_tokens",
    "choices",
    "message",
    "tool_calls",
    "function",
    "prompt_tokens",
    "completion_tokens",
)


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    root = tmp_path / "cwd"
    (root / "src").mkdir(parents=True)
    (root / "src" / "main.rs").write_text('fn main() {\n    println!("hi");\n}\n')
    (root / "README.md").write_text("# A crate\n")
    (tmp_path / "secret.txt").write_text("not for the agent")
    return Workspace(root, writable=False)


def test_the_tools_see_only_the_working_directory(workspace: Workspace, tmp_path: Path) -> None:
    assert workspace.list_files() == "README.md\nsrc/main.rs"
    assert "println" in workspace.read_file("src/main.rs")
    assert workspace.search(r"println", ".") == 'src/main.rs:2:     println!("hi");'
    (workspace.root / "out").symlink_to(tmp_path / "secret.txt")
    for path in ("../secret.txt", str(tmp_path / "secret.txt"), "out"):
        with pytest.raises(ValueError, match="outside the working directory"):
            workspace.read_file(path)


def test_writing_is_offered_and_done_only_when_granted(workspace: Workspace) -> None:
    assert "write_file" not in [tool["name"] for tool in workspace.tools()]
    with pytest.raises(ValueError, match="not granted"):
        workspace.call("write_file", {"path": "a.md", "content": "x"})
    granted = Workspace(workspace.root, writable=True)
    assert "write_file" in [tool["name"] for tool in granted.tools()]
    assert granted.call("write_file", {"path": "notes/a.md", "content": "hello"}) == "wrote 5 bytes to notes/a.md"
    assert (workspace.root / "notes" / "a.md").read_text() == "hello"


class ScriptedDoor:
    """The model's side of the loop, scripted per call: what outside our control answers (no network)."""

    def __init__(self, answers: list[dict[str, Any]], *, routes: tuple[str, ...] = ("/v1/responses",)) -> None:
        self.answers = answers
        self.routes = routes
        self.model = "scripted"
        self.bodies: list[tuple[str, dict[str, Any]]] = []

    def post(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        if route not in self.routes:
            raise NoRouteError(f"the door has no {route}")
        self.bodies.append((route, json.loads(json.dumps(body))))
        return self.answers.pop(0)


def test_a_responses_turn_runs_the_asked_tool_and_answers_with_its_output(workspace: Workspace, tmp_path: Path) -> None:
    door = ScriptedDoor(
        [
            {
                "output": [
                    {"type": "function_call", "call_id": "c1", "name": "read_file", "arguments": '{"path":"README.md"}'}
                ],
                "usage": {"input_tokens": 10, "output_tokens": 3},
            },
            {
                "output": [
                    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A crate."}]}
                ],
                "usage": {"input_tokens": 20, "output_tokens": 4},
            },
        ]
    )
    trace = tmp_path / "trajectory.atif.jsonl"
    log = TraceLog(trace, {"id": "s", "model": "scripted", "door": "responses", "repository": "", "directive": "",
                           "state": "", "seconds": 0, "version": "t"})  # fmt: skip
    reply, error = work(door, workspace, "What is this?", "system", log)  # type: ignore[arg-type]
    log.finish()
    assert (reply, error) == ("A crate.", None)
    second = door.bodies[1][1]["input"]
    assert second[-1] == {"type": "function_call_output", "call_id": "c1", "output": "# A crate\n"}
    trajectory = read_trajectory(trace, whole=True)
    calls = [call for step in trajectory.steps for call in step.tool_calls]
    assert [call.function_name for call in calls] == ["read_file"]


def test_a_door_without_responses_is_spoken_to_in_chat_completions(workspace: Workspace) -> None:
    door = ScriptedDoor(
        [
            {
                "choices": [
                    {
                        "message": {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [
                                {"id": "t1", "type": "function", "function": {"name": "list_files", "arguments": "{}"}}
                            ],
                        }
                    }
                ]
            },
            {"choices": [{"message": {"role": "assistant", "content": "Two files."}}]},
        ],
        routes=("/v1/chat/completions",),
    )
    reply, error = work(door, workspace, "List it.", "system", TraceLog(None, {}))  # type: ignore[arg-type]
    assert (reply, error) == ("Two files.", None)
    messages = door.bodies[1][1]["messages"]
    assert messages[-1] == {"role": "tool", "tool_call_id": "t1", "content": "README.md\nsrc/main.rs"}


def test_a_model_that_never_stops_calling_tools_ends_at_the_turn_bound(workspace: Workspace) -> None:
    call = {"output": [{"type": "function_call", "call_id": "c", "name": "list_files", "arguments": "{}"}]}
    door = ScriptedDoor([call] * builtin_agent.MAX_TURNS)
    reply, error = work(door, workspace, "Loop.", "system", TraceLog(None, {}))  # type: ignore[arg-type]
    assert reply is None
    assert error == f"no answer within {builtin_agent.MAX_TURNS} model calls"


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS), JSON, max_size=5))
def test_any_door_answer_reads_as_text_and_calls_never_an_exception(answer: dict[str, Any]) -> None:
    for conversation in (ResponsesConversation("s", "p", []), ChatConversation("s", "p", [])):
        turn = conversation.read(answer)
        assert isinstance(turn.text, str)
        assert all(isinstance(name, str) and isinstance(arguments, dict) for _, name, arguments in turn.calls)
        assert all(isinstance(count, int) and count >= 0 for count in turn.tokens)


async def test_as_a_process_against_the_stand_in_door_it_keeps_the_child_contract(tmp_path: Path) -> None:
    key = secrets.token_hex(16)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    trace = tmp_path / "out" / "trajectory.atif.jsonl"
    async with StandInDoor(key) as door:
        env = {"PATH": os.environ["PATH"], "CODER_DOOR_URL": door.url, "CODER_DOOR_KEY": key, "CODER_MODEL": "m"}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-S", builtin_agent.__file__, "-p", "Hello there", "--trace", str(trace), "--json",
            cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        stdout, stderr = await process.communicate()
    assert process.returncode == 0, stderr
    last = json.loads(stdout.decode().splitlines()[-1])
    assert last == {
        "reply": "Welcome aboard, glad you are here!",
        "outcome": "answered",
        "cost_usd": None,
        "error": None,
    }
    assert key.encode() not in trace.read_bytes()
    trajectory = read_trajectory(trace, whole=True)
    assert trajectory.steps[-1].message == "Welcome aboard, glad you are here!"
    assert [call.prompt for call in door.calls] == ["Hello there"]
