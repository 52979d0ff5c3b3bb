"""Execute and control bodies as a trainer's phone sends them, for the execution and execution property tests."""

from __future__ import annotations

from typing import Any

from eval_runner.contracts.strict_json import digest_bytes

R = "a7cff3ee1ff0209f971b9f24673db310ab858899c9d9a99b640e6cb29b1753f0"
DEADLINE = 1_790_003_600
EXPIRATION = str(DEADLINE)


def artifact(text: str) -> dict[str, Any]:
    data = text.encode()
    return {"digest": digest_bytes(data), "size": len(data), "media_type": "application/json"}


def body(**changes: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "v": "openagents.execution.v1",
        "requires": [],
        "type": "execute",
        "request": "9e107d9d372bb6826bd81d3542a419d6",
        "attempt": 1,
        "run": "9e107d9d372bb6826bd81d3542a419d6",
        "target": {"id": f"{R}:ext-eval/run", "artifact": artifact("program")},
        "lock": artifact("lock"),
        "input": {"task": "count", "n": [1, 2.5, None]},
        "context": artifact("context"),
        "requirements": artifact("requirements"),
        "bounds": {"wall_ms": 3_600_000},
        "deadline": DEADLINE,
        "retain_until": DEADLINE + 604_800,
    }
    value.update(changes)
    return value


def control(kind: str, **changes: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "v": "openagents.execution.v1",
        "requires": [],
        "type": kind,
        "request": "req-1",
        "attempt": 1,
        "run": "req-1",
    }
    value.update(changes)
    return value
