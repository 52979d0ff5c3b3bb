"""What a run's model calls used, read by the door proxy from the door's own answers (issue 11, item 5).

An agent's own report of its tokens and cost is the agent's word; the door's answers are the door's. The
proxy feeds each answer here as it streams it on: a JSON answer is read whole at its end (up to
`MAX_JSON_BYTES`), a server-sent event stream event by event (each event up to the same bound). Three
APIs are understood, each where it reports usage:

* Anthropic Messages: `usage` of a message (`input_tokens`, `cache_creation_input_tokens`,
  `cache_read_input_tokens`, `output_tokens`); streamed, `message_start.message.usage` and the
  `message_delta.usage` that ends it (its output count is the total so far, so the last one counts).
* OpenAI Responses: `response.usage` (`input_tokens`, `output_tokens`), streamed in `response.completed`.
* Chat Completions: `usage` (`prompt_tokens`, `completion_tokens`), streamed in the last chunk.

A `cost` number beside the tokens (OpenRouter's `usage.cost`, a gateway's) is summed too; the cost is
None when no answer reported one. Nothing here raises on what a door sends.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MAX_JSON_BYTES = 4 * 1024 * 1024


@dataclass(slots=True)
class DoorUsage:
    """The run's totals over every answer read so far. `answers` counts every successful answer (a `HEAD /`
    and a `count_tokens` too); `reported` only those that said what they used, which is the run's model
    calls (a door that reports no usage at all leaves it 0, and the calls unknown)."""

    answers: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    reported: int = 0

    def add(self, found: AnswerUsage) -> None:
        self.answers += 1
        self.reported += int(found.reported)
        self.input_tokens += found.input_tokens
        self.output_tokens += found.output_tokens
        if found.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + found.cost_usd


@dataclass(slots=True)
class AnswerUsage:
    """One answer's usage as it is read (streamed answers report it in parts)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    #: Whether the answer carried a `usage` object at all.
    reported: bool = False


class AnswerReader:
    """Reads one answer's usage from its bytes as they pass; `finish()` gives what it found.

    The bytes are kept in one `bytearray` (appended to, and cut at the front as events are read) and a stream
    is searched for an event's end only past where the last search stopped, so an answer of many small
    chunks is read in time linear in its size, not quadratic."""

    __slots__ = ("_buffer", "_found", "_over", "_scanned", "_stream")

    def __init__(self, content_type: str) -> None:
        self._stream = content_type.split(";", 1)[0].strip().lower() == "text/event-stream"
        self._buffer = bytearray()
        #: How far into `_buffer` no event's end can begin (the next search starts there).
        self._scanned = 0
        self._over = False
        self._found = AnswerUsage()

    def feed(self, chunk: bytes) -> None:
        if self._over:
            return
        buffer = self._buffer
        buffer += chunk
        if not self._stream:
            if len(buffer) > MAX_JSON_BYTES:
                self._over = True
                buffer.clear()
            return
        while True:
            end = _event_end(buffer, self._scanned)
            if end is None:
                # A mark is at most 4 bytes: one that began in the last 3 bytes may still be completed.
                self._scanned = max(0, len(buffer) - 3)
                break
            self._event(bytes(buffer[: end[0]]))
            del buffer[: end[1]]  # a bytearray cut at the front is not copied again
            self._scanned = 0
        if len(buffer) > MAX_JSON_BYTES:
            buffer.clear()  # an event past the bound is skipped, the rest still read
            self._scanned = 0

    def finish(self) -> AnswerUsage:
        if self._stream:
            if self._buffer.strip():
                self._event(bytes(self._buffer))
        elif not self._over:
            self._read(_json(bytes(self._buffer)))
        self._buffer.clear()
        self._scanned = 0
        return self._found

    def _event(self, event: bytes) -> None:
        data = b"\n".join(
            line[5:].removeprefix(b" ")
            for line in event.replace(b"\r\n", b"\n").split(b"\n")
            if line.startswith(b"data:")
        )
        if data and data != b"[DONE]":
            self._read(_json(data))

    def _read(self, value: Any) -> None:
        if not isinstance(value, dict):
            return
        kind = value.get("type")
        if kind == "message_start" and isinstance(value.get("message"), dict):
            self._usage(value["message"].get("usage"), replace_output=True)
        elif kind == "message_delta":
            self._usage(value.get("usage"), replace_output=True, input_too=False)
        elif isinstance(kind, str) and kind.startswith("response."):
            if kind == "response.completed" and isinstance(value.get("response"), dict):
                self._usage(value["response"].get("usage"))
        elif isinstance(value.get("usage"), dict):
            # A whole answer of any of the three APIs, or a chat completion's last chunk.
            self._usage(value["usage"])

    def _usage(self, usage: Any, *, replace_output: bool = False, input_too: bool = True) -> None:
        if not isinstance(usage, dict):
            return
        found = self._found
        found.reported = True
        if input_too:
            found.input_tokens += sum(
                _count(usage.get(key))
                for key in ("input_tokens", "prompt_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
            )
        output = _count(usage.get("output_tokens")) + _count(usage.get("completion_tokens"))
        found.output_tokens = output if replace_output else found.output_tokens + output
        cost = usage.get("cost")
        if isinstance(cost, int | float) and not isinstance(cost, bool) and 0 <= cost < 1e6:
            found.cost_usd = (found.cost_usd or 0.0) + float(cost)


def _event_end(buffer: bytearray, start: int = 0) -> tuple[int, int] | None:
    """Where the first complete event ends and the next begins (a blank line, LF or CRLF), searching from
    `start` (no mark begins before it)."""
    ends = [(at, at + len(mark)) for mark in (b"\n\n", b"\r\n\r\n") if (at := buffer.find(mark, start)) >= 0]
    return min(ends) if ends else None


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53 else 0
