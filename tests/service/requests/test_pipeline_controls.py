"""Controls, cancels, failures and the claim slots, through the whole pipeline over a real relay.

A control is answered e-tagged to itself and only for the original signer; a cancel stops a live or a
queued run, whose execute event then gets the `cancelled` result; a suite error fails the run and gives
the quota back; and the ledger refuses the seventeenth claim while sixteen hold their slots.
"""

from __future__ import annotations

import json
from pathlib import Path

from eval_runner.contracts.answers import CANCELLED_MESSAGE
from eval_runner.contracts.errors import Code
from eval_runner.contracts.execution import Binding
from eval_runner.contracts.strict_json import JsonValue
from eval_runner.service.ledger.claims import CAPACITY, key_name, key_of
from eval_runner.service.requests.pipeline import CONTROL_NOT_FOUND
from eval_runner.service.settings import Limits
from tests.support.hosted_service import Service, hosted_service
from tests.support.stand_in_suite import FAILURE
from tests.support.trainer_side import (
    CancelResult,
    ProgressBody,
    ReplayResult,
    StatusResult,
    Trainer,
    catalog_tool,
    draft,
    run_input,
)


def catalog_run(service: Service, runs: int = 1) -> dict[str, JsonValue]:
    found = service.catalog.tools[0].definition.to_json()
    return run_input(found, draft(catalog_tool(found)), runs=runs)


def running(notes: list[ProgressBody]) -> bool:
    return any(note.status == "running" for note in notes)


async def test_a_cancel_stops_a_live_run_and_the_execute_event_gets_cancelled(tmp_path: Path) -> None:
    async with hosted_service(tmp_path, mode="wait_cancel") as service, Trainer(service.url, service.runner) as trainer:
        event, body = await trainer.run(catalog_run(service), "req-stop")
        await trainer.progress(event, running)
        cancel = trainer.control_event("cancel", event, body.binding, reason="the person tapped Stop")
        await trainer.publish(cancel)
        acknowledged = await trainer.answer(cancel, CancelResult)
        assert (acknowledged.binding, acknowledged.outcome, acknowledged.dispatched) == (body.binding, None, True)
        result = await trainer.result(event)
        assert (result.outcome, result.dispatched, result.code, result.message) == (
            "cancelled",
            True,
            None,
            CANCELLED_MESSAGE,
        )
        assert result.output is None
        assert [answer.kind for answer in trainer.about(cancel.id)] == [26920], "the control is answered once"
        key = key_of(service.runner, trainer.pubkey, "req-stop", 1)
        assert f"cancelling {key_name(key)}" in service.logs.lines
        claim = service.ledger.lookup(key)
        assert claim is not None
        assert (claim.cancel_requested, claim.outcome, claim.cancel_reason) == (
            True,
            "cancelled",
            "the person tapped Stop",
        )
        job = service.ledger.job(key)
        assert job is not None
        assert job.status == "cancelled"
        [record] = service.usage()
        assert (record.outcome, record.code, record.tests, record.turns) == ("cancelled", None, 2, 4)
        assert service.suite.runs == 1


async def test_a_cancel_of_a_run_waiting_for_a_slot_means_it_never_starts(tmp_path: Path) -> None:
    async with (
        hosted_service(tmp_path, limits=Limits(jobs=1), mode="block") as service,
        Trainer(service.url, service.runner) as trainer,
    ):
        first, _ = await trainer.run(catalog_run(service), "req-holds-the-slot")
        await trainer.progress(first, running)
        waiting, body = await trainer.run(catalog_run(service), "req-waits")
        notes = await trainer.progress(waiting, lambda found: len(found) == 1)
        assert [(note.status, note.completed, note.planned) for note in notes] == [("queued", 0, 4)]
        cancel = trainer.control_event("cancel", waiting, body.binding, reason="never mind")
        await trainer.publish(cancel)
        await trainer.answer(cancel, CancelResult)
        result = await trainer.result(waiting)
        assert (result.outcome, result.message) == ("cancelled", CANCELLED_MESSAGE)
        assert service.suite.runs == 1, "the cancelled run never reached the suite runner"
        assert [note.status for note in trainer.sent[waiting.id].progress] == ["queued"]
        service.suite.release()
        assert (await trainer.result(first)).outcome == "completed"


async def test_status_and_replay_answer_the_original_signer_about_its_claim(tmp_path: Path) -> None:
    async with hosted_service(tmp_path) as service, Trainer(service.url, service.runner) as trainer:
        event, body = await trainer.run(catalog_run(service), "req-status")
        await trainer.result(event)
        [accepted] = trainer.sent[event.id].accepted
        status = trainer.control_event("status", event, body.binding)
        replay = trainer.control_event("replay", event, body.binding, after_seq=None, max_records=10)
        for control in (status, replay):
            await trainer.publish(control)
        found = await trainer.answer(status, StatusResult)
        assert (found.state, found.outcome, found.dispatched, found.record) == (
            "terminal",
            "completed",
            True,
            accepted.record,
        )
        records = await trainer.answer(replay, ReplayResult)
        claim = service.ledger.lookup(key_of(service.runner, trainer.pubkey, "req-status", 1))
        assert claim is not None
        assert [(record.seq, record.digest) for record in records.records] == [(0, claim.root_digest)]
        assert (records.complete, records.gap, records.next_seq) == (True, False, 1)
        assert len(service.usage()) == 1, "controls are never usage records"


async def test_controls_from_a_stranger_or_about_nothing_are_not_admitted(tmp_path: Path) -> None:
    async with (
        hosted_service(tmp_path, mode="block") as service,
        Trainer(service.url, service.runner) as trainer,
        Trainer(service.url, service.runner) as stranger,
    ):
        event, body = await trainer.run(catalog_run(service), "req-mine")
        await trainer.progress(event, running)
        attempts = [
            stranger.control_event("cancel", event, body.binding, reason="not yours"),
            stranger.control_event("status", event, body.binding),
            trainer.control_event("status", event, Binding("req-other", 1, "req-other")),
        ]
        for control in attempts:
            await (stranger if control.pubkey == stranger.pubkey else trainer).publish(control)
        for control in attempts:
            side = stranger if control.pubkey == stranger.pubkey else trainer
            result = await side.result(control)
            assert (result.outcome, result.code, result.message) == (
                "refused",
                Code.NOT_ADMITTED.value,
                CONTROL_NOT_FOUND,
            )
            assert result.binding.run == ""
        assert trainer.sent[event.id].results == [], "the run goes on"
        assert not [line for line in service.logs.lines if line.startswith("cancelling")]
        service.suite.release()
        assert (await trainer.result(event)).outcome == "completed"
        assert [record.request for record in service.usage()] == [event.id]


async def test_a_suite_error_fails_the_run_and_gives_the_quota_back(tmp_path: Path) -> None:
    async with hosted_service(tmp_path, mode="fail") as service, Trainer(service.url, service.runner) as trainer:
        event, _ = await trainer.run(catalog_run(service, runs=3), "req-fails")
        result = await trainer.result(event)
        assert (result.outcome, result.dispatched, result.code, result.message) == ("failed", True, "failed", FAILURE)
        key = key_of(service.runner, trainer.pubkey, "req-fails", 1)
        assert f"run {key_name(key)} failed: {FAILURE}" in service.logs.lines
        job = service.ledger.job(key)
        assert job is not None
        assert job.status == "failed"
        [record] = service.usage()
        assert (record.outcome, record.code, record.turns) == ("failed", "failed", 12)
        quota = json.loads((service.state / "quota.json").read_text())
        assert (quota["runs"], quota["turns"]) == ({trainer.pubkey: 0}, 0), "a failed run gives its share back"
        assert trainer.about(event.id)[-1].kind == 26920
        assert not [answer for answer in trainer.received if answer.kind == 3188], "nothing is sealed"


async def test_the_seventeenth_claim_is_busy_while_sixteen_hold_their_slots(tmp_path: Path) -> None:
    async with hosted_service(tmp_path, mode="block") as service, Trainer(service.url, service.runner) as trainer:
        events = [(await trainer.run(catalog_run(service), f"req-{n}"))[0] for n in range(CAPACITY)]
        await trainer.wait(lambda: all(trainer.sent[event.id].accepted for event in events))
        assert service.ledger.active_slots() == CAPACITY
        busy, _ = await trainer.run(catalog_run(service), "req-busy")
        result = await trainer.result(busy)
        assert (result.outcome, result.code) == ("refused", Code.BUSY.value)
        assert f"refused {busy.id[:12]} from {trainer.pubkey[:12]}: busy: " in "\n".join(service.logs.lines)
        assert json.loads((service.state / "quota.json").read_text())["runs"][trainer.pubkey] == CAPACITY
        service.suite.release()
        for event in events:
            assert (await trainer.result(event)).outcome == "completed"
        assert service.suite.runs == CAPACITY
        assert service.ledger.active_slots() == 0


async def test_a_seal_the_relay_refuses_fails_the_run_and_keeps_the_quota(tmp_path: Path) -> None:
    async with (
        hosted_service(tmp_path, refuse_kinds=frozenset({3188})) as service,
        Trainer(service.url, service.runner) as trainer,
    ):
        event, _ = await trainer.run(catalog_run(service), "req-unsealed")
        result = await trainer.result(event)
        why = "publishing the sealed report: the relay refused 3188: blocked: not on this relay"
        assert (result.outcome, result.code, result.message, result.output) == ("failed", "failed", why, None)
        key = key_of(service.runner, trainer.pubkey, "req-unsealed", 1)
        assert f"run {key_name(key)} failed: {why}" in service.logs.lines
        job = service.ledger.job(key)
        assert job is not None
        assert (job.status, job.sealed) == ("failed", None)
        quota = json.loads((service.state / "quota.json").read_text())
        assert quota["runs"] == {trainer.pubkey: 1}, "a seal failure does not give the run back"
