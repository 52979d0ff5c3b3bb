"""How fast the door proxy reads a model's answer for its usage: `uv run python bench/door_usage.py`.

A 4 MiB server-sent event (the bound) then the usage, fed in chunks of 256 and of 16 bytes, and a 4 MiB JSON
answer in 256-byte chunks; each figure is MiB/s, the best of three rounds. The reader keeps one bytearray and
searches only past where it last stopped, so the rate does not fall as the chunks get smaller or the event
longer (it was quadratic: every chunk copied and searched the whole buffer; 1 MiB in 256-byte chunks took
5.5 s on the 2-core machine, 4 MiB about 90 s). Targets: ≥ 20 MiB/s in 256-byte chunks (measured 50), ≥ 4 MiB/s
in 16-byte chunks (measured 12: the cost of a call per chunk), ≥ 50 MiB/s for the JSON answer (measured 200).
"""

from __future__ import annotations

import json
import sys
import time

from eval_runner.engine.run.door_usage import MAX_JSON_BYTES, AnswerReader

ROUNDS = 3
USAGE = b'data: {"type":"message_delta","usage":{"output_tokens":7}}\n\n'


def stream_body() -> bytes:
    filler = json.dumps({"type": "content_block_delta", "delta": {"text": "x" * (MAX_JSON_BYTES - 1024)}})
    return b"data: " + filler.encode() + b"\n\n" + USAGE


def json_body() -> bytes:
    return json.dumps({"usage": {"prompt_tokens": 9}, "pad": "y" * (MAX_JSON_BYTES - 100)}).encode()


def rate(content_type: str, data: bytes, size: int) -> float:
    chunks = [data[at : at + size] for at in range(0, len(data), size)]
    best = 0.0
    for _ in range(ROUNDS):
        started = time.perf_counter()
        reader = AnswerReader(content_type)
        for chunk in chunks:
            reader.feed(chunk)
        found = reader.finish()
        seconds = time.perf_counter() - started
        assert found.reported, "the usage was not read"
        best = max(best, len(data) / (1024 * 1024) / seconds)
    return best


def main() -> int:
    figures = {
        "event stream, 256-byte chunks": (rate("text/event-stream", stream_body(), 256), 20.0),
        "event stream, 16-byte chunks": (rate("text/event-stream", stream_body(), 16), 4.0),
        "JSON answer, 256-byte chunks": (rate("application/json", json_body(), 256), 50.0),
    }
    missed = []
    for name, (figure, target) in figures.items():
        print(f"{name}: {figure:,.0f} MiB/s (target {target:.0f})")
        if figure < target:
            missed.append(name)
    if missed:
        print(f"below target: {', '.join(missed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
