"""Execution answers as the runner sends them (runner.md §10), for the answer and execution property tests:
the spec's completed run and refusal, an unknown result, accepted and progress."""

from __future__ import annotations

from typing import Any

from eval_runner.contracts.execution import Binding
from eval_runner.contracts.refs import ArtifactRef

R = "a7cff3ee1ff0209f971b9f24673db310ab858899c9d9a99b640e6cb29b1753f0"
BINDING = Binding("9e107d9d372bb6826bd81d3542a419d6", 1, "9e107d9d372bb6826bd81d3542a419d6")
HEAD = {"v": "openagents.execution.v1", "requires": [], **BINDING.to_json()}
ROOT = ArtifactRef.of_bytes(b'{"root":1}', "application/json")
REPORT = ArtifactRef(
    digest="sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
    size=24817,
    media_type="application/json",
    schema="openagents.eval-report.v1",
)


def completed_run() -> dict[str, Any]:
    """§10.2, verbatim in shape."""
    return {
        **HEAD,
        "type": "result",
        "outcome": "completed",
        "dispatched": True,
        "output": {
            "v": "openagents.ext-eval-hosted.v1",
            "action": "run",
            "report": REPORT.to_json(),
            "sealed": {"id": "77" * 32, "pubkey": R, "kind": 3188},
            "headline": {"subject_passed": 6, "baseline_passed": 2, "total": 6},
            "verdict": "pass",
            "notes": ["Faster: 12.0 s against 30.0 s per run."],
        },
        "artifacts": [REPORT.to_json()],
        "receipts": [],
        "verification": "not_run",
        "integration": "not_requested",
        "record": ROOT.to_json(),
        "spend": None,
        "code": None,
        "message": None,
    }


def refusal() -> dict[str, Any]:
    """§10.4, verbatim."""
    return {
        **HEAD,
        "type": "result",
        "outcome": "refused",
        "dispatched": False,
        "output": None,
        "artifacts": [],
        "receipts": [],
        "verification": "not_run",
        "integration": "not_requested",
        "record": None,
        "spend": None,
        "code": "not_admitted",
        "message": "the hosted runner tests catalog tools and tools made in chat only",
    }


def terminal(outcome: str, **changes: Any) -> dict[str, Any]:
    value = {**refusal(), "outcome": outcome, "dispatched": True, "record": ROOT.to_json(), "code": None}
    value.update(changes)
    return value


def unknown() -> dict[str, Any]:
    value = terminal("unknown")
    del value["code"], value["message"]
    return value


def accepted() -> dict[str, Any]:
    return {
        **HEAD,
        "type": "accepted",
        "input_digest": "sha256:" + "12" * 32,
        "lock_digest": "sha256:afc85046b5a4f254530ae3cb4a95bbaf79e1b55b1edd1485e3b26c6505d49ee8",
        "record": ROOT.to_json(),
        "mailbox": "ab" * 32,
        "retain_until": 1_790_608_400,
        "controller": R,
    }


def progress(completed: int = 2, planned: int = 8, **meta: Any) -> dict[str, Any]:
    return {
        **HEAD,
        "type": "progress",
        "seq": 3,
        "status": "running",
        "meta": {"ext_eval": {"completed": completed, "planned": planned}, **meta},
    }
