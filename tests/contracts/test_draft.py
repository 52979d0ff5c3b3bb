"""The draft `openagents.eval-draft.v1`: the reference fixtures, each rule, and the chat-made subject."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from eval_runner.contracts.draft import (
    DRAFT_SCHEMA,
    Draft,
    draft_suite_id,
    made_record,
    made_slug,
    made_subject,
)
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.strict_json import canonical, digest_bytes, read
from tests.support.paths import TESTS

FIXTURES = TESTS / "vectors" / "reference" / "eval-ext" / "eval-draft"
VALID = sorted((FIXTURES / "valid").glob("*.json"))
INVALID = sorted((FIXTURES / "invalid").glob("*.json"))
T = "c5d77c5216669e9a39902f875d11224a4576a3b5f8f09c72e8c8771f839cc971"

#: What the reference answers for each invalid fixture, by file name.
INVALID_CODES = {
    "both-kinds-of-tool": Code.MALFORMED,
    "no-graders": Code.MALFORMED,
    "too-many-graders": Code.MALFORMED,
    "unknown-field": Code.UNSUPPORTED_FEATURE,
    "wrong-version": Code.UNSUPPORTED_VERSION,
}


def fixture(name: str) -> Any:
    return read((FIXTURES / "valid" / f"{name}.json").read_bytes())


def refused(value: object) -> ContractError:
    with pytest.raises(ContractError) as caught:
        Draft.parse(value)
    return caught.value


def test_every_fixture_is_vendored() -> None:
    assert [path.stem for path in VALID] == ["catalog-tool", "chat-made-tool", "no-tests-yet"]
    assert sorted(path.stem for path in INVALID) == sorted(INVALID_CODES)


@pytest.mark.parametrize("path", VALID, ids=lambda path: path.stem)
def test_valid_fixtures_parse_and_give_back_their_jcs_bytes(path: Path) -> None:
    value = read(path.read_bytes())
    assert canonical(Draft.parse(value).to_json()) == canonical(value)


@pytest.mark.parametrize("path", INVALID, ids=lambda path: path.stem)
def test_invalid_fixtures_are_refused_as_the_reference_does(path: Path) -> None:
    assert refused(read(path.read_bytes())).code is INVALID_CODES[path.stem]


def test_the_fixture_tools_are_one_kind_each() -> None:
    catalog = Draft.parse(fixture("catalog-tool")).tool
    assert not catalog.made_in_chat
    assert catalog.catalog is not None
    assert catalog.catalog.event is not None
    made = Draft.parse(fixture("chat-made-tool")).tool
    assert made.made_in_chat
    assert made.skill == "Group std, external, then crate imports."
    assert made.uses == (f"{T}:project-map/map",)


def chat() -> Any:
    return copy.deepcopy(fixture("chat-made-tool"))


def with_graders(names: list[str]) -> Any:
    value = chat()
    value["cases"][0]["graders"] = [{"name": name, "text": "x"} for name in names]
    return value


def case(ident: str) -> dict[str, Any]:
    return {"id": ident, "kind": "should-fire", "prompt": "p", "graders": [{"name": "g", "text": "t"}]}


@pytest.mark.parametrize(
    ("mutate", "code", "path"),
    [
        (lambda d: d["tool"].update(name="x" * 81), Code.LIMIT_EXCEEDED, "tool.name"),
        (lambda d: d["tool"].update(name="   "), Code.MALFORMED, "tool.name"),
        (lambda d: d["tool"].update(summary="s" * 401), Code.LIMIT_EXCEEDED, "tool.summary"),
        (lambda d: d["tool"].update(skill=" \n"), Code.MALFORMED, "tool.skill"),
        (lambda d: d["tool"].update(skill="s" * 16_385), Code.MALFORMED, "tool.skill"),
        (lambda d: d["tool"].update(skill=None), Code.MALFORMED, "tool"),
        (lambda d: d["tool"].update(uses=[f"{T}:p/c{n}" for n in range(9)]), Code.MALFORMED, "tool.uses"),
        (lambda d: d["tool"].update(uses=[f"{T}:p/c", f"{T}:p/c"]), Code.MALFORMED, "tool.uses"),
        (lambda d: d["tool"].update(uses=["repo-map"]), Code.MALFORMED, "tool.uses[0]"),
        (lambda d: d["tool"].update(colour="red"), Code.UNSUPPORTED_FEATURE, "tool.colour"),
        (lambda d: d["cases"][0].update(kind="should-maybe-fire"), Code.UNSUPPORTED_FEATURE, "cases[0].kind"),
        (lambda d: d["cases"][0].update(id=".git"), Code.MALFORMED, "cases[0].id"),
        (lambda d: d["cases"][0].update(prompt="\t"), Code.MALFORMED, "cases[0].prompt"),
        (lambda d: d["cases"][0].update(notes=""), Code.UNSUPPORTED_FEATURE, "cases[0].notes"),
        (lambda d: d["cases"][0]["graders"][0].update(text=" "), Code.MALFORMED, "cases[0].graders[0].text"),
        (lambda d: d["cases"][0]["graders"][0].update(name="g" * 65), Code.MALFORMED, "cases[0].graders[0].name"),
        (lambda d: d.update(cases=[case(f"c{n}") for n in range(17)]), Code.LIMIT_EXCEEDED, "cases"),
        (lambda d: d.update(cases=[case("same"), case("other"), case("same")]), Code.CONFLICT, "cases[2].id"),
        (lambda d: d.pop("cases"), Code.MALFORMED, "cases"),
    ],
)
def test_each_rule_refuses_with_its_code(mutate: Any, code: Code, path: str) -> None:
    value = chat()
    mutate(value)
    error = refused(value)
    assert (error.code, error.path) == (code, path)


def test_a_catalog_tool_may_not_turn_on_other_tools() -> None:
    value = copy.deepcopy(fixture("catalog-tool"))
    value["tool"]["uses"] = [f"{T}:project-map/map"]
    assert refused(value).path == "tool"


def test_graders_are_strictly_increasing_by_name() -> None:
    assert len(Draft.parse(with_graders(["a", "b", "c"])).cases[0].graders) == 3
    assert refused(with_graders(["b", "a"])).path == "cases[0].graders[1]"
    assert refused(with_graders(["a", "a"])).path == "cases[0].graders[1]"


def test_sixteen_cases_and_sixteen_graders_are_the_most() -> None:
    value = chat()
    value["cases"] = [case(f"c{n:02}") for n in range(16)]
    value["cases"][0]["graders"] = [{"name": f"g{n:02}", "text": "x"} for n in range(16)]
    draft = Draft.parse(value)
    assert (len(draft.cases), len(draft.cases[0].graders)) == (16, 16)


def test_an_oversized_draft_is_a_limit_before_anything_else() -> None:
    value = chat()
    value["v"] = "openagents.eval-draft.v9"
    value["cases"][0]["prompt"] = "p" * 65_536
    error = refused(value)
    assert (error.code, error.path) == (Code.LIMIT_EXCEEDED, "")


def test_the_size_bound_is_on_jcs_bytes() -> None:
    value = chat()
    value["cases"][0]["prompt"] = ""
    room = 65_536 - len(canonical(value))
    value["cases"][0]["prompt"] = "p" * room
    assert len(canonical(value)) == 65_536
    Draft.parse(value)
    value["cases"][0]["prompt"] += "p"
    assert refused(value).code is Code.LIMIT_EXCEEDED


def test_paths_carry_the_prefix_the_caller_gives() -> None:
    value = chat()
    value["cases"][0]["kind"] = "never"
    with pytest.raises(ContractError) as caught:
        Draft.parse(value, "input.draft")
    assert caught.value.path == "input.draft.cases[0].kind"


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("Brief the Layout!", "brief-the-layout"),
        ("Tidy imports", "tidy-imports"),
        ("  --Hello,   World--  ", "hello-world"),
        ("Crème brûlée", "cr-me-br-l-e"),
        ("!!!", "chat-tool"),
        ("", "chat-tool"),
        ("日本語", "chat-tool"),
        ("a" * 60, "a" * 48),
        ("a" * 47 + " b", "a" * 47),
        ("x" * 47 + "YZ", "x" * 47 + "y"),
    ],
)
def test_made_slug(name: str, slug: str) -> None:
    assert made_slug(name) == slug


def test_a_chat_made_tool_is_named_by_its_requester_and_record() -> None:
    tool = Draft.parse(fixture("chat-made-tool")).tool
    requester = "ab" * 32
    subject = made_subject(tool, requester)
    assert subject.id == f"{requester}:tidy-imports/skill"
    record = made_record(tool)
    assert json.loads(record) == {
        "name": "Tidy imports",
        "summary": "Keeps Rust imports grouped and sorted.",
        "skill": "Group std, external, then crate imports.",
        "uses": [f"{T}:project-map/map"],
    }
    assert record == canonical(json.loads(record))
    assert subject.artifact.to_json() == {
        "digest": digest_bytes(record),
        "size": len(record),
        "media_type": "application/json",
        "schema": DRAFT_SCHEMA,
    }
    assert subject.event is None


def test_a_catalog_tool_has_no_made_subject() -> None:
    tool = Draft.parse(fixture("catalog-tool")).tool
    with pytest.raises(ContractError):
        made_subject(tool, "ab" * 32)


def test_a_bad_requester_cannot_name_a_subject() -> None:
    tool = Draft.parse(fixture("chat-made-tool")).tool
    with pytest.raises(ContractError):
        made_subject(tool, "AB" * 32)


def test_a_draft_suite_is_authored_by_the_runner() -> None:
    tool = Draft.parse(fixture("chat-made-tool")).tool
    assert draft_suite_id("cd" * 32, tool) == f"{'cd' * 32}:tidy-imports-tests/suite"
