"""A suite runner that runs nothing but leaves what a run leaves, and the service around it for publish tests.

`StandInResultsRunner` obeys the `SuiteRunner` protocol like `stand_in_suite`, but its report and results
directory are the engine's own (`build_report`, `write_results`) for the plan's real suite, subject and
authorship, with no attempt made (so every run is `unknown` and the verdict inconclusive): a publish reads
`report.json`, `artifacts/suite.json`, `artifacts/cases.json` and `suite/` exactly as after a real run.

`publishing_service` is the pipeline `serve` builds, in process, over a real relay (nostr-sdk's LocalRelay) and
the real embedded blob server, with this runner: the listener delivers, the publisher answers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from eval_runner.contracts.report_documents import AgentPin
from eval_runner.contracts.strict_json import digest_bytes
from eval_runner.engine.report.build import build_report
from eval_runner.engine.report.inputs import ReportInputs, RunSetup
from eval_runner.engine.report.results_dir import suite_files, write_results
from eval_runner.engine.suite_run import gate_file
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import SecretKey
from eval_runner.service.blobs import BlobServer, BlobStore
from eval_runner.service.ledger.store import Ledger, ledger_path
from eval_runner.service.relay.connection import RelayClient
from eval_runner.service.relay.liveness import SUBSCRIBED, RelayListener
from eval_runner.service.relay.publisher import Publisher
from eval_runner.service.requests.admission import Admission, RunPlan
from eval_runner.service.requests.pipeline import Pipeline, Progress, SuiteResult
from eval_runner.service.requests.quota import Quota
from eval_runner.service.settings import Limits
from eval_runner.service.usage import UsageLog
from tests.support.captured_logs import LogLines, captured_logs
from tests.support.stand_in_relay import BOUND, local_relay

AGENT = AgentPin(digest=digest_bytes(b"stand-in coder"), size=14)


class StandInResultsRunner:
    """Runs nothing; writes the engine's report and results directory for the plan (see the module)."""

    def __init__(self) -> None:
        self.plans: list[RunPlan] = []

    async def run(self, plan: RunPlan, *, progress: Progress, cancel: asyncio.Event, results_base: Path) -> SuiteResult:
        self.plans.append(plan)
        return await asyncio.to_thread(self._results, plan, results_base)

    def _results(self, plan: RunPlan, results_base: Path) -> SuiteResult:
        authorship = plan.authorship
        now = int(time.time())
        built = build_report(
            ReportInputs(
                suite=plan.suite,
                subject=plan.subject,
                agent=AGENT,
                attempts=(),
                gate_file=gate_file(),
                author=authorship.author,
                package=authorship.package,
                component=authorship.component,
                evaluator=authorship.evaluator,
                started_at=now,
                ended_at=now,
                setup=RunSetup(runs=plan.runs),
                subject_definition=None if plan.tool is None else plan.tool.record,
                subject_release=plan.subject.definition.event,
                suite_release=authorship.suite_release,
                requester=authorship.requester,
                host="stand-in-host",
            )
        )
        return SuiteResult.of(built, write_results(results_base, built, (), suite_files(plan.suite)))


@dataclass
class PublishingService:
    url: str
    secret: SecretKey
    pipeline: Pipeline
    ledger: Ledger
    suite: StandInResultsRunner
    catalog: Catalog
    logs: LogLines
    state: Path

    @property
    def runner(self) -> str:
        return self.secret.public_key().to_hex()


@asynccontextmanager
async def publishing_service(tmp_path: Path, catalog: Catalog) -> AsyncIterator[PublishingService]:
    """The runner over `tmp_path/state`, with a relay and a blob store, releasing nothing at start."""
    state, temp_root = tmp_path / "state", tmp_path / "tmp"
    state.mkdir(exist_ok=True)
    temp_root.mkdir(exist_ok=True)
    secret = SecretKey.generate()
    runner = secret.public_key().to_hex()
    suite = StandInResultsRunner()
    with captured_logs() as logs:
        async with (
            local_relay() as url,
            BlobServer(state / "blobs", [runner]) as server,
            BlobStore([server.url], server.url, secret) as store,
            Publisher(url, secret, challenge_wait=0.05) as publisher,
        ):
            with Ledger.open(ledger_path(state), runner, int(time.time())) as ledger:
                admission = Admission(
                    runner=runner,
                    catalog=catalog,
                    state=state,
                    temp_root=temp_root,
                    blobs=store,
                    relay=RelayClient(url, secret, challenge_wait=0.05),
                )
                pipeline = Pipeline(
                    secret=secret,
                    ledger=ledger,
                    admission=admission,
                    suite_runner=suite,
                    publisher=publisher,
                    quota=Quota(state / "quota.json"),
                    usage=UsageLog(state / "usage"),
                    limits=Limits(),
                )
                listener = RelayListener(
                    url, secret, deliver=pipeline.handle, since=lambda: int(time.time()) - 3600, challenge_wait=0.05
                )
                listening = asyncio.create_task(listener.run_forever())
                try:
                    await logs.wait_for(SUBSCRIBED)
                    yield PublishingService(url, secret, pipeline, ledger, suite, catalog, logs, state)
                    await asyncio.wait_for(pipeline.wait_idle(), BOUND)
                finally:
                    listener.stop()
                    await asyncio.wait_for(listening, BOUND)
                    await pipeline.aclose()
