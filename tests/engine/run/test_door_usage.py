"""Usage read from the door's answers: Anthropic Messages, OpenAI Responses and Chat Completions, streamed
however the bytes are cut, and through the real door proxy in front of the scripted stand-in door."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from eval_runner.engine.run.collect import remove_tree
from eval_runner.engine.run.door_proxy import DoorProxy
from eval_runner.engine.run.door_usage import MAX_JSON_BYTES, AnswerReader, AnswerUsage
from eval_runner.stand_ins.scripted_doors import Play, Say, ScriptedDoor, Tool

KEY = "sk-usage-door-key-9"


def sse(events: list[dict[str, Any]], crlf: bool = False) -> bytes:
    end = b"\r\n" if crlf else b"\n"
    return b"".join(
        b"event: " + event["type"].encode() + end + b"data: " + json.dumps(event).encode() + end + end
        for event in events
    )


ANTHROPIC = sse(
    [
        {
            "type": "message_start",
            "message": {"usage": {"input_tokens": 100, "cache_read_input_tokens": 20, "output_tokens": 1}},
        },
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 7}},
        {"type": "message_stop"},
    ]
)
RESPONSES = sse(
    [
        {"type": "response.created", "response": {"usage": None}},
        {"type": "response.completed", "response": {"usage": {"input_tokens": 50, "output_tokens": 5, "cost": 0.25}}},
    ],
    crlf=True,
)
CHAT = (
    b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3}}\n\n'
    b"data: [DONE]\n\n"
)


def read(content_type: str, chunks: list[bytes]) -> AnswerUsage:
    reader = AnswerReader(content_type)
    for chunk in chunks:
        reader.feed(chunk)
    return reader.finish()


def cuts(data: bytes, at: list[int]) -> list[bytes]:
    points = sorted({min(point, len(data)) for point in at})
    return [data[start:end] for start, end in zip([0, *points], [*points, len(data)], strict=True)]


@pytest.mark.parametrize(
    ("data", "found"),
    [(ANTHROPIC, (120, 7, None)), (RESPONSES, (50, 5, 0.25)), (CHAT, (9, 3, None))],
)
@given(at=st.lists(st.integers(min_value=0, max_value=600), max_size=8))
def test_a_stream_reads_the_same_however_it_is_cut(
    data: bytes, found: tuple[int, int, float | None], at: list[int]
) -> None:
    usage = read("text/event-stream; charset=utf-8", cuts(data, at))
    assert (usage.input_tokens, usage.output_tokens, usage.cost_usd) == found


def test_a_whole_answer_of_each_api() -> None:
    assert read(
        "application/json", [b'{"type":"message","usage":{"input_tokens":3,"output_tokens":4}}']
    ) == AnswerUsage(3, 4, reported=True)
    assert read(
        "application/json", [b'{"object":"response","usage":{"input_tokens":1,"output_tokens":2}}']
    ) == AnswerUsage(1, 2, reported=True)
    assert read("application/json", [b'{"usage":{"prompt_tokens":5,"completion_tokens":6,"cost":1}}']) == AnswerUsage(
        5, 6, 1.0, reported=True
    )
    assert read("application/json", [b'{"input_tokens":12}']) == AnswerUsage()  # count_tokens: not a model call


@pytest.mark.parametrize(("data", "found"), [(ANTHROPIC, (120, 7, None)), (RESPONSES, (50, 5, 0.25))])
def test_a_stream_fed_a_byte_at_a_time_finds_every_event_end(data: bytes, found: tuple[int, int, float | None]) -> None:
    """Each search resumes where the last stopped: an end mark split over chunks (`\r\n` | `\r\n`) is found."""
    usage = read("text/event-stream", [data[at : at + 1] for at in range(len(data))])
    assert (usage.input_tokens, usage.output_tokens, usage.cost_usd) == found


def test_four_mib_of_small_chunks_are_read_whole() -> None:
    """An event just under the bound, then the usage, in 256-byte chunks (the bench times it: bench/door_usage)."""
    filler = {"type": "content_block_delta", "delta": {"text": "x" * (MAX_JSON_BYTES - 1024)}}
    data = sse([filler]) + ANTHROPIC
    usage = read("text/event-stream", [data[at : at + 256] for at in range(0, len(data), 256)])
    assert (usage.input_tokens, usage.output_tokens) == (120, 7)
    whole = json.dumps({"usage": {"prompt_tokens": 9, "completion_tokens": 3}, "pad": "y" * (MAX_JSON_BYTES - 100)})
    body = whole.encode()
    assert read("application/json", [body[at : at + 256] for at in range(0, len(body), 256)]) == AnswerUsage(
        9, 3, reported=True
    )
    over = body + b" " * 100
    assert read("application/json", [over[at : at + 256] for at in range(0, len(over), 256)]) == AnswerUsage()


@given(st.binary(max_size=300), st.sampled_from(["text/event-stream", "application/json", ""]))
def test_anything_a_door_sends_reads_without_raising(data: bytes, content_type: str) -> None:
    usage = read(content_type, [data])
    assert usage.input_tokens >= 0
    assert usage.output_tokens >= 0


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="du-", dir="/tmp"))
    yield path
    remove_tree(path)


async def test_the_proxy_sums_what_the_door_reported_for_the_run(short_dir: Path) -> None:
    plays = [Play("hello", (Tool("Read", {"file_path": "a"}), Say("Hi.")))]
    body: dict[str, Any] = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hello"}]}
    async with ScriptedDoor(KEY, plays) as door, DoorProxy(door.url, KEY, short_dir / "d.sock") as proxy:
        connector = aiohttp.UnixConnector(path=str(short_dir / "d.sock"))
        async with aiohttp.ClientSession(connector=connector) as session:
            for _ in range(2):
                async with session.post(
                    "http://door/v1/messages", json=body, headers={"x-api-key": proxy.token}
                ) as answer:
                    assert answer.status == 200
                    text = await answer.text()
    assert "message_stop" in text
    assert door.refused == 0
    assert proxy.usage.answers == 2
    assert proxy.usage.reported == 2
    assert proxy.usage.input_tokens > 0
    assert proxy.usage.output_tokens > 0
    assert proxy.usage.cost_usd is None


async def test_the_proxy_reads_chat_completions_usage_streamed_and_whole(short_dir: Path) -> None:
    plays = [Play("hello", (Tool("read_file", {"path": "a"}), Say("Hi.")))]
    async with (
        ScriptedDoor(KEY, plays, speaks=("chat",)) as door,
        DoorProxy(door.url, KEY, short_dir / "c.sock") as proxy,
    ):
        connector = aiohttp.UnixConnector(path=str(short_dir / "c.sock"))
        async with aiohttp.ClientSession(connector=connector) as session:
            for stream in (True, False):
                body = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hello"}]}
                headers = {"Authorization": f"Bearer {proxy.token}"}
                async with session.post("http://door/v1/chat/completions", json=body, headers=headers) as answer:
                    assert answer.status == 200
                    await answer.read()
            async with session.post("http://door/v1/responses", json=body, headers=headers) as answer:
                assert answer.status == 404  # not a successful answer: not read
    assert [call.api for call in door.calls] == ["chat", "chat", "other"]
    assert (proxy.usage.answers, proxy.usage.reported) == (2, 2)
    # The scripted door counts a quarter of the characters: both answers' prompt and completion summed.
    assert proxy.usage.input_tokens == 2 * (len(json.dumps(body["messages"])) // 4)
    assert proxy.usage.output_tokens == 2 * (len(json.dumps({"path": "a"})) // 4 or 1)
