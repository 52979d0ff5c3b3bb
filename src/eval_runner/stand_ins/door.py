"""A STAND-IN model door for tests and demos: deterministic canned answers, no model behind it.

The runner's real door is a hosted LLM endpoint we do not control, so tests talk to this instead. It
follows the reference's fake door (runner.md §21): it requires `Authorization: Bearer <key>` (401
otherwise) and answers `POST /v1/responses` (Open Responses: `input` text plus `instructions`; one
assistant message back, or server-sent events when `stream` is true) from an answer table whose default
is the reference's:

* the prompt mentions "repository" and the instructions contain "name its main language" →
  "It is a Rust crate of six files; the largest is src/tables.rs.";
* the prompt mentions "repository" → "I would have to look at the files.";
* anything else → "Welcome aboard, glad you are here!".

The table is configurable (`AnswerTable`, or `--answers FILE` as JSON) so an example extension's own
cases can be matched. A `judge` grader's call (instructions or a system message holding
`JUDGE_SYSTEM`) is answered `PASS` when the run record in its prompt contains one of the table's judge
phrases, else `FAIL`.

    python -m eval_runner.stand_ins.door --port 0 --key-env NAME [--answers FILE]

prints `READY http://127.0.0.1:<port>` and serves until SIGTERM or SIGINT; in tests use it as an async
context manager. It binds loopback only, never prints its key, and keeps no request headers.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import os
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from eval_runner.stand_ins.loopback import LOOPBACK, LoopbackDoor, LoopbackServer

JUDGE_SYSTEM = "You are a strict, terse evaluation judge for agent runs."
SKILLED_REPLY = "It is a Rust crate of six files; the largest is src/tables.rs."
UNSKILLED_REPLY = "I would have to look at the files."
GREETING_REPLY = "Welcome aboard, glad you are here!"


@dataclass(frozen=True, slots=True)
class AnswerRule:
    """Answer `reply` when the prompt mentions `prompt_contains` (any case) and, if set, the instructions
    contain `instructions_contain` (exactly, as the reference matches its skill sentence)."""

    prompt_contains: str
    reply: str
    instructions_contain: str | None = None

    def matches(self, prompt: str, instructions: str) -> bool:
        if self.prompt_contains.lower() not in prompt.lower():
            return False
        return self.instructions_contain is None or self.instructions_contain in instructions


REFERENCE_RULES = (
    AnswerRule("repository", SKILLED_REPLY, "name its main language"),
    AnswerRule("repository", UNSKILLED_REPLY),
)


@dataclass(frozen=True, slots=True)
class AnswerTable:
    """First matching rule wins; `fallback` otherwise. A judge passes when the run record holds a phrase."""

    rules: tuple[AnswerRule, ...] = REFERENCE_RULES
    fallback: str = GREETING_REPLY
    judge_passes_on: tuple[str, ...] = ("src/tables.rs",)

    def answer(self, prompt: str, instructions: str) -> str:
        return next((rule.reply for rule in self.rules if rule.matches(prompt, instructions)), self.fallback)

    def judge(self, record: str) -> str:
        return "PASS" if any(phrase in record for phrase in self.judge_passes_on) else "FAIL"

    @classmethod
    def from_json(cls, value: Any) -> AnswerTable:
        """`{"rules": [{"prompt_contains", "reply", "instructions_contain"?}], "fallback"?, "judge_passes_on"?}`;
        keys left out keep the reference's defaults. Raises ValueError naming what is wrong."""
        if not isinstance(value, dict) or set(value) - {"rules", "fallback", "judge_passes_on"}:
            raise ValueError("an answer table is an object with rules, fallback and judge_passes_on")
        default = cls()
        rules = value.get("rules")
        if rules is not None and not isinstance(rules, list):
            raise ValueError("rules must be an array")
        fallback = value.get("fallback", default.fallback)
        phrases = value.get("judge_passes_on", list(default.judge_passes_on))
        if not isinstance(fallback, str):
            raise ValueError("fallback must be a string")
        if not isinstance(phrases, list) or not all(isinstance(phrase, str) and phrase for phrase in phrases):
            raise ValueError("judge_passes_on must be an array of non-empty strings")
        parsed = default.rules if rules is None else tuple(_rule(rule, index) for index, rule in enumerate(rules))
        return cls(parsed, fallback, tuple(phrases))


class Answers(Protocol):
    """What a stand-in door answers: a table of fixed replies, or a script."""

    def answer(self, prompt: str, instructions: str) -> str: ...

    def judge(self, record: str) -> str: ...


@dataclass
class Script:
    """Replies handed out one per call, in order, to calls matching `prompt_contains` (any case) and, if set,
    whose instructions contain `instructions_contain` — or lack it, with `instructions_lack`."""

    prompt_contains: str
    replies: deque[str]
    instructions_contain: str | None = None
    instructions_lack: str | None = None

    def matches(self, prompt: str, instructions: str) -> bool:
        if self.prompt_contains.lower() not in prompt.lower():
            return False
        if self.instructions_contain is not None and self.instructions_contain not in instructions:
            return False
        return self.instructions_lack is None or self.instructions_lack not in instructions


@dataclass
class ScriptedAnswers:
    """A stand-in model scripted turn by turn: the first script that matches and has a reply left gives its
    next one; `fallback` when none has. The judge always says FAIL (a scripted run has no judge)."""

    scripts: list[Script]
    fallback: str = GREETING_REPLY

    def answer(self, prompt: str, instructions: str) -> str:
        for script in self.scripts:
            if script.replies and script.matches(prompt, instructions):
                return script.replies.popleft()
        return self.fallback

    def judge(self, record: str) -> str:
        return "FAIL"

    @property
    def left(self) -> int:
        """Replies not handed out yet."""
        return sum(len(script.replies) for script in self.scripts)


def _rule(value: Any, index: int) -> AnswerRule:
    keys = {"prompt_contains", "reply", "instructions_contain"}
    if not isinstance(value, dict) or set(value) - keys or not {"prompt_contains", "reply"} <= set(value):
        raise ValueError(f"rules[{index}] must hold prompt_contains, reply and optionally instructions_contain")
    if not all(isinstance(item, str) for item in value.values()):
        raise ValueError(f"rules[{index}] values must be strings")
    return AnswerRule(value["prompt_contains"], value["reply"], value.get("instructions_contain"))


@dataclass(frozen=True, slots=True)
class DoorCall:
    """One answered call, for a test to inspect (no headers, so never a key)."""

    kind: str  # "answer" or "judge"
    model: str
    prompt: str
    instructions: str
    reply: str
    stream: bool


@dataclass
class StandInDoor(LoopbackDoor):
    """The stand-in door on loopback. `async with StandInDoor(key) as door: door.url`."""

    key: str = field(repr=False)
    table: Answers = field(default_factory=AnswerTable)
    host: str = "127.0.0.1"
    port: int = 0
    calls: list[DoorCall] = field(default_factory=list)
    refused: int = 0
    _server: LoopbackServer = field(default_factory=LoopbackServer, repr=False)
    _called: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    async def answered(self, count: int) -> None:
        """Wait until the door has answered `count` calls (an event, never a poll)."""
        while len(self.calls) < count:
            self._called.clear()
            await self._called.wait()

    def _application(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/responses", self._responses)
        return app

    def _authorized(self, request: web.Request) -> bool:
        scheme, _, credential = request.headers.get("Authorization", "").strip().partition(" ")
        presented = credential.strip().encode("utf-8", "surrogateescape")
        return scheme.lower() == "bearer" and hmac.compare_digest(presented, self.key.encode("utf-8"))

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request):
            self.refused += 1
            return _error(401, "a valid door key is required", "invalid_api_key")
        try:
            body = json.loads(await request.read())
        except (ValueError, UnicodeDecodeError):
            return _error(400, "the body is not JSON", "invalid_request_error")
        if not isinstance(body, dict):
            return _error(400, "the body is not a JSON object", "invalid_request_error")
        model = _string(body.get("model"), "stand-in")
        prompt, system = _input_texts(body.get("input"))
        instructions = _string(body.get("instructions"), "")
        stream = body.get("stream") is True
        if JUDGE_SYSTEM in instructions or JUDGE_SYSTEM in system:
            kind, reply = "judge", self.table.judge(_run_record(prompt))
        else:
            kind, reply = "answer", self.table.answer(prompt, instructions)
        self.calls.append(DoorCall(kind, model, prompt, instructions, reply, stream))
        self._called.set()
        answer = _response(len(self.calls), model, prompt, reply)
        if not stream:
            return web.json_response(answer)
        return await _stream(request, answer, reply)


def _string(value: Any, default: str) -> str:
    return value if isinstance(value, str) else default


def _error(status: int, message: str, kind: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind}}, status=status)


def _input_texts(value: Any) -> tuple[str, str]:
    """The user-side text and any system/developer text of an Open Responses `input`."""
    if isinstance(value, str):
        return value, ""
    user: list[str] = []
    system: list[str] = []
    for item in value if isinstance(value, list) else []:
        if not isinstance(item, dict):
            continue
        content = item.get("content")
        parts = [content] if isinstance(content, str) else content if isinstance(content, list) else []
        texts = [part if isinstance(part, str) else part.get("text") for part in parts if isinstance(part, str | dict)]
        target = system if item.get("role") in ("system", "developer") else user
        target.extend(text for text in texts if isinstance(text, str))
    return "\n".join(user), "\n".join(system)


def _run_record(prompt: str) -> str:
    """The `## Run record` section of a judge prompt (runner.md §13.6), so the criterion itself never
    counts as evidence; the whole prompt when the section is absent."""
    start = prompt.find("## Run record\n")
    if start < 0:
        return prompt
    start += len("## Run record\n")
    end = prompt.find("\n\n## Criterion", start)
    return prompt[start:] if end < 0 else prompt[start:end]


def _response(number: int, model: str, prompt: str, reply: str) -> dict[str, Any]:
    return {
        "id": f"resp_stand_in_{number:06d}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": model,
        "output": [
            {
                "type": "message",
                "id": f"msg_stand_in_{number:06d}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": reply, "annotations": []}],
            }
        ],
        "usage": {
            "input_tokens": len(prompt.split()),
            "output_tokens": len(reply.split()),
            "total_tokens": len(prompt.split()) + len(reply.split()),
        },
    }


async def _stream(request: web.Request, answer: dict[str, Any], reply: str) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    item = answer["output"][0]["id"]
    half = len(reply) // 2
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {**answer, "status": "in_progress", "output": []}},
        *(
            {"type": "response.output_text.delta", "item_id": item, "output_index": 0, "content_index": 0, "delta": d}
            for d in (reply[:half], reply[half:])
            if d
        ),
        {"type": "response.output_text.done", "item_id": item, "output_index": 0, "content_index": 0, "text": reply},
        {"type": "response.completed", "response": answer},
    ]
    for number, event in enumerate(events):
        data = json.dumps({**event, "sequence_number": number})
        await response.write(f"event: {event['type']}\ndata: {data}\n\n".encode())
    await response.write_eof()
    return response


# ----------------------------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stand_in_door", description="A stand-in model door for tests.")
    parser.add_argument("--host", default="127.0.0.1", choices=LOOPBACK)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--key-env", required=True, help="name of the environment variable holding the key")
    parser.add_argument("--answers", type=Path, help="a JSON answer table (see AnswerTable.from_json)")
    args = parser.parse_args(argv)
    key = os.environ.get(args.key_env, "")
    if not key:
        print(f"stand-in door: ${args.key_env} is not set", file=sys.stderr)
        return 2
    table = AnswerTable()
    if args.answers is not None:
        try:
            table = AnswerTable.from_json(json.loads(args.answers.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            print(f"stand-in door: {args.answers}: {exc}", file=sys.stderr)
            return 2
    asyncio.run(_serve(StandInDoor(key, table, args.host, args.port)))
    return 0


async def _serve(door: StandInDoor) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with door:
        print(f"READY {door.url}", flush=True)
        await stop.wait()


if __name__ == "__main__":
    sys.exit(main())
