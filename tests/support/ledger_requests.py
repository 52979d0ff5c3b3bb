"""Ledger requests for the ledger tests: execute bodies as a trainer's phone sends them, the parties'
keys, a fixed clock, and the service's steps (reserve, dispatch) and result bodies over a real ledger file.

Shared by the store, jobs, durability (whose child processes use them too), lookup and property tests.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from eval_runner.contracts.answers import ResultBody
from eval_runner.contracts.execution import ExecuteBody
from eval_runner.contracts.outputs import PublishOutput
from eval_runner.contracts.refs import EventRef
from eval_runner.contracts.strict_json import digest_bytes
from eval_runner.service.ledger.store import Claim, Job, Ledger, ledger_path

WORKER = "a7cff3ee1ff0209f971b9f24673db310ab858899c9d9a99b640e6cb29b1753f0"
OTHER_WORKER = "c" * 64
TRAINER = "b" * 64
STRANGER = "d" * 64
NOW = 1_790_000_000
DEADLINE = NOW + 3_600
RETAIN = DEADLINE + 604_800
MAILBOX = "ab" * 32


def artifact(text: str) -> dict[str, Any]:
    data = text.encode()
    return {"digest": digest_bytes(data), "size": len(data), "media_type": "application/json"}


def execute(
    request: str = "req-1",
    attempt: int = 1,
    *,
    deadline: int = DEADLINE,
    retain_until: int = RETAIN,
    note: str = "first",
) -> ExecuteBody:
    """An execute body as a trainer's phone would send it (the input is opaque to the ledger)."""
    value = {
        "v": "openagents.execution.v1",
        "requires": [],
        "type": "execute",
        "request": request,
        "attempt": attempt,
        "run": f"run-{request}",
        "target": {"id": f"{WORKER}:ext-eval/run", "artifact": artifact("program")},
        "lock": artifact("lock"),
        "input": {"v": "openagents.ext-eval-hosted.v1", "note": note},
        "context": artifact("context"),
        "requirements": artifact("requirements"),
        "bounds": {},
        "deadline": deadline,
        "retain_until": retain_until,
    }
    return ExecuteBody.parse(value, expiration=str(deadline))


def event(n: int | str) -> str:
    """A distinct 64-hex event id."""
    return hashlib.sha256(f"event-{n}".encode()).hexdigest()


def open_ledger(directory: Path, worker: str = WORKER, now: int = NOW) -> Ledger:
    return Ledger.open(ledger_path(directory), worker, now)


def reserve(ledger: Ledger, body: ExecuteBody, event_id: str | None = None, principal: str = TRAINER) -> Claim:
    found = ledger.prepare(body, event_id or event(body.request), principal, NOW, MAILBOX, created_at=NOW - 5)
    assert isinstance(found, Claim), found
    return found


def dispatch(ledger: Ledger, body: ExecuteBody, event_id: str | None = None, principal: str = TRAINER) -> Claim:
    """prepare + acknowledge + intend, as the service does before `accepted` (runner.md §9.7 step 3)."""
    claim = reserve(ledger, body, event_id, principal)
    ledger.acknowledge(claim.key)
    return ledger.intend(claim.key)


def stored_job(ledger: Ledger, key: str) -> Job:
    found = ledger.job(key)
    assert found is not None
    return found


def failed(claim: Claim, message: str = "the suite could not start") -> str:
    return json.dumps(ResultBody.failed(claim.binding, claim.record, message).to_json())


def cancelled(claim: Claim) -> str:
    return json.dumps(ResultBody.cancelled(claim.binding, claim.record).to_json())


def published(claim: Claim, result_id: str = "e" * 64) -> str:
    output = PublishOutput(EventRef("f" * 64, WORKER, 3184), EventRef(result_id, WORKER, 3189))
    return json.dumps(ResultBody.completed(claim.binding, claim.record, output).to_json(), indent=1)
