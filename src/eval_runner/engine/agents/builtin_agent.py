#!/usr/bin/env python3
"""The built-in agent (`EVAL_RUNNER_AGENT=builtin`): a small real agent of our own that speaks the coder child
contract (runner.md §13.4 steps 8–9), so a runner with a real model door but no `coder` can still answer
"does this extension help?".

    builtin_agent.py --prompt-file PATH | -p TEXT  [--trace PATH.atif.jsonl]  [--json]

It asks the door (`$CODER_DOOR_URL`, `$CODER_DOOR_KEY`, `$CODER_MODEL`) in a loop with tools, OpenAI Responses
first (`POST /v1/responses`) and Chat Completions (`POST /v1/chat/completions`) when the door has no Responses
route (404/405 on the first call). Its instructions are the contract's guidance file (`$CODER_GUIDANCE`, its
digest checked): in the subject arm the runner has put the extension's skills there, so the skills reach the
model as instructions in that arm only. Tools are what the grant allows: `list_files`, `read_file`, `search`
in the working directory always; `write_file` only when the working directory is writable (write granted).
Every path is resolved inside the working directory; no shell, ever. Bounds: `MAX_TURNS` model calls and
`MAX_TOKENS` tokens in all; past either the turn ends `failed` with the reason.

Its log is the coder's ATIF log (a `session` record, `step`s with calls and `tokens`, an `end`), one synced
line at a time, and its last stdout line is `{"reply", "outcome", "cost_usd", "error"}`. Cost is null: the
runner's door proxy reads usage and cost from the door's answers, not from the agent.

It runs under the sandbox's bare `/usr/bin/python3` with only the contract's variables, so it imports the
standard library only and never `eval_runner`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

SCHEMA_VERSION = "ATIF-v1.8"
VERSION = "0.1.0"
MAX_TURNS = 24
MAX_TOKENS = 400_000
DOOR_TIMEOUT_SECONDS = 300
#: What one tool answer may put back into the conversation.
MAX_TOOL_OUTPUT = 64 * 1024
MAX_LISTED = 500
MAX_SEARCH_FILE = 1024 * 1024
MAX_WRITE = 1024 * 1024
RESPONSES, CHAT = "/v1/responses", "/v1/chat/completions"

SYSTEM = (
    "You are an agent working in a repository checked out in your working directory. Use the tools to look at "
    "the files before you answer; answer the user's request in plain text when you are done."
)


class DoorError(Exception):
    """The door gave no usable answer (the message never holds the key)."""


class NoRouteError(DoorError):
    """The door has no such API route (404/405): try the other API."""


class TraceLog:
    """An ATIF log, appended and synced a line at a time, so a killed agent loses at most one line."""

    def __init__(self, path: Path | None, session: dict[str, Any]) -> None:
        self._file: Any = None
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError:
            return
        self._file = os.fdopen(descriptor, "wb")
        self._write({"record": "session", "schema_version": SCHEMA_VERSION, "at": now_ms(), "session": session})

    def step(
        self,
        source: str,
        message: str,
        *,
        call: dict[str, Any] | None = None,
        tokens: tuple[int, int] | None = None,
        model: str | None = None,
    ) -> None:
        step: dict[str, Any] = {"at": now_ms(), "source": source, "message": message}
        if call is not None:
            step["call"] = call
        if tokens is not None:
            step["tokens"] = list(tokens)
        if model is not None:
            step["model"] = model
        self._write({"record": "step", "step": step})

    def finish(self, state: str = "ended") -> None:
        self._write({"record": "end", "at": now_ms(), "state": state})
        if self._file is not None:
            self._file.close()
            self._file = None

    def _write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            return
        self._file.write((json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode())
        self._file.flush()
        os.fsync(self._file.fileno())


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- the workspace tools ------------------------------------------------------------------------------


class Workspace:
    """The working directory as the tools see it: every path resolved inside it, or refused."""

    def __init__(self, root: Path, writable: bool) -> None:
        self.root = root.resolve()
        self.writable = writable

    def inside(self, path: str) -> Path:
        target = (self.root / (path or ".")).resolve()
        if target != self.root and self.root not in target.parents:
            raise ValueError(f"{path!r} is outside the working directory")
        return target

    def list_files(self, path: str = ".") -> str:
        base = self.inside(path)
        if not base.is_dir():
            raise ValueError(f"{path!r} is not a directory")
        found: list[str] = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(name for name in dirnames if name not in (".git",))
            for name in sorted(filenames):
                found.append(str((Path(dirpath) / name).relative_to(self.root)))
                if len(found) >= MAX_LISTED:
                    return "\n".join([*found, f"… (stopped at {MAX_LISTED} files)"])
        return "\n".join(found) or "(no files)"

    def read_file(self, path: str, offset: int = 0) -> str:
        target = self.inside(path)
        with open(target, "rb") as handle:
            handle.seek(max(0, offset))
            data = handle.read(MAX_TOOL_OUTPUT + 1)
        text = data[:MAX_TOOL_OUTPUT].decode("utf-8", "replace")
        if len(data) > MAX_TOOL_OUTPUT:
            text += f"\n… (more from offset {max(0, offset) + MAX_TOOL_OUTPUT})"
        return text

    def search(self, pattern: str, path: str = ".") -> str:
        try:
            compiled = re.compile(pattern)
        except re.error as error:
            raise ValueError(f"the pattern does not compile: {error}") from None
        base = self.inside(path)
        hits: list[str] = []
        size = 0
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(name for name in dirnames if name != ".git")
            for name in sorted(filenames):
                file = Path(dirpath) / name
                try:
                    if file.stat().st_size > MAX_SEARCH_FILE:
                        continue
                    lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
                except OSError:
                    continue
                for number, line in enumerate(lines, start=1):
                    if compiled.search(line):
                        hit = f"{file.relative_to(self.root)}:{number}: {line[:300]}"
                        hits.append(hit)
                        size += len(hit) + 1
                        if size > MAX_TOOL_OUTPUT:
                            return "\n".join([*hits, "… (more matches)"])
        return "\n".join(hits) or "(no matches)"

    def write_file(self, path: str, content: str) -> str:
        if not self.writable:
            raise ValueError("writing is not granted in this run")
        data = content.encode("utf-8")
        if len(data) > MAX_WRITE:
            raise ValueError(f"at most {MAX_WRITE} bytes may be written at once")
        target = self.inside(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return f"wrote {len(data)} bytes to {target.relative_to(self.root)}"

    def tools(self) -> list[dict[str, Any]]:
        """The tools the grant allows, as JSON Schema function definitions."""
        text = {"type": "string"}
        listed = [
            ("list_files", "List the files under a directory of the working directory.", {"path": text}, []),
            (
                "read_file",
                "Read a file of the working directory (64 KiB at a time; pass offset for more).",
                {"path": text, "offset": {"type": "integer"}},
                ["path"],
            ),
            (
                "search",
                "Search the files under a directory for lines matching a regular expression.",
                {"pattern": text, "path": text},
                ["pattern"],
            ),
        ]
        if self.writable:
            listed.append(
                (
                    "write_file",
                    "Write a file in the working directory.",
                    {"path": text, "content": text},
                    ["path", "content"],
                )
            )
        return [
            {
                "name": name,
                "description": description,
                "parameters": {"type": "object", "properties": properties, "required": required},
            }
            for name, description, properties, required in listed
        ]

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run a tool; a ValueError or OSError is the tool's failure, told to the model."""
        if name == "list_files":
            return self.list_files(str(arguments.get("path") or "."))
        if name == "read_file":
            offset = arguments.get("offset")
            return self.read_file(str(arguments.get("path", "")), offset if isinstance(offset, int) else 0)
        if name == "search":
            return self.search(str(arguments.get("pattern", "")), str(arguments.get("path") or "."))
        if name == "write_file":
            return self.write_file(str(arguments.get("path", "")), str(arguments.get("content", "")))
        raise ValueError(f"there is no tool {name!r}")


# -- the door -------------------------------------------------------------------------------------------


class Door:
    """The model door through the run's proxy: one JSON POST at a time, never streaming."""

    def __init__(self, url: str, key: str, model: str) -> None:
        if not url.startswith(("http://", "https://")):
            raise DoorError("the door URL is not http or https")
        if not key:
            raise DoorError("no door key")
        self.url = url.rstrip("/")
        self.key = key
        self.model = model
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def post(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(  # noqa: S310 - the scheme is checked in __init__
            self.url + route,
            data=json.dumps(body).encode("utf-8"),
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
            method="POST",
        )
        try:
            with self._opener.open(request, timeout=DOOR_TIMEOUT_SECONDS) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as error:
            if error.code in (404, 405):
                raise NoRouteError(f"the door has no {route}") from None
            raise DoorError(f"the door answered {error.code}") from None
        except (urllib.error.URLError, OSError) as error:
            raise DoorError(f"the door: {getattr(error, 'reason', error)}") from None
        try:
            value = json.loads(raw)
        except ValueError:
            raise DoorError("the door's answer is not JSON") from None
        if not isinstance(value, dict):
            raise DoorError("the door's answer is not a JSON object")
        return value


class Turn:
    """One model answer: its text, the tool calls it asks for `(id, name, arguments)`, and its tokens."""

    def __init__(self, text: str, calls: list[tuple[str, str, dict[str, Any]]], tokens: tuple[int, int]) -> None:
        self.text = text
        self.calls = calls
        self.tokens = tokens


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


class ResponsesConversation:
    """The conversation as OpenAI Responses input items."""

    route = RESPONSES

    def __init__(self, instructions: str, prompt: str, tools: list[dict[str, Any]]) -> None:
        self.instructions = instructions
        self.items: list[dict[str, Any]] = [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}
        ]
        self.tools = [{"type": "function", **tool} for tool in tools]

    def body(self, model: str) -> dict[str, Any]:
        return {
            "model": model,
            "instructions": self.instructions,
            "input": self.items,
            "tools": self.tools,
            "stream": False,
            "store": False,
        }

    def read(self, answer: dict[str, Any]) -> Turn:
        texts: list[str] = []
        calls: list[tuple[str, str, dict[str, Any]]] = []
        output = answer.get("output")
        for item in output if isinstance(output, list) else []:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "message":
                self.items.append(item)
                content = item.get("content")
                for part in content if isinstance(content, list) else []:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        texts.append(part["text"])
            elif item.get("type") == "function_call" and isinstance(item.get("name"), str):
                self.items.append(item)
                call_id = str(item.get("call_id") or item.get("id") or f"call-{len(self.items)}")
                calls.append((call_id, item["name"], _arguments(item.get("arguments"))))
        usage = _object(answer.get("usage"))
        return Turn("".join(texts), calls, (_count(usage.get("input_tokens")), _count(usage.get("output_tokens"))))

    def answer(self, call_id: str, output: str) -> None:
        self.items.append({"type": "function_call_output", "call_id": call_id, "output": output})


class ChatConversation:
    """The conversation as Chat Completions messages, for doors that only have that."""

    route = CHAT

    def __init__(self, instructions: str, prompt: str, tools: list[dict[str, Any]]) -> None:
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": instructions},
            {"role": "user", "content": prompt},
        ]
        self.tools = [{"type": "function", "function": tool} for tool in tools]

    def body(self, model: str) -> dict[str, Any]:
        return {"model": model, "messages": self.messages, "tools": self.tools, "stream": False}

    def read(self, answer: dict[str, Any]) -> Turn:
        choices = answer.get("choices")
        first = _object(choices[0]) if isinstance(choices, list) and choices else {}
        message = _object(first.get("message"))
        content = message.get("content")
        text = content if isinstance(content, str) else ""
        calls: list[tuple[str, str, dict[str, Any]]] = []
        asked = message.get("tool_calls")
        for call in asked if isinstance(asked, list) else []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                call_id = str(call.get("id") or f"call-{len(self.messages)}")
                calls.append((call_id, function["name"], _arguments(function.get("arguments"))))
        kept: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            kept["tool_calls"] = [
                {"id": ident, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
                for ident, name, arguments in calls
            ]
        self.messages.append(kept)
        usage = _object(answer.get("usage"))
        return Turn(text, calls, (_count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))))

    def answer(self, call_id: str, output: str) -> None:
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": output})


# -- the turn -----------------------------------------------------------------------------------------


def summary(reply: str | None, outcome: str, error: str | None) -> None:
    print(json.dumps({"reply": reply, "outcome": outcome, "cost_usd": None, "error": error}), flush=True)


def instructions() -> tuple[str, str | None]:
    """The system text and the guidance it carries; an error when the guidance is not what the runner sent."""
    path = os.environ.get("CODER_GUIDANCE")
    if not path:
        return SYSTEM, None
    try:
        data = Path(path).read_bytes()
    except OSError:
        return SYSTEM, "the guidance file cannot be read"
    expected = os.environ.get("CODER_GUIDANCE_DIGEST")
    if expected is not None and "sha256:" + hashlib.sha256(data).hexdigest() != expected:
        return SYSTEM, "guidance digest mismatch"
    return SYSTEM + "\n\n" + data.decode("utf-8", "replace"), None


def work(door: Door, workspace: Workspace, prompt: str, system: str, log: TraceLog) -> tuple[str | None, str | None]:
    """The loop: ask, run the tools asked for, answer them, until the model answers in text. (reply, error)."""
    conversation: ResponsesConversation | ChatConversation = ResponsesConversation(system, prompt, workspace.tools())
    spent = 0
    for turn_number in range(MAX_TURNS):
        try:
            answer = door.post(conversation.route, conversation.body(door.model))
        except NoRouteError:
            if turn_number != 0 or isinstance(conversation, ChatConversation):
                raise
            conversation = ChatConversation(system, prompt, workspace.tools())
            answer = door.post(conversation.route, conversation.body(door.model))
        turn = conversation.read(answer)
        spent += sum(turn.tokens)
        if not turn.calls:
            log.step("Agent", turn.text, tokens=turn.tokens, model=door.model)
            return turn.text, None
        for index, (call_id, name, arguments) in enumerate(turn.calls):
            started = time.monotonic()
            try:
                output, outcome = workspace.call(name, arguments), "Completed"
            except (ValueError, OSError) as error:
                output, outcome = f"error: {error}", "Failed"
            output = output[:MAX_TOOL_OUTPUT]
            conversation.answer(call_id, output)
            call = {
                "id": call_id,
                "name": name,
                "arguments": arguments,
                "output": output,
                "outcome": outcome,
                "milliseconds": int((time.monotonic() - started) * 1000),
                "extra": {},
            }
            log.step(
                "Agent",
                turn.text if index == 0 else "",
                call=call,
                tokens=turn.tokens if index == 0 else None,
                model=door.model,
            )
        if spent > MAX_TOKENS:
            return None, f"the turn used {spent} tokens, past its bound of {MAX_TOKENS}"
    return None, f"no answer within {MAX_TURNS} model calls"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="builtin-agent", description="eval-runner's built-in agent.")
    parser.add_argument("--prompt-file")
    parser.add_argument("-p", dest="prompt")
    parser.add_argument("--trace")
    parser.add_argument("--json", action="store_true")
    args, _ = parser.parse_known_args(argv)
    prompt = args.prompt or ""
    if args.prompt_file:
        try:
            prompt = Path(args.prompt_file).read_text(encoding="utf-8")
        except (OSError, ValueError):
            summary(None, "failed", "the prompt file cannot be read")
            return 1
    model = os.environ.get("CODER_MODEL", "")
    cwd = Path.cwd()
    session = {
        "id": f"builtin-{os.getpid()}-{now_ms()}",
        "model": model,
        "door": "responses",
        "repository": str(cwd),
        "directive": "",
        "state": "",
        "seconds": 0,
        "version": VERSION,
    }
    log = TraceLog(Path(args.trace) if args.trace else None, session)
    log.step("User", prompt)
    system, refused = instructions()
    reply: str | None = None
    error = refused
    if error is None:
        try:
            door = Door(os.environ.get("CODER_DOOR_URL", ""), os.environ.get("CODER_DOOR_KEY", ""), model)
            reply, error = work(door, Workspace(cwd, os.access(cwd, os.W_OK)), prompt, system, log)
        except DoorError as failure:
            error = str(failure)
    if reply is None:
        log.step("System", error or "no answer")
        log.finish()
        summary(None, "failed", error)
        return 1
    log.finish()
    summary(reply, "answered", None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
