"""The runner's outgoing events: answers (tags, encryption, signature) and the sealed 3188 report, read back
with nostr-sdk (an independent implementation), over a real relay where it matters."""

from __future__ import annotations

import json

import nostr_sdk as sdk
import pytest

from eval_runner.contracts.envelope import ARTIFACT_MARKER, Envelope
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.refs import ArtifactRef
from eval_runner.contracts.report import report_ref
from eval_runner.contracts.strict_json import canonical
from eval_runner.nostr import Event, Filter, SecretKey
from eval_runner.service.relay.connection import RelayClient
from eval_runner.service.relay.publisher import Publisher
from eval_runner.service.requests.reply import FEEDBACK_KIND, RESULT_KIND, Answers, SealError, answer_event, seal_event
from tests.support.captured_logs import LogLines
from tests.support.sample_reports import Spec, report
from tests.support.stand_in_relay import local_relay, unused_port_url

RUNNER = SecretKey.parse("11" * 32)
TRAINER = SecretKey.parse("22" * 32)
MAILBOX = "5a" * 32
NOW = 1_790_000_000
REPORT, REPORT_REF = report_ref(report(Spec(evaluator=RUNNER.public_key().to_hex())))


def opened(event: Event, reader: SecretKey, writer: SecretKey) -> str:
    """Decrypt with nostr-sdk after checking id and signature with it."""
    assert sdk.Event.from_json(json.dumps(event.to_json())).verify()
    reader_key = sdk.SecretKey.parse(reader.to_hex())
    return str(sdk.nip44_decrypt(reader_key, sdk.PublicKey.parse(writer.public_key().to_hex()), event.content))


# -- answers -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [FEEDBACK_KIND, RESULT_KIND])
def test_an_answer_is_tagged_exactly_and_carries_compact_json_to_the_recipient(kind: int) -> None:
    payload = {"v": "openagents.execution.v1", "type": "result", "request": "r", "nested": {"b": 1, "a": [2]}}
    event = answer_event(RUNNER, kind, TRAINER.public_key(), "ab" * 32, payload, NOW)
    assert (event.kind, event.pubkey, event.created_at) == (kind, RUNNER.public_key().to_hex(), NOW)
    assert event.tags == (("p", TRAINER.public_key().to_hex()), ("e", "ab" * 32))
    assert opened(event, TRAINER, RUNNER) == canonical(payload).decode()


def test_a_stored_result_goes_out_byte_for_byte() -> None:
    stored = '{"a":1,"v":"x"}'
    event = answer_event(RUNNER, RESULT_KIND, TRAINER.public_key(), "ab" * 32, stored, NOW)
    assert opened(event, TRAINER, RUNNER) == stored


async def test_a_failed_answer_is_logged_not_raised_and_a_bad_recipient_is_skipped(logs: LogLines) -> None:
    async with Publisher(unused_port_url(), RUNNER, bound=0.2) as publisher:
        answers = Answers(RUNNER, publisher, clock=lambda: NOW)
        assert not await answers.result(TRAINER.public_key().to_hex(), "cd" * 32, {"v": 1})
        assert logs.matching("answer to") == [f"answer to {'cd' * 6}: the relay didn't answer in time"]
        assert not await answers.result("f" * 64, "cd" * 32, {"v": 1})
        assert len(logs.matching("answer to")) == 1, "an answer to a key that is no key is skipped silently"


# -- the sealed report -------------------------------------------------------------------------------


def test_the_seal_is_a_3188_with_three_tags_that_opens_to_the_same_report() -> None:
    event = seal_event(RUNNER, TRAINER.public_key(), MAILBOX, REPORT, REPORT_REF, NOW, NOW + 604_800)
    assert (event.kind, event.pubkey) == (3188, RUNNER.public_key().to_hex())
    assert event.tags == (("p", TRAINER.public_key().to_hex()), ("h", MAILBOX), ("t", ARTIFACT_MARKER))
    body = opened(event, TRAINER, RUNNER).encode()
    assert body == canonical(json.loads(body)), "the envelope is JCS bytes"
    envelope = Envelope.parse_bytes(body)
    assert envelope.artifact == REPORT_REF
    assert envelope.inline_bytes() == REPORT
    assert (envelope.issued_at, envelope.retain_until) == (NOW, NOW + 604_800)


def test_the_runner_can_open_its_own_seal_too() -> None:
    event = seal_event(RUNNER, TRAINER.public_key(), MAILBOX, REPORT, REPORT_REF, NOW, NOW + 10)
    assert Envelope.parse_bytes(opened(event, RUNNER, TRAINER).encode()).artifact.digest == REPORT_REF.digest


def test_retention_is_at_least_a_second_past_issue() -> None:
    event = seal_event(RUNNER, TRAINER.public_key(), MAILBOX, REPORT, REPORT_REF, NOW, NOW - 5)
    assert Envelope.parse_bytes(opened(event, TRAINER, RUNNER).encode()).retain_until == NOW + 1


@pytest.mark.parametrize(
    ("ref", "code"),
    [
        (ArtifactRef.of_bytes(REPORT, "application/json"), Code.IDENTITY_MISMATCH),
        (ArtifactRef.of_bytes(REPORT + b" ", "application/json", REPORT_REF.schema), Code.IDENTITY_MISMATCH),
    ],
    ids=["no schema", "other bytes"],
)
def test_a_report_that_is_not_its_reference_is_not_sealed(ref: ArtifactRef, code: Code) -> None:
    with pytest.raises(ContractError) as caught:
        seal_event(RUNNER, TRAINER.public_key(), MAILBOX, REPORT, ref, NOW, NOW + 10)
    assert caught.value.code is code


def test_a_report_past_nip44s_standard_bound_is_not_sealed() -> None:
    big = report(Spec(evaluator=RUNNER.public_key().to_hex()))
    value = big.to_json()
    value["meta"] = {**value["meta"], "padding": "x" * 70_000}
    data = canonical(value)
    ref = ArtifactRef.of_bytes(data, "application/json", REPORT_REF.schema)
    with pytest.raises(ContractError) as caught:
        seal_event(RUNNER, TRAINER.public_key(), MAILBOX, data, ref, NOW, NOW + 10)
    assert caught.value.code is Code.LIMIT_EXCEEDED


async def test_a_seal_is_on_the_relay_when_it_returns_and_the_trainer_opens_it_there() -> None:
    async with local_relay() as url, Publisher(url, RUNNER, challenge_wait=0.05) as publisher:
        answers = Answers(RUNNER, publisher)
        pointer = await answers.seal(TRAINER.public_key().to_hex(), MAILBOX, REPORT, REPORT_REF, NOW + 10**6)
        assert (pointer.pubkey, pointer.kind) == (RUNNER.public_key().to_hex(), 3188)
        stored = await RelayClient(url, TRAINER, challenge_wait=0.05).query(Filter.build(ids=[pointer.id]))
        assert [event.id for event in stored] == [pointer.id]
        envelope = Envelope.parse_bytes(opened(stored[0], TRAINER, RUNNER).encode())
        assert envelope.artifact.digest == REPORT_REF.digest


async def test_sealing_failures_say_which_step_failed() -> None:
    async with Publisher(unused_port_url(), RUNNER, bound=0.2) as publisher:
        answers = Answers(RUNNER, publisher)
        with pytest.raises(SealError) as caught:
            await answers.seal(TRAINER.public_key().to_hex(), MAILBOX, REPORT, REPORT_REF, NOW + 10)
        assert str(caught.value) == "publishing the sealed report: the relay didn't answer in time"
        with pytest.raises(SealError) as caught:
            await answers.seal(TRAINER.public_key().to_hex(), MAILBOX, REPORT + b" ", REPORT_REF, NOW + 10)
        assert str(caught.value).startswith("sealing the report: identity_mismatch")
