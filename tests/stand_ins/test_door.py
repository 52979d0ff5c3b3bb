"""The stand-in door's rules, its key check, its judge answers, its stream and its command line."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from eval_runner.stand_ins.door import (
    GREETING_REPLY,
    JUDGE_SYSTEM,
    SKILLED_REPLY,
    UNSKILLED_REPLY,
    AnswerRule,
    AnswerTable,
    StandInDoor,
)

KEY = "stand-in-key-1"
SKILL = "When asked about a repository, name its main language and its largest file."


@pytest.fixture
async def door() -> AsyncIterator[StandInDoor]:
    async with StandInDoor(KEY) as running:
        yield running


def user_input(text: str) -> list[dict[str, Any]]:
    return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}]


async def ask(door: StandInDoor, body: dict[str, Any], auth: str | None = f"Bearer {KEY}") -> tuple[int, Any]:
    headers = {"Authorization": auth} if auth is not None else {}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{door.url}/v1/responses", json=body, headers=headers) as answer,
    ):
        return answer.status, await answer.json()


def text_of(answer: Any) -> str:
    return str(answer["output"][0]["content"][0]["text"])


@pytest.mark.parametrize(
    ("prompt", "instructions", "reply"),
    [
        ("Give me an overview of the repository in this directory.", SKILL, SKILLED_REPLY),
        ("Give me an overview of the REPOSITORY in this directory.", SKILL, SKILLED_REPLY),
        ("Give me an overview of the repository in this directory.", "", UNSKILLED_REPLY),
        ("Give me an overview of the repository.", "Name its main language.", UNSKILLED_REPLY),
        ("Say hello to a new contributor in one line.", SKILL, GREETING_REPLY),
    ],
)
async def test_the_reference_rules(door: StandInDoor, prompt: str, instructions: str, reply: str) -> None:
    status, answer = await ask(door, {"model": "m", "instructions": instructions, "input": user_input(prompt)})
    assert status == 200
    assert text_of(answer) == reply
    assert answer["output"][0]["role"] == "assistant"
    assert door.calls[-1].kind == "answer"


async def test_a_plain_string_input_is_read_too(door: StandInDoor) -> None:
    _, answer = await ask(door, {"input": "about this repository?", "instructions": SKILL})
    assert text_of(answer) == SKILLED_REPLY


@pytest.mark.parametrize("auth", [None, "Bearer wrong", f"Basic {KEY}", KEY])
async def test_a_missing_or_wrong_key_is_401(door: StandInDoor, auth: str | None) -> None:
    status, answer = await ask(door, {"input": "hi"}, auth=auth)
    assert status == 401
    assert KEY not in json.dumps(answer)
    assert door.calls == []
    assert door.refused == 1


async def test_the_scheme_is_read_in_any_case(door: StandInDoor) -> None:
    status, _ = await ask(door, {"input": "hi"}, auth=f"bearer {KEY}")
    assert status == 200


def judge_prompt(record: str, criterion: str) -> str:
    return f'## Run record\n{record}\n\n## Criterion\n{criterion}\n\nAnswer only with "PASS" or "FAIL".'


async def test_a_judge_call_passes_only_when_the_run_record_holds_the_phrase(door: StandInDoor) -> None:
    passing = judge_prompt(SKILLED_REPLY, "Names the largest file.")
    failing = judge_prompt(UNSKILLED_REPLY, "Names src/tables.rs as the largest file.")
    _, yes = await ask(door, {"instructions": JUDGE_SYSTEM, "input": user_input(passing)})
    _, no = await ask(door, {"instructions": JUDGE_SYSTEM, "input": user_input(failing)})
    system_message = [{"role": "system", "content": JUDGE_SYSTEM}, *user_input(passing)]
    _, also = await ask(door, {"input": system_message})
    assert (text_of(yes), text_of(no), text_of(also)) == ("PASS", "FAIL", "PASS")
    assert [call.kind for call in door.calls] == ["judge"] * 3


async def test_a_configured_table_answers_an_example_extension() -> None:
    table = AnswerTable(
        rules=(AnswerRule("config", "Production settings live in app/settings/production.toml.", "## Case"),),
        fallback="Hello!",
        judge_passes_on=("production.toml",),
    )
    async with StandInDoor(KEY, table) as door:
        _, hit = await ask(door, {"instructions": "## Case instructions", "input": "Where is the config?"})
        _, miss = await ask(door, {"input": "Where is the config?"})
        _, judged = await ask(door, {"instructions": JUDGE_SYSTEM, "input": judge_prompt("production.toml", "x")})
    assert text_of(hit) == "Production settings live in app/settings/production.toml."
    assert text_of(miss) == "Hello!"
    assert text_of(judged) == "PASS"


def test_an_answer_table_from_json_keeps_defaults_for_what_it_leaves_out() -> None:
    assert AnswerTable.from_json({}) == AnswerTable()
    table = AnswerTable.from_json({"rules": [{"prompt_contains": "a", "reply": "b"}], "judge_passes_on": ["z"]})
    assert table == AnswerTable((AnswerRule("a", "b"),), GREETING_REPLY, ("z",))
    bads: list[object] = [
        [],
        {"rules": {}},
        {"rules": [{"reply": "b"}]},
        {"fallback": 1},
        {"judge_passes_on": [""]},
        {"x": 1},
    ]
    for bad in bads:
        with pytest.raises(ValueError, match=r"."):
            AnswerTable.from_json(bad)


async def test_a_streamed_answer_is_server_sent_events_that_add_up_to_the_reply(door: StandInDoor) -> None:
    body = {"stream": True, "instructions": SKILL, "input": user_input("the repository?")}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{door.url}/v1/responses", json=body, headers={"Authorization": f"Bearer {KEY}"}) as answer,
    ):
        assert answer.headers["Content-Type"] == "text/event-stream"
        raw = (await answer.read()).decode()
    events = [json.loads(block.split("data: ", 1)[1]) for block in raw.strip().split("\n\n")]
    deltas = "".join(event["delta"] for event in events if event["type"] == "response.output_text.delta")
    assert deltas == SKILLED_REPLY
    assert events[-1]["type"] == "response.completed"
    assert text_of(events[-1]["response"]) == SKILLED_REPLY
    assert [event["sequence_number"] for event in events] == list(range(len(events)))


async def test_a_body_that_is_not_a_json_object_is_400(door: StandInDoor) -> None:
    async with aiohttp.ClientSession() as session:
        for data in (b"not json", b"[1]"):
            async with session.post(
                f"{door.url}/v1/responses", data=data, headers={"Authorization": f"Bearer {KEY}"}
            ) as answer:
                assert answer.status == 400


async def test_the_command_line_prints_ready_and_serves_until_terminated(tmp_path: Path) -> None:
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps({"fallback": "From the file."}))
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "eval_runner.stand_ins.door",
        "--port",
        "0",
        "--key-env",
        "DOOR_KEY_FOR_TEST",
        "--answers",
        str(answers),
        env={**os.environ, "DOOR_KEY_FOR_TEST": KEY},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        line = (await asyncio.wait_for(child.stdout.readline(), timeout=30)).decode().strip()
        assert line.startswith("READY http://127.0.0.1:")
        url = line.split(" ", 1)[1]
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{url}/v1/responses", json={"input": "hi"}, headers={"Authorization": f"Bearer {KEY}"}) as a,
        ):
            assert text_of(await a.json()) == "From the file."
    finally:
        child.terminate()
        out, err = await child.communicate()
    assert child.returncode == 0
    assert KEY.encode() not in out + err


def test_the_command_line_refuses_a_missing_key() -> None:
    env = {name: value for name, value in os.environ.items() if name != "NO_SUCH_DOOR_KEY"}
    done = subprocess.run(
        [sys.executable, "-m", "eval_runner.stand_ins.door", "--key-env", "NO_SUCH_DOOR_KEY"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "NO_SUCH_DOOR_KEY is not set" in done.stderr
