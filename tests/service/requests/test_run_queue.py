"""The fleet's queue through two pipelines with one key on one PostgreSQL ledger (a real database, a real
relay, real signatures; the stand-in suite runner).

The runner that admits a run only queues it; the other, with a free slot, takes it and runs it rebuilt
from the stored request, with the tool release admission chose (not one of its own), and answers its
progress and result. A queued run that no longer plans on the taker fails with the reason, once; one whose
rebuilding breaks unforeseen (a bug) fails too, its quota given back and its slot free for the next run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from eval_runner.contracts.hosted import RunInput
from eval_runner.contracts.refs import EventRef
from eval_runner.contracts.strict_json import JsonValue
from eval_runner.engine.testset.catalog import Catalog, Tool
from eval_runner.nostr import SecretKey
from eval_runner.service.ledger.postgres import PostgresLedger
from eval_runner.service.relay.publisher import Publisher
from eval_runner.service.requests.admission import NOT_A_CATALOG_TOOL, Admission, RunPlan, ToolRelease
from eval_runner.service.requests.pipeline import Pipeline
from eval_runner.service.requests.quota import day_of, quota_for
from eval_runner.service.requests.run_queue import DEADLINE_PASSED, UNREBUILT
from eval_runner.service.settings import Limits
from eval_runner.service.usage import read_database, usage_log_for
from tests.support.paths import EXAMPLE
from tests.support.postgres_server import PostgresServer
from tests.support.stand_in_relay import BOUND, local_relay
from tests.support.stand_in_suite import StandInSuiteRunner
from tests.support.trainer_side import Trainer, catalog_tool, draft, example_case, run_input

RELEASE = EventRef(id="e" * 64, pubkey="f" * 64, kind=3184)


async def released(_: Tool) -> EventRef:
    return RELEASE


class PlanningBug(Admission):
    """Planning with a bug in its first run: any error rebuilding was not written to expect (a real
    admission's bug cannot be summoned on demand, so this one is put there)."""

    broken = True

    async def plan(self, run: RunInput, requester: EventRef) -> RunPlan:
        if self.broken:
            self.broken = False
            raise RuntimeError("a bug in planning")
        return await super().plan(run, requester)


@dataclass
class Runner:
    pipeline: Pipeline
    suite: StandInSuiteRunner
    ledger: PostgresLedger


@contextlib.asynccontextmanager
async def runner(
    url: str,
    relay: str,
    secret: SecretKey,
    state: Path,
    catalog: Catalog,
    release: ToolRelease | None,
    admitting: type[Admission] = Admission,
) -> AsyncIterator[Runner]:
    state.mkdir(parents=True)
    key = secret.public_key().to_hex()
    suite = StandInSuiteRunner()
    with PostgresLedger.connect(url, state, key, int(time.time())) as ledger:
        async with Publisher(relay, secret, challenge_wait=0.05) as publisher:
            pipeline = Pipeline(
                secret=secret,
                ledger=ledger,
                admission=admitting(runner=key, catalog=catalog, state=state, temp_root=state, tool_release=release),
                suite_runner=suite,
                publisher=publisher,
                quota=quota_for(state / "quota.json", ledger),
                usage=usage_log_for(state / "usage", ledger),
                limits=Limits(jobs=1),
            )
            try:
                yield Runner(pipeline, suite, ledger)
            finally:
                await asyncio.wait_for(pipeline.wait_idle(), BOUND)
                await pipeline.aclose()
                pipeline.usage.close()


def greeting() -> dict[str, JsonValue]:
    found = Catalog.load([EXAMPLE]).tools[0].definition.to_json()
    return run_input(found, draft(catalog_tool(found), [example_case("greeting")]), runs=1)


async def test_a_run_admitted_by_one_runner_runs_on_the_other_rebuilt_from_the_record(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    url = postgres.fresh_schema()
    secret = SecretKey.generate()
    catalog = Catalog.load([EXAMPLE])
    stop = asyncio.Event()
    async with (
        local_relay() as relay,
        runner(url, relay, secret, tmp_path / "admits", catalog, released) as admitter,
        runner(url, relay, secret, tmp_path / "takes", catalog, None) as taker,
        Trainer(relay, secret.public_key().to_hex()) as trainer,
    ):
        event = trainer.execute_event(trainer.body(greeting(), "req-queued"))
        await admitter.pipeline.handle(event)
        assert admitter.ledger.queue_depth() == 1
        assert taker.pipeline.queue is not None
        taker.pipeline.queue.start(stop)
        result = await trainer.result(event)
        assert result.outcome == "completed"
        stop.set()
        assert (admitter.suite.runs, taker.suite.runs) == (0, 1)
        [plan] = taker.suite.plans
        assert plan.subject.definition.event == RELEASE, "the release admission chose, not the taker's"
        statuses = [(note.seq, note.status) for note in trainer.sent[event.id].progress]
        assert statuses[:2] == [(0, "queued"), (1, "running")]
        assert [len(trainer.sent[event.id].accepted), len(trainer.sent[event.id].results)] == [1, 1]
    found = read_database(url)
    assert [(record.request, record.outcome) for record in found.records] == [(event.id, "completed")]


async def test_a_queued_run_that_no_longer_plans_fails_with_the_reason(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    url = postgres.fresh_schema()
    secret = SecretKey.generate()
    stop = asyncio.Event()
    async with (
        local_relay() as relay,
        runner(url, relay, secret, tmp_path / "admits", Catalog.load([EXAMPLE]), None) as admitter,
        runner(url, relay, secret, tmp_path / "takes", Catalog.load([]), None) as taker,
        Trainer(relay, secret.public_key().to_hex()) as trainer,
    ):
        event = trainer.execute_event(trainer.body(greeting(), "req-unplanned"))
        await admitter.pipeline.handle(event)
        assert taker.pipeline.queue is not None
        taker.pipeline.queue.start(stop)
        result = await trainer.result(event)
        stop.set()
        assert (result.outcome, result.message) == ("failed", NOT_A_CATALOG_TOOL)
        assert (admitter.suite.runs, taker.suite.runs) == (0, 0)
        job = taker.ledger.job(result_key(taker, trainer, "req-unplanned"))
        assert job is not None
        assert job.status == "failed"
    assert [record.outcome for record in read_database(url).records] == ["failed"]


async def test_a_queued_run_whose_deadline_passed_fails_unrun_and_gives_its_quota_back(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    url = postgres.fresh_schema()
    secret = SecretKey.generate()
    catalog = Catalog.load([EXAMPLE])
    stop = asyncio.Event()
    async with (
        local_relay() as relay,
        runner(url, relay, secret, tmp_path / "admits", catalog, released) as admitter,
        runner(url, relay, secret, tmp_path / "takes", catalog, None) as taker,
        Trainer(relay, secret.public_key().to_hex()) as trainer,
    ):
        event = trainer.execute_event(trainer.body(greeting(), "req-late"))
        await admitter.pipeline.handle(event)
        day = day_of(time.time())
        assert admitter.ledger.day_counts(day) == ({trainer.pubkey: 1}, 2)
        claim = admitter.ledger.lookup(result_key(admitter, trainer, "req-late"))
        assert claim is not None
        assert taker.pipeline.queue is not None
        taker.pipeline.queue.clock = lambda: float(claim.deadline)  # the taker's first look is at the deadline
        taker.pipeline.queue.start(stop)
        result = await trainer.result(event)
        stop.set()
        assert (result.outcome, result.message) == ("failed", DEADLINE_PASSED)
        assert (admitter.suite.runs, taker.suite.runs) == (0, 0), "never run"
        assert [note.status for note in trainer.sent[event.id].progress] == ["queued"]
        assert taker.ledger.queue_depth() == 0
        job = taker.ledger.job(claim.key)
        assert job is not None
        assert job.status == "failed"
        assert taker.ledger.day_counts(day) == ({}, 0), "the run's share given back"
    assert [record.outcome for record in read_database(url).records] == ["failed"]


async def test_a_queued_run_whose_rebuilding_breaks_fails_and_frees_its_slot(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    url = postgres.fresh_schema()
    secret = SecretKey.generate()
    catalog = Catalog.load([EXAMPLE])
    stop = asyncio.Event()
    async with (
        local_relay() as relay,
        runner(url, relay, secret, tmp_path / "admits", catalog, released) as admitter,
        runner(url, relay, secret, tmp_path / "takes", catalog, None, PlanningBug) as taker,
        Trainer(relay, secret.public_key().to_hex()) as trainer,
    ):
        broken = trainer.execute_event(trainer.body(greeting(), "req-broken"))
        after = trainer.execute_event(trainer.body(greeting(), "req-after"))
        await admitter.pipeline.handle(broken)
        await admitter.pipeline.handle(after)
        assert admitter.ledger.queue_depth() == 2
        assert taker.pipeline.queue is not None
        taker.pipeline.queue.start(stop)
        result = await trainer.result(broken)
        assert (result.outcome, result.message) == ("failed", UNREBUILT)
        later = await trainer.result(after)
        stop.set()
        assert later.outcome == "completed", "the one suite slot came back after the broken run"
        assert (admitter.suite.runs, taker.suite.runs) == (0, 1)
        job = taker.ledger.job(result_key(taker, trainer, "req-broken"))
        assert job is not None
        assert job.status == "failed"
        assert taker.ledger.day_counts(day_of(time.time())) == ({trainer.pubkey: 1}, 2), (
            "the broken run's share given back"
        )
    assert sorted(record.outcome for record in read_database(url).records) == ["completed", "failed"]


def result_key(found: Runner, trainer: Trainer, request: str) -> str:
    return found.ledger.key(trainer.pubkey, request, 1)
