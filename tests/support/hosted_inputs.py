"""Hosted-profile inputs for the hosted and execution property tests: a run of a published suite and subject,
and a run of a chat draft."""

from __future__ import annotations

import copy
from typing import Any

from eval_runner.contracts.hosted import RUNNER

SCHEMA = "openagents.ext-eval-hosted.v1"
RELEASE = {"id": "5c1b9d0e7a3f4b2c8d6e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c", "pubkey": RUNNER, "kind": 3184}
REPO_MAP = {
    "id": "a" * 64 + ":openagents/repo-map",
    "artifact": {
        "digest": "sha256:0f788d7adacbe189aed5c8be9aa96a13e2568074f3db213d708c5ac7254a1536",
        "size": 134838,
        "media_type": "application/wasm",
    },
}


def published(**changes: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "v": SCHEMA,
        "action": "run",
        "suite": copy.deepcopy(RELEASE),
        "subject": copy.deepcopy(REPO_MAP),
        "draft": None,
        "runs": 3,
        "baseline": True,
        "check": None,
    }
    value.update(changes)
    return value


def draft(cases: int) -> dict[str, Any]:
    return {
        "v": "openagents.eval-draft.v1",
        "tool": {
            "name": "Map brief",
            "summary": "Maps, then briefs.",
            "catalog": None,
            "skill": "When asked about a repository, name its main language.",
            "uses": ["a" * 64 + ":openagents/repo-map"],
        },
        "cases": [
            {
                "id": f"overview-{n}",
                "kind": "should-fire",
                "prompt": '+++\nv = "openagents.eval-case.v1"\n+++\n\nGive me an overview of the repository.\n',
                "graders": [{"name": "said", "text": '+++\ntype = "regex"\ntarget = "last_message"\n+++\n\nRust\n'}],
            }
            for n in range(cases)
        ],
    }


def chat(cases: int = 1, **changes: Any) -> dict[str, Any]:
    return published(**{"suite": "draft", "subject": "draft", "draft": draft(cases), "runs": 1, **changes})
