"""The engine's plan `serve` builds for an admitted run: with an agent that is not `coder` the subject's
programs do not go in, and the report's limitations say so; with `coder` nothing changes."""

from __future__ import annotations

from pathlib import Path

from eval_runner.contracts.refs import EventRef
from eval_runner.engine.grade.doors import AnthropicMessagesJudge, OpenResponsesJudge
from eval_runner.engine.run.sandbox import Unconfined
from eval_runner.engine.testset.cases import load_suite
from eval_runner.engine.testset.catalog import resolve_extension
from eval_runner.engine.testset.skills import programs_left_out
from eval_runner.service.config import Config
from eval_runner.service.requests.admission import Authorship, RunPlan
from eval_runner.service.requests.suites import EngineSuiteRunner
from tests.support.paths import EXAMPLE, REPO

BASE = {"CODER_DOOR_KEY": "door-key-1", "HOME": "/home/trainer", "TMPDIR": "/var/tmp"}
KEY = "ab" * 32


def suite_plan(tmp_path: Path, extension: Path, **env: str) -> tuple[RunPlan, EngineSuiteRunner]:
    config = Config.from_env({**BASE, "EVAL_RUNNER_CATALOG": str(extension), **env})
    tool = resolve_extension(extension)
    suite = load_suite(EXAMPLE / "evals")
    plan = RunPlan(
        staging=tmp_path,
        evals=EXAMPLE / "evals",
        suite=suite,
        subject=tool.subject,
        tool=tool,
        runs=1,
        turns=2 * len(suite.cases),
        authorship=Authorship(KEY, "codebase-brief-tests", "suite", KEY, None, EventRef("cd" * 32, KEY, 25920)),
    )
    return plan, EngineSuiteRunner(config, confinement=Unconfined("not run"), questions=())


def test_a_real_agent_gets_no_programs_and_the_report_says_so(tmp_path: Path) -> None:
    plan, runner = suite_plan(tmp_path, EXAMPLE, EVAL_RUNNER_AGENT="codex:/opt/codex")
    left_out = programs_left_out([program.slug for program in plan.subject.programs], "codex")
    assert left_out is not None
    engine_plan = runner.suite_plan(plan, tmp_path / "results")
    assert engine_plan.extra_limitations == (left_out.limitation,)
    assert not engine_plan.programs_in


def test_the_built_in_agent_gets_no_programs_either(tmp_path: Path) -> None:
    plan, runner = suite_plan(tmp_path, EXAMPLE, EVAL_RUNNER_AGENT="builtin")
    engine_plan = runner.suite_plan(plan, tmp_path / "results")
    assert engine_plan.adapter is None
    assert not engine_plan.programs_in
    assert len(engine_plan.extra_limitations) == 1


def test_coder_and_a_subject_without_programs_add_nothing(tmp_path: Path) -> None:
    plan, runner = suite_plan(tmp_path, EXAMPLE, EVAL_RUNNER_CODER="/opt/coder")
    engine_plan = runner.suite_plan(plan, tmp_path / "results")
    assert (engine_plan.programs_in, engine_plan.extra_limitations) == (True, ())
    skill_only, runner = suite_plan(tmp_path, REPO / "examples" / "brief", EVAL_RUNNER_AGENT="claude-code:/opt/c")
    assert runner.suite_plan(skill_only, tmp_path / "results").extra_limitations == ()


def test_the_judge_speaks_the_doors_api_anthropic_for_claude_code(tmp_path: Path) -> None:
    _, claude = suite_plan(tmp_path, EXAMPLE, EVAL_RUNNER_AGENT="claude-code:/opt/claude")
    _, codex = suite_plan(tmp_path, EXAMPLE, EVAL_RUNNER_AGENT="codex:/opt/codex")
    _, coder = suite_plan(tmp_path, EXAMPLE, EVAL_RUNNER_CODER="/opt/coder")
    assert isinstance(claude.doors.judge, AnthropicMessagesJudge)
    assert isinstance(codex.doors.judge, OpenResponsesJudge)
    assert isinstance(coder.doors.judge, OpenResponsesJudge)
