"""The hosted profile: fixed documents, the phone's request body, and the run/publish input rules."""

from __future__ import annotations

from typing import Any

import pytest

from eval_runner.contracts.draft import Draft
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.execution import ExecuteBody, open_body
from eval_runner.contracts.hosted import (
    CONTEXT_REF,
    LOCK_REF,
    PROGRAM_DOCUMENT,
    PROGRAM_REF,
    REQUIREMENTS_REF,
    RUNNER,
    PublishInput,
    RunInput,
    build_execute_body,
    check_requirements,
    check_target,
    hosted_refusal,
    hosted_refusal_code,
    parse_input,
    request_tags,
    target,
)
from eval_runner.contracts.refs import ArtifactRef, DefinitionRef
from eval_runner.contracts.strict_json import canonical
from tests.support.hosted_inputs import RELEASE, REPO_MAP, SCHEMA, chat, draft, published

REPORT = {
    "digest": "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
    "size": 24817,
    "media_type": "application/json",
    "schema": "openagents.eval-report.v1",
}
CHECK = "cd" * 32
NINE_TESTS = "the hosted runner runs at most 8 tests, and this set has 9"
BOTH_ARMS = "the hosted runner always runs both arms"


def refused(value: object) -> ContractError:
    with pytest.raises(ContractError) as caught:
        parse_input(value)
    return caught.value


# -- the fixed documents ---------------------------------------------------------------------------


def test_the_four_fixed_documents_have_the_spec_digests() -> None:
    expected = {
        "program": ("sha256:59eb780d98a6b54b3b93195172e80d9b5115261277ad8bfd6192907c1b1e662e", 237),
        "lock": ("sha256:afc85046b5a4f254530ae3cb4a95bbaf79e1b55b1edd1485e3b26c6505d49ee8", 303),
        "context": ("sha256:06dd03ff94bea9772084f7b483fd206e90ccb9fa25ec3e44219ce73cfbc1fe1f", 50),
        "requirements": ("sha256:978ee5f1df25cd197f3bfefbbd6bad8abb8c87e0f718672c19d8fd68d240168c", 150),
    }
    refs = {"program": PROGRAM_REF, "lock": LOCK_REF, "context": CONTEXT_REF, "requirements": REQUIREMENTS_REF}
    for name, ref in refs.items():
        assert (ref.digest, ref.size) == expected[name], name
        assert (ref.media_type, ref.schema) == ("application/json", SCHEMA)


def test_the_program_document_is_the_spec_text() -> None:
    text = (
        b'{"bounds":{"arms":2,"cases":8,"draft_bytes":65536,"runs":3},"effects":["read","write"],'
        b'"input":"openagents.ext-eval-hosted.v1","program":"ext-eval",'
        b'"runs":"openagents ext eval run, in the run sandbox","v":"openagents.ext-eval-hosted.v1"}'
    )
    assert canonical(PROGRAM_DOCUMENT) == text
    assert PROGRAM_REF.matches(text)


def test_target_names_the_runners_program() -> None:
    assert target(RUNNER).to_json() == {
        "id": f"{RUNNER}:ext-eval/run",
        "artifact": {
            "digest": "sha256:59eb780d98a6b54b3b93195172e80d9b5115261277ad8bfd6192907c1b1e662e",
            "size": 237,
            "media_type": "application/json",
            "schema": SCHEMA,
        },
    }
    with pytest.raises(ContractError):
        target("not-a-key")


def test_check_target_admits_only_the_runners_own_program() -> None:
    check_target(target(RUNNER), RUNNER)
    other = "55" * 32
    for found in (
        target(other),
        DefinitionRef(id=f"{RUNNER}:ext-eval/run", artifact=ArtifactRef.of_bytes(b"{}", "application/json")),
    ):
        with pytest.raises(ContractError) as caught:
            check_target(found, RUNNER)
        assert (caught.value.code, caught.value.path) == (Code.NOT_ADMITTED, "target")


def test_check_requirements_admits_only_read_and_sandbox_write() -> None:
    check_requirements(REQUIREMENTS_REF)
    with pytest.raises(ContractError) as caught:
        check_requirements(CONTEXT_REF)
    assert caught.value.code is Code.NOT_ADMITTED


# -- the phone's request body ------------------------------------------------------------------------


def test_the_request_body_is_the_spec_example() -> None:
    built = build_execute_body(RUNNER, "9e107d9d372bb6826bd81d3542a419d6", published(), 1_790_000_000)
    assert built.to_json() == {
        "v": "openagents.execution.v1",
        "requires": [],
        "type": "execute",
        "request": "9e107d9d372bb6826bd81d3542a419d6",
        "attempt": 1,
        "run": "9e107d9d372bb6826bd81d3542a419d6",
        "target": target(RUNNER).to_json(),
        "lock": {
            "digest": "sha256:afc85046b5a4f254530ae3cb4a95bbaf79e1b55b1edd1485e3b26c6505d49ee8",
            "size": 303,
            "media_type": "application/json",
            "schema": SCHEMA,
        },
        "input": published(),
        "context": {
            "digest": "sha256:06dd03ff94bea9772084f7b483fd206e90ccb9fa25ec3e44219ce73cfbc1fe1f",
            "size": 50,
            "media_type": "application/json",
            "schema": SCHEMA,
        },
        "requirements": {
            "digest": "sha256:978ee5f1df25cd197f3bfefbbd6bad8abb8c87e0f718672c19d8fd68d240168c",
            "size": 150,
            "media_type": "application/json",
            "schema": SCHEMA,
        },
        "bounds": {"wall_ms": 3_600_000},
        "deadline": 1_790_003_600,
        "retain_until": 1_790_608_400,
    }


def test_deadline_and_retention_arithmetic() -> None:
    built = build_execute_body(RUNNER, "req-1", published(), 1_000)
    assert (built.deadline, built.retain_until) == (4_600, 609_400)
    assert request_tags(RUNNER, built.deadline) == [["p", RUNNER], ["expiration", "4600"]]


def test_the_built_body_opens_as_the_runner_opens_it() -> None:
    built = build_execute_body(RUNNER, "req-1", RunInput.parse(chat(2)), 1_000)
    tags = dict(request_tags(RUNNER, built.deadline))
    opened = open_body(canonical(built.to_json()), tags["expiration"])
    assert isinstance(opened, ExecuteBody)
    assert opened == built
    check_target(opened.target, RUNNER)
    check_requirements(opened.requirements)
    assert parse_input(opened.input) == RunInput.parse(chat(2))


@pytest.mark.parametrize(
    ("runner", "request_id", "value"),
    [("nope", "req", published()), (RUNNER, "has space", published()), (RUNNER, "req", published(runs=0))],
)
def test_the_builder_refuses_what_the_runner_would(runner: str, request_id: str, value: Any) -> None:
    with pytest.raises(ContractError):
        build_execute_body(runner, request_id, value, 1_000)


# -- the input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        published(),
        published(check=CHECK),
        published(validates=None),
        published(validates=CHECK),
        published(subject="draft", draft=draft(0)),
        published(suite="draft", draft=draft(8)),
        chat(1),
        {"v": SCHEMA, "action": "publish", "report": REPORT},
    ],
)
def test_valid_inputs_round_trip(value: dict[str, Any]) -> None:
    parsed = parse_input(value)
    assert canonical(parsed.to_json()) == canonical(value)


def test_validates_absent_and_null_are_distinct() -> None:
    absent = RunInput.parse(published())
    null = RunInput.parse(published(validates=None))
    assert "validates" not in absent.to_json()
    assert null.to_json()["validates"] is None
    assert RunInput.parse(published(validates=CHECK)).validates == CHECK


def test_a_run_input_names_its_sides() -> None:
    parsed = RunInput.parse(chat(3))
    assert (parsed.suite, parsed.subject, parsed.needs_draft) == ("draft", "draft", True)
    assert parsed.draft == Draft.parse(draft(3))
    assert parsed.turns(3) == 3 * 1 * 2
    publish = parse_input({"v": SCHEMA, "action": "publish", "report": REPORT})
    assert isinstance(publish, PublishInput)
    assert publish.report.size == 24817


@pytest.mark.parametrize(
    ("value", "code", "path", "message"),
    [
        (published(runs=0), Code.MALFORMED, "input.runs", "at least 1"),
        (published(runs=4), Code.LIMIT_EXCEEDED, "input.runs", "the hosted runner runs at most 3 per arm"),
        (published(runs=-1), Code.MALFORMED, "input.runs", None),
        (published(runs=2.0), Code.MALFORMED, "input.runs", None),
        (published(baseline=False), Code.LIMIT_EXCEEDED, "input.baseline", BOTH_ARMS),
        (published(baseline=None), Code.LIMIT_EXCEEDED, "input.baseline", None),
        (chat(9), Code.LIMIT_EXCEEDED, "input.draft.cases", NINE_TESTS),
        (chat(0), Code.MALFORMED, "input.draft.cases", "a draft suite has at least one test"),
        (published(check=CHECK, validates=CHECK), Code.MALFORMED, "input.validates", None),
        (published(suite="draft"), Code.MALFORMED, "input.draft", "the draft is missing"),
        (published(subject="draft"), Code.MALFORMED, "input.draft", "the draft is missing"),
        (published(draft=draft(1)), Code.MALFORMED, "input.draft", None),
        (published(check="AB" * 32), Code.MALFORMED, "input.check", None),
        (published(validates="x"), Code.MALFORMED, "input.validates", None),
        (published(suite={**RELEASE, "kind": 3189}), Code.MALFORMED, "input.suite.kind", None),
        (published(suite="published"), Code.MALFORMED, "input.suite", None),
        (published(subject={**REPO_MAP, "id": "x"}), Code.MALFORMED, "input.subject.id", None),
        (published(extra=1), Code.UNSUPPORTED_FEATURE, "input.extra", None),
        (published(v="openagents.ext-eval-hosted.v2"), Code.UNSUPPORTED_VERSION, "input.v", None),
        (published(action="train"), Code.UNSUPPORTED_FEATURE, "input.action", None),
        ({"v": SCHEMA, "action": "publish", "report": {**REPORT, "schema": "x.v1"}}, Code.IDENTITY_MISMATCH,
         "input.report.schema", None),
        ({"v": SCHEMA, "action": "publish", "report": REPORT, "runs": 1}, Code.UNSUPPORTED_FEATURE, "input.runs", None),
        ("run", Code.MALFORMED, "input", None),
    ],
)  # fmt: skip
def test_input_refusals(value: object, code: Code, path: str, message: str | None) -> None:
    error = refused(value)
    assert (error.code, error.path) == (code, path)
    if message is not None:
        assert error.message == message


def big_draft() -> dict[str, Any]:
    value = draft(1)
    value["tool"]["skill"] = "x" * (16 * 1024)
    value["cases"][0]["graders"] = [{"name": f"g{n}", "text": "y" * 7 * 1024} for n in range(8)]
    return value


def test_a_draft_over_64_kib_is_a_limit() -> None:
    error = refused(chat(draft=big_draft()))
    assert (error.code, error.path) == (Code.LIMIT_EXCEEDED, "input.draft")


def test_the_serialised_draft_bound_counts_escapes() -> None:
    # JSON escapes make the serialised text longer than the characters: 33,000 newlines are 66,000 bytes.
    value = draft(1)
    value["cases"][0]["prompt"] = "p" + "\n" * 33_000
    error = refused(chat(draft=value))
    assert error.code is Code.LIMIT_EXCEEDED


def test_a_draft_error_names_its_field_under_input() -> None:
    value = draft(1)
    value["cases"][0]["kind"] = "maybe"
    error = refused(chat(draft=value))
    assert (error.code, error.path) == (Code.UNSUPPORTED_FEATURE, "input.draft.cases[0].kind")


@pytest.mark.parametrize("code", list(Code))
def test_hosted_refusal_code_collapses_everything_but_limits_and_admission(code: Code) -> None:
    expected = {
        Code.LIMIT_EXCEEDED: Code.TOO_LARGE,
        Code.TOO_LARGE: Code.TOO_LARGE,
        Code.NOT_ADMITTED: Code.NOT_ADMITTED,
    }.get(code, Code.MALFORMED)
    assert hosted_refusal_code(code) is expected


@pytest.mark.parametrize(
    ("value", "code", "message"),
    [
        (published(runs=4), Code.TOO_LARGE, "limit_exceeded: input.runs: the hosted runner runs at most 3 per arm"),
        (published(baseline=False), Code.TOO_LARGE, f"limit_exceeded: input.baseline: {BOTH_ARMS}"),
        (published(runs=0), Code.MALFORMED, "malformed: input.runs: at least 1"),
        (published(v="x"), Code.MALFORMED, None),
        (chat(9), Code.TOO_LARGE, None),
        (chat(draft=big_draft()), Code.TOO_LARGE, None),
    ],
)  # fmt: skip
def test_the_runner_answers_input_errors_with_hosted_codes(value: object, code: Code, message: str | None) -> None:
    answer = hosted_refusal(refused(value))
    assert answer[0] is code
    if message is not None:
        assert answer[1] == message
