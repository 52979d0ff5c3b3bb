"""The trainer's side of publishing, checks and validations: the run inputs a check and a validation send, the
publish request, the report a kept run record remembers for `trainer publish`, and a published result read
from a real relay (nostr-sdk's LocalRelay) through the reader checks before a check or a validation cites it, and
the library publish refused for a report no run of this trainer returned.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval_runner.contracts.answers import ResultBody
from eval_runner.contracts.hosted import PublishInput, parse_input
from eval_runner.contracts.outputs import PublishOutput, RunOutput
from eval_runner.contracts.refs import EventRef
from eval_runner.contracts.report import report_ref
from eval_runner.trainer.binding import RunAnswer
from eval_runner.trainer.client import Request, Trainer, TrainerError, build_request, published_run_input
from tests.support.hosted_service import hosted_service
from tests.support.published_results import (
    RUNNER,
    TRAINER,
    Published,
    hosted_report,
    result_event,
    signed_request,
    spoiled,
)
from tests.support.sample_reports import Spec, report
from tests.support.stand_in_relay import BOUND

RELEASE = EventRef(id="ab" * 32, pubkey="cd" * 32, kind=3184)
RESULT = "ef" * 32
SUBJECT = report(Spec()).subject.definition
REPORT = report_ref(report(Spec()))[1]


def test_a_check_and_a_validation_name_the_result_they_cite() -> None:
    check = published_run_input(RELEASE, SUBJECT, runs=2, check=RESULT)
    assert (check.check, check.validates, check.runs) == (RESULT, None, 2)
    assert check.to_json()["check"] == RESULT
    assert "validates" not in check.to_json()
    validation = published_run_input(RELEASE, SUBJECT, validates=RESULT)
    sent = validation.to_json()
    assert (sent["check"], sent["validates"]) == (None, RESULT)
    assert parse_input(sent) == validation
    with pytest.raises(TrainerError) as both:
        published_run_input(RELEASE, SUBJECT, check=RESULT, validates=RESULT)
    assert both.value.code == "input"
    assert "never both" in both.value.message
    with pytest.raises(TrainerError, match="64-hex"):
        published_run_input(RELEASE, SUBJECT, check="not-an-id")


def test_a_publish_request_names_the_runs_report() -> None:
    body = build_request(RUNNER.public_key().to_hex(), PublishInput(REPORT))
    assert body.input == {"v": "openagents.ext-eval-hosted.v1", "action": "publish", "report": REPORT.to_json()}


def test_a_kept_run_record_remembers_its_report_and_old_records_still_read() -> None:
    request = Request(RUNNER.public_key().to_hex(), build_request(RUNNER.public_key().to_hex(), PublishInput(REPORT)))
    assert "report" not in request.to_json()
    assert Request.from_json(request.to_json()).report is None
    request.report = REPORT
    again = Request.from_json(json.loads(json.dumps(request.to_json())))
    assert again.report == REPORT
    spoilt = {**request.to_json(), "report": {"digest": "nope"}}
    with pytest.raises(TrainerError, match="does not read"):
        Request.from_json(spoilt)


def test_a_publish_answer_is_read_as_its_pointers_and_a_run_answer_is_not() -> None:
    request = Request(RUNNER.public_key().to_hex(), build_request(RUNNER.public_key().to_hex(), PublishInput(REPORT)))
    answer = RunAnswer(request)
    assert (answer.published, answer.output) == (None, None)
    pointers = PublishOutput(RELEASE, EventRef(RESULT, "12" * 32, 3189))
    answer.result = ResultBody.completed(request.binding, REPORT, pointers)
    assert (answer.published, answer.output) == (pointers, None)
    ran = RunOutput(REPORT, EventRef("34" * 32, "12" * 32, 3188), report(Spec()).ext_eval.headline, "pass")
    answer.result = ResultBody.completed(request.binding, REPORT, ran)
    assert (answer.published, answer.output) == (None, ran)


async def test_a_published_result_is_read_through_the_reader_checks(world: Published) -> None:
    request = signed_request(TRAINER)
    good = result_event(hosted_report(world, request), request)
    bad = spoiled(good, tags=lambda tags: [*tags, ["p", RUNNER.public_key().to_hex()]])
    for event in (good, bad):
        await world.relay.publish(event)
    async with Trainer(world.relay_url, TRAINER, RUNNER.public_key().to_hex()) as trainer:
        found = await trainer.published_result(good.id)
        assert (found.id, found.trainer, found.suite_release) == (
            good.id,
            TRAINER.public_key().to_hex(),
            world.suite_pointer,
        )
        with pytest.raises(TrainerError, match="doesn't check: ") as spoilt:
            await trainer.published_result(bad.id)
        assert spoilt.value.code == "input"
        with pytest.raises(TrainerError, match="isn't on the relay"):
            await trainer.published_result("12" * 32)
        with pytest.raises(TrainerError, match="64-hex"):
            await trainer.published_result("nope")


async def test_the_library_publish_of_a_report_no_run_of_ours_returned_is_refused(tmp_path: Path) -> None:
    async with (
        hosted_service(tmp_path) as service,
        Trainer(service.url, TRAINER, service.runner) as trainer,
    ):
        answer = await trainer.publish(REPORT, timeout=BOUND)
    assert answer.published is None
    assert answer.result is not None
    assert (answer.result.outcome, answer.result.code) == ("refused", "not_admitted")
    assert answer.result.message == "no finished run of yours has that report"
