"""`meta.ext_eval` against the reference's fixtures, its schema, and each profile rule."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.ext_eval import (
    RELIANCE_KEYS,
    CaseKind,
    ExtEval,
    Identity,
    Reliance,
)
from eval_runner.contracts.strict_json import JsonValue, canonical
from tests.support.reference_files import load, names

VALID = "eval-ext/ext-eval/valid"
INVALID = "eval-ext/ext-eval/invalid"

#: The reference's code for each invalid fixture (crates/nostr eval_ext::parse_profile).
INVALID_CODES = {
    "defaults-not-a-release": (Code.IDENTITY_MISMATCH, "meta.ext_eval.defaults.kind"),
    "gate-not-digest": (Code.MALFORMED, "meta.ext_eval.gate"),
    "identity-unknown": (Code.UNSUPPORTED_FEATURE, "meta.ext_eval.identity"),
    "no-cases": (Code.MALFORMED, "meta.ext_eval.cases"),
    "reliance-unknown-key": (Code.UNSUPPORTED_FEATURE, "meta.ext_eval.reliance.weather"),
    "requester-not-execution": (Code.IDENTITY_MISMATCH, "meta.ext_eval.requester.kind"),
    "unknown-case-kind": (Code.UNSUPPORTED_FEATURE, "meta.ext_eval.cases[0].kind"),
    "unknown-field": (Code.UNSUPPORTED_FEATURE, "meta.ext_eval.score"),
    "wrong-version": (Code.UNSUPPORTED_VERSION, "meta.ext_eval.v"),
}


def test_every_fixture_has_an_expectation() -> None:
    assert names(INVALID) == sorted(INVALID_CODES)
    assert names(VALID) == ["decision-service", "hosted", "local", "reliance-and-defaults", "subject-only"]


@pytest.mark.parametrize("name", names(VALID))
def test_valid_fixture_parses_and_keeps_its_bytes(name: str) -> None:
    value = load(f"{VALID}/{name}.json")
    record = ExtEval.parse(value)
    assert canonical(record.to_json()) == canonical(value)
    assert record.headline.total == len(record.cases)


@pytest.mark.parametrize("name", sorted(INVALID_CODES))
def test_invalid_fixture_is_refused_with_the_reference_code(name: str) -> None:
    code, path = INVALID_CODES[name]
    with pytest.raises(ContractError) as caught:
        ExtEval.parse(load(f"{INVALID}/{name}.json"))
    assert (caught.value.code, caught.value.path) == (code, path)


def test_hosted_fixture_reads_its_requester_and_kinds() -> None:
    record = ExtEval.parse(load(f"{VALID}/hosted.json"))
    assert record.requester is not None
    assert record.requester.kind == 25920
    assert [case.kind for case in record.cases] == [CaseKind.SHOULD_FIRE, CaseKind.SHOULD_NOT_FIRE]
    assert record.reliance is None
    assert "reliance" not in record.to_json()


def test_reliance_and_defaults_fixture_reads_the_claim_scope() -> None:
    record = ExtEval.parse(load(f"{VALID}/reliance-and-defaults.json"))
    assert record.identity is Identity.CONTENT
    assert record.defaults is not None
    assert record.defaults.kind == 3184
    assert record.reliance is not None
    assert record.reliance.runner is None
    assert record.reliance.door == "chat.openagents.com"


def test_key_sets_match_the_reference_schema() -> None:
    schema = load("schemas/ext-eval.v1.json")
    assert set(schema["properties"]) == {
        "v",
        "gate",
        "cases",
        "headline",
        "requester",
        "reliance",
        "identity",
        "distribution",
        "defaults",
    }
    assert tuple(schema["properties"]["reliance"]["anyOf"][1]["properties"]) == RELIANCE_KEYS
    assert [word for word in schema["properties"]["identity"]["enum"] if word] == [item.value for item in Identity]
    kinds = schema["properties"]["cases"]["items"]["properties"]["kind"]["enum"]
    assert kinds == [item.value for item in CaseKind]


def base() -> dict[str, JsonValue]:
    value = load(f"{VALID}/reliance-and-defaults.json")
    assert isinstance(value, dict)
    return value


@pytest.mark.parametrize(
    ("has_baseline", "baseline_passed", "ok"),
    [(True, 1, True), (False, None, True), (True, None, False), (False, 1, False), (None, 1, True), (None, None, True)],
)
def test_baseline_passed_is_null_exactly_without_a_baseline(
    has_baseline: bool | None, baseline_passed: int | None, ok: bool
) -> None:
    value = base()
    value["headline"]["baseline_passed"] = baseline_passed
    if ok:
        assert ExtEval.parse(value, has_baseline=has_baseline).headline.baseline_passed == baseline_passed
    else:
        with pytest.raises(ContractError) as caught:
            ExtEval.parse(value, has_baseline=has_baseline)
        assert caught.value.code is Code.IDENTITY_MISMATCH


def refused(value: JsonValue) -> ContractError:
    with pytest.raises(ContractError) as caught:
        ExtEval.parse(value)
    return caught.value


@pytest.mark.parametrize(
    ("edit", "code"),
    [
        (lambda v: v["headline"].update(total=3), Code.IDENTITY_MISMATCH),
        (lambda v: v["headline"].update(subject_passed=3, total=2), Code.IDENTITY_MISMATCH),
        (lambda v: v["headline"].update(baseline_passed=3), Code.IDENTITY_MISMATCH),
        (lambda v: v["headline"].update(subject_passed=-1), Code.MALFORMED),
        (lambda v: v["headline"].update(subject_passed=1.0), Code.MALFORMED),
        (lambda v: v["headline"].update(extra=1), Code.UNSUPPORTED_FEATURE),
        (lambda v: v["cases"].append(dict(v["cases"][0])), Code.MALFORMED),
        (lambda v: v["cases"][0].update(id=".hidden"), Code.MALFORMED),
        (lambda v: v["cases"][0].update(id="results"), Code.MALFORMED),
        (lambda v: v["cases"][0].update(kind=1), Code.MALFORMED),
        (lambda v: v.update(cases=[{"id": f"c{i:03}", "kind": "should-fire"} for i in range(257)]), Code.MALFORMED),
        (lambda v: v["reliance"].update(host=""), Code.MALFORMED),
        (lambda v: v["reliance"].update(host="h" * 257), Code.MALFORMED),
        (lambda v: v["reliance"].update(host=7), Code.MALFORMED),
        (lambda v: v.update(distribution="d" * 257), Code.MALFORMED),
        (lambda v: v.update(identity=1), Code.MALFORMED),
        (lambda v: v.update(reliance=[]), Code.MALFORMED),
        (lambda v: v["defaults"].update(coordinate="3184:x:y"), Code.UNSUPPORTED_FEATURE),
        (lambda v: v["defaults"].update(id="AB" * 32), Code.MALFORMED),
        (lambda v: v.update(requester={"id": "ab" * 32, "pubkey": "cd" * 32, "kind": 3184}), Code.IDENTITY_MISMATCH),
        (lambda v: v.pop("requester"), Code.MALFORMED),
        (lambda v: v.update(gate="sha256:" + "A" * 64), Code.MALFORMED),
    ],
)
def test_each_rule_refuses(edit: Callable[[Any], object], code: Code) -> None:
    value = base()
    edit(value)
    assert refused(value).code is code


def test_optional_keys_keep_absent_null_and_value_apart() -> None:
    plain = load(f"{VALID}/local.json")
    assert isinstance(plain, dict)
    for key in ("reliance", "identity", "distribution", "defaults"):
        with_null = copy.deepcopy(plain)
        with_null[key] = None
        parsed = ExtEval.parse(with_null)
        assert parsed.nulls == {key}
        assert canonical(parsed.to_json()) == canonical(with_null)
        assert canonical(ExtEval.parse(plain).to_json()) != canonical(with_null)


def test_a_reliance_with_omitted_entries_keeps_them_omitted() -> None:
    value = base()
    del value["reliance"]["model"]
    record = ExtEval.parse(value)
    assert record.reliance is not None
    assert record.reliance.omitted == {"model"}
    assert "model" not in record.to_json()["reliance"]
    assert canonical(record.to_json()) == canonical(value)


def test_reliance_shared_and_varied() -> None:
    original = Reliance(runner="r", host="h1", door="d", model=None, agent="a@1")
    rerun = Reliance(runner="r", host="h2", door="d", model="m", agent=None)
    assert original.shared(rerun) == ("runner", "door")
    assert original.varied(rerun) == ("host",)
