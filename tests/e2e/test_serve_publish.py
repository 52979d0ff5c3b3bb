"""Publishing through `eval-runner serve` (runner.md §15, §21.1 publish items, §21.6): nothing is public until the
trainer asks; then one `3189` that parses with our own reader and credits the trainer from the inline request.

`serve` runs as a subprocess over its embedded relay and embedded blob server, with the stand-in agent and door in
real sandboxes, a catalog tool the runner releases itself, and a brake of one run per trainer a day. Dana runs
that tool on a draft test set; no `3189` exists until she publishes. A stranger's publish of her report is
refused `not_admitted`; hers releases the draft test set (signed by the runner, which wrote it), rewrites the
report to name that release (so the published digest is not the sealed one) and publishes one result; a second
publish answers the same pointers and publishes nothing. The relay holds no `25920`. Then Erin, whose own run
spent her brake, checks Dana's result on its released test set: the check is admitted (a check never counts
against the brake; her next plain run is refused `over_quota`), publishes with `check` naming Dana's result,
credits Erin, and counts as a check (same suite, same tool, equal subject locks, another trainer). Fay's
validation of Dana's result on the same test set ("that would be a check") and of a missing result are refused;
on a second test set, released later by another author, it runs, publishes with `validates`, and is
independent. The usage log shows every line with its action, outcome and result; no published event holds the
door key or the runner's secret.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval_runner.contracts.outputs import PublishOutput, RunOutput
from eval_runner.contracts.publication import Citation, Cites, verified_trainer
from eval_runner.contracts.strict_json import read
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import SecretKey
from eval_runner.service.blobs import BlobStore
from eval_runner.service.releases import release_suite
from eval_runner.service.requests.quota import BRAKED
from eval_runner.service.usage import read as read_usage
from eval_runner.stand_ins.door import StandInDoor
from tests.support.published_suites import example_release
from tests.support.publishing import (
    RELEASE_KIND,
    REQUEST_KIND,
    SEALED_KIND,
    holding,
    publish_input,
    publishing_env,
    read_results_on,
    reader,
    stored,
)
from tests.support.runner_tools import runner_published_copy
from tests.support.sandboxed_runs import fresh_temp_root, host_confinement
from tests.support.serve_process import DOOR_KEY, serving
from tests.support.trainer_side import Trainer, catalog_tool, draft, example_case, run_input


@pytest.fixture
def temp_root() -> Iterator[Path]:
    host_confinement()
    yield from fresh_temp_root()


def without_release(data: bytes) -> object:
    value = read(data)
    assert isinstance(value, dict)
    assert isinstance(value["suite"], dict)
    value["suite"].pop("event", None)
    return value


async def test_a_published_result_credits_its_trainer_and_another_trainers_check_counts(
    tmp_path: Path, temp_root: Path
) -> None:
    secret = SecretKey.generate()
    runner = secret.public_key().to_hex()
    catalog = runner_published_copy(tmp_path / "catalog" / "codebase-brief", runner)
    dana, erin, fay, stranger, author = (SecretKey.generate() for _ in range(5))
    tool = Catalog.load([catalog]).tools[0].definition.to_json()
    async with StandInDoor(DOOR_KEY) as door:
        env = publishing_env(tmp_path, temp_root, secret, catalog, door_url=door.url, EVAL_RUNNER_RUNS_PER_DAY="1")
        async with serving(env) as serve:
            url = await serve.url()
            async with Trainer(url, runner, dana) as phone:
                run_event, _ = await phone.run(run_input(tool, draft(catalog_tool(tool))), "req-dana-run")
                ran = await phone.result(run_event)
                assert ran.outcome == "completed", ran
                assert isinstance(ran.output, RunOutput)
                _, envelope = await phone.open_sealed(ran.output.sealed)
                sealed_report = envelope.inline_bytes()
                assert sealed_report is not None
                assert await read_results_on(url) == [], "nothing is public until the trainer asks"

                async with Trainer(url, runner, stranger) as other:
                    theirs, _ = await other.run(publish_input(ran.output.report), "req-stranger-publish")
                    refused = await other.result(theirs)
                assert (refused.outcome, refused.code) == ("refused", "not_admitted")
                assert refused.message == "no finished run of yours has that report"

                first_event, _ = await phone.run(publish_input(ran.output.report), "req-dana-publish")
                first = await phone.result(first_event)
                assert first.outcome == "completed", first
                assert len(phone.sent[first_event.id].accepted) == 1
                again_event, _ = await phone.run(publish_input(ran.output.report), "req-dana-publish-again")
                again = await phone.result(again_event)
            assert isinstance(first.output, PublishOutput)
            assert again.outcome == "completed"
            assert again.output == first.output, "a second publish answers the same pointers"

            results = await read_results_on(url)
            assert [result.id for result in results] == [first.output.result.id], "exactly one 3189"
            dana_result = results[0]
            assert dana_result.evaluator == runner
            assert verified_trainer(dana_result) == dana.public_key().to_hex()
            assert dana_result.request is not None
            assert dana_result.request.id == run_event.id, "the request rides inline, signed by Dana"
            assert dana_result.suite_release == first.output.suite_release
            assert first.output.suite_release.pubkey == runner, "the runner released the draft test set it wrote"
            assert dana_result.report_ref.digest != ran.output.report.digest, "the report now names its release"
            assert without_release(dana_result.report_bytes) == without_release(sealed_report)
            assert dana_result.subject_release is not None
            releases = {event.id for event in await stored(url, [RELEASE_KIND])}
            assert {first.output.suite_release.id, dana_result.subject_release.id} <= releases
            assert await stored(url, [REQUEST_KIND]) == [], "the relay holds no 25920"

            async with Trainer(url, runner, erin) as erins:
                own, _ = await erins.run(
                    run_input(tool, draft(catalog_tool(tool), [example_case("greeting")])), "req-erin-run"
                )
                assert (await erins.result(own)).outcome == "completed"
                checking = run_input(tool, None, suite=first.output.suite_release.to_json(), check=dana_result.id)
                check_event, _ = await erins.run(checking, "req-erin-check")
                checked = await erins.result(check_event)
                assert checked.outcome == "completed", checked
                assert isinstance(checked.output, RunOutput)
                braked, _ = await erins.run(
                    run_input(tool, draft(catalog_tool(tool), [example_case("greeting")])), "req-erin-braked"
                )
                over = await erins.result(braked)
                assert (over.code, over.message) == ("over_quota", BRAKED)
                erin_publish, _ = await erins.run(publish_input(checked.output.report), "req-erin-publish")
                published_check = await erins.result(erin_publish)
            assert published_check.outcome == "completed", published_check
            assert isinstance(published_check.output, PublishOutput)
            assert published_check.output.suite_release == first.output.suite_release

            by_id = {result.id: result for result in await read_results_on(url)}
            assert set(by_id) == {dana_result.id, published_check.output.result.id}
            erin_result = by_id[published_check.output.result.id]
            assert erin_result.cites == Citation(Cites.CHECK, dana_result.id)
            assert verified_trainer(erin_result) == erin.public_key().to_hex()
            assert erin_result.report_ref.digest == checked.output.report.digest, "a published set's bytes stay"
            # It counts as a check (wire.md §13.4, §17): same suite, same tool, equal subject locks, another trainer.
            original, rerun = dana_result.report, erin_result.report
            assert rerun.suite.digest == original.suite.digest
            assert dataclasses.replace(rerun.subject.definition, event=None) == dataclasses.replace(
                original.subject.definition, event=None
            )
            assert rerun.subject.lock == original.subject.lock
            assert verified_trainer(erin_result) != verified_trainer(dana_result)

            # Fay validates Dana's result on a second test set, released later by another author.
            blobs_url = (await serve.wait_for("blobs   embedded at ")).split()[-1]
            async with BlobStore([blobs_url], blobs_url, secret) as store:  # the runner's key may upload
                second = await release_suite(
                    example_release(author.public_key().to_hex()), secret=author, blobs=store, relay=reader(url)
                )
            async with Trainer(url, runner, fay) as fays:
                same, _ = await fays.run(
                    run_input(tool, None, suite=first.output.suite_release.to_json(), validates=dana_result.id),
                    "req-fay-same",
                )
                on_same = await fays.result(same)
                missing, _ = await fays.run(
                    run_input(tool, None, suite=second.event.to_json(), validates="ab" * 32), "req-fay-missing"
                )
                on_missing = await fays.result(missing)
                validating, _ = await fays.run(
                    run_input(tool, None, suite=second.event.to_json(), validates=dana_result.id), "req-fay-validates"
                )
                validated = await fays.result(validating)
                assert isinstance(validated.output, RunOutput), validated
                fay_publish, _ = await fays.run(publish_input(validated.output.report), "req-fay-publish")
                published_validation = await fays.result(fay_publish)
            assert (on_same.code, on_missing.code) == ("not_admitted", "not_admitted")
            assert on_same.message is not None
            assert "that would be a check" in on_same.message
            assert "second test set" in on_same.message
            assert first.output.suite_release.id in on_same.message
            assert on_missing.message == "the result to validate isn't on the relay"
            assert isinstance(published_validation.output, PublishOutput), published_validation
            assert published_validation.output.suite_release == second.event
            fay_result = {result.id: result for result in await read_results_on(url)}[
                published_validation.output.result.id
            ]
            assert fay_result.cites == Citation(Cites.VALIDATES, dana_result.id)
            assert verified_trainer(fay_result) == fay.public_key().to_hex()
            # Independent (wire.md §17): the second set's signer is not the tool's, and it came after the tool.
            assert fay_result.subject_release == dana_result.subject_release
            subject_release = next(
                event for event in await stored(url, [RELEASE_KIND]) if event.id == dana_result.subject_release.id
            )
            second_release = next(event for event in await stored(url, [RELEASE_KIND]) if event.id == second.event.id)
            assert second_release.pubkey != subject_release.pubkey
            assert second_release.created_at >= subject_release.created_at
            assert fay_result.report.subject.lock == dana_result.report.subject.lock
            everything = await stored(url, [RELEASE_KIND, SEALED_KIND, 3189])
            assert await serve.terminate() == 0

    secrets = {"door key": DOOR_KEY, "runner secret": secret.to_hex(), "runner nsec": secret.to_bech32()}
    assert len(everything) >= 6
    assert holding(everything, secrets) == []

    usage = read_usage(tmp_path / "state" / "usage")
    assert usage.unreadable == 0
    lines = [(record.key, record.action, record.outcome, record.code, record.result) for record in usage.records]
    dana_key, erin_key, fay_key = (trainer.public_key().to_hex() for trainer in (dana, erin, fay))
    assert lines == [
        (dana_key, "run", "completed", None, None),
        (stranger.public_key().to_hex(), "publish", "refused", "not_admitted", None),
        (dana_key, "publish", "completed", None, dana_result.id),
        (dana_key, "publish", "completed", None, dana_result.id),
        (erin_key, "run", "completed", None, None),
        (erin_key, "check", "completed", None, dana_result.id),
        (erin_key, "run", "refused", "over_quota", None),
        (erin_key, "publish", "completed", None, erin_result.id),
        (fay_key, "validation", "refused", "not_admitted", dana_result.id),
        (fay_key, "validation", "refused", "not_admitted", "ab" * 32),
        (fay_key, "validation", "completed", None, dana_result.id),
        (fay_key, "publish", "completed", None, fay_result.id),
    ]
    publishes = [record for record in usage.records if record.action == "publish" and record.outcome == "completed"]
    assert [record.report for record in publishes] == [dana_result.report_ref.digest] * 2 + [None, None]
    assert json.loads(publishes[0].line())["report"] == dana_result.report_ref.digest
