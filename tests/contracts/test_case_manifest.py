"""The case manifest against the reference's fixtures and each §14.1 rule."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from eval_runner.contracts.case_manifest import (
    CASE_SCHEMA,
    CaseEntry,
    CaseManifest,
    case_manifest,
    fixture_path,
)
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.ext_eval import CaseKind
from eval_runner.contracts.refs import ArtifactRef
from eval_runner.contracts.strict_json import JsonValue, canonical, digest_bytes
from tests.support.reference_files import load, names, raw

VALID = "eval-ext/eval-case/valid"
INVALID = "eval-ext/eval-case/invalid"

#: The reference's code for each invalid fixture (crates/nostr eval_ext::parse_case_manifest). Runs out
#: of range is `malformed` there, not `limit_exceeded`.
INVALID_CODES = {
    "no-cases": (Code.MALFORMED, "cases"),
    "oversize-file": (Code.LIMIT_EXCEEDED, "cases[0].prompt.size"),
    "prompt-schema": (Code.IDENTITY_MISMATCH, "cases[0].prompt.schema"),
    "too-many-runs": (Code.MALFORMED, "cases[0].runs"),
    "unknown-field": (Code.UNSUPPORTED_FEATURE, "cases[0].max_turns"),
    "unknown-kind": (Code.UNSUPPORTED_FEATURE, "cases[0].kind"),
    "wrong-version": (Code.UNSUPPORTED_VERSION, "v"),
}


def test_every_fixture_has_an_expectation() -> None:
    assert names(INVALID) == sorted(INVALID_CODES)
    assert names(VALID) == ["one-case", "two-cases"]


@pytest.mark.parametrize("name", names(VALID))
def test_valid_fixture_parses_and_keeps_its_bytes(name: str) -> None:
    value = load(f"{VALID}/{name}.json")
    manifest = CaseManifest.parse(value)
    assert canonical(manifest.to_json()) == canonical(value)
    assert CaseManifest.parse_bytes(raw(f"{VALID}/{name}.json")) == manifest


@pytest.mark.parametrize("name", sorted(INVALID_CODES))
def test_invalid_fixture_is_refused_with_the_reference_code(name: str) -> None:
    code, path = INVALID_CODES[name]
    with pytest.raises(ContractError) as caught:
        CaseManifest.parse(load(f"{INVALID}/{name}.json"))
    assert (caught.value.code, caught.value.path) == (code, path)


def test_two_cases_reads_files_and_kinds() -> None:
    manifest = CaseManifest.parse(load(f"{VALID}/two-cases.json"))
    first, second = manifest.cases
    assert (first.id, first.kind, first.runs) == ("map-repo", CaseKind.SHOULD_FIRE, 3)
    assert [grader.name for grader in first.graders] == ["criteria"]
    assert [fixture.name for fixture in first.fixtures] == ["src/main.rs"]
    assert len(list(first.files())) == 3
    assert second.config is not None
    assert list(second.files()) == [second.prompt, second.config]
    assert manifest.should_not_fire() == 1


def test_the_builder_writes_jcs_bytes_and_their_ref() -> None:
    fixture = load(f"{VALID}/two-cases.json")
    entries = CaseManifest.parse(fixture).cases
    data, ref = case_manifest(entries)
    assert data == canonical(fixture)
    assert ref == ArtifactRef(
        digest=digest_bytes(data), size=len(data), media_type="application/json", schema=CASE_SCHEMA
    )
    assert ref.matches(data)


def test_the_builder_refuses_what_a_reader_would() -> None:
    entries = CaseManifest.parse(load(f"{VALID}/two-cases.json")).cases
    with pytest.raises(ContractError) as caught:
        case_manifest(tuple(reversed(entries)))
    assert caught.value.code is Code.MALFORMED
    with pytest.raises(ContractError) as caught:
        case_manifest((entries[0], entries[0]))
    assert caught.value.code is Code.CONFLICT


def base() -> dict[str, JsonValue]:
    value = load(f"{VALID}/two-cases.json")
    assert isinstance(value, dict)
    return value


def case(value: dict[str, Any], index: int = 0) -> dict[str, Any]:
    found = value["cases"][index]
    assert isinstance(found, dict)
    return found


def more_graders(count: int) -> Callable[[Any], object]:
    def edit(value: Any) -> None:
        grader = case(value)["graders"][0]
        case(value)["graders"] = [dict(grader, name=f"g{index:03}") for index in range(count)]

    return edit


@pytest.mark.parametrize(
    ("edit", "code", "path"),
    [
        (lambda v: v["cases"].reverse(), Code.MALFORMED, "cases[1].id"),
        (lambda v: case(v, 1).update(id="map-repo"), Code.CONFLICT, "cases[1].id"),
        (lambda v: case(v).update(id="results"), Code.MALFORMED, "cases[0].id"),
        (lambda v: case(v).update(id=".git"), Code.MALFORMED, "cases[0].id"),
        (lambda v: case(v).update(id="a/b"), Code.MALFORMED, "cases[0].id"),
        (lambda v: case(v).update(id="x" * 129), Code.MALFORMED, "cases[0].id"),
        (lambda v: case(v).update(runs=0), Code.MALFORMED, "cases[0].runs"),
        (lambda v: case(v).update(runs=True), Code.MALFORMED, "cases[0].runs"),
        (lambda v: case(v).update(runs=2.0), Code.MALFORMED, "cases[0].runs"),
        (lambda v: case(v).update(graders=[]), Code.MALFORMED, "cases[0]"),
        (lambda v: case(v).pop("config"), Code.MALFORMED, "cases[0].config"),
        (lambda v: case(v, 1)["config"].update(schema="other.v1"), Code.IDENTITY_MISMATCH, "cases[1].config.schema"),
        (lambda v: case(v)["prompt"].pop("schema"), Code.IDENTITY_MISMATCH, "cases[0].prompt.schema"),
        (lambda v: case(v)["graders"][0]["artifact"].update(size=1_048_577), Code.LIMIT_EXCEEDED, None),
        (lambda v: case(v)["graders"][0]["artifact"].update(schema="x"), Code.IDENTITY_MISMATCH, None),
        (lambda v: case(v)["graders"][0].update(name="n" * 65), Code.MALFORMED, "cases[0].graders[0].name"),
        (lambda v: case(v)["graders"][0].update(note="x"), Code.UNSUPPORTED_FEATURE, "cases[0].graders[0].note"),
        (lambda v: case(v)["graders"].append(case(v)["graders"][0]), Code.MALFORMED, "cases[0].graders[1].name"),
        (more_graders(65), Code.LIMIT_EXCEEDED, "cases[0].graders"),
        (lambda v: case(v)["fixtures"][0]["artifact"].update(size=1_048_577), Code.LIMIT_EXCEEDED, None),
        (lambda v: case(v)["fixtures"][0].update(path="../etc/passwd"), Code.MALFORMED, "cases[0].fixtures[0].path"),
        (lambda v: case(v)["fixtures"].append(case(v)["fixtures"][0]), Code.MALFORMED, "cases[0].fixtures[1].path"),
        (lambda v: v.update(requires=["x"]), Code.UNSUPPORTED_FEATURE, "requires"),
        (lambda v: v.update(requires={}), Code.MALFORMED, "requires"),
        (lambda v: v.update(meta=[]), Code.MALFORMED, "meta"),
        (lambda v: v.update(cases={}), Code.MALFORMED, "cases"),
    ],
)
def test_each_rule_refuses(edit: Callable[[Any], object], code: Code, path: str | None) -> None:
    value = base()
    edit(value)
    with pytest.raises(ContractError) as caught:
        CaseManifest.parse(value)
    assert caught.value.code is code
    if path is not None:
        assert caught.value.path == path


def test_more_than_256_cases_is_over_the_limit() -> None:
    value = base()
    template = case(value, 1)
    value["cases"] = [dict(template, id=f"case-{index:03}") for index in range(257)]
    with pytest.raises(ContractError) as caught:
        CaseManifest.parse(value)
    assert caught.value.code is Code.LIMIT_EXCEEDED
    value["cases"] = value["cases"][:256]
    assert len(CaseManifest.parse(value).cases) == 256


def test_a_case_with_config_and_no_grader_files_is_accepted() -> None:
    value = base()
    case(value)["graders"] = []
    case(value)["config"] = copy.deepcopy(case(value, 1)["config"])
    assert CaseManifest.parse(value).cases[0].graders == ()


def test_meta_is_kept_for_the_bytes() -> None:
    value = base()
    value["meta"] = {"note": "kept"}
    assert canonical(CaseManifest.parse(value).to_json()) == canonical(value)


@pytest.mark.parametrize("path", ["a", "src/main.rs", "a.b/c-d_e", "é/ü.txt", "x" * 512])
def test_fixture_paths_accepted(path: str) -> None:
    assert fixture_path(path, "p") == path


@pytest.mark.parametrize(
    "path", ["", "/abs", "a//b", "a/./b", "a/..", "..", ".", "a\\b", "a\nb", "a\x7fb", "a\x85b", "x" * 513, "a/", 3]
)
def test_fixture_paths_refused(path: object) -> None:
    with pytest.raises(ContractError) as caught:
        fixture_path(path, "p")
    assert caught.value.code is Code.MALFORMED


def test_case_entry_to_json_round_trips() -> None:
    value = case(base())
    assert canonical(CaseEntry.parse(value, "c").to_json()) == canonical(value)
