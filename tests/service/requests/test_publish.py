"""The publish action in process (runner.md §15): the pipeline `serve` builds over a real relay and the real
embedded blob server, with a suite runner that leaves the engine's own report and results directory.

What the end-to-end tests cannot reach cheaply: a result too large for the relay (a request near NIP-44's bound
cannot pass a relay that keeps events of 64 KiB, so it is handed to the pipeline as the listener would), a run
whose results no longer check, and the durable record of a publish on the run's job (the signed `3189` kept
before it was sent, then the pointers).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

from eval_runner.contracts.outputs import PublishOutput, RunOutput
from eval_runner.contracts.package import RELEASE_KIND
from eval_runner.contracts.publication import MAX_EVENT_MESSAGE_BYTES
from eval_runner.contracts.refs import ArtifactRef
from eval_runner.contracts.report import REPORT_SCHEMA
from eval_runner.contracts.strict_json import JsonValue, digest_bytes, read
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import Event
from eval_runner.service.requests.publish import NO_FINISHED_RUN, TOO_LARGE
from eval_runner.service.usage import read as read_usage
from tests.support.paths import EXAMPLE
from tests.support.publishing import publish_input, results_on, stored
from tests.support.stand_in_results import PublishingService, publishing_service
from tests.support.trainer_side import Trainer, catalog_tool, draft, example_case, run_input

REPORT_MEDIA = "application/json"
CATALOG = Catalog.load([EXAMPLE])
TOOL = CATALOG.tools[0].definition.to_json()


def big_draft() -> dict[str, JsonValue]:
    """Eight long-named cases whose prompts fill the draft to just under its 64 KiB, run three times per arm."""
    cases = []
    for number in range(8):
        case = example_case("greeting")
        case["id"] = f"greeting-{number}-with-a-name-long-enough-to-weigh-in-the-report-xxxx"
        case["prompt"] = str(case["prompt"]) + "Say hello warmly. " * 400
        cases.append(case)
    return run_input(TOOL, draft(catalog_tool(TOOL), cases), runs=3)


async def delivered(service: PublishingService, phone: Trainer, value: JsonValue, request: str) -> Event:
    """A request handed to the pipeline as the listener hands it (past any relay's event size limit)."""
    event = phone.execute_event(phone.body(value, request))
    await service.pipeline.handle(event)
    return event


async def test_a_result_the_relay_could_not_hold_fails_too_large_and_publishes_nothing(tmp_path: Path) -> None:
    async with publishing_service(tmp_path, CATALOG) as service, Trainer(service.url, service.runner) as phone:
        event = await delivered(service, phone, big_draft(), "req-big")
        ran = await phone.result(event)
        assert isinstance(ran.output, RunOutput), ran
        asked = await delivered(service, phone, publish_input(ran.output.report), "req-big-publish")
        failed = await phone.result(asked)
        assert (failed.outcome, failed.code, failed.message) == ("failed", "too_large", TOO_LARGE)
        assert await results_on(service.url) == []
        assert await stored(service.url, [RELEASE_KIND]) == [], "the draft's test set is not released first"
        job = service.ledger.jobs()[0]
        assert (job.published, job.publishing) == (None, None), "nothing was recorded for a result never sent"
        assert f"publish {job.key_name} failed: too_large: {TOO_LARGE}" in service.logs.text
    usage = read_usage(service.state / "usage").records
    assert [(record.action, record.outcome, record.code) for record in usage][-1] == ("publish", "failed", "too_large")
    assert MAX_EVENT_MESSAGE_BYTES == 128_000


async def test_a_publish_is_recorded_on_the_runs_job_and_a_draft_report_is_rewritten_in_place(tmp_path: Path) -> None:
    async with publishing_service(tmp_path, CATALOG) as service, Trainer(service.url, service.runner) as phone:
        value = run_input(TOOL, draft(catalog_tool(TOOL), [example_case("greeting")]))
        ran_event, _ = await phone.run(value, "req-run")
        ran = await phone.result(ran_event)
        assert isinstance(ran.output, RunOutput)
        results = Path(str(service.ledger.jobs()[0].results))
        sealed = (results / "report.json").read_bytes()
        assert ran.output.report.matches(sealed)
        asked, _ = await phone.run(publish_input(ran.output.report), "req-publish")
        done = await phone.result(asked)
        assert isinstance(done.output, PublishOutput), done
        job = service.ledger.jobs()[0]
        assert job.published == done.output
        assert job.report == ran.output.report, "the job still names the sealed report, which admission finds"
        assert job.publishing is not None
        kept = Event.from_json(read(job.publishing))
        assert kept.id == done.output.result.id, "the 3189 sent is the one recorded before it was sent"
        rewritten = (results / "report.json").read_bytes()
        assert rewritten.endswith(b"}\n")
        assert json.loads(rewritten)["suite"]["event"] == done.output.suite_release.to_json()
        assert (await results_on(service.url))[0].id == done.output.result.id
        assert f"digest is now {digest_bytes(rewritten)}" in service.logs.text


async def test_a_run_whose_results_no_longer_check_is_not_published(tmp_path: Path) -> None:
    async with publishing_service(tmp_path, CATALOG) as service, Trainer(service.url, service.runner) as phone:
        value = run_input(TOOL, draft(catalog_tool(TOOL), [example_case("greeting")]))
        ran_event, _ = await phone.run(value, "req-run")
        ran = await phone.result(ran_event)
        assert isinstance(ran.output, RunOutput)
        results = Path(str(service.ledger.jobs()[0].results))
        report = results / "report.json"
        report.write_bytes(report.read_bytes().replace(b'"verdict":"inconclusive"', b'"verdict":"pass"'))
        asked, _ = await phone.run(publish_input(ran.output.report), "req-publish")
        failed = await phone.result(asked)
        assert (failed.outcome, failed.code) == ("failed", "unavailable")
        assert failed.message == "the run's report.json is not the report it sealed"
        shutil.rmtree(results / "suite")
        again, _ = await phone.run(publish_input(ran.output.report), "req-publish-again")
        assert (await phone.result(again)).code == "unavailable"
        # Another trainer's report digest, or none at all: not this trainer's finished run.
        other, _ = await phone.run(publish_input(ArtifactRef.of_bytes(b"{}", REPORT_MEDIA, REPORT_SCHEMA)), "req-other")
        assert (await phone.result(other)).message == NO_FINISHED_RUN
        assert await results_on(service.url) == []


async def test_publishes_of_one_run_take_turns_and_leave_no_lock_behind(tmp_path: Path) -> None:
    async with publishing_service(tmp_path, CATALOG) as service, Trainer(service.url, service.runner) as phone:
        value = run_input(TOOL, draft(catalog_tool(TOOL), [example_case("greeting")]))
        ran_event, _ = await phone.run(value, "req-run")
        ran = await phone.result(ran_event)
        assert isinstance(ran.output, RunOutput)
        publishing = service.pipeline.publishing
        job = service.ledger.jobs()[0]
        first, second = await asyncio.gather(publishing.publish(job), publishing.publish(job))
        assert first.output == second.output, "the second waited for the first and found what it published"
        assert publishing.under_way == (), "a finished publish keeps no lock"
        assert len(await stored(service.url, [RELEASE_KIND])) == 1
        assert len(await results_on(service.url)) == 1
        third = await publishing.publish(service.ledger.jobs()[0])
        assert third.output == first.output
        assert publishing.under_way == ()
