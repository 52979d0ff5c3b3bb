"""The reader over a real relay (nostr-sdk's LocalRelay), the real embedded blob server and real signatures: a
result the runner would publish passes every check and credits the trainer who signed the request; the same
result spoiled one rule at a time fails, naming that rule, and no later check runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.publication import Citation, Cites
from eval_runner.contracts.refs import EventRef
from eval_runner.contracts.report import Verdict
from eval_runner.nostr import Event
from eval_runner.reader.credit import Relation
from eval_runner.reader.verify import STEPS, Reader, ReaderError, Step, Verification, rule_of
from tests.support.published_results import (
    OTHER,
    TRAINER,
    Published,
    hosted_report,
    result_event,
    signed_request,
    spoiled,
    suite_ref,
)
from tests.support.published_suites import blob_path


async def verified(world: Published, event: Event, tmp_path: Path, *, publish: bool = True) -> Verification:
    if publish:
        await world.relay.publish(event)
    staging = tmp_path / f"staging-{event.id[:8]}"
    staging.mkdir()
    return await Reader(world.relay, world.store).verify(event.id, staging)


def failing(found: Verification) -> tuple[Step, str]:
    check = found.failed
    assert check is not None, "the result should not verify"
    assert not found.valid
    after = found.checks[found.checks.index(check) + 1 :]
    assert all(later.passed is None for later in after), "nothing runs after the first failure"
    assert [item.step for item in found.checks] == list(STEPS)
    return check.step, check.detail


async def test_a_result_the_runner_would_publish_passes_and_credits_the_trainer(
    world: Published, tmp_path: Path
) -> None:
    request = signed_request(TRAINER)
    event = result_event(hosted_report(world, request), request)
    found = await verified(world, event, tmp_path)
    assert found.valid, found.checks
    assert found.failed is None
    assert [check.step for check in found.checks] == list(STEPS)
    assert found.trainer == TRAINER.public_key().to_hex()
    assert found.suite is not None
    assert found.suite.suite_digest == world.suite.suite.digest
    assert (found.suite.evals / "overview" / "prompt.md").is_file()
    assert found.suite_release is not None
    assert found.suite_release.id == world.suite_pointer.id
    assert found.subject_release is not None
    assert found.subject_release.id == world.tool_pointer.id
    assert found.cited is None


@pytest.mark.parametrize(
    ("name", "change", "step", "rule"),
    [
        (
            "wrong x",
            {"tags": lambda tags: [["x", "ab" * 32] if tag[0] == "x" else tag for tag in tags]},
            Step.READ,
            "x tag",
        ),
        (
            "two p",
            {"tags": lambda tags: [*tags, ["p", OTHER.public_key().to_hex()]]},
            Step.READ,
            "e and p tags",
        ),
        (
            "report bytes changed",
            {
                "content": lambda body: {
                    **body,
                    "meta": {
                        **body["meta"],
                        "ext_eval_report": body["meta"]["ext_eval_report"].replace('"pass"', '"fail"'),
                    },
                }
            },
            Step.READ,
            "report bytes vs digest",
        ),
    ],
)
async def test_a_result_spoiled_one_rule_fails_naming_it(
    world: Published, tmp_path: Path, name: str, change: dict[str, Any], step: Step, rule: str
) -> None:
    request = signed_request(TRAINER)
    good = result_event(hosted_report(world, request), request)
    found = await verified(world, spoiled(good, **change), tmp_path)
    got, detail = failing(found)
    assert got is step, name
    assert detail.startswith(f"{rule}: "), detail


async def test_a_request_signed_by_another_key_fails_the_inline_request_rule(world: Published, tmp_path: Path) -> None:
    request = signed_request(TRAINER)
    good = result_event(hosted_report(world, request), request)
    forged = signed_request(OTHER, at=request.created_at)

    def swap(body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "meta": {**body["meta"], "ext_eval_request": forged.to_json()}}

    step, detail = failing(await verified(world, spoiled(good, content=swap), tmp_path))
    assert step is Step.READ
    assert detail.startswith("inline request: identity_mismatch: meta.ext_eval_request: "), detail


async def test_a_hosted_result_without_its_request_credits_nobody(world: Published, tmp_path: Path) -> None:
    request = signed_request(TRAINER)
    bare = result_event(hosted_report(world, request), None)
    step, detail = failing(await verified(world, bare, tmp_path))
    assert step is Step.TRAINER
    assert detail.startswith("content_unavailable: ")


async def test_a_missing_suite_release_fails_the_suite_release_check(world: Published, tmp_path: Path) -> None:
    request = signed_request(TRAINER)
    absent = EventRef(id="cd" * 32, pubkey=world.suite_pointer.pubkey, kind=3184)
    report = hosted_report(world, request, suite=suite_ref(world.suite, absent))
    step, detail = failing(await verified(world, result_event(report, request), tmp_path))
    assert step is Step.SUITE_RELEASE
    assert "isn't on the relay" in detail


async def test_a_suite_release_by_another_signer_is_not_the_one_named(world: Published, tmp_path: Path) -> None:
    request = signed_request(TRAINER)
    other = EventRef(id=world.suite_pointer.id, pubkey=OTHER.public_key().to_hex(), kind=3184)
    report = hosted_report(world, request, suite=suite_ref(world.suite, other))
    step, _ = failing(await verified(world, result_event(report, request), tmp_path))
    assert step is Step.SUITE_RELEASE


async def test_a_suite_file_gone_from_the_store_fails_the_files_check(world: Published, tmp_path: Path) -> None:
    request = signed_request(TRAINER)
    event = result_event(hosted_report(world, request), request)
    prompt = next(file for file in world.suite.files if file.path.endswith("overview/prompt.md"))
    blob_path(tmp_path / "blobs", prompt.data).unlink()
    step, detail = failing(await verified(world, event, tmp_path))
    assert step is Step.SUITE_FILES
    assert detail.startswith("content_unavailable: "), detail


async def test_a_report_that_ran_other_suite_bytes_fails_the_digest_check(world: Published, tmp_path: Path) -> None:
    request = signed_request(TRAINER)
    other, _ = await world.release_suite(OTHER, "other-tests")  # the same cases under another id: another digest
    report = hosted_report(world, request, suite=suite_ref(other, world.suite_pointer))
    step, detail = failing(await verified(world, result_event(report, request), tmp_path))
    assert step is Step.SUITE_DIGEST
    assert other.suite.digest in detail


async def test_a_tool_release_not_on_the_relay_fails_the_subject_release_check(
    world: Published, tmp_path: Path
) -> None:
    request = signed_request(TRAINER)
    gone = EventRef(id="ef" * 32, pubkey=world.tool_pointer.pubkey, kind=3184)
    event = result_event(hosted_report(world, request, tool=gone), request)
    step, _ = failing(await verified(world, event, tmp_path))
    assert step is Step.SUBJECT_RELEASE


async def test_a_result_not_on_the_relay_fails_first(world: Published, tmp_path: Path) -> None:
    request = signed_request(TRAINER)
    event = result_event(hosted_report(world, request), request)
    step, _ = failing(await verified(world, event, tmp_path, publish=False))
    assert step is Step.FOUND


async def test_an_id_that_is_not_hex_is_an_input_error(world: Published, tmp_path: Path) -> None:
    with pytest.raises(ReaderError) as caught:
        await Reader(world.relay, world.store).verify("not-an-id", tmp_path)
    assert caught.value.code == "input"


async def test_a_check_by_another_trainer_confirms_or_disputes(world: Published, tmp_path: Path) -> None:
    first = signed_request(TRAINER)
    original = result_event(hosted_report(world, first), first)
    await world.relay.publish(original)
    second = signed_request(OTHER)
    citing = Citation(Cites.CHECK, original.id)
    agreeing = result_event(hosted_report(world, second), second, cites=citing)
    found = await verified(world, agreeing, tmp_path)
    assert found.valid
    assert found.cited is not None
    assert found.cited.credit is not None
    assert (found.cited.marker, found.cited.credit.relation, found.cited.credit.counts) == (
        "check",
        Relation.CONFIRMS,
        True,
    )
    third = signed_request(OTHER)
    disagreeing = result_event(hosted_report(world, third, verdict=Verdict.FAIL), third, cites=citing)
    found = await verified(world, disagreeing, tmp_path)
    assert found.cited is not None
    assert found.cited.credit is not None
    assert found.cited.credit.relation is Relation.DISPUTES
    again = signed_request(TRAINER)
    own = result_event(hosted_report(world, again), again, cites=citing)
    found = await verified(world, own, tmp_path)
    assert found.valid, "a rerun by the same trainer is a valid result, just not a check"
    assert found.cited is not None
    assert found.cited.credit is not None
    assert (found.cited.credit.relation, found.cited.credit.counts) == (Relation.NOT_A_CHECK, False)


async def test_a_cited_result_gone_from_the_relay_is_noted_not_failed(world: Published, tmp_path: Path) -> None:
    request = signed_request(TRAINER)
    event = result_event(hosted_report(world, request), request, cites=Citation(Cites.CHECK, "ab" * 32))
    found = await verified(world, event, tmp_path)
    assert found.valid
    assert found.cited is not None
    assert found.cited.original is None
    assert found.cited.note == "the cited result isn't on the relay"


def test_a_reader_check_failure_is_named_by_its_rule() -> None:
    assert rule_of(ContractError(Code.IDENTITY_MISMATCH, "kind", "a result is a 3189")) == "kind 3189"
    assert rule_of(ContractError(Code.IDENTITY_MISMATCH, "tags", "needs exactly one x tag")) == "x tag"
    assert rule_of(ContractError(Code.IDENTITY_MISMATCH, "tags", "the suite e tag is not")) == "e and p tags"
    assert rule_of(ContractError(Code.UNSUPPORTED_VERSION, "v", "unsupported")) == "body"
