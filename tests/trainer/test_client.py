"""The trainer client against a real relay (nostr-sdk's LocalRelay) and the runner's real pipeline, wired as
`serve` wires it with the stand-in suite runner (tests.support.hosted_service): a run accepted, streamed
and answered, its sealed report opened and checked, refusals typed, retransmissions answered from the
ledger, status and cancel controls, and silence named for what it is.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from eval_runner.contracts.answers import AcceptedBody, CancelResult, ProgressBody, ResultBody, StatusResult
from eval_runner.contracts.hosted import RunInput
from eval_runner.contracts.outputs import RunOutput
from eval_runner.contracts.refs import ArtifactRef, DefinitionRef
from eval_runner.contracts.strict_json import canonical, read
from eval_runner.nostr import SecretKey
from eval_runner.trainer.client import (
    WORKER_ABSENT,
    WORKER_SILENT,
    Request,
    RunAnswer,
    Trainer,
    TrainerError,
    extension_tool,
    run_input,
    suite_draft,
)
from tests.support.hosted_service import Service, hosted_service
from tests.support.paths import EXAMPLE
from tests.support.stand_in_relay import BOUND, StandInRelay, local_relay

WAIT = 0.05  # how long a trainer waits for a relay's first challenge (LocalRelay challenges later)


def trainer_for(service: Service, secret: SecretKey | None = None) -> Trainer:
    return Trainer(service.url, secret or SecretKey.generate(), service.runner, challenge_wait=WAIT)


def nobody() -> str:
    """A runner key nothing listens for."""
    return SecretKey.generate().public_key().to_hex()


def example_run(runs: int = 1) -> tuple[RunInput, tuple[str, ...]]:
    """The example extension's own evals/ against it, as `trainer run --extension examples/codebase-brief`."""
    tool = extension_tool(EXAMPLE)
    drafted = suite_draft(EXAMPLE / "evals", tool.draft_tool())
    return run_input(drafted.draft, subject=tool.definition, runs=runs), drafted.warnings


async def test_a_run_is_accepted_streamed_answered_and_its_report_opens(tmp_path: Path) -> None:
    async with hosted_service(tmp_path) as service, trainer_for(service) as trainer:
        value, _ = example_run(runs=2)
        shown: list[object] = []
        answer = await trainer.run(value, on_answer=shown.append, timeout=BOUND)

        request = answer.request
        [event] = request.events
        assert len(request.id) == 32
        assert set(request.id) <= set("0123456789abcdef")
        assert answer.silence is None
        assert isinstance(answer.accepted, AcceptedBody)
        assert request.accepted_event == event.id
        assert answer.accepted.input_digest == request.body.input_digest
        # queued 0/8, running 0/8, then one running k/8 per case run (2 tests × 2 runs × 2 arms)
        assert [note.seq for note in answer.progress] == list(range(10))
        assert [note.completed for note in answer.progress] == [0, 0, *range(1, 9)]
        assert {note.planned for note in answer.progress} == {8}
        assert not answer.progress_stopped
        result = answer.result
        assert isinstance(result, ResultBody)
        assert (result.outcome, result.code, result.message) == ("completed", None, None)
        # rendered in order: accepted, each contiguous progress note, then the result
        assert shown == [answer.accepted, *answer.progress, result]

        output = answer.output
        assert isinstance(output, RunOutput)
        report, data = await trainer.fetch_report(output.sealed, output.report)
        assert output.report.matches(data)
        assert ArtifactRef.of_bytes(data, "application/json", output.report.schema) == output.report
        assert data == canonical(read(data))
        assert report.evaluator == service.runner
        assert report.ext_eval.requester is not None
        assert (report.ext_eval.requester.id, report.ext_eval.requester.pubkey) == (event.id, trainer.pubkey)
        assert trainer.unbound == []
        assert answer.conflicts == []
        assert service.suite.runs == 1


async def test_a_suite_directory_travels_as_a_draft_the_runner_stages_byte_for_byte(tmp_path: Path) -> None:
    async with hosted_service(tmp_path, mode="block") as service, trainer_for(service) as trainer:
        value, warnings = example_run()
        assert warnings == (
            "overview: its fixtures (6 files) stay behind; a draft carries only prompt.md and graders/*.md, "
            "so the run starts in an empty directory",
        )
        answer = trainer.follow(trainer.request(value))
        await trainer.send(answer.request)
        await asyncio.wait_for(service.suite.wait_started(1), BOUND)
        [plan] = service.suite.plans
        assert plan.turns == 2 * 1 * 2
        for case in ("greeting", "overview"):
            staged, local = plan.evals / case, EXAMPLE / "evals" / case
            assert (staged / "prompt.md").read_bytes() == (local / "prompt.md").read_bytes()
            graders = sorted(path.name for path in (local / "graders").iterdir())
            assert sorted(path.name for path in (staged / "graders").iterdir()) == graders
            for name in graders:
                assert (staged / "graders" / name).read_bytes() == (local / "graders" / name).read_bytes()
        assert not (plan.evals / "overview" / "fixtures").exists()
        service.suite.release()
        await trainer.wait(answer, BOUND)
        assert answer.result is not None
        assert answer.result.outcome == "completed"


async def test_a_retransmission_re_signs_the_same_body_and_is_answered_without_a_rerun(tmp_path: Path) -> None:
    async with hosted_service(tmp_path) as service:
        secret = SecretKey.generate()
        async with trainer_for(service, secret) as trainer:
            value, _ = example_run()
            first = await trainer.run(value, timeout=BOUND)
        assert first.result is not None
        kept = read(canonical(first.request.to_json()))
        # a new process: the kept record, a new connection, the same key
        request = Request.from_json(kept)
        assert request.body == first.request.body
        assert request.body.to_json() == first.request.body.to_json()
        async with trainer_for(service, secret) as trainer:
            again = await trainer.run(request, timeout=BOUND)
        assert [event.id for event in request.events[:1]] == [first.request.events[0].id]
        assert len(request.events) == 2
        assert request.events[1].id != request.events[0].id
        assert again.result == first.result
        assert again.accepted is None, "answered from the ledger"
        assert again.progress == []
        assert service.suite.runs == 1


async def test_refusals_come_back_typed(tmp_path: Path) -> None:
    async with hosted_service(tmp_path) as service, trainer_for(service) as trainer:
        value, _ = example_run()
        too_many = value.to_json()
        too_many["runs"] = 4
        refused = await trainer.run(trainer.request(too_many, checked=False), timeout=BOUND)
        stranger = DefinitionRef(
            id="ab" * 32 + ":someone-else/tool", artifact=ArtifactRef.of_bytes(b"{}", "application/json")
        )
        tool = extension_tool(EXAMPLE)
        drafted = suite_draft(EXAMPLE / "evals", tool.draft_tool())
        other = await trainer.run(run_input(drafted.draft, subject=stranger), timeout=BOUND)
    for answer, code in ((refused, "too_large"), (other, "not_admitted")):
        result = answer.result
        assert result is not None
        assert (result.outcome, result.dispatched, result.code, result.output) == ("refused", False, code, None)
        assert result.message
        assert answer.accepted is None
        assert answer.progress == []
    assert service.suite.runs == 0


async def test_a_builder_refuses_what_the_runner_would_refuse_before_signing() -> None:
    value, _ = example_run()
    too_many = value.to_json()
    too_many["runs"] = 4
    async with (
        local_relay() as url,
        Trainer(url, SecretKey.generate(), nobody()) as trainer,
    ):
        with pytest.raises(TrainerError, match=r"limit_exceeded: input\.runs") as refused:
            trainer.request(too_many)
        assert refused.value.code == "input"


async def test_status_answers_for_the_trainer_and_refuses_a_stranger(tmp_path: Path) -> None:
    async with hosted_service(tmp_path) as service, trainer_for(service) as trainer:
        value, _ = example_run()
        answer = await trainer.run(value, timeout=BOUND)
        request = answer.request
        status = await trainer.status(request.target, request.body, timeout=BOUND)
        assert isinstance(status, StatusResult)
        assert (status.state, status.outcome, status.dispatched) == ("terminal", "completed", True)
        assert answer.accepted is not None
        assert status.record == answer.accepted.record
        async with trainer_for(service) as stranger:
            refused = await stranger.status(request.target, request.body, timeout=BOUND)
        assert isinstance(refused, ResultBody)
        assert (refused.outcome, refused.code) == ("refused", "not_admitted")


async def test_cancelling_a_waiting_run_ends_it_cancelled(tmp_path: Path) -> None:
    async with hosted_service(tmp_path, mode="wait_cancel") as service, trainer_for(service) as trainer:
        value, _ = example_run()
        request = trainer.request(value)
        running = asyncio.create_task(trainer.run(request, timeout=BOUND))
        await asyncio.wait_for(service.suite.wait_started(1), BOUND)
        answer = trainer.follow(request)
        assert await trainer.until(lambda: answer.accepted is not None)
        acknowledged = await trainer.cancel(answer.request.target, answer.request.body, timeout=BOUND)
        assert isinstance(acknowledged, CancelResult)
        assert acknowledged.confirmed is False
        done: RunAnswer = await asyncio.wait_for(running, BOUND)
        assert done is answer
        result = answer.result
        assert result is not None
        assert (result.outcome, result.dispatched, result.code) == ("cancelled", True, None)
        assert result.message == "the requester stopped the run"


async def test_silence_is_named_worker_absent_or_worker_silent(tmp_path: Path) -> None:
    # nobody listens for this runner: nothing is heard
    async with (
        local_relay() as url,
        Trainer(url, SecretKey.generate(), nobody()) as trainer,
    ):
        value, _ = example_run()
        absent = await trainer.run(value, timeout=0.2)
        assert (absent.result, absent.silence, absent.heard) == (None, WORKER_ABSENT, 0)
    # the runner accepts, then its suite never finishes: heard, then nothing
    async with hosted_service(tmp_path, mode="block") as service, trainer_for(service) as trainer:
        answer = trainer.follow(trainer.request(value))
        await trainer.send(answer.request)
        assert await trainer.until(lambda: len(answer.progress) == 2)  # queued, running
        await trainer.wait(answer, 0.2)
        assert (answer.result, answer.silence) == (None, WORKER_SILENT)
        assert [note.status for note in answer.progress] == ["queued", "running"]
        assert all(isinstance(note, ProgressBody) for note in answer.progress)


async def test_a_lost_relay_fails_the_wait_instead_of_passing_for_silence() -> None:
    """The relay takes the request, then closes the connection: the wait fails, it is not silence. (A scripted
    relay, which closes when told: LocalRelay's shutdown left the socket open past the wait on a loaded host.)"""
    value, _ = example_run()
    async with StandInRelay(challenge=False) as relay:
        trainer = Trainer(relay.url, SecretKey.generate(), nobody())
        await trainer.connect()
        connection = await relay.accept()
        answer = trainer.follow(trainer.request(value))
        sending = asyncio.ensure_future(trainer.send(answer.request))
        subscription = await connection.recv_until("REQ")
        await connection.send(["EOSE", subscription[1]])
        published = await connection.recv_until("EVENT")
        await connection.send(["OK", published[1]["id"], True, ""])
        await sending
        await connection.close()
    try:
        with pytest.raises(TrainerError, match="lost the relay") as lost:
            await trainer.wait(answer, BOUND)
        assert lost.value.code == "relay"
        assert answer.silence is None
    finally:
        trainer.close()
