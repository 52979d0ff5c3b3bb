"""`eval-runner trainer results` and the check and validation options of `trainer run`, as real subprocesses
over a real relay (nostr-sdk's LocalRelay) and the real embedded blob server: a tool's results grouped by the
test set they ran with what cites them, and the command lines a check or a validation refuses (exit 64).
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

from rich.console import Console

from eval_runner.cli.trainer import published_input
from eval_runner.cli.trainer_results import (
    DIGEST_NOTE,
    LIMIT_NOTE,
    listing_json,
    publish_json,
    show_listing,
    show_publish,
)
from eval_runner.contracts.answers import ResultBody
from eval_runner.contracts.errors import Code
from eval_runner.contracts.hosted import PublishInput
from eval_runner.contracts.outputs import PublishOutput
from eval_runner.contracts.publication import Citation, Cites
from eval_runner.contracts.refs import ArtifactRef, EventRef
from eval_runner.contracts.report import Verdict, report_ref
from eval_runner.reader.listing import Listing
from eval_runner.trainer.binding import RunAnswer
from eval_runner.trainer.client import Request, Trainer, build_request, published_run_input
from tests.support.published_results import (
    OTHER,
    RUNNER,
    TRAINER,
    Published,
    hosted_report,
    result_event,
    signed_request,
    suite_ref,
)
from tests.support.sample_reports import Spec, report
from tests.support.serve_process import trainer_command as trainer

SUBJECT = report(Spec()).subject.definition


def hosted_report_ref() -> ArtifactRef:
    return report_ref(report(Spec()))[1]


async def test_results_are_grouped_by_test_set_with_their_checks_and_validations(world: Published) -> None:
    first = signed_request(TRAINER)
    original_report = hosted_report(world, first)
    original = result_event(original_report, first, at=1_790_000_000)
    second = signed_request(OTHER)
    check = result_event(
        hosted_report(world, second, verdict=Verdict.FAIL),
        second,
        cites=Citation(Cites.CHECK, original.id),
        at=1_790_000_100,
    )
    other_suite, other_pointer = await world.release_suite(OTHER, "other-tests")
    third = signed_request(OTHER)
    validation = result_event(
        hosted_report(world, third, suite=suite_ref(other_suite, other_pointer)),
        third,
        cites=Citation(Cites.VALIDATES, original.id),
        at=1_790_000_200,
    )
    for event in (validation, check, original):
        await world.relay.publish(event)
    subject = json.dumps(original_report.subject.definition.to_json())
    code, out, err = await trainer("results", "--subject", subject, "--relay", world.relay_url, "--json")
    assert code == 0, err
    found = json.loads(out)
    assert [group["suite"] for group in found["groups"]] == [world.suite.suite.digest, other_suite.suite.digest]
    assert [group["release"]["id"] for group in found["groups"]] == [world.suite_pointer.id, other_pointer.id]
    listed = found["groups"][0]["results"]
    assert [result["id"] for result in listed] == [original.id, check.id]
    assert listed[0]["trainer"] == TRAINER.public_key().to_hex()
    cited = {item["id"]: item for item in listed[0]["cited_by"]}
    assert (cited[check.id]["relation"], cited[check.id]["counts"]) == ("disputes", True)
    assert cited[validation.id]["relation"] == "validation"
    assert found["groups"][1]["results"][0]["id"] == validation.id
    code, out, err = await trainer("results", "--subject", subject, "--relay", world.relay_url)
    assert code == 0, err
    assert "Test set " in out
    assert "not compared" in out


async def test_a_tool_with_no_results_lists_none(world: Published) -> None:
    subject = json.dumps(hosted_report(world, signed_request(TRAINER)).subject.definition.to_json())
    code, out, _ = await trainer("results", "--subject", subject, "--relay", world.relay_url, "--json")
    assert code == 0
    assert json.loads(out)["groups"] == []


async def test_check_and_validation_command_lines_that_cannot_be_right_exit_64(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text(TRAINER.to_hex() + "\n")
    key.chmod(0o600)
    common = ["--relay", "ws://127.0.0.1:9", "--runner", RUNNER.public_key().to_hex(), "--key-file", str(key)]
    common += ["--requests", str(tmp_path / "requests")]
    wrong = {
        "validates without a second test set": ["--validates", "ab" * 32],
        "a check of a draft": ["--check", "ab" * 32, "--draft", str(tmp_path / "draft.json")],
        "both": ["--check", "ab" * 32, "--validates", "cd" * 32],
        "a retransmitted check": ["--retransmit", "12" * 16, "--check", "ab" * 32],
    }
    for what, args in wrong.items():
        code, _, err = await trainer("run", *args, *common)
        assert code == 64, (what, err)


async def test_a_check_takes_its_test_set_and_tool_from_the_result_and_a_validation_its_tool(
    world: Published,
) -> None:
    request = signed_request(TRAINER)
    original_report = hosted_report(world, request)
    original = result_event(original_report, request)
    await world.relay.publish(original)
    other_suite, other_pointer = await world.release_suite(OTHER, "second-tests")
    async with Trainer(world.relay_url, OTHER, RUNNER.public_key().to_hex()) as client:
        args = argparse.Namespace(
            check=original.id, validates=None, suite_release=None, subject=None, extension=None, runs=2
        )
        check = await published_input(client, args, None)
        assert (check.suite, check.subject, check.check, check.runs) == (
            world.suite_pointer,
            original_report.subject.definition,
            original.id,
            2,
        )
        args = argparse.Namespace(
            check=None, validates=original.id, suite_release=other_pointer.id, subject=None, extension=None, runs=1
        )
        validation = await published_input(client, args, None)
        assert (validation.suite, validation.subject, validation.validates) == (
            other_pointer,
            original_report.subject.definition,
            original.id,
        )
        assert other_suite.suite.digest != world.suite.suite.digest


def test_a_publish_answer_in_words_and_json_names_both_pointers_and_the_digest_note() -> None:
    runner = RUNNER.public_key().to_hex()
    report = hosted_report_ref()
    run = Request(runner, build_request(runner, published_run_input(EventRef("ab" * 32, runner, 3184), SUBJECT)))
    run.report = report
    request = Request(runner, build_request(runner, PublishInput(report)))
    answer = RunAnswer(request)
    pointers = PublishOutput(EventRef("ab" * 32, runner, 3184), EventRef("cd" * 32, runner, 3189))
    answer.result = ResultBody.completed(request.binding, report, pointers)
    found = publish_json("ws://relay", run, request, answer)
    assert (found["outcome"], found["result"], found["suite_release"]) == (
        "completed",
        pointers.result.to_json(),
        pointers.suite_release.to_json(),
    )
    assert (found["run"], found["report"], found["note"]) == (run.id, report.to_json(), DIGEST_NOTE)
    out = io.StringIO()
    show_publish(Console(file=out, width=200), request, answer, trainer_pubkey=TRAINER.public_key().to_hex())
    shown = out.getvalue()
    assert f"Published result {'cd' * 32}" in shown
    assert f"crediting {TRAINER.public_key().to_hex()}" in shown
    assert f"eval-runner verify {'cd' * 32}" in shown
    answer.result = ResultBody.refused(request.binding, Code.NOT_ADMITTED, "no finished run of yours has that report")
    out = io.StringIO()
    show_publish(Console(file=out, width=200), request, answer, trainer_pubkey=TRAINER.public_key().to_hex())
    assert "refused (not_admitted): no finished run of yours has that report" in out.getvalue()


def test_a_listing_that_reached_its_limit_says_so_in_words_and_json() -> None:
    out = io.StringIO()
    show_listing(Console(file=out, width=200), Listing(SUBJECT, (), 0, limit_reached=True))
    assert LIMIT_NOTE in out.getvalue()
    assert "500" in LIMIT_NOTE
    assert listing_json(Listing(SUBJECT, (), 0, limit_reached=True))["limit_reached"] is True
    out = io.StringIO()
    show_listing(Console(file=out, width=200), Listing(SUBJECT, (), 0))
    assert LIMIT_NOTE not in out.getvalue()
