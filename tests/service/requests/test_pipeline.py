"""The request pipeline over a real relay (nostr-sdk's LocalRelay): a hosted run streamed, sealed and
answered; retransmissions answered from the record without a rerun; drops that publish nothing.

The runner side is wired as `serve` wires it (listener → pipeline → publisher) with the stand-in suite
runner; the trainer side subscribes before it publishes and binds every answer (tests.support.trainer_side).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from eval_runner.contracts.envelope import ARTIFACT_MARKER
from eval_runner.contracts.outputs import RunOutput
from eval_runner.contracts.strict_json import JsonValue
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import SecretKey
from eval_runner.service.config import Config
from eval_runner.service.ledger.claims import key_name, key_of
from eval_runner.service.ledger.store import Ledger, ledger_path
from eval_runner.service.relay.publisher import Publisher
from eval_runner.service.requests.pipeline import Pipeline
from eval_runner.service.settings import Limits
from tests.support.hosted_service import Service, hosted_service
from tests.support.paths import EXAMPLE
from tests.support.stand_in_relay import unused_port_url
from tests.support.stand_in_suite import NOTES, StandInSuiteRunner
from tests.support.trainer_side import (
    AcceptedBody,
    ProgressBody,
    ResultBody,
    Trainer,
    catalog_tool,
    draft,
    run_input,
)


def definition(service: Service) -> dict[str, JsonValue]:
    return service.catalog.tools[0].definition.to_json()


def catalog_run(service: Service, runs: int = 1) -> dict[str, JsonValue]:
    found = definition(service)
    return run_input(found, draft(catalog_tool(found)), runs=runs)


async def test_a_hosted_run_is_streamed_sealed_and_answered(tmp_path: Path) -> None:
    async with hosted_service(tmp_path) as service, Trainer(service.url, service.runner) as trainer:
        event, body = await trainer.run(catalog_run(service, runs=2), "req-streamed")
        result = await trainer.result(event)
        sent = trainer.sent[event.id]

        # accepted, once, naming what the ledger holds
        [accepted] = sent.accepted
        assert isinstance(accepted, AcceptedBody)
        assert accepted.input_digest == body.input_digest
        assert accepted.lock_digest == body.lock.digest
        assert (accepted.controller, accepted.retain_until) == (service.runner, body.retain_until)
        claim = service.ledger.lookup(key_of(service.runner, trainer.pubkey, "req-streamed", 1))
        assert claim is not None
        assert (accepted.mailbox, accepted.record) == (claim.mailbox, claim.record)

        # progress: queued 0/8, running 0/8, then one running k/8 per case run
        progress = sent.progress
        assert [note.seq for note in progress] == list(range(10))
        assert [note.status for note in progress] == ["queued"] + ["running"] * 9
        assert [note.completed for note in progress] == [0, 0, *range(1, 9)]
        assert {note.planned for note in progress} == {8}
        assert [(note.seq, note.status) for note in claim.progress] == [(0, "queued")] + [
            (n, "running") for n in range(1, 10)
        ]

        # the result: completed, naming the report and the 3188 that seals it
        assert (result.outcome, result.dispatched, result.code, result.message) == ("completed", True, None, None)
        assert result.record == accepted.record
        output = result.output
        assert isinstance(output, RunOutput)
        assert result.artifacts == (output.report,)
        assert (output.headline.subject_passed, output.headline.baseline_passed, output.headline.total) == (2, 1, 2)
        assert (output.verdict, output.notes) == ("pass", NOTES)
        sealed, envelope = await trainer.open_sealed(output.sealed)
        assert sealed.tags == (("p", trainer.pubkey), ("h", accepted.mailbox), ("t", ARTIFACT_MARKER))
        assert envelope.artifact == output.report
        assert envelope.inline_bytes() is not None
        assert output.report.matches(envelope.inline_bytes() or b"")
        assert envelope.retain_until >= body.retain_until

        # in order on the wire: accepted, progress, the 3188, then the result
        kinds = [(answer.kind, answer.id) for answer in trainer.received]
        assert kinds.index((3188, sealed.id)) < kinds.index((26920, sent.answers[-1].event.id))
        order = [type(bound.answer) for bound in sent.answers]
        assert order == [AcceptedBody] + [ProgressBody] * 10 + [ResultBody]

        # the run ran once, its staging is gone, its job and usage are recorded
        assert service.suite.runs == 1
        assert not service.suite.plans[0].staging.exists()
        job = service.ledger.job(claim.key)
        assert job is not None
        assert (job.status, job.report, job.sealed) == ("completed", output.report, output.sealed)
        assert job.results is not None
        assert Path(job.results).is_dir()
        assert Path(job.results).parent == service.state / "jobs" / key_name(claim.key) / "results"
        [record] = service.usage()
        assert record.to_json() == {
            "time": record.time,
            "key": trainer.pubkey,
            "request": event.id,
            "action": "run",
            "subject": service.catalog.tools[0].definition.id,
            "suite": "draft",
            "tests": 2,
            "runs": 2,
            "turns": 8,
            "outcome": "completed",
            "verdict": "pass",
            "subject_passed": 2,
            "baseline_passed": 1,
            "total_ms": record.total_ms,
            "bytes_in": len(event.content),
        }
        name = key_name(claim.key)
        assert f"running {name} for {trainer.pubkey[:12]}: 2 tests, 2 runs per arm" in service.logs.lines
        assert f"finished {name}: 2 of 2 with the tool, 1 without, pass" in service.logs.lines
        secrets = (service.secret.to_hex(), trainer.secret.to_hex())
        assert not [line for line in service.logs.lines if any(secret in line for secret in secrets)]
        assert trainer.unbound == []


async def test_a_retransmission_is_answered_from_the_record_and_never_rerun(tmp_path: Path) -> None:
    async with hosted_service(tmp_path) as service, Trainer(service.url, service.runner) as trainer:
        first, body = await trainer.run(catalog_run(service), "req-again")
        original = await trainer.result(first)
        again = trainer.execute_event(body)
        assert again.id != first.id
        await trainer.publish(again)
        answered = await trainer.result(again)
        assert answered == original
        sent = trainer.sent[again.id]
        assert [type(bound.answer) for bound in sent.answers] == [ResultBody], "no accepted, no progress"
        stored = service.ledger.lookup(key_of(service.runner, trainer.pubkey, "req-again", 1))
        assert stored is not None
        assert stored.aliases == (first.id, again.id)
        assert service.suite.runs == 1
        assert len(service.usage()) == 1, "a retransmission answered from the ledger is not a new record"


async def test_a_retransmission_while_running_gets_the_final_result_at_its_own_event(tmp_path: Path) -> None:
    async with hosted_service(tmp_path, mode="block") as service, Trainer(service.url, service.runner) as trainer:
        first, body = await trainer.run(catalog_run(service), "req-alias")
        await trainer.progress(first, lambda notes: any(note.status == "running" for note in notes))
        again = trainer.execute_event(body)
        await service.deliver(again)  # handed over as the listener would, so it is handled when this returns
        assert _aliases(service, key_of(service.runner, trainer.pubkey, "req-alias", 1)) == 2
        assert trainer.sent[again.id].answers == [], "nothing is answered to an alias while the run goes on"
        service.suite.release()
        results = [await trainer.result(first), await trainer.result(again)]
        assert results[0] == results[1]
        assert results[0].outcome == "completed"
        assert service.suite.runs == 1
        assert [type(bound.answer) for bound in trainer.sent[again.id].answers] == [ResultBody]


async def test_what_cannot_be_proven_is_dropped_and_nothing_is_published(tmp_path: Path) -> None:
    async with hosted_service(tmp_path) as service, Trainer(service.url, service.runner) as trainer:
        body = trainer.body(catalog_run(service), "req-dropped")
        genuine = trainer.execute_event(body)
        zeroed = dataclasses.replace(genuine, sig="0" * 128)
        altered = dataclasses.replace(genuine, tags=(*genuine.tags, ("t", "added")))
        elsewhere = trainer.seal(body.to_json(), [["p", "c" * 64], ["expiration", str(body.deadline)]])
        old = trainer.execute_event(body, created_at=int(time.time()) - 660)
        for event in (zeroed, altered, elsewhere):  # a relay refuses or never routes these: deliver them directly
            await service.deliver(event)
        await trainer.publish(old)  # the relay takes this one and the listener reaches an hour back
        # the zeroed and the altered copy carry the genuine event's id: each is dropped, neither is remembered
        assert "invalid_signature" in await service.logs.wait_for(f"dropped {genuine.id[:12]}: ", 1)
        assert "invalid_id" in await service.logs.wait_for(f"dropped {genuine.id[:12]}: ", 2)
        assert "not exactly this runner" in await service.logs.wait_for(f"dropped {elsewhere.id[:12]}: ")
        assert "stale: created 6" in await service.logs.wait_for(f"dropped {old.id[:12]}: ")

        barrier, _ = await trainer.run(catalog_run(service, runs=4), "req-barrier", checked=False)
        refused = await trainer.result(barrier)
        assert refused.code == "too_large"
        await service.deliver(barrier)  # the same event again is handled once
        second, _ = await trainer.run(catalog_run(service, runs=4), "req-barrier-2", checked=False)
        await trainer.result(second)

        for event in (zeroed, altered, elsewhere, old):
            assert trainer.about(event.id) == [], "a dropped event is never answered"
        assert len(trainer.about(barrier.id)) == 1
        assert [record.request for record in service.usage()] == [barrier.id, second.id]
        assert service.ledger.claims() == ()
        assert service.suite.runs == 0


def _aliases(service: Service, key: str) -> int:
    claim = service.ledger.lookup(key)
    return 0 if claim is None else len(claim.aliases)


async def test_a_forgery_carrying_a_genuine_events_id_does_not_shadow_it(tmp_path: Path) -> None:
    async with hosted_service(tmp_path) as service, Trainer(service.url, service.runner) as trainer:
        genuine = trainer.execute_event(trainer.body(catalog_run(service), "req-shadowed"))
        await service.deliver(dataclasses.replace(genuine, sig="0" * 128))
        await trainer.publish(genuine)
        assert (await trainer.result(genuine)).outcome == "completed"
        assert service.suite.runs == 1


async def test_progress_reported_from_worker_threads_arrives_in_order(tmp_path: Path) -> None:
    async with hosted_service(tmp_path, mode="threads") as service, Trainer(service.url, service.runner) as trainer:
        event, _ = await trainer.run(catalog_run(service, runs=2), "req-threads")
        assert (await trainer.result(event)).outcome == "completed"
        progress = trainer.sent[event.id].progress
        assert [(note.seq, note.completed) for note in progress] == list(enumerate([0, 0, *range(1, 9)]))


def test_the_pipeline_serve_runs_takes_its_places_and_limits_from_the_configuration(tmp_path: Path) -> None:
    environ = {
        "EVAL_RUNNER_CATALOG": str(EXAMPLE),
        "EVAL_RUNNER_CODER": "/usr/bin/true",
        "CODER_DOOR_KEY": "door-key",
        "EVAL_RUNNER_STATE": str(tmp_path / "state"),
        "EVAL_RUNNER_TMP": str(tmp_path / "tmp"),
        "EVAL_RUNNER_JOBS": "3",
        "EVAL_RUNNER_RUNS_PER_DAY": "5",
    }
    config = Config.from_env(environ)
    secret = SecretKey.generate()
    (tmp_path / "state").mkdir()
    with Ledger.open(ledger_path(config.state), secret.public_key().to_hex(), int(time.time())) as ledger:
        pipeline = Pipeline.from_config(
            config,
            secret=secret,
            ledger=ledger,
            catalog=Catalog.load(config.catalog),
            suite_runner=StandInSuiteRunner(),
            publisher=Publisher(unused_port_url(), secret),
        )
        assert (pipeline.admission.state, pipeline.admission.temp_root) == (config.state, config.temp_root)
        assert pipeline.admission.runner == pipeline.runner == secret.public_key().to_hex()
        assert (pipeline.quota.path, pipeline.usage.directory) == (config.quota_file, config.usage_dir)
        assert pipeline.limits == Limits(runs_per_trainer=5, jobs=3)


async def test_a_run_interrupted_by_a_restart_answers_unknown_and_never_reruns(tmp_path: Path) -> None:
    phone = SecretKey.generate()
    async with (
        hosted_service(tmp_path, mode="block") as service,
        Trainer(service.url, service.runner, phone) as trainer,
    ):
        runner_key = service.secret
        event, body = await trainer.run(catalog_run(service), "req-interrupted")
        await trainer.progress(event, lambda notes: any(note.status == "running" for note in notes))
        await service.pipeline.aclose()  # the process dies mid-run: no result is ever sent
        assert trainer.sent[event.id].results == []
    async with (
        hosted_service(tmp_path, secret=runner_key) as restarted,
        Trainer(restarted.url, restarted.runner, phone) as trainer,
    ):
        again = trainer.execute_event(body)
        await trainer.publish(again)
        result = await trainer.result(again)
        claim = restarted.ledger.lookup(key_of(restarted.runner, phone.public_key().to_hex(), "req-interrupted", 1))
        assert claim is not None
        assert (result.outcome, result.dispatched, result.output, result.record) == (
            "unknown",
            True,
            None,
            claim.record,
        )
        assert not result.has_code
        assert restarted.suite.runs == 0, "an interrupted run is never run again"
        assert claim.aliases == (event.id, again.id)
