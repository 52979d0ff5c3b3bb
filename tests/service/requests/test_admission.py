"""Admission and run plans against the example catalog: the checks in the spec's order, their codes and
words, the subject (catalog tool by definition or Wasm guest, chat-made tool), the staged draft suite,
and the staging directory's life."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from eval_runner.contracts.errors import Code
from eval_runner.contracts.execution import ExecuteBody, fingerprint
from eval_runner.contracts.hosted import REPORT_SCHEMA, PublishInput, build_execute_body, request_tags
from eval_runner.contracts.refs import EventRef
from eval_runner.contracts.strict_json import JsonValue, digest_bytes
from eval_runner.engine.testset.catalog import Catalog, Tool
from eval_runner.nostr import SecretKey, sign
from eval_runner.service.requests.admission import (
    CHECK_NEEDS_RELEASE,
    CLOSED,
    LOW_DISK,
    NO_PUBLISHED_SUITES,
    NOT_A_CATALOG_TOOL,
    VALIDATION_NEEDS_RELEASE,
    Admission,
    InputFacts,
    RefusalError,
    RunPlan,
    input_facts,
)
from eval_runner.service.requests.opening import OpenedExecute
from tests.support.paths import EXAMPLE
from tests.support.trainer_side import asking_case, catalog_tool, chat_tool, draft, example_case, run_input

RUNNER = SecretKey.parse("11" * 32).public_key().to_hex()
TRAINER = SecretKey.parse("22" * 32)
NOW = int(time.time())
CATALOG = Catalog.load([EXAMPLE])
TOOL = CATALOG.tools[0]
DEFINITION = TOOL.definition.to_json()
GUEST = TOOL.aliases[0].to_json()


@pytest.fixture
def temp_root(tmp_path: Path) -> Path:
    root = tmp_path / "tmp"
    root.mkdir()
    return root


@pytest.fixture
def state(tmp_path: Path) -> Path:
    found = tmp_path / "state"
    found.mkdir()
    return found


def admission(state: Path, temp_root: Path, **hooks: Any) -> Admission:
    return Admission(runner=RUNNER, catalog=CATALOG, state=state, temp_root=temp_root, **hooks)


def opened(value: JsonValue, *, runner: str = RUNNER, body: ExecuteBody | None = None) -> OpenedExecute:
    found = body if body is not None else build_execute_body(runner, "req-1", value, NOW)
    event = sign(TRAINER, 25920, request_tags(runner, found.deadline), "sealed", NOW)
    return OpenedExecute(event, TRAINER.public_key().to_hex(), found, fingerprint(found))


def as_run(found: RunPlan | PublishInput) -> RunPlan:
    assert isinstance(found, RunPlan), "a run input is planned as a run"
    return found


async def plan(state: Path, temp_root: Path, value: JsonValue, **hooks: Any) -> RunPlan:
    return as_run(await admission(state, temp_root, **hooks).admit(opened(value)))


async def refusal(state: Path, temp_root: Path, value: JsonValue | OpenedExecute) -> tuple[Code, str]:
    request = value if isinstance(value, OpenedExecute) else opened(value)
    with pytest.raises(RefusalError) as caught:
        await admission(state, temp_root).admit(request)
    assert list(temp_root.iterdir()) == [], "a refusal leaves no staging behind"
    return caught.value.code, caught.value.message


# -- admitted ----------------------------------------------------------------------------------------


async def test_a_catalog_tool_against_a_draft_suite_is_planned(state: Path, temp_root: Path) -> None:
    found = await plan(state, temp_root, run_input(DEFINITION, draft(catalog_tool(DEFINITION)), runs=2))
    assert found.tool == TOOL
    assert found.subject == TOOL.subject
    assert [case.name for case in found.suite.cases] == ["greeting", "overview"]
    assert (found.tests, found.runs, found.turns) == (2, 2, 8)
    assert (found.evals / "overview" / "graders" / "language.md").read_bytes() == (
        EXAMPLE / "evals" / "overview" / "graders" / "language.md"
    ).read_bytes()
    authorship = found.authorship
    assert authorship.suite_id == f"{RUNNER}:codebase-brief-tests/suite"
    assert (authorship.evaluator, authorship.suite_release) == (RUNNER, None)
    assert (found.action, found.suite_word, found.check, found.validates) == ("run", "draft", None, None)
    assert found.staging.parent == temp_root
    assert found.staging.name.startswith("eval-runner-suite-")
    found.close()
    assert not found.staging.exists()
    found.close()  # idempotent


async def test_the_request_that_asked_is_the_plans_requester(state: Path, temp_root: Path) -> None:
    request = opened(run_input(DEFINITION, draft(catalog_tool(DEFINITION))))
    found = as_run(await admission(state, temp_root).admit(request))
    assert found.authorship.requester == EventRef(id=request.event.id, pubkey=request.principal, kind=25920)
    found.close()


async def test_a_wasm_guests_definition_names_the_tool_and_the_plan_uses_the_tools_own(
    state: Path, temp_root: Path
) -> None:
    found = await plan(state, temp_root, run_input(GUEST, draft(catalog_tool(DEFINITION))))
    assert found.subject.definition == TOOL.definition
    assert found.tool == TOOL
    found.close()


async def test_a_chat_made_tool_is_its_skill_and_the_catalog_tools_it_turns_on(state: Path, temp_root: Path) -> None:
    found = await plan(state, temp_root, run_input("draft", draft(chat_tool([TOOL.aliases[0].id]))))
    assert found.subject.definition.id == f"{TRAINER.public_key().to_hex()}:brief-the-layout/skill"
    assert found.subject.programs == TOOL.subject.programs
    assert [skill.name for skill in found.subject.skills] == ["brief-the-layout"]
    assert found.tool is None
    assert found.authorship.package == "brief-the-layout-tests"
    found.close()


async def test_a_catalog_tool_is_named_by_its_release_when_one_is_found(state: Path, temp_root: Path) -> None:
    release = EventRef(id="ee" * 32, pubkey=RUNNER, kind=3184)
    asked: list[Tool] = []

    async def tool_release(tool: Tool) -> EventRef:
        asked.append(tool)
        return release

    found = await plan(
        state, temp_root, run_input(DEFINITION, draft(catalog_tool(DEFINITION))), tool_release=tool_release
    )
    assert asked == [TOOL]
    assert found.subject.definition.event == release
    assert found.subject.definition.id == TOOL.definition.id
    found.close()


async def test_a_tool_without_a_release_is_only_logged(
    state: Path, temp_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def tool_release(tool: Tool) -> EventRef:
        raise LookupError("the relay holds none")

    caplog.set_level(logging.INFO, logger="eval_runner")
    value = run_input(DEFINITION, draft(catalog_tool(DEFINITION)))
    found = await plan(state, temp_root, value, tool_release=tool_release)
    assert found.subject.definition.event is None
    assert caplog.messages == ["Codebase brief has no release: the relay holds none"]
    found.close()


# -- refused, in order -------------------------------------------------------------------------------


async def test_another_runners_target_is_not_admitted(state: Path, temp_root: Path) -> None:
    value = run_input(DEFINITION, draft(catalog_tool(DEFINITION)))
    request = opened(value, body=build_execute_body("cc" * 32, "req-1", value, NOW))
    assert await refusal(state, temp_root, request) == (
        Code.NOT_ADMITTED,
        "target: this runner runs only its ext-eval program",
    )


async def test_other_requirements_are_not_admitted(state: Path, temp_root: Path) -> None:
    value = run_input(DEFINITION, draft(catalog_tool(DEFINITION)))
    body = build_execute_body(RUNNER, "req-1", value, NOW).to_json()
    body["requirements"] = {"digest": digest_bytes(b"exec please"), "size": 11, "media_type": "application/json"}
    request = opened(value, body=ExecuteBody.parse(body, expiration=str(body["deadline"])))
    assert await refusal(state, temp_root, request) == (
        Code.NOT_ADMITTED,
        "requirements: the hosted runner grants read and sandbox write only",
    )


@pytest.mark.parametrize(
    ("change", "code", "message"),
    [
        ({"runs": 4}, Code.TOO_LARGE, "limit_exceeded: input.runs: the hosted runner runs at most 3 per arm"),
        ({"runs": 0}, Code.MALFORMED, "malformed: input.runs: at least 1"),
        (
            {"baseline": False},
            Code.TOO_LARGE,
            "limit_exceeded: input.baseline: the hosted runner always runs both arms",
        ),
        ({"v": "openagents.ext-eval-hosted.v2"}, Code.MALFORMED, "unsupported_version: input.v: "),
        ({"action": "launch"}, Code.MALFORMED, "unsupported_feature: input.action: "),
        ({"check": "not-an-id"}, Code.MALFORMED, "malformed: input.check: "),
        ({"draft": None}, Code.MALFORMED, "malformed: input.draft: the draft is missing"),
    ],
    ids=["runs 4", "runs 0", "no baseline", "version", "action", "check", "no draft"],
)
async def test_inputs_that_do_not_parse_are_refused_with_the_mapped_code(
    state: Path, temp_root: Path, change: dict[str, JsonValue], code: Code, message: str
) -> None:
    value = {**run_input(DEFINITION, draft(catalog_tool(DEFINITION))), **change}
    found = await refusal(state, temp_root, opened(value, body=_unchecked_body(value)))
    assert found[0] is code
    assert found[1].startswith(message)


async def test_a_draft_of_nine_tests_is_too_large(state: Path, temp_root: Path) -> None:
    cases = [example_case("greeting") | {"id": f"case-{n}"} for n in range(9)]
    value = run_input(DEFINITION, draft(catalog_tool(DEFINITION), cases))
    assert await refusal(state, temp_root, opened(value, body=_unchecked_body(value))) == (
        Code.TOO_LARGE,
        "limit_exceeded: input.draft.cases: the hosted runner runs at most 8 tests, and this set has 9",
    )


async def test_a_closed_switch_refuses_after_the_input_is_read(state: Path, temp_root: Path) -> None:
    (state / "closed").touch()
    good = run_input(DEFINITION, draft(catalog_tool(DEFINITION)))
    assert await refusal(state, temp_root, good) == (Code.NOT_ADMITTED, CLOSED)
    bad = {**good, "runs": 4}
    assert (await refusal(state, temp_root, opened(bad, body=_unchecked_body(bad))))[0] is Code.TOO_LARGE


async def test_below_the_free_space_floor_new_runs_are_refused_and_the_log_says_so_once(
    state: Path, temp_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The ledger must never meet a full disk: below the floor, runs are refused `unavailable`."""
    caplog.set_level(logging.INFO, logger="eval_runner")
    floor = admission(state, temp_root, disk_floor=1 << 62)  # more than any disk has free
    good = run_input(DEFINITION, draft(catalog_tool(DEFINITION)))
    for _ in range(2):
        with pytest.raises(RefusalError) as caught:
            await floor.admit(opened(good))
        assert (caught.value.code, caught.value.message) == (Code.UNAVAILABLE, LOW_DISK)
    assert len([line for line in caplog.messages if line.startswith("low disk: ")]) == 1
    assert list(temp_root.iterdir()) == []
    # Above the floor (here: none) the same request is admitted.
    admitted = as_run(await admission(state, temp_root, disk_floor=0).admit(opened(good)))
    admitted.close()


async def test_a_publish_is_admitted_as_its_input_and_stages_nothing(state: Path, temp_root: Path) -> None:
    """Whether the trainer has a finished run with that report is the ledger's (the pipeline asks it)."""
    report = {"digest": digest_bytes(b"r"), "size": 1, "media_type": "application/json", "schema": REPORT_SCHEMA}
    value = {"v": "openagents.ext-eval-hosted.v1", "action": "publish", "report": report}
    found = await admission(state, temp_root).admit(opened(value))
    assert isinstance(found, PublishInput)
    assert found.report.digest == digest_bytes(b"r")
    assert list(temp_root.iterdir()) == []
    (state / "closed").touch()
    assert await refusal(state, temp_root, value) == (Code.NOT_ADMITTED, CLOSED)


async def test_a_published_test_set_is_not_taken_yet(state: Path, temp_root: Path) -> None:
    release = {"id": "ab" * 32, "pubkey": RUNNER, "kind": 3184}
    value = run_input(DEFINITION, None, suite=release)
    assert await refusal(state, temp_root, value) == (Code.NOT_ADMITTED, NO_PUBLISHED_SUITES)


async def test_a_changed_digest_is_not_a_catalog_tool(state: Path, temp_root: Path) -> None:
    changed = {**DEFINITION, "artifact": {**TOOL.definition.artifact.to_json(), "digest": digest_bytes(b"other")}}
    value = run_input(changed, draft(catalog_tool(DEFINITION)))
    assert await refusal(state, temp_root, value) == (Code.NOT_ADMITTED, NOT_A_CATALOG_TOOL)


async def test_a_drafts_tool_must_be_in_the_catalog(state: Path, temp_root: Path) -> None:
    changed = {**DEFINITION, "id": "0" * 64 + ":elsewhere/elsewhere"}
    assert await refusal(state, temp_root, run_input("draft", draft(catalog_tool(changed)))) == (
        Code.NOT_ADMITTED,
        "Codebase brief isn't a catalog tool, and the hosted runner tests only those",
    )
    assert await refusal(state, temp_root, run_input("draft", draft(chat_tool(["0" * 64 + ":nope/nope"])))) == (
        Code.NOT_ADMITTED,
        f"{'0' * 64}:nope/nope isn't a catalog tool, and a chat-made tool may turn on catalog tools only",
    )


async def test_a_test_that_asks_to_run_commands_is_not_admitted(state: Path, temp_root: Path) -> None:
    cases = [example_case("greeting"), asking_case("shell", ["read", "exec"])]
    value = run_input(DEFINITION, draft(catalog_tool(DEFINITION), cases))
    assert await refusal(state, temp_root, value) == (
        Code.NOT_ADMITTED,
        "the test shell asks to run commands or reach the network, which the hosted runner never allows",
    )
    network = run_input(DEFINITION, draft(catalog_tool(DEFINITION), [asking_case("fetch", ["read", "network"])]))
    assert (await refusal(state, temp_root, network))[0] is Code.NOT_ADMITTED


async def test_a_draft_case_that_does_not_load_is_malformed(state: Path, temp_root: Path) -> None:
    broken = example_case("greeting") | {"prompt": "+++\nkind = 3\n+++\n\nhello\n"}
    code, message = await refusal(state, temp_root, run_input(DEFINITION, draft(catalog_tool(DEFINITION), [broken])))
    assert code is Code.MALFORMED
    assert message.startswith("greeting/prompt.md")


async def test_checks_and_validations_need_a_published_test_set(state: Path, temp_root: Path) -> None:
    value = run_input(DEFINITION, draft(catalog_tool(DEFINITION)), check="ab" * 32)
    assert await refusal(state, temp_root, value) == (Code.NOT_ADMITTED, CHECK_NEEDS_RELEASE)
    value = run_input(DEFINITION, draft(catalog_tool(DEFINITION)), validates="ab" * 32)
    assert await refusal(state, temp_root, value) == (Code.NOT_ADMITTED, VALIDATION_NEEDS_RELEASE)


async def test_no_staging_directory_is_unavailable(state: Path, tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(RefusalError) as caught:
        await admission(state, missing).admit(opened(run_input(DEFINITION, draft(catalog_tool(DEFINITION)))))
    assert caught.value.code is Code.UNAVAILABLE
    assert caught.value.message.startswith("staging the test set: No such file or directory")


# -- what a usage record says about an input ----------------------------------------------------------


def test_input_facts() -> None:
    catalog_run = run_input(DEFINITION, draft(catalog_tool(DEFINITION)), runs=2)
    assert input_facts(catalog_run) == InputFacts("run", TOOL.definition.id, "draft", 2)
    assert input_facts(run_input("draft", None)) == InputFacts()
    assert input_facts({**catalog_run, "check": "ab" * 32}).action == "check"
    assert input_facts({**catalog_run, "validates": "ab" * 32}).action == "validation"
    chat = run_input("draft", draft(chat_tool([TOOL.aliases[0].id])))
    assert input_facts(chat) == InputFacts("run", None, "draft", 1)
    release = {"id": "ab" * 32, "pubkey": RUNNER, "kind": 3184}
    assert input_facts(run_input(DEFINITION, None, suite=release)).suite == "ab" * 32
    report = {"digest": digest_bytes(b"r"), "size": 1, "media_type": "application/json", "schema": REPORT_SCHEMA}
    assert input_facts({"v": "openagents.ext-eval-hosted.v1", "action": "publish", "report": report}) == InputFacts(
        "publish"
    )
    assert input_facts("nonsense") == InputFacts()


def _unchecked_body(value: JsonValue) -> ExecuteBody:
    """An execute body around an input the phone's builder would refuse to build (a hand-made client)."""
    body = build_execute_body(RUNNER, "req-1", run_input(DEFINITION, draft(catalog_tool(DEFINITION))), NOW).to_json()
    body["input"] = value
    return ExecuteBody.parse(body, expiration=str(body["deadline"]))
