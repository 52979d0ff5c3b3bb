"""Opening the sealed report (wire.md §15, §12 step 6) on a relay that requires NIP-42 for reads and writes
(nostr-sdk's LocalRelay): read authenticated as the trainer, opened with the trainer's key, and refused
unless it is exactly the report the result names, sealed to this trainer, naming this trainer.
The `3188`s are sealed by the runner's own `seal_event`.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from eval_runner.contracts.refs import ArtifactRef, EventRef
from eval_runner.contracts.report import REPORT_SCHEMA, Report, report_ref
from eval_runner.nostr import Event, Filter, RelayEvent, SecretKey
from eval_runner.service.relay.connection import RelayClient, RelayConnection, query_on
from eval_runner.service.requests.reply import seal_event
from eval_runner.trainer.client import Trainer, TrainerError, extension_tool, run_input, suite_draft
from tests.support.paths import EXAMPLE
from tests.support.sample_reports import Spec, report
from tests.support.stand_in_relay import BOUND, local_relay

WAIT = 0.05
MAILBOX = "ab" * 32


def sealed_report(runner: SecretKey, recipient: SecretKey, requester: str) -> tuple[Event, bytes, ArtifactRef]:
    requested = EventRef(id="cd" * 32, pubkey=requester, kind=25920)
    data, ref = report_ref(report(Spec(evaluator=runner.public_key().to_hex(), requester=requested)))
    now = int(time.time())
    return seal_event(runner, recipient.public_key(), MAILBOX, data, ref, now, now + 3600), data, ref


def pointer(event: Event) -> EventRef:
    return EventRef(id=event.id, pubkey=event.pubkey, kind=event.kind)


async def test_the_sealed_report_opens_only_as_the_report_the_result_names() -> None:
    runner, me, stranger = SecretKey.generate(), SecretKey.generate(), SecretKey.generate()
    mine = me.public_key().to_hex()
    event, data, ref = sealed_report(runner, me, mine)
    to_stranger, _, stranger_ref = sealed_report(runner, stranger, mine)
    naming_stranger, _, naming_ref = sealed_report(runner, me, stranger.public_key().to_hex())
    async with local_relay(nip42=True) as url:
        await RelayClient(url, runner, challenge_wait=WAIT).publish(event)
        await RelayClient(url, runner, challenge_wait=WAIT).publish(to_stranger)
        await RelayClient(url, runner, challenge_wait=WAIT).publish(naming_stranger)
        async with Trainer(url, me, runner.public_key().to_hex(), challenge_wait=WAIT) as trainer:
            parsed, opened = await trainer.fetch_report(pointer(event), ref)
            assert opened == data
            assert parsed == Report.parse_bytes(data)

            other = ArtifactRef.of_bytes(b"{}", "application/json", REPORT_SCHEMA)
            refusals = {
                "the sealed report is not the report the result names": (pointer(event), other),
                "isn't on the relay": (EventRef(id="ef" * 32, pubkey=event.pubkey, kind=3188), ref),
                "another key signed": (EventRef(id=event.id, pubkey=mine, kind=3188), ref),
                "the report names another requester": (pointer(naming_stranger), naming_ref),
            }
            for words, (sealed, named) in refusals.items():
                with pytest.raises(TrainerError, match=words) as refused:
                    await trainer.fetch_report(sealed, named)
                assert refused.value.code == "report"
            # the relay lets an authenticated reader fetch a 3188 sealed to someone else; the trainer refuses it
            with pytest.raises(TrainerError, match="the sealed report is sealed to another key"):
                await trainer.fetch_report(pointer(to_stranger), stranger_ref)


async def test_a_trainer_subscribes_and_publishes_once_the_relay_has_authenticated_it() -> None:
    runner = SecretKey.generate()
    async with local_relay(nip42=True) as url, Trainer(url, SecretKey.generate(), runner.public_key().to_hex()) as t:
        request = t.request(run_input(suite_draft(EXAMPLE / "evals", extension_tool(EXAMPLE).draft_tool()).draft))
        answer = t.follow(request)
        # the runner's side: a live subscription (25920 is ephemeral; no relay stores it)
        jobs = await RelayConnection.open(url, runner, challenge_wait=WAIT)
        try:
            assert await query_on(jobs, Filter.build(kinds=[25920], tags={"p": [runner.public_key().to_hex()]})) == []
            await t.send(request)  # REQ and EVENT are refused `auth-required:` first, then resent once authenticated
            async with asyncio.timeout(BOUND):
                delivered = await jobs.next_frame()
                while not isinstance(delivered, RelayEvent):
                    delivered = await jobs.next_frame()
        finally:
            jobs.dispose()
        assert delivered.event == request.events[0]
        await t.wait(answer, 0.1)
        assert answer.silence == "worker_absent"
