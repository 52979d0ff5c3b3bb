"""STAND-IN model doors that script tool calls, so tests drive the real agents (Claude Code, Codex). No model.

A real agent talks to its model through the runner's door proxy; in tests this door answers instead,
speaking exactly the API each agent uses:

* Anthropic Messages (Claude Code): `HEAD /` (Claude Code's first request), `POST /v1/messages` (also
  `?beta=true`; a `role: "system"` entry inside `messages` is accepted), streamed as server-sent events
  (`message_start`, `content_block_start`/`delta`/`stop` for text and `tool_use` blocks, `message_delta`,
  `message_stop`, then the answer ends) or as one JSON message, and `POST /v1/messages/count_tokens`.
  The key may come as `x-api-key` or a bearer token.
* OpenAI Responses (Codex): `POST /v1/responses`, streamed (`response.created`, `response.in_progress`,
  `response.output_item.added`/`done` with `message` and `function_call` items, text deltas,
  `response.completed` with usage) or as one response. A bearer token.
* Chat Completions (the built-in agent on a door that has only that): `POST /v1/chat/completions`,
  `tool_calls` on the assistant message, streamed as `chat.completion.chunk` deltas (the call's name and
  arguments, then `finish_reason`, then a last chunk with `usage` and no choices, then `data: [DONE]`) or
  as one `chat.completion`. A bearer token. `speaks` leaves APIs out: a door without `responses` answers
  404 there, as a Chat-Completions-only door does.

What it answers is a `Play` per case and arm, deterministic and stateless: the first play whose
`prompt_contains` is in the conversation's user text and whose `when_listed` (say, a skill's description)
is in the request — or, with `unless_listed`, is not — answers; the step is the number of tool results
already in the conversation, so the n-th answer is the n-th move whatever else the agent asked between.
A move is a tool call (`Tool`; `Shell` is a command for whichever shell tool the agent offers) or the
final text (`Say`). Anything unmatched gets `fallback` text. Every request is recorded (`calls`), never
its headers, so a test can assert the door saw every call.

Say STAND-IN wherever a person reads what it produced: its replies are scripted, not a model's.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from aiohttp import web

from eval_runner.stand_ins.loopback import LoopbackDoor, LoopbackServer

FALLBACK = "STAND-IN door: nothing scripted for this request."
_SHELL_TOOLS = ("exec_command", "shell_command", "shell", "local_shell")
#: The APIs a scripted door can speak (`ScriptedDoor.speaks`).
APIS = ("anthropic", "responses", "chat")


@dataclass(frozen=True, slots=True)
class Tool:
    """Call the tool `name` with `arguments`."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Shell:
    """Run `command` through whichever shell tool the request offers (Codex names it by model family)."""

    command: str


@dataclass(frozen=True, slots=True)
class Say:
    """Answer `text` and end the turn."""

    text: str


Move = Tool | Shell | Say


@dataclass(frozen=True, slots=True)
class Play:
    """The moves for one case and arm (module docstring)."""

    prompt_contains: str
    moves: tuple[Move, ...]
    when_listed: str | None = None
    unless_listed: str | None = None

    def matches(self, user_text: str, request_text: str) -> bool:
        if self.prompt_contains.lower() not in user_text.lower():
            return False
        if self.when_listed is not None and self.when_listed not in request_text:
            return False
        return self.unless_listed is None or self.unless_listed not in request_text


@dataclass(frozen=True, slots=True)
class DoorCall:
    """One request the door saw (no headers, so never a key)."""

    api: str  # "anthropic", "anthropic-count", "responses", "chat", "probe", "other"
    method: str
    path: str
    model: str
    stream: bool
    step: int
    answer: str  # the move's kind and name: "say", "tool:Skill", "shell", "none"


@dataclass
class ScriptedDoor(LoopbackDoor):
    """The scripted stand-in door on loopback. `async with ScriptedDoor(key, plays) as door: door.url`."""

    key: str = field(repr=False)
    plays: Sequence[Play] = ()
    fallback: str = FALLBACK
    host: str = "127.0.0.1"
    port: int = 0
    calls: list[DoorCall] = field(default_factory=list)
    refused: int = 0
    speaks: tuple[str, ...] = APIS
    _server: LoopbackServer = field(default_factory=LoopbackServer, repr=False)
    _serial: int = 0
    _runner_options: ClassVar[dict[str, Any]] = {"shutdown_timeout": 1.0}

    def _application(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._route)
        return app

    def _authorized(self, request: web.Request) -> bool:
        expected = self.key.encode()
        presented = [value.strip() for value in request.headers.getall("x-api-key", ())]
        for value in request.headers.getall("Authorization", ()):
            scheme, _, credential = value.strip().partition(" ")
            if scheme.lower() == "bearer":
                presented.append(credential.strip())
        return any(hmac.compare_digest(value.encode("utf-8", "surrogateescape"), expected) for value in presented)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if request.method == "HEAD" or (request.method == "GET" and path == "/"):
            self.calls.append(DoorCall("probe", request.method, path, "", False, 0, "none"))
            return web.Response(status=200)
        if not self._authorized(request):
            self.refused += 1
            return _error(401, "authentication_error", "a valid door key is required")
        if request.method != "POST":
            self.calls.append(DoorCall("other", request.method, path, "", False, 0, "none"))
            return _error(404, "not_found_error", f"the stand-in door has no {request.method} {path}")
        try:
            body = json.loads(await request.read())
        except (ValueError, UnicodeDecodeError):
            return _error(400, "invalid_request_error", "the body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "invalid_request_error", "the body is not a JSON object")
        model: str = body["model"] if isinstance(body.get("model"), str) else ""
        api = _API_OF.get(path)
        if api is not None and api.removesuffix("-count") not in self.speaks:
            self.calls.append(DoorCall("other", "POST", path, model, False, 0, "none"))
            return _error(404, "not_found_error", f"the stand-in door has no POST {path}")
        if path == "/v1/messages/count_tokens":
            self.calls.append(DoorCall("anthropic-count", "POST", path, model, False, 0, "none"))
            return web.json_response({"input_tokens": _tokens(json.dumps(body))})
        if path == "/v1/messages":
            return await self._messages(request, body, model)
        if path in ("/v1/responses", "/responses"):
            return await self._responses(request, body, model)
        if path in ("/v1/chat/completions", "/chat/completions"):
            return await self._chat(request, body, model)
        self.calls.append(DoorCall("other", "POST", path, model, False, 0, "none"))
        return _error(404, "not_found_error", f"the stand-in door has no POST {path}")

    def _move(self, user_text: str, request_text: str, step: int) -> Move:
        for play in self.plays:
            if play.matches(user_text, request_text):
                return play.moves[step] if step < len(play.moves) else play.moves[-1]
        return Say(self.fallback)

    def _next_id(self, prefix: str) -> str:
        self._serial += 1
        return f"{prefix}_stand_in_{self._serial:06d}"

    # ------------------------------------------------------------------------------ Anthropic Messages

    async def _messages(self, request: web.Request, body: dict[str, Any], model: str) -> web.StreamResponse:
        messages: list[Any] = body["messages"] if isinstance(body.get("messages"), list) else []
        step = sum(1 for block in _blocks(messages, "user") if block.get("type") == "tool_result")
        user_text = "\n".join(_texts(_blocks(messages, "user")))
        move = self._move(user_text, json.dumps(body, ensure_ascii=False), step)
        if isinstance(move, Shell):
            move = Tool("Bash", {"command": move.command})
        stream = body.get("stream") is True
        self.calls.append(DoorCall("anthropic", "POST", request.path, model, stream, step, _word(move)))
        message_id = self._next_id("msg")
        usage = {"input_tokens": _tokens(json.dumps(messages)), "output_tokens": 0}
        if isinstance(move, Tool):
            block: dict[str, Any] = {"type": "tool_use", "id": self._next_id("toolu"), "name": move.name}
            block["input"] = move.arguments
            stop = "tool_use"
            usage["output_tokens"] = _tokens(json.dumps(move.arguments))
        else:
            block = {"type": "text", "text": move.text}
            stop = "end_turn"
            usage["output_tokens"] = _tokens(move.text)
        message = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [block],
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        if not stream:
            return web.json_response(message)
        start_block = {**block, "input": {}} if block["type"] == "tool_use" else {"type": "text", "text": ""}
        if block["type"] == "tool_use":
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            delta = {"type": "text_delta", "text": block["text"]}
        events: list[dict[str, Any]] = [
            {
                "type": "message_start",
                "message": {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}},
            },
            {"type": "content_block_start", "index": 0, "content_block": start_block},
            {"type": "content_block_delta", "index": 0, "delta": delta},
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
            {"type": "message_stop"},
        ]
        return await _sse(request, [(event["type"], event) for event in events])

    # --------------------------------------------------------------------------------- OpenAI Responses

    async def _responses(self, request: web.Request, body: dict[str, Any], model: str) -> web.StreamResponse:
        items: list[Any] = body["input"] if isinstance(body.get("input"), list) else []
        step = sum(1 for item in items if isinstance(item, dict) and item.get("type") == "function_call_output")
        user_text = body["input"] if isinstance(body.get("input"), str) else "\n".join(_texts(_user_items(items)))
        move = self._move(user_text, json.dumps(body, ensure_ascii=False), step)
        stream = body.get("stream") is True
        self.calls.append(DoorCall("responses", "POST", request.path, model, stream, step, _word(move)))
        response_id = self._next_id("resp")
        if isinstance(move, Say):
            item: dict[str, Any] = {
                "type": "message",
                "id": self._next_id("msg"),
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": move.text, "annotations": []}],
            }
            out_tokens = _tokens(move.text)
        else:
            name, arguments = _function(move, body.get("tools"))
            item = {
                "type": "function_call",
                "id": self._next_id("fc"),
                "call_id": self._next_id("call"),
                "name": name,
                "arguments": json.dumps(arguments),
                "status": "completed",
            }
            out_tokens = _tokens(item["arguments"])
        in_tokens = _tokens(json.dumps(items))
        response = {
            "id": response_id,
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": model,
            "output": [item],
            "usage": {
                "input_tokens": in_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": out_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": in_tokens + out_tokens,
            },
        }
        if not stream:
            return web.json_response(response)
        pending = {**response, "status": "in_progress", "output": [], "usage": None}
        events: list[tuple[str, dict[str, Any]]] = [
            ("response.created", {"response": pending}),
            ("response.in_progress", {"response": pending}),
        ]
        if item["type"] == "message":
            text = item["content"][0]["text"]
            events += [
                (
                    "response.output_item.added",
                    {"output_index": 0, "item": {**item, "status": "in_progress", "content": []}},
                ),
                (
                    "response.content_part.added",
                    {
                        "output_index": 0,
                        "item_id": item["id"],
                        "content_index": 0,
                        "part": {"type": "output_text", "text": "", "annotations": []},
                    },
                ),
                (
                    "response.output_text.delta",
                    {"output_index": 0, "item_id": item["id"], "content_index": 0, "delta": text},
                ),
                (
                    "response.output_text.done",
                    {"output_index": 0, "item_id": item["id"], "content_index": 0, "text": text},
                ),
                (
                    "response.content_part.done",
                    {"output_index": 0, "item_id": item["id"], "content_index": 0, "part": item["content"][0]},
                ),
            ]
        else:
            events += [
                (
                    "response.output_item.added",
                    {"output_index": 0, "item": {**item, "status": "in_progress", "arguments": ""}},
                ),
                (
                    "response.function_call_arguments.delta",
                    {"output_index": 0, "item_id": item["id"], "delta": item["arguments"]},
                ),
                (
                    "response.function_call_arguments.done",
                    {"output_index": 0, "item_id": item["id"], "arguments": item["arguments"]},
                ),
            ]
        events += [
            ("response.output_item.done", {"output_index": 0, "item": item}),
            ("response.completed", {"response": response}),
        ]
        numbered = [(kind, {"type": kind, "sequence_number": n, **data}) for n, (kind, data) in enumerate(events)]
        return await _sse(request, numbered)

    # --------------------------------------------------------------------------------- Chat Completions

    async def _chat(self, request: web.Request, body: dict[str, Any], model: str) -> web.StreamResponse:
        messages: list[Any] = body["messages"] if isinstance(body.get("messages"), list) else []
        step = sum(1 for message in messages if isinstance(message, dict) and message.get("role") == "tool")
        user_text = "\n".join(_texts(_blocks(messages, "user")))
        move = self._move(user_text, json.dumps(body, ensure_ascii=False), step)
        stream = body.get("stream") is True
        self.calls.append(DoorCall("chat", "POST", request.path, model, stream, step, _word(move)))
        completion_id = self._next_id("chatcmpl")
        created = int(time.time())
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if isinstance(move, Say):
            message["content"] = move.text
            finish, out_tokens = "stop", _tokens(move.text)
        else:
            offered = [tool.get("function") for tool in body.get("tools") or () if isinstance(tool, dict)]
            name, arguments = _function(move, offered)
            call: dict[str, Any] = {"id": self._next_id("call"), "type": "function"}
            call["function"] = {"name": name, "arguments": json.dumps(arguments)}
            message["tool_calls"] = [call]
            finish, out_tokens = "tool_calls", _tokens(call["function"]["arguments"])
        in_tokens = _tokens(json.dumps(messages))
        usage = {"prompt_tokens": in_tokens, "completion_tokens": out_tokens, "total_tokens": in_tokens + out_tokens}
        head = {"id": completion_id, "created": created, "model": model}
        if not stream:
            choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            return web.json_response({**head, "object": "chat.completion", "choices": [choice], "usage": usage})
        chunk = {**head, "object": "chat.completion.chunk"}
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": "" if message["content"] else None}]
        if message["content"]:
            text = message["content"]
            deltas += [{"content": text[: len(text) // 2]}, {"content": text[len(text) // 2 :]}]
        for index, call in enumerate(message.get("tool_calls", ())):
            function = call["function"]
            start = {"index": index, "id": call["id"], "type": "function"}
            deltas.append({"tool_calls": [{**start, "function": {"name": function["name"], "arguments": ""}}]})
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": function["arguments"]}}]})
        chunks = [{**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in deltas]
        chunks.append({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        chunks.append({**chunk, "choices": [], "usage": usage})
        return await _sse(request, [("", item) for item in chunks], done=True)


def _function(move: Tool | Shell, tools: Any) -> tuple[str, dict[str, Any]]:
    """A move as the function call the request's tools allow: a `Shell` goes to the shell tool offered."""
    if isinstance(move, Tool):
        return move.name, move.arguments
    offered = {tool.get("name") for tool in tools if isinstance(tool, dict)} if isinstance(tools, list) else set()
    offered |= {tool.get("type") for tool in tools if isinstance(tool, dict)} if isinstance(tools, list) else set()
    name = next((name for name in _SHELL_TOOLS if name in offered), "shell")
    if name == "exec_command":
        return name, {"cmd": move.command}
    if name == "shell_command":
        return name, {"command": move.command}
    return name, {"command": ["bash", "-lc", move.command]}


async def _sse(
    request: web.Request, events: Sequence[tuple[str, dict[str, Any]]], *, done: bool = False
) -> web.StreamResponse:
    """Server-sent events (an empty kind is a `data:` line alone, as Chat Completions streams), then
    `data: [DONE]` when `done`, then the end of the answer (an agent waits for it)."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    for kind, data in events:
        named = f"event: {kind}\n" if kind else ""
        await response.write(f"{named}data: {json.dumps(data)}\n\n".encode())
        await asyncio.sleep(0)
    if done:
        await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


#: Which API a POST path belongs to, for `speaks`.
_API_OF = {
    "/v1/messages": "anthropic",
    "/v1/messages/count_tokens": "anthropic-count",
    "/v1/responses": "responses",
    "/responses": "responses",
    "/v1/chat/completions": "chat",
    "/chat/completions": "chat",
}


def _error(status: int, kind: str, message: str) -> web.Response:
    return web.json_response({"type": "error", "error": {"type": kind, "message": message}}, status=status)


def _word(move: Move) -> str:
    if isinstance(move, Tool):
        return f"tool:{move.name}"
    return "shell" if isinstance(move, Shell) else "say"


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _blocks(messages: list[Any], role: str) -> list[dict[str, Any]]:
    """The content blocks of every message of `role` (a string content is one text block)."""
    found: list[dict[str, Any]] = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role") != role:
            continue
        content = message.get("content")
        if isinstance(content, str):
            found.append({"type": "text", "text": content})
        elif isinstance(content, list):
            found.extend(block for block in content if isinstance(block, dict))
    return found


def _user_items(items: list[Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                found.append({"type": "input_text", "text": content})
            elif isinstance(content, list):
                found.extend(part for part in content if isinstance(part, dict))
    return found


def _texts(blocks: list[dict[str, Any]]) -> list[str]:
    return [block["text"] for block in blocks if isinstance(block.get("text"), str)]
