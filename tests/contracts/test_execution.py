"""The execute body `openagents.execution.v1` and its controls: one test per rule of wire.md §5.2 and §11."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.execution import (
    CREDENTIAL_KEYS,
    RUN_RECORD_SCHEMA,
    Bounds,
    ControlBody,
    ExecuteBody,
    Parent,
    fingerprint,
    open_body,
    record_digest,
    root_record,
)
from eval_runner.contracts.strict_json import canonical, digest_bytes, read
from tests.support.execution_bodies import DEADLINE, EXPIRATION, R, artifact, body, control


def without(key: str) -> dict[str, Any]:
    value = body()
    del value[key]
    return value


def refused(value: object, expiration: str | None = EXPIRATION) -> ContractError:
    with pytest.raises(ContractError) as caught:
        ExecuteBody.parse(value, expiration=expiration)
    return caught.value


def test_a_valid_body_parses_and_rebuilds_its_value() -> None:
    value = body(parent={"run": "parent-run", "step": "s", "iteration": 0, "attempt": 2}, meta={"note": [1]})
    parsed = ExecuteBody.parse(value, expiration=EXPIRATION)
    assert parsed.request == "9e107d9d372bb6826bd81d3542a419d6"
    assert parsed.bounds == Bounds(wall_ms=3_600_000)
    assert parsed.parent == Parent("parent-run", "s", 0, 2)
    assert parsed.meta == {"note": [1]}
    assert canonical(parsed.to_json()) == canonical(value)
    assert parsed.raw is value


def test_absent_optional_members_stay_absent() -> None:
    parsed = ExecuteBody.parse(body(bounds={}), expiration=EXPIRATION)
    assert parsed.to_json()["bounds"] == {}
    assert "parent" not in parsed.to_json()
    assert "meta" not in parsed.to_json()


@pytest.mark.parametrize("key", [*sorted(CREDENTIAL_KEYS), "Token", "API_KEY", "Authorization"])
def test_a_credential_named_key_is_malformed_not_unknown(key: str) -> None:
    error = refused(body(**{key: "x"}))
    assert (error.code, error.path) == (Code.MALFORMED, key)


def test_credential_names_fold_ascii_case_only() -> None:
    # "\u212a" (Kelvin sign) lowercases to "k" in Unicode; the reference folds ASCII only, so "\u212aey"
    # is merely an unknown key.
    kelvin = body()
    kelvin["\u212aey"] = "x"
    assert refused(kelvin).code is Code.UNSUPPORTED_FEATURE
    assert refused(body(tokens="x")).code is Code.UNSUPPORTED_FEATURE


def test_an_unknown_top_level_key_is_unsupported_feature() -> None:
    error = refused(body(priority="high"))
    assert (error.code, error.path) == (Code.UNSUPPORTED_FEATURE, "priority")


def test_a_missing_key_is_malformed_and_named_before_an_unknown_one() -> None:
    value = without("bounds")
    value["extra"] = 1
    error = refused(value)
    assert (error.code, error.path) == (Code.MALFORMED, "bounds")


@pytest.mark.parametrize("version", ["openagents.execution.v2", 1, None])
def test_another_version_is_unsupported_version(version: object) -> None:
    assert refused(body(v=version)).code is Code.UNSUPPORTED_VERSION
    assert refused(without("v")).code is Code.UNSUPPORTED_VERSION


def test_the_version_is_checked_before_credentials() -> None:
    assert refused(body(v="x", token="t")).code is Code.UNSUPPORTED_VERSION


def test_non_empty_requires_is_unsupported_feature() -> None:
    error = refused(body(requires=["openagents.labor-binding.v1"]))
    assert (error.code, error.path) == (Code.UNSUPPORTED_FEATURE, "requires")
    assert refused(body(requires={})).code is Code.MALFORMED


@pytest.mark.parametrize("field", ["request", "run"])
@pytest.mark.parametrize("bad", ["", "has space", "x" * 129, "caf\u00e9", "tab\there", "\x7f", 7, None])
def test_id_grammar(field: str, bad: object) -> None:
    error = refused(body(**{field: bad}))
    assert (error.code, error.path) == (Code.MALFORMED, field)


@pytest.mark.parametrize("good", ["!", "~" * 128, "req-1"])
def test_id_grammar_accepts_printable_ascii(good: str) -> None:
    assert ExecuteBody.parse(body(request=good), expiration=EXPIRATION).request == good


@pytest.mark.parametrize("bad", [0, -1, 2**32, 1.0, True, "1"])
def test_attempt_is_at_least_one_and_fits_u32(bad: object) -> None:
    error = refused(body(attempt=bad))
    assert (error.code, error.path) == (Code.MALFORMED, "attempt")
    assert ExecuteBody.parse(body(attempt=2**32 - 1), expiration=EXPIRATION).attempt == 2**32 - 1


@pytest.mark.parametrize(
    ("bounds", "code", "path"),
    [
        ({"memory_bytes": 1}, Code.UNSUPPORTED_FEATURE, "bounds.memory_bytes"),
        ({"wall_ms": -1}, Code.MALFORMED, "bounds.wall_ms"),
        ({"jobs": 1.5}, Code.MALFORMED, "bounds.jobs"),
        ({"output_bytes": None}, Code.MALFORMED, "bounds.output_bytes"),
        ([], Code.MALFORMED, "bounds"),
    ],
)
def test_bounds(bounds: object, code: Code, path: str) -> None:
    error = refused(body(bounds=bounds))
    assert (error.code, error.path) == (code, path)


def test_all_four_bounds_round_trip() -> None:
    bounds = {"wall_ms": 1, "output_bytes": 0, "jobs": 2, "spend_microunits": 3}
    parsed = ExecuteBody.parse(body(bounds=bounds), expiration=EXPIRATION)
    assert parsed.bounds.to_json() == bounds


@pytest.mark.parametrize("expiration", [str(DEADLINE + 1), None, "", "17900O3600", "-1", f"{DEADLINE}.0"])
def test_the_deadline_must_equal_the_expiration_tag(expiration: str | None) -> None:
    error = refused(body(), expiration)
    assert (error.code, error.path) == (Code.MALFORMED, "deadline")


def test_an_expiration_given_as_a_number_is_refused_not_crashed() -> None:
    error = refused(body(), DEADLINE)  # type: ignore[arg-type]
    assert (error.code, error.path) == (Code.MALFORMED, "deadline")


@pytest.mark.parametrize("retain", [DEADLINE, DEADLINE - 1])
def test_retention_must_outlast_the_deadline(retain: int) -> None:
    error = refused(body(retain_until=retain))
    assert (error.code, error.path) == (Code.MALFORMED, "retain_until")


def test_input_over_128_kib_is_limit_exceeded() -> None:
    filler = "x" * (131_072 - len(canonical({"a": ""})))
    assert len(canonical({"a": filler})) == 131_072
    ExecuteBody.parse(body(input={"a": filler}), expiration=EXPIRATION)
    error = refused(body(input={"a": filler + "x"}))
    assert (error.code, error.path) == (Code.LIMIT_EXCEEDED, "input")


@pytest.mark.parametrize(
    ("parent", "code", "path"),
    [
        ({"run": "r", "step": "s", "iteration": 0}, Code.MALFORMED, "parent.attempt"),
        ({"run": "r", "step": "s", "iteration": 0, "attempt": 1, "x": 1}, Code.UNSUPPORTED_FEATURE, "parent.x"),
        ({"run": "r", "step": "s", "iteration": -1, "attempt": 1}, Code.MALFORMED, "parent.iteration"),
        ({"run": "r", "step": "s", "iteration": 0, "attempt": 0}, Code.MALFORMED, "parent.attempt"),
        ({"run": "", "step": "s", "iteration": 0, "attempt": 1}, Code.MALFORMED, "parent.run"),
        (None, Code.MALFORMED, "parent"),
    ],
)
def test_parent(parent: object, code: Code, path: str) -> None:
    error = refused(body(parent=parent))
    assert (error.code, error.path) == (code, path)


def test_meta_is_an_object() -> None:
    assert refused(body(meta=[])).path == "meta"


def test_references_are_checked() -> None:
    assert refused(body(target={"id": "nope", "artifact": artifact("p")})).path == "target.id"
    assert refused(body(lock={"digest": "sha256:0", "size": 1, "media_type": "a/b"})).path == "lock.digest"


def test_fingerprint_is_the_jcs_digest_of_the_whole_body() -> None:
    value = body()
    parsed = ExecuteBody.parse(value, expiration=EXPIRATION)
    assert fingerprint(parsed) == digest_bytes(canonical(value))
    # Key order and whitespace do not change it; any value does.
    reordered = json.loads(json.dumps(value, indent=3, sort_keys=True))
    assert fingerprint(ExecuteBody.parse(reordered, expiration=EXPIRATION)) == fingerprint(parsed)
    changed = ExecuteBody.parse(body(retain_until=DEADLINE + 604_801), expiration=EXPIRATION)
    assert fingerprint(changed) != fingerprint(parsed)
    with_meta = ExecuteBody.parse(body(meta={}), expiration=EXPIRATION)
    assert fingerprint(with_meta) != fingerprint(parsed)


def test_input_digest_is_the_jcs_digest_of_input() -> None:
    parsed = ExecuteBody.parse(body(), expiration=EXPIRATION)
    assert parsed.input_digest == digest_bytes(canonical(body()["input"]))


def control_refused(value: object) -> ContractError:
    with pytest.raises(ContractError) as caught:
        ControlBody.parse(value)
    return caught.value


@pytest.mark.parametrize(
    "value",
    [
        control("status"),
        control("status", max_records=3, meta={"a": 1}),
        control("replay", after_seq=None, max_records=256),
        control("replay", after_seq=4, max_records=1),
        control("cancel", reason="the person tapped Stop"),
        control("cancel", reason="r" * 1024),
    ],
)
def test_valid_controls_round_trip(value: dict[str, Any]) -> None:
    parsed = ControlBody.parse(value)
    assert parsed.type == value["type"]
    assert canonical(parsed.to_json()) == canonical(value)


def test_replay_from_the_root_keeps_its_null() -> None:
    parsed = ControlBody.parse(control("replay", after_seq=None, max_records=5))
    assert parsed.has_after_seq
    assert parsed.after_seq is None
    assert parsed.to_json()["after_seq"] is None


@pytest.mark.parametrize(
    ("value", "code", "path"),
    [
        (control("status", after_seq=1), Code.UNSUPPORTED_FEATURE, "after_seq"),
        (control("status", reason="x"), Code.UNSUPPORTED_FEATURE, "reason"),
        (control("replay", max_records=5), Code.MALFORMED, "after_seq"),
        (control("replay", after_seq=None), Code.MALFORMED, "max_records"),
        (control("replay", after_seq=None, max_records=0), Code.MALFORMED, "max_records"),
        (control("replay", after_seq=None, max_records=257), Code.MALFORMED, "max_records"),
        (control("replay", after_seq=-1, max_records=1), Code.MALFORMED, "after_seq"),
        (control("cancel"), Code.MALFORMED, "reason"),
        (control("cancel", reason=""), Code.MALFORMED, "reason"),
        (control("cancel", reason="r" * 1025), Code.MALFORMED, "reason"),
        (control("cancel", reason="x", why="y"), Code.UNSUPPORTED_FEATURE, "why"),
        (control("cancel", reason="x", requires=["f"]), Code.UNSUPPORTED_FEATURE, "requires"),
        (control("cancel", reason="x", secret="s"), Code.MALFORMED, "secret"),
        (control("pause"), Code.MALFORMED, "type"),
        (control("status", attempt=0), Code.MALFORMED, "attempt"),
    ],
)
def test_control_rules(value: object, code: Code, path: str) -> None:
    error = control_refused(value)
    assert (error.code, error.path) == (code, path)


def test_open_body_dispatches_on_type() -> None:
    execute = open_body(json.dumps(body()), EXPIRATION)
    assert isinstance(execute, ExecuteBody)
    cancel = open_body(json.dumps(control("cancel", reason="stop")).encode(), None)
    assert isinstance(cancel, ControlBody)
    assert cancel.reason == "stop"


@pytest.mark.parametrize(
    ("plaintext", "code"),
    [
        ('{"v": "openagents.execution.v1", "type": "result"}', Code.MALFORMED),
        ('{"v": "openagents.execution.v1"}', Code.MALFORMED),
        ('{"v": 2, "type": "execute"}', Code.UNSUPPORTED_VERSION),
        ('{"v": "openagents.execution.v1", "type": "execute", "type": "status"}', Code.MALFORMED),
        ("[1]", Code.MALFORMED),
        ("not json", Code.MALFORMED),
        (json.dumps(control("status", pad="x" * 262_144)), Code.LIMIT_EXCEEDED),
    ],
)
def test_open_body_refusals(plaintext: str, code: Code) -> None:
    with pytest.raises(ContractError) as caught:
        open_body(plaintext, EXPIRATION)
    assert caught.value.code is code


def test_an_execute_needs_its_expiration_at_open() -> None:
    with pytest.raises(ContractError) as caught:
        open_body(json.dumps(body()), None)
    assert caught.value.path == "deadline"


def test_the_root_record_envelope() -> None:
    parent = {"run": "p", "step": "s", "iteration": 3, "attempt": 1}
    parsed = ExecuteBody.parse(body(parent=parent), expiration=EXPIRATION)
    root = root_record(parsed, R, 1_790_000_000)
    envelope = read(root.data)
    assert root.data == canonical(envelope)
    assert set(envelope) == {"v", "requires", "record", "digest"}
    assert (envelope["v"], envelope["requires"]) == (RUN_RECORD_SCHEMA, [])
    record = envelope["record"]
    assert record == {
        "run": parsed.run,
        "seq": 0,
        "previous": None,
        "controller": R,
        "generation": 0,
        "type": "created",
        "subject": {"step": None, "iteration": None, "attempt": None},
        "time": 1_790_000_000,
        "data": {
            "owner": R,
            "request": parsed.request,
            "base": parsed.lock.digest,
            "program": parsed.target.artifact.digest,
            "lock": parsed.lock.digest,
            "context": parsed.context.digest,
            "policy": parsed.requirements.digest,
            "parent": parent,
            "recipients": [R],
        },
    }
    expected = digest_bytes(b"openagents.run-record.v1\n" + canonical(record))
    assert envelope["digest"] == expected == root.digest == record_digest(record)
    assert root.ref.to_json() == {
        "digest": digest_bytes(root.data),
        "size": len(root.data),
        "media_type": "application/json",
    }


def test_a_root_without_parent_says_null() -> None:
    parsed = ExecuteBody.parse(body(), expiration=EXPIRATION)
    assert read(root_record(parsed, R, 5).data)["record"]["data"]["parent"] is None


def test_the_root_needs_a_real_controller() -> None:
    parsed = ExecuteBody.parse(body(), expiration=EXPIRATION)
    with pytest.raises(ContractError):
        root_record(parsed, "R", 5)


def test_parsing_does_not_depend_on_mutating_the_value() -> None:
    value = body()
    snapshot = copy.deepcopy(value)
    ExecuteBody.parse(value, expiration=EXPIRATION)
    assert value == snapshot


@pytest.mark.parametrize("bad", [float("inf"), 2**53 + 1])
def test_a_body_without_jcs_bytes_has_no_fingerprint_and_is_refused(bad: object) -> None:
    # A strict reader never yields these; a caller building values by hand might.
    assert refused(body(meta={"x": bad})).code is Code.MALFORMED
