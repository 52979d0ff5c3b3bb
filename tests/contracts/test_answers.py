"""Answers: accepted, progress, every result outcome's key set, control results, and the run/publish outputs."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from eval_runner.contracts.answers import (
    AcceptedBody,
    CancelResult,
    ProgressBody,
    ReplayRecord,
    ReplayResult,
    ResultBody,
    StatusResult,
    parse_answer,
    read_answer,
)
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.outputs import Headline, PublishOutput, RunOutput, parse_output
from eval_runner.contracts.refs import EventRef
from eval_runner.contracts.strict_json import canonical
from tests.support.execution_answers import (
    BINDING,
    HEAD,
    REPORT,
    ROOT,
    R,
    accepted,
    completed_run,
    progress,
    refusal,
    terminal,
    unknown,
)

RUN_OUTPUT = RunOutput(
    report=REPORT,
    sealed=EventRef("77" * 32, R, 3188),
    headline=Headline(6, 2, 6),
    verdict="pass",
    notes=("Faster: 12.0 s against 30.0 s per run.",),
)
PUBLISH_OUTPUT = PublishOutput(suite_release=EventRef("11" * 32, "22" * 32, 3184), result=EventRef("88" * 32, R, 3189))


def test_builders_give_the_spec_key_sets() -> None:
    assert canonical(ResultBody.completed(BINDING, ROOT, RUN_OUTPUT).to_json()) == canonical(completed_run())
    refused = ResultBody.refused(BINDING, Code.NOT_ADMITTED, refusal()["message"])
    assert canonical(refused.to_json()) == canonical(refusal())
    assert ResultBody.unknown(BINDING, ROOT).to_json() == unknown()
    cancelled = ResultBody.cancelled(BINDING, ROOT).to_json()
    assert cancelled == terminal("cancelled", message="the requester stopped the run")
    failed = ResultBody.failed(BINDING, ROOT, "x" * 500).to_json()
    assert (failed["code"], failed["message"]) == ("failed", "x" * 400)
    publish_failed = ResultBody.failed(BINDING, ROOT, "y" * 500, code="unavailable").to_json()
    assert (publish_failed["code"], len(publish_failed["message"])) == ("unavailable", 500)
    published = ResultBody.completed(BINDING, ROOT, PUBLISH_OUTPUT).to_json()
    assert published["artifacts"] == []
    assert published["output"] == PUBLISH_OUTPUT.to_json()


def test_unknown_results_have_no_code_or_message_keys() -> None:
    value = ResultBody.unknown(BINDING, ROOT).to_json()
    assert "code" not in value
    assert "message" not in value
    assert set(value) == {
        *HEAD,
        "type",
        "outcome",
        "dispatched",
        "output",
        "artifacts",
        "receipts",
        "verification",
        "integration",
        "record",
        "spend",
    }


@pytest.mark.parametrize(
    "value",
    [
        completed_run(),
        refusal(),
        {**refusal(), "run": ""},
        terminal("failed", code="failed", message="the agent crashed"),
        terminal("failed", code="too_large", message="the result is too large for the relay to hold"),
        terminal("cancelled", message="the requester stopped the run"),
        unknown(),
        ResultBody.completed(BINDING, ROOT, PUBLISH_OUTPUT).to_json(),
    ],
)
def test_results_round_trip(value: dict[str, Any]) -> None:
    parsed = ResultBody.parse(value)
    assert canonical(parsed.to_json()) == canonical(value)
    assert parse_answer(value) == parsed


def result_refused(value: object) -> ContractError:
    with pytest.raises(ContractError) as caught:
        ResultBody.parse(value)
    return caught.value


def mutated(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    value = copy.deepcopy(base)
    value.update(changes)
    return value


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({**unknown(), "code": None, "message": None}, ""),
        ({k: v for k, v in completed_run().items() if k != "message"}, ""),
        ({k: v for k, v in completed_run().items() if k not in ("code", "message")}, "code"),
        (mutated(completed_run(), artifacts=[]), "artifacts"),
        (mutated(completed_run(), output=None), "output"),
        (mutated(completed_run(), record=None), "record"),
        (mutated(completed_run(), dispatched=False), "dispatched"),
        (mutated(completed_run(), code="failed"), "code"),
        (mutated(refusal(), dispatched=True), "dispatched"),
        (mutated(refusal(), record=ROOT.to_json()), "record"),
        (mutated(refusal(), code=None), "code"),
        (mutated(refusal(), code="failed"), "code"),
        (terminal("failed", code="failed", message="m" * 401), "message"),
        (terminal("failed", code="failed", message=None), "code"),
        (terminal("cancelled", code="failed"), "code"),
        (mutated(unknown(), output=RUN_OUTPUT.to_json()), "output"),
        (mutated(refusal(), receipts=[{}]), "receipts"),
        (mutated(refusal(), spend=-1), "spend"),
        (mutated(unknown(), dispatched=False), "dispatched"),
    ],
)
def test_outcome_rules(value: object, path: str) -> None:
    assert result_refused(value).path == path


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (mutated(refusal(), outcome="paused"), Code.UNSUPPORTED_FEATURE),
        (mutated(refusal(), verification="passed"), Code.UNSUPPORTED_FEATURE),
        (mutated(refusal(), code="nope"), Code.UNSUPPORTED_FEATURE),
        (mutated(refusal(), extra=1), Code.UNSUPPORTED_FEATURE),
        (mutated(refusal(), v="openagents.execution.v2"), Code.UNSUPPORTED_VERSION),
        (mutated(refusal(), requires=["x"]), Code.UNSUPPORTED_FEATURE),
        (mutated(refusal(), type="accepted"), Code.MALFORMED),
        (mutated(refusal(), request=""), Code.MALFORMED),
    ],
)
def test_result_codes(value: object, code: Code) -> None:
    assert result_refused(value).code is code


def test_an_answer_of_an_unknown_type_is_unsupported() -> None:
    with pytest.raises(ContractError) as caught:
        parse_answer({**HEAD, "type": "receipt"})
    assert caught.value.code is Code.UNSUPPORTED_FEATURE


def test_accepted_round_trips() -> None:
    parsed = AcceptedBody.parse(accepted())
    assert (parsed.binding, parsed.record, parsed.controller) == (BINDING, ROOT, R)
    assert parsed.to_json() == accepted()
    assert read_answer(canonical(accepted())) == parsed


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"mailbox": "AB" * 32}, "mailbox"),
        ({"input_digest": "12" * 32}, "input_digest"),
        ({"retain_until": -5}, "retain_until"),
        ({"record": None}, "record"),
    ],
)
def test_accepted_rules(change: dict[str, Any], path: str) -> None:
    with pytest.raises(ContractError) as caught:
        AcceptedBody.parse({**accepted(), **change})
    assert caught.value.path == path


def test_progress_round_trips_and_keeps_other_meta() -> None:
    parsed = ProgressBody.parse(progress())
    assert (parsed.seq, parsed.status, parsed.completed, parsed.planned) == (3, "running", 2, 8)
    assert parsed.to_json() == progress()
    with_other = ProgressBody.parse(progress(note="inert"))
    assert with_other.other_meta == {"note": "inert"}
    assert canonical(with_other.to_json()) == canonical(progress(note="inert"))
    built = ProgressBody(BINDING, 0, "queued", 0, 8)
    assert ProgressBody.parse(built.to_json()) == built


@pytest.mark.parametrize(
    ("value", "code", "path"),
    [
        (progress(9, 8), Code.MALFORMED, "meta.ext_eval"),
        (progress(0, 0), Code.MALFORMED, "meta.ext_eval.planned"),
        ({**progress(), "status": "paused"}, Code.UNSUPPORTED_FEATURE, "status"),
        ({**progress(), "seq": -1}, Code.MALFORMED, "seq"),
        ({**progress(), "meta": {}}, Code.MALFORMED, "meta.ext_eval"),
        ({**progress(), "meta": {"ext_eval": {"completed": 1, "planned": 2, "left": 1}}}, Code.UNSUPPORTED_FEATURE,
         "meta.ext_eval.left"),
    ],
)  # fmt: skip
def test_progress_rules(value: object, code: Code, path: str) -> None:
    with pytest.raises(ContractError) as caught:
        ProgressBody.parse(value)
    assert (caught.value.code, caught.value.path) == (code, path)


def test_control_answers_round_trip() -> None:
    status = StatusResult(BINDING, "intended", ROOT, None, True)
    replay = ReplayResult(BINDING, (ReplayRecord(1, "sha256:" + "33" * 32),), 2, False, True)
    cancel = CancelResult(BINDING, False, None, True)
    for answer in (status, replay, cancel):
        value = answer.to_json()
        assert parse_answer(value) == answer
        assert canonical(type(answer).parse(value).to_json()) == canonical(value)
    assert replay.to_json()["code"] == "content_unavailable"
    assert ReplayResult(BINDING, (), 0, True, False).to_json()["code"] is None
    assert cancel.to_json()["acknowledged"] is True


@pytest.mark.parametrize(
    "value",
    [
        {**StatusResult(BINDING, "intended", ROOT, None, True).to_json(), "state": "sleeping"},
        {**StatusResult(BINDING, "terminal", ROOT, "completed", True).to_json(), "outcome": "done"},
        {**ReplayResult(BINDING, (), 0, True, False).to_json(), "code": "content_unavailable"},
        {**ReplayResult(BINDING, (), 0, False, True).to_json(), "code": None},
        {**ReplayResult(BINDING, (), 0, False, True).to_json(), "complete": True},
        {**CancelResult(BINDING, False, None, True).to_json(), "acknowledged": False},
    ],
)
def test_control_answer_rules(value: object) -> None:
    with pytest.raises(ContractError):
        parse_answer(value)


def test_outputs_round_trip() -> None:
    assert parse_output(RUN_OUTPUT.to_json()) == RUN_OUTPUT
    assert parse_output(PUBLISH_OUTPUT.to_json()) == PUBLISH_OUTPUT
    no_baseline = RunOutput(REPORT, RUN_OUTPUT.sealed, Headline(3, None, 4), "inconclusive")
    assert RunOutput.parse(no_baseline.to_json()).to_json() == no_baseline.to_json()
    assert no_baseline.to_json()["headline"] == {"subject_passed": 3, "baseline_passed": None, "total": 4}


OVER = {"subject_passed": 7, "baseline_passed": 2, "total": 6}


def run_output(**changes: Any) -> dict[str, Any]:
    return {**RUN_OUTPUT.to_json(), **changes}


@pytest.mark.parametrize(
    ("value", "code", "path"),
    [
        (run_output(verdict="better"), Code.UNSUPPORTED_FEATURE, "output.verdict"),
        (run_output(notes=["n"] * 5), Code.MALFORMED, "output.notes"),
        (run_output(notes=["n" * 201]), Code.MALFORMED, "output.notes[0]"),
        (run_output(notes=["\u00e9" * 200]), None, None),
        (run_output(report={**REPORT.to_json(), "schema": "x"}), Code.IDENTITY_MISMATCH, "output.report.schema"),
        (run_output(sealed={"id": "77" * 32, "pubkey": R, "kind": 3189}), Code.MALFORMED, "output.sealed.kind"),
        (run_output(headline=OVER), Code.MALFORMED, "output.headline"),
        (run_output(headline={"subject_passed": 1, "total": 6}), Code.MALFORMED, "output.headline.baseline_passed"),
        (run_output(v="openagents.ext-eval-hosted.v2"), Code.UNSUPPORTED_VERSION, "output.v"),
        (run_output(extra=1), Code.UNSUPPORTED_FEATURE, "output.extra"),
        ({**PUBLISH_OUTPUT.to_json(), "result": {"id": "88" * 32, "pubkey": R, "kind": 3184}}, Code.MALFORMED,
         "output.result.kind"),
        ({**PUBLISH_OUTPUT.to_json(), "action": "run"}, Code.UNSUPPORTED_FEATURE, "output.suite_release"),
    ],
)  # fmt: skip
def test_output_rules(value: object, code: Code | None, path: str | None) -> None:
    if code is None:
        parse_output(value)
        return
    with pytest.raises(ContractError) as caught:
        parse_output(value)
    assert (caught.value.code, caught.value.path) == (code, path)
