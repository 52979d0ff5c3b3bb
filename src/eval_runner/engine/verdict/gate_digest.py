"""The Gym's digest of an extension-evaluation gate: what `meta.ext_eval.gate` carries (wire.md §13.2).

A gate's digest names its rule, not its file (`gym::gate::Gate::digest`, `docs/gym/gate-digests.md`):
sha256 over a canonical projection of the rule's identity, so rewording an explanation never
re-identifies a rule. The projection, its canonical text and the reference's digest this module
reproduces are in decisions.md ("`meta.ext_eval.gate` is the Gym's rule digest", under "The report and
its results directory"). Pure.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from eval_runner.contracts.errors import ContractError
from eval_runner.contracts.strict_json import JsonValue, read
from eval_runner.engine.verdict.gate import GateError

GATE_IDENTITY_SCHEMA = "openagents.gym.gate-identity.v1"


def gate_digest(gate_file: bytes) -> str:
    """`meta.ext_eval.gate`: the Gym's digest of an `ext_eval` gate rule, as a `sha256:` digest.

    The Gym hashes a projection of the rule, not the file (`gym::gate::Gate::digest`): identity schema,
    schema, id, and the rule's `decides`, each bound's value (as a float), basis and evidence,
    `primary` and `non_inferiority` when present, and the pending measurement's quantity and issue;
    prose (`question`, `why`, `$comment`, `previously`) stays out. Keys sorted, no whitespace.
    """
    try:
        document = read(gate_file)
    except ContractError as error:
        raise GateError(f"the gate file is not JSON: {error.detail}") from None
    rule = document.get("rule") if isinstance(document, dict) else None
    if not isinstance(rule, dict) or rule.get("decides") != "ext_eval":
        raise GateError("the gate file does not hold an ext_eval rule")

    def bound(name: str) -> dict[str, Any]:
        entry = rule.get(name)
        if not isinstance(entry, dict) or "basis" not in entry:
            raise GateError(f"the gate's rule.{name} is not a bound")
        value = entry.get("value")
        return {
            "value": None if value is None else float(value),
            "basis": entry["basis"],
            "evidence": entry.get("evidence", []),
        }

    projected: dict[str, Any] = {
        "decides": "ext_eval",
        "min_runs": bound("min_runs"),
        "spread_multiple": bound("spread_multiple"),
    }
    if rule.get("max_increase") is not None:
        projected["max_increase"] = bound("max_increase")
    if rule.get("primary") is not None:
        projected["primary"] = rule["primary"]
    if rule.get("non_inferiority"):
        projected["non_inferiority"] = rule["non_inferiority"]
    pending = rule.get("pending_measurement")
    if isinstance(pending, str):
        pending = {"quantity": pending}
    projected["pending_measurement"] = (
        None if pending is None else {"quantity": pending.get("quantity"), "issue": pending.get("issue")}
    )
    identity = {
        "identity_schema": GATE_IDENTITY_SCHEMA,
        "schema": document.get("schema"),
        "id": document.get("id"),
        "rule": projected,
    }
    return "sha256:" + hashlib.sha256(_gym_canonical(identity).encode("utf-8")).hexdigest()


def _gym_canonical(value: JsonValue) -> str:
    """The Gym's canonical text: sorted keys, no whitespace, serde_json's escapes and float form."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{_text(key)}:{_gym_canonical(value[key])}" for key in sorted(value)) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_gym_canonical(item) for item in value) + "]"
    if isinstance(value, int | float) and not isinstance(value, bool):
        # The Gym writes every number through f64, and serde_json (ryu) writes a whole float with `.0`;
        # Python's repr agrees for every value a gate bound holds (it differs beyond 1e16, below 1e-4).
        return repr(float(value))
    if isinstance(value, str):
        return _text(value)
    return json.dumps(value)


def _text(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)
