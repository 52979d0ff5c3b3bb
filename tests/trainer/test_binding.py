"""Binding (wire.md §12 step 3–4): forged answers published on a real relay while a run is in flight are
never trusted, only contiguous progress is rendered, a second differing result is kept as a conflict,
and the trainer subscribes before it publishes. The runner side is the real pipeline over nostr-sdk's
LocalRelay (tests.support.hosted_service); forgeries are signed events any relay client could publish.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from eval_runner.contracts.answers import AcceptedBody, Answer, ProgressBody, ResultBody
from eval_runner.contracts.errors import Code
from eval_runner.contracts.execution import Binding
from eval_runner.contracts.refs import ArtifactRef
from eval_runner.contracts.strict_json import JsonValue, canonical
from eval_runner.nostr import Event, PublicKey, SecretKey, conversation_key, encrypt, sign
from eval_runner.service.relay.connection import RelayClient
from eval_runner.service.requests.reply import FEEDBACK_KIND, RESULT_KIND, answer_event
from eval_runner.trainer.client import Request, Trainer, Unbound, bind, extension_tool, run_input, suite_draft
from tests.support.hosted_service import Service, hosted_service
from tests.support.paths import EXAMPLE
from tests.support.stand_in_relay import BOUND, StandInRelay

WAIT = 0.05


def trainer_for(service: Service) -> Trainer:
    return Trainer(service.url, SecretKey.generate(), service.runner, challenge_wait=WAIT)


def example_request(trainer: Trainer) -> Request:
    tool = extension_tool(EXAMPLE)
    drafted = suite_draft(EXAMPLE / "evals", tool.draft_tool())
    return trainer.request(run_input(drafted.draft, subject=tool.definition))


def forged(signer: SecretKey, trainer: str, kind: int, tags: list[list[str]], body: JsonValue) -> Event:
    """An answer-shaped event: `body` encrypted from `signer` to `trainer`, with exactly `tags`."""
    content = encrypt(canonical(body).decode("utf-8"), conversation_key(signer, PublicKey.parse(trainer)))
    return sign(signer, kind, tags, content, int(time.time()))


async def publish(url: str, *events: Event) -> None:
    """Publish as some other client on the relay would (its own key for NIP-42, none needed here)."""
    client = RelayClient(url, SecretKey.generate(), challenge_wait=WAIT)
    for event in events:
        await client.publish(event)


async def test_forged_answers_on_the_relay_are_never_trusted(tmp_path: Path) -> None:
    async with hosted_service(tmp_path, mode="block") as service, trainer_for(service) as trainer:
        request = example_request(trainer)
        answer = trainer.follow(request)
        sent = await trainer.send(request)
        assert await trainer.until(lambda: len(answer.progress) == 2)  # queued 0/4, running 0/4
        ours = request.binding
        lie = ResultBody.refused(ours, Code.NOT_ADMITTED, "forged: this tool is not admitted").to_json()
        other = ResultBody.refused(Binding("another-request", 1, "another-request"), Code.MALFORMED, "x").to_json()
        stranger = SecretKey.generate()
        elsewhere = "ab" * 32
        tagged = [["p", trainer.pubkey], ["e", sent.id]]
        forgeries = {
            "not signed by the runner": forged(stranger, trainer.pubkey, RESULT_KIND, tagged, lie),
            "its e tags name no event of ours": forged(
                service.secret, trainer.pubkey, RESULT_KIND, [*tagged, ["e", elsewhere]], lie
            ),
            "its p tags are not exactly this trainer": forged(
                service.secret, trainer.pubkey, RESULT_KIND, [*tagged, ["p", elsewhere]], lie
            ),
            "it names another request or attempt": forged(service.secret, trainer.pubkey, RESULT_KIND, tagged, other),
        }
        await publish(service.url, *forgeries.values())
        assert await trainer.until(lambda: len(trainer.unbound) == len(forgeries))
        assert {found.event.id: found.reason for found in trainer.unbound} == {
            event.id: reason for reason, event in forgeries.items()
        }
        assert answer.result is None
        assert answer.heard == 3  # accepted and two progress notes; no forgery counted

        service.suite.release()
        await trainer.wait(answer, BOUND)
        result = answer.result
        assert result is not None
        assert (result.outcome, result.code) == ("completed", None)
        assert [note.seq for note in answer.progress] == list(range(6))
        assert answer.conflicts == []
        assert len(trainer.unbound) == len(forgeries)


async def test_only_contiguous_progress_is_rendered(tmp_path: Path) -> None:
    async with hosted_service(tmp_path, mode="block") as service, trainer_for(service) as trainer:
        request = example_request(trainer)
        shown: list[object] = []
        answer = trainer.follow(request, shown.append)
        sent = await trainer.send(request)
        assert await trainer.until(lambda: len(answer.progress) == 2)
        runner, to = service.secret, PublicKey.parse(trainer.pubkey)
        repeat = answer_event(runner, FEEDBACK_KIND, to, sent.id, answer.progress[1].to_json(), int(time.time()))
        await publish(service.url, repeat)
        assert await trainer.until(lambda: answer.heard == 4)
        assert not answer.progress_stopped, "the same note again is a duplicate, not disorder"
        ahead = ProgressBody(request.binding, 7, "running", 3, 4)
        await publish(service.url, answer_event(runner, FEEDBACK_KIND, to, sent.id, ahead.to_json(), int(time.time())))
        assert await trainer.until(lambda: answer.progress_stopped)

        service.suite.release()
        await trainer.wait(answer, BOUND)
        assert answer.result is not None
        assert answer.result.outcome == "completed"
        assert [note.seq for note in answer.progress] == [0, 1], "nothing after the gap is rendered"
        assert shown == [answer.accepted, *answer.progress, answer.result]


async def test_a_second_differing_result_is_kept_as_a_conflict(tmp_path: Path) -> None:
    async with hosted_service(tmp_path) as service, trainer_for(service) as trainer:
        request = example_request(trainer)
        answer = await trainer.run(request, timeout=BOUND)
        first = answer.result
        assert first is not None
        [sent] = request.events
        runner, to, now = service.secret, PublicKey.parse(trainer.pubkey), int(time.time())
        heard = answer.heard
        same = answer_event(runner, RESULT_KIND, to, sent.id, first.to_json(), now)
        differing = ResultBody.refused(request.binding, Code.UNAVAILABLE, "a second opinion")
        await publish(service.url, same, answer_event(runner, RESULT_KIND, to, sent.id, differing.to_json(), now))
        assert await trainer.until(lambda: answer.heard == heard + 2)
        assert answer.result == first, "the first valid terminal result stands"
        assert answer.conflicts == [differing]


async def test_the_trainer_subscribes_before_it_publishes() -> None:
    async with StandInRelay(challenge=False) as relay:
        runner = SecretKey.generate().public_key().to_hex()
        async with Trainer(relay.url, SecretKey.generate(), runner, challenge_wait=WAIT) as trainer:
            connection = await relay.accept()
            request = example_request(trainer)
            sending = asyncio.create_task(trainer.send(request))
            req = await connection.recv_until("REQ")
            [event] = request.events
            assert req == [
                "REQ",
                "answers",
                {"kinds": [26920, 27020], "#p": [trainer.pubkey], "#e": [event.id]},
            ]
            await connection.send(["EOSE", "answers"])
            published = await connection.recv_until("EVENT")
            assert published[1]["id"] == event.id
            await connection.send(["OK", event.id, True, ""])
            await sending
            number = connection.number
            assert relay.seq_of(number, "out", ["EOSE", "answers"]) < relay.seq_of(number, "in", ["EVENT"])
            assert event.kind == 25920
            assert event.tags == (("p", runner), ("expiration", str(request.body.deadline)))


def test_bind_checks_every_rule_of_step_three() -> None:
    runner, trainer, stranger = SecretKey.generate(), SecretKey.generate(), SecretKey.generate()
    to = trainer.public_key()
    ours = "cd" * 32
    binding = Binding("req-1", 1, "req-1")
    expected = {ours: binding}
    key = conversation_key(trainer, runner.public_key())
    root = ArtifactRef.of_bytes(b"root", "application/json")
    accepted = AcceptedBody(binding, "sha256:" + "0" * 64, "sha256:" + "1" * 64, root, "2" * 64, 9, "3" * 64)

    def check(event: Event) -> tuple[str, Answer, str] | Unbound:
        return bind(event, runner=runner.public_key().to_hex(), trainer=to.to_hex(), expected=expected, key=key)

    good = answer_event(runner, FEEDBACK_KIND, to, ours, accepted.to_json(), 1_790_000_000)
    bound = check(good)
    assert not isinstance(bound, Unbound)
    assert bound[:2] == (ours, accepted)

    tampered = Event(good.id, good.pubkey, good.created_at, good.kind, good.tags, good.content, "0" * 128)
    as_result = answer_event(runner, RESULT_KIND, to, ours, accepted.to_json(), 1_790_000_000)
    elsewhere = answer_event(runner, FEEDBACK_KIND, stranger.public_key(), ours, accepted.to_json(), 1_790_000_000)
    unreadable = sign(runner, FEEDBACK_KIND, [["p", to.to_hex()], ["e", ours]], "not nip-44", 1_790_000_000)
    not_an_answer = sign(runner, 1, [["p", to.to_hex()], ["e", ours]], good.content, 1_790_000_000)
    cases = {
        "id or signature invalid": tampered,
        "a AcceptedBody does not come as kind 26920": as_result,
        "its p tags are not exactly this trainer": elsewhere,
        "kind 1 is not an answer": not_an_answer,
    }
    for reason, event in cases.items():
        found = check(event)
        assert isinstance(found, Unbound), reason
        assert found.reason == reason
    found = check(unreadable)
    assert isinstance(found, Unbound)
    assert found.reason.startswith("does not open: ")
