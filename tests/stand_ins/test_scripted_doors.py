"""The scripted stand-in doors: Anthropic Messages and OpenAI Responses, each in the shapes the real agents
read (every stream ends), the key checked, and the n-th answer chosen by the tool results already there."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from eval_runner.stand_ins.scripted_doors import FALLBACK, DoorCall, Play, Say, ScriptedDoor, Shell, Tool

KEY = "scripted-door-key-1"
LISTED = "a skill called brief"
PLAYS = (
    Play("overview", (Tool("Skill", {"skill": "brief"}), Say("A Rust crate.")), when_listed=LISTED),
    Play("overview", (Shell("ls"), Say("Let me look.")), unless_listed=LISTED),
)


@pytest.fixture
async def door() -> AsyncIterator[ScriptedDoor]:
    async with ScriptedDoor(KEY, PLAYS) as running:
        yield running


def events(text: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for chunk in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in chunk.splitlines())
        found.append((lines["event"], json.loads(lines["data"])))
    return found


async def post(door: ScriptedDoor, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(door.url + path, json=body, headers=headers) as answer,
    ):
        return answer.status, await answer.text()


def messages_body(*, listed: bool, results: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are Claude Code." + (f" There is {LISTED}." if listed else "")},
        {"role": "user", "content": [{"type": "text", "text": "Give me an overview."}]},
    ]
    for number in range(results):
        messages += [
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{number}", "name": "X", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{number}", "content": "ok"}]},
        ]
    return {"model": "m", "stream": True, "max_tokens": 100, "messages": messages}


async def test_anthropic_streams_a_tool_use_then_the_answer_and_ends_each(door: ScriptedDoor) -> None:
    status, text = await post(door, "/v1/messages?beta=true", messages_body(listed=True, results=0), {"x-api-key": KEY})
    assert status == 200
    found = events(text)
    assert [kind for kind, _ in found] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert found[1][1]["content_block"]["type"] == "tool_use"
    assert json.loads(found[2][1]["delta"]["partial_json"]) == {"skill": "brief"}
    assert found[4][1]["delta"]["stop_reason"] == "tool_use"
    status, text = await post(door, "/v1/messages", messages_body(listed=True, results=1), {"x-api-key": KEY})
    found = events(text)
    assert found[2][1]["delta"] == {"type": "text_delta", "text": "A Rust crate."}
    assert found[4][1]["delta"]["stop_reason"] == "end_turn"
    assert [(call.api, call.step, call.answer) for call in door.calls] == [
        ("anthropic", 0, "tool:Skill"),
        ("anthropic", 1, "say"),
    ]


async def test_anthropic_without_the_listing_plays_the_other_script_and_answers_whole(door: ScriptedDoor) -> None:
    body = {**messages_body(listed=False, results=0), "stream": False}
    status, text = await post(door, "/v1/messages", body, {"Authorization": f"Bearer {KEY}"})
    assert status == 200
    message = json.loads(text)
    assert message["content"][0]["type"] == "tool_use"
    assert message["content"][0]["name"] == "Bash"
    assert message["content"][0]["input"] == {"command": "ls"}


async def test_count_tokens_and_the_probe(door: ScriptedDoor) -> None:
    status, text = await post(
        door, "/v1/messages/count_tokens", messages_body(listed=False, results=0), {"x-api-key": KEY}
    )
    assert status == 200
    assert json.loads(text)["input_tokens"] > 0
    async with aiohttp.ClientSession() as session, session.head(door.url + "/") as answer:
        assert answer.status == 200
    assert [call.api for call in door.calls] == ["anthropic-count", "probe"]


async def test_a_wrong_key_is_refused_and_not_recorded(door: ScriptedDoor) -> None:
    status, _ = await post(door, "/v1/messages", messages_body(listed=True, results=0), {"x-api-key": "other"})
    assert status == 401
    assert door.refused == 1
    assert door.calls == []


def responses_body(*, listed: bool, results: int, tool: str) -> dict[str, Any]:
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": LISTED if listed else ""}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Give me an overview."}]},
    ]
    for number in range(results):
        items += [
            {"type": "function_call", "call_id": f"c{number}", "name": tool, "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{number}", "output": "ok"},
        ]
    return {"model": "gpt-5", "stream": True, "input": items, "tools": [{"type": "function", "name": tool}]}


async def test_responses_streams_a_function_call_for_the_offered_shell_then_the_answer(door: ScriptedDoor) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    status, text = await post(
        door, "/v1/responses", responses_body(listed=False, results=0, tool="exec_command"), headers
    )
    assert status == 200
    found = events(text)
    kinds = [kind for kind, _ in found]
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed"
    assert [data["sequence_number"] for _, data in found] == list(range(len(found)))
    done = next(data["item"] for kind, data in found if kind == "response.output_item.done")
    assert (done["type"], done["name"], json.loads(done["arguments"])) == (
        "function_call",
        "exec_command",
        {"cmd": "ls"},
    )
    status, text = await post(door, "/v1/responses", responses_body(listed=False, results=1, tool="shell"), headers)
    found = events(text)
    completed = found[-1][1]["response"]
    assert completed["output"][0]["content"][0]["text"] == "Let me look."
    assert completed["usage"]["total_tokens"] > 0


async def test_anything_unscripted_gets_the_fallback(door: ScriptedDoor) -> None:
    body = {"model": "m", "input": "Say hello.", "stream": False}
    status, text = await post(door, "/v1/responses", body, {"Authorization": f"Bearer {KEY}"})
    assert status == 200
    assert json.loads(text)["output"][0]["content"][0]["text"] == FALLBACK


def chat_body(*, listed: bool, results: int, stream: bool) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent." + (f" There is {LISTED}." if listed else "")},
        {"role": "user", "content": "Give me an overview."},
    ]
    for number in range(results):
        call = {"id": f"c{number}", "type": "function", "function": {"name": "Skill", "arguments": "{}"}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{number}", "content": "ok"},
        ]
    tools = [{"type": "function", "function": {"name": "Skill", "parameters": {"type": "object"}}}]
    return {"model": "m", "stream": stream, "messages": messages, "tools": tools}


def chat_chunks(text: str) -> list[Any]:
    lines = [chunk.removeprefix("data: ") for chunk in text.strip().split("\n\n")]
    assert all(not chunk.startswith("event:") for chunk in lines)
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


async def test_chat_completions_streams_a_tool_call_then_usage_then_done(door: ScriptedDoor) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    status, text = await post(door, "/v1/chat/completions", chat_body(listed=True, results=0, stream=True), headers)
    assert status == 200
    chunks = chat_chunks(text)
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    calls = [call for chunk in chunks for choice in chunk["choices"] for call in choice["delta"].get("tool_calls", ())]
    assert calls[0]["function"]["name"] == "Skill"
    arguments = "".join(call["function"]["arguments"] for call in calls)
    assert json.loads(arguments) == {"skill": "brief"}
    assert [choice["finish_reason"] for chunk in chunks for choice in chunk["choices"]][-1] == "tool_calls"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["prompt_tokens"] > 0
    assert door.calls[-1] == DoorCall("chat", "POST", "/v1/chat/completions", "m", True, 0, "tool:Skill")


async def test_chat_completions_answers_whole_and_the_step_is_the_tool_results_so_far(door: ScriptedDoor) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    status, text = await post(door, "/v1/chat/completions", chat_body(listed=True, results=1, stream=False), headers)
    assert status == 200
    answer = json.loads(text)
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"] == {"role": "assistant", "content": "A Rust crate."}
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["usage"]["completion_tokens"] > 0
    status, text = await post(door, "/v1/chat/completions", chat_body(listed=False, results=0, stream=True), headers)
    chunks = chat_chunks(text)
    calls = [call for chunk in chunks for choice in chunk["choices"] for call in choice["delta"].get("tool_calls", ())]
    assert calls[0]["function"]["name"] == "shell"  # the other play's shell move; no shell tool was offered
    assert all(not choice["delta"].get("content") for chunk in chunks for choice in chunk["choices"])


async def test_a_door_that_speaks_only_chat_completions_has_no_responses_route() -> None:
    async with ScriptedDoor(KEY, PLAYS, speaks=("chat",)) as door:
        headers = {"Authorization": f"Bearer {KEY}"}
        status, _ = await post(door, "/v1/responses", responses_body(listed=False, results=0, tool="shell"), headers)
        assert status == 404
        status, _ = await post(door, "/v1/messages", messages_body(listed=True, results=0), {"x-api-key": KEY})
        assert status == 404
        status, _ = await post(door, "/v1/chat/completions", chat_body(listed=True, results=0, stream=False), headers)
        assert status == 200
    assert [call.api for call in door.calls] == ["other", "other", "chat"]
