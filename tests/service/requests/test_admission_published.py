"""Admission of a run of a published test set (runner.md §10.3 step 3, "Published") over a real relay (nostr-sdk's
LocalRelay), the real embedded Blossom server and real signatures: the release is found by id and signer,
materialized into the plan's staging, and rebuilt byte for byte; the plan names the suite by its release and
its author by the suite id. Every refusal has its code and the reference's words, and leaves no staging.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from eval_runner.contracts.errors import Code
from eval_runner.contracts.execution import fingerprint
from eval_runner.contracts.hosted import PublishInput, build_execute_body, request_tags
from eval_runner.contracts.publication import publication
from eval_runner.contracts.refs import DefinitionRef, EventRef
from eval_runner.contracts.report import report_ref
from eval_runner.contracts.strict_json import JsonValue
from eval_runner.engine.suite_run import gate_file
from eval_runner.engine.testset.cases import load_suite
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import Event, SecretKey, sign
from eval_runner.service.blobs import BlobServer, BlobStore
from eval_runner.service.relay.connection import RelayClient
from eval_runner.service.releases import SuiteRelease, release_suite, suite_release
from eval_runner.service.requests.admission import Admission, RefusalError, RunPlan
from eval_runner.service.requests.opening import OpenedExecute
from eval_runner.service.requests.published import (
    ANOTHER_TOOL,
    CHECK_OTHER_SUITE,
    CHECK_OTHER_TOOL,
    DOES_NOT_CHECK,
    NOT_ON_RELAY,
    OTHER_RULES,
    SAME_SUITE,
)
from tests.support.paths import EXAMPLE
from tests.support.published_suites import PACKAGE, blob_path, example_release, spelled
from tests.support.sample_reports import Spec, report
from tests.support.stand_in_relay import local_relay
from tests.support.trainer_side import run_input

RUNNER = SecretKey(hashlib.sha256(b"admission-published: the runner").digest())
AUTHOR = SecretKey(hashlib.sha256(b"admission-published: a suite author").digest())
TRAINER = SecretKey(hashlib.sha256(b"admission-published: a trainer").digest())
CATALOG = Catalog.load([EXAMPLE])
DEFINITION = CATALOG.tools[0].definition.to_json()


def as_run(found: RunPlan | PublishInput) -> RunPlan:
    assert isinstance(found, RunPlan), "a run input is planned as a run"
    return found


@dataclass
class World:
    tmp: Path
    relay: RelayClient
    server: BlobServer
    store: BlobStore

    @property
    def state(self) -> Path:
        return self.tmp / "state"

    @property
    def temp_root(self) -> Path:
        return self.tmp / "tmp"

    def admission(self, *, relay: RelayClient | None = None) -> Admission:
        return Admission(
            runner=RUNNER.public_key().to_hex(),
            catalog=CATALOG,
            state=self.state,
            temp_root=self.temp_root,
            blobs=self.store,
            relay=relay or self.relay,
        )

    async def publish(self, release: SuiteRelease) -> EventRef:
        return (await release_suite(release, secret=AUTHOR, blobs=self.store, relay=self.relay)).event


@pytest_asyncio.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    (tmp_path / "state").mkdir()
    (tmp_path / "tmp").mkdir()
    async with (
        local_relay() as url,
        BlobServer(tmp_path / "blobs", [AUTHOR.public_key().to_hex()]) as server,
        BlobStore([server.url], server.url, AUTHOR) as store,
    ):
        yield World(tmp_path, RelayClient(url, AUTHOR, challenge_wait=0.05), server, store)


def opened(value: JsonValue) -> OpenedExecute:
    now = int(time.time())
    body = build_execute_body(RUNNER.public_key().to_hex(), "req-published", value, now)
    event = sign(TRAINER, 25920, request_tags(RUNNER.public_key().to_hex(), body.deadline), "sealed", now)
    return OpenedExecute(event, TRAINER.public_key().to_hex(), body, fingerprint(body))


def published_run(release: EventRef, *, check: str | None = None, validates: str | None = None) -> JsonValue:
    return run_input(DEFINITION, None, suite=release.to_json(), check=check, validates=validates)


async def refusal(world: World, value: JsonValue, admission: Admission | None = None) -> tuple[Code, str]:
    with pytest.raises(RefusalError) as caught:
        await (admission or world.admission()).admit(opened(value))
    assert list(world.temp_root.iterdir()) == [], "a refusal leaves no staging behind"
    return caught.value.code, caught.value.message


# -- admitted ------------------------------------------------------------------------------------------


async def test_a_published_test_set_is_planned_under_its_release(world: World) -> None:
    pointer = await world.publish(example_release(AUTHOR.public_key().to_hex()))
    plan = as_run(await world.admission().admit(opened(published_run(pointer))))
    author = AUTHOR.public_key().to_hex()
    assert plan.authorship.suite_id == f"{author}:{PACKAGE}/suite"
    assert plan.authorship.suite_release == pointer
    assert plan.authorship.evaluator == RUNNER.public_key().to_hex()
    assert (plan.suite_word, plan.action, plan.tests, plan.turns) == (pointer.id, "run", 2, 4)
    assert plan.evals.parent == plan.staging
    fixture = plan.evals / "overview" / "fixtures" / "src" / "tables.rs"
    assert fixture.read_bytes() == (EXAMPLE / "evals/overview/fixtures/src/tables.rs").read_bytes()
    assert [case.name for case in plan.suite.cases] == ["greeting", "overview"]
    plan.close()
    assert not plan.staging.exists()


async def test_the_second_run_of_a_release_is_served_from_the_cache(world: World) -> None:
    release = example_release(AUTHOR.public_key().to_hex())
    pointer = await world.publish(release)
    as_run(await world.admission().admit(opened(published_run(pointer)))).close()
    shutil.rmtree(world.tmp / "blobs")  # the store has nothing now
    plan = as_run(await world.admission().admit(opened(published_run(pointer))))
    assert plan.authorship.suite_release == pointer
    assert (world.state / "suites" / release.manifest_ref.digest.removeprefix("sha256:") / "cases.json").is_file()
    plan.close()


# -- refused -------------------------------------------------------------------------------------------


async def test_a_release_not_on_the_relay_or_by_another_signer_is_not_admitted(world: World) -> None:
    pointer = await world.publish(example_release(AUTHOR.public_key().to_hex()))
    absent = EventRef(id="ab" * 32, pubkey=pointer.pubkey, kind=3184)
    assert await refusal(world, published_run(absent)) == (Code.NOT_ADMITTED, NOT_ON_RELAY)
    other_signer = EventRef(id=pointer.id, pubkey=TRAINER.public_key().to_hex(), kind=3184)
    assert await refusal(world, published_run(other_signer)) == (Code.NOT_ADMITTED, NOT_ON_RELAY)


async def test_a_relay_out_of_reach_is_unavailable(world: World) -> None:
    pointer = EventRef(id="ab" * 32, pubkey=AUTHOR.public_key().to_hex(), kind=3184)
    gone = RelayClient("ws://127.0.0.1:9", RUNNER, bound=5.0)
    code, message = await refusal(world, published_run(pointer), world.admission(relay=gone))
    assert code is Code.UNAVAILABLE
    assert message.startswith("looking up that test set's release: ")


async def test_a_tampered_file_is_refused_with_its_code_and_the_references_words(world: World) -> None:
    release = example_release(AUTHOR.public_key().to_hex())
    pointer = await world.publish(release)
    blob_path(world.tmp / "blobs", spelled(release).files["evals/greeting/prompt.md"]).write_bytes(b"other\n")
    code, message = await refusal(world, published_run(pointer))
    assert code is Code.IDENTITY_MISMATCH
    assert message.startswith(DOES_NOT_CHECK + "evals/greeting/prompt.md: ")


async def test_a_release_this_runner_cannot_rebuild_is_not_admitted(world: World) -> None:
    """Released under another gate: every byte checks, but this runner's suite.json would differ."""
    other_gate = gate_file().replace(b"ext-eval-v2", b"ext-eval-v2 ", 1)
    assert other_gate != gate_file()
    release = suite_release(
        load_suite(EXAMPLE / "evals"), author=AUTHOR.public_key().to_hex(), package=PACKAGE, gate_file=other_gate
    )
    pointer = await world.publish(release)
    assert await refusal(world, published_run(pointer)) == (Code.NOT_ADMITTED, OTHER_RULES)


async def test_a_published_set_of_more_than_eight_tests_is_too_large(world: World, tmp_path: Path) -> None:
    evals = tmp_path / "nine" / "evals"
    for number in range(9):
        shutil.copytree(EXAMPLE / "evals" / "greeting", evals / f"greeting-{number}")
    release = suite_release(
        load_suite(evals), author=AUTHOR.public_key().to_hex(), package="nine-tests", gate_file=gate_file()
    )
    pointer = await world.publish(release)
    assert await refusal(world, published_run(pointer)) == (
        Code.TOO_LARGE,
        "the hosted runner runs at most 8 tests, and this set has 9",
    )


# -- checks and validations name a published result ----------------------------------------------------


def result_event(suite_release: EventRef, *, content: str | None = None, subject: DefinitionRef | None = None) -> Event:
    """A published result (3189) whose report ran `suite_release`, signed by its evaluator; its subject is the
    sample report's tool (repo-map-brief), or `subject` (the example's catalog tool, say)."""
    evaluator = SecretKey(hashlib.sha256(b"admission-published: an evaluator").digest())
    built = report(Spec(evaluator=evaluator.public_key().to_hex(), suite_release=suite_release))
    if subject is not None:
        built = dataclasses.replace(built, subject=dataclasses.replace(built.subject, definition=subject))
    parts = publication(report_ref(built)[0])
    return sign(evaluator, parts.kind, parts.tags, parts.content if content is None else content, int(time.time()))


async def test_a_check_of_a_result_that_ran_this_release_is_planned_as_a_check(world: World) -> None:
    pointer = await world.publish(example_release(AUTHOR.public_key().to_hex()))
    result = result_event(pointer, subject=CATALOG.tools[0].definition)
    await world.relay.publish(result)
    plan = as_run(await world.admission().admit(opened(published_run(pointer, check=result.id))))
    assert (plan.action, plan.check, plan.authorship.suite_release) == ("check", result.id, pointer)
    plan.close()


async def test_a_check_is_refused_unless_its_result_is_on_the_relay_reads_and_ran_this_release(world: World) -> None:
    pointer = await world.publish(example_release(AUTHOR.public_key().to_hex()))
    tool = CATALOG.tools[0].definition
    other_suite = result_event(EventRef(id="cd" * 32, pubkey=pointer.pubkey, kind=3184), subject=tool)
    other_tool = result_event(pointer)  # a repo-map-brief result on this very test set
    garbled = result_event(pointer, content="{}")
    for event in (other_suite, other_tool, garbled):
        await world.relay.publish(event)
    assert await refusal(world, published_run(pointer, check="ef" * 32)) == (
        Code.NOT_ADMITTED,
        "the result to check isn't on the relay",
    )
    assert await refusal(world, published_run(pointer, check=other_suite.id)) == (Code.NOT_ADMITTED, CHECK_OTHER_SUITE)
    assert await refusal(world, published_run(pointer, check=other_tool.id)) == (Code.NOT_ADMITTED, CHECK_OTHER_TOOL)
    code, message = await refusal(world, published_run(pointer, check=garbled.id))
    assert code is Code.NOT_ADMITTED
    assert message.startswith("the result to check doesn't check: ")


async def test_a_validation_runs_a_second_test_set_on_the_tool_the_result_tested(world: World) -> None:
    pointer = await world.publish(example_release(AUTHOR.public_key().to_hex()))
    same_suite = result_event(pointer)
    other_tool = result_event(EventRef(id="cd" * 32, pubkey=pointer.pubkey, kind=3184))  # a repo-map-brief result
    for event in (same_suite, other_tool):
        await world.relay.publish(event)
    code, message = await refusal(world, published_run(pointer, validates=same_suite.id))
    assert code is Code.NOT_ADMITTED
    assert message.startswith(SAME_SUITE)
    assert "that would be a check" in message
    assert "second test set" in message
    assert pointer.id in message, "the refusal names the test set that was sent"
    assert await refusal(world, published_run(pointer, validates=other_tool.id)) == (Code.NOT_ADMITTED, ANOTHER_TOOL)
    assert await refusal(world, published_run(pointer, validates="ef" * 32)) == (
        Code.NOT_ADMITTED,
        "the result to validate isn't on the relay",
    )
    # The same tool's result on another test set: this one is its second test set.
    first = result_event(EventRef(id="cd" * 32, pubkey=pointer.pubkey, kind=3184), subject=CATALOG.tools[0].definition)
    await world.relay.publish(first)
    plan = as_run(await world.admission().admit(opened(published_run(pointer, validates=first.id))))
    assert (plan.action, plan.validates, plan.authorship.suite_release) == ("validation", first.id, pointer)
    plan.close()
