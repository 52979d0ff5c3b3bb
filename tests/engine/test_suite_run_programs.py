"""An agent that is not `coder` gets an extension's skills and never its programs (only `coder` runs Wasm
guests): none go in, the subject lock lists none (it pins what went in), and the report's limitations say
so in the caller's words (`SuitePlan.extra_limitations`). The suites run on a host that cannot confine,
so nothing starts and the report is still built and written."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from eval_runner import stand_ins
from eval_runner.contracts.strict_json import read
from eval_runner.engine.agents.claude_code import ClaudeCode
from eval_runner.engine.run.sandbox import Unconfined
from eval_runner.engine.suite_run import DoorSettings, SuiteAuthor, SuitePlan, _spec, plan_attempts, run_suite
from eval_runner.engine.testset.cases import load_suite
from eval_runner.engine.testset.catalog import Tool, resolve_extension
from eval_runner.engine.testset.skills import programs_left_out
from eval_runner.engine.verdict.scores import Arm
from tests.support.paths import EXAMPLE
from tests.support.sandboxed_runs import fresh_temp_root

UNCONFINED = Unconfined("this test runs nothing")


@pytest.fixture
def tool() -> Tool:
    return resolve_extension(EXAMPLE)


@pytest.fixture
def temp_root() -> Iterator[Path]:
    yield from fresh_temp_root()


def plan_for(tool: Tool, temp_root: Path, results: Path) -> SuitePlan:
    return SuitePlan(
        suite=load_suite(EXAMPLE / "evals"),
        subject=tool.subject,
        agent=stand_ins.AGENT,
        door=DoorSettings("http://127.0.0.1:9", "door-key-programs-1", "stand-in"),
        author=SuiteAuthor(tool.definition.author, f"{tool.subject.slug}-tests", "suite", "0" * 64),
        temp_root=temp_root,
        results_base=results,
        runs=1,
        subject_definition=tool.record,
        hosted=False,
    )


def subject_spec_programs(plan: SuitePlan) -> list[str]:
    first = next(
        planned for planned in plan_attempts(plan.suite, plan.subject, plan.runs) if planned.arm is Arm.SUBJECT
    )
    return [slug for slug, _ in _spec(plan, first).programs]


def test_only_the_coder_is_given_the_programs(tool: Tool, temp_root: Path, tmp_path: Path) -> None:
    coder = plan_for(tool, temp_root, tmp_path)
    assert tool.subject.programs
    assert subject_spec_programs(coder) == [program.slug for program in tool.subject.programs]
    assert subject_spec_programs(replace(coder, adapter=ClaudeCode(stand_ins.AGENT))) == []
    assert subject_spec_programs(replace(coder, programs_run=False)) == []  # the built-in agent


async def test_a_report_of_another_agent_says_the_programs_did_not_run_and_locks_none(
    tool: Tool, temp_root: Path, tmp_path: Path
) -> None:
    left_out = programs_left_out([program.slug for program in tool.subject.programs], "claude-code")
    assert left_out is not None
    plan = replace(
        plan_for(tool, temp_root, tmp_path / "results"),
        adapter=ClaudeCode(stand_ins.AGENT),
        extra_limitations=(left_out.limitation,),
    )
    outcome = await run_suite(plan, confinement=UNCONFINED)
    assert left_out.limitation in outcome.built.limitations.limitations
    limitations = read((outcome.results_dir / "artifacts" / "limitations.json").read_bytes())
    assert isinstance(limitations, dict)
    assert left_out.limitation in limitations["limitations"]
    lock = json.loads((outcome.results_dir / "artifacts" / "subject-lock.json").read_bytes())
    assert lock["programs"] == []
    assert [skill["name"] for skill in lock["skills"]] == [skill.name for skill in tool.subject.skills]
    run = json.loads((outcome.results_dir / "run.json").read_bytes())
    assert json.loads(run["subject_lock"])["programs"] == []


async def test_a_coder_report_locks_the_programs_and_says_nothing_of_them(
    tool: Tool, temp_root: Path, tmp_path: Path
) -> None:
    outcome = await run_suite(plan_for(tool, temp_root, tmp_path / "results"), confinement=UNCONFINED)
    assert not any("did not run" in sentence for sentence in outcome.built.limitations.limitations)
    lock = json.loads((outcome.results_dir / "artifacts" / "subject-lock.json").read_bytes())
    assert [program["slug"] for program in lock["programs"]] == [program.slug for program in tool.subject.programs]
