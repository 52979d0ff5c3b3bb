"""Tokens, model calls and tool calls per run and per arm: the door's word over the agent's, unknown never 0,
carried in report.json's `meta` where the reference's checks still accept it, and shown by every reader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eval_runner.contracts.report import Report
from eval_runner.contracts.report_figures import META_KEY, FigureRow, Figures
from eval_runner.contracts.strict_json import read
from eval_runner.engine.agents.atif_document import Call, StepLog
from eval_runner.engine.report import view as words
from eval_runner.engine.report.build import build_report
from eval_runner.engine.report.figures import arm_figures, run_figures
from eval_runner.engine.report.html import RunLine
from eval_runner.engine.report.inputs import RunFigures
from eval_runner.engine.report.view import view_of
from eval_runner.engine.run.door_usage import DoorUsage
from eval_runner.engine.run.trajectory import Trajectory, parse_trajectory
from eval_runner.engine.verdict.scores import Arm
from tests.support.reference_validator import validate
from tests.support.report_inputs import B, S, attempt, better_attempts, inputs


def document(steps: list[dict[str, Any]], final: dict[str, Any] | None) -> Trajectory:
    value: dict[str, Any] = {"schema_version": "ATIF-v1.8", "session_id": "s", "agent": {"name": "a", "version": "1"}}
    value["steps"] = steps
    if final is not None:
        value["final_metrics"] = final
    return parse_trajectory(json.dumps(value).encode())


def agent_step(number: int, calls: int = 0, metrics: bool = False) -> dict[str, Any]:
    step: dict[str, Any] = {"step_id": number, "source": "agent", "message": "m"}
    if calls:
        step["tool_calls"] = [
            {"tool_call_id": f"c{number}-{n}", "function_name": "Read", "arguments": {}} for n in range(calls)
        ]
    if metrics:
        step["metrics"] = {"prompt_tokens": 10, "completion_tokens": 2}
    return step


def claude_like() -> Trajectory:
    """An adapter's document: the agent's totals in final_metrics, no token counts on its steps."""
    log = StepLog("claude-code", "2", "m")
    log.user("hello")
    log.agent(
        "", [Call("c1", "Read", {"file_path": "a"}, None), Call("c2", "Skill", {"skill": "brief"}, "skill:brief")]
    )
    log.agent("done")
    log.prompt_tokens, log.completion_tokens = 900, 40
    return parse_trajectory(log.document())


def test_the_door_wins_for_tokens_and_model_calls_and_the_trajectory_counts_tool_calls() -> None:
    door = DoorUsage(answers=4, input_tokens=1500, output_tokens=60, reported=3)
    assert run_figures(claude_like(), door) == RunFigures(1500, 60, 3, 2)


def test_the_agents_word_stands_where_the_door_said_nothing() -> None:
    assert run_figures(claude_like(), None) == RunFigures(900, 40, 2, 2)
    # A door whose answers carried no usage (a `HEAD /` only) leaves the agent's word.
    assert run_figures(claude_like(), DoorUsage(answers=1)) == RunFigures(900, 40, 2, 2)


def test_no_successful_answer_through_the_door_is_a_known_zero() -> None:
    assert run_figures(claude_like(), DoorUsage()) == RunFigures(0, 0, 0, 2)


def test_a_log_without_token_counts_is_unknown_never_zero() -> None:
    trajectory = document(
        [agent_step(1, calls=1), agent_step(2)], {"total_prompt_tokens": 0, "total_completion_tokens": 0}
    )
    assert run_figures(trajectory, None) == RunFigures(None, None, 2, 1)
    assert run_figures(None, None) == RunFigures()
    metered = document(
        [agent_step(1, calls=1, metrics=True), {"step_id": 2, "source": "user", "message": "x"}, agent_step(3)],
        {"total_prompt_tokens": 10, "total_completion_tokens": 2},
    )
    assert run_figures(metered, None) == RunFigures(10, 2, 1, 1)
    assert run_figures(document([agent_step(1)], None), None) == RunFigures(None, None, 1, 0)


def test_an_arm_totals_the_runs_that_reported_and_counts_the_others_unknown() -> None:
    attempts = (
        attempt("overview", S, 1, figures=RunFigures(100, 10, 2, 1)),
        attempt("overview", S, 2, figures=RunFigures(300, 30, 4, None)),
        attempt("overview", B, 1, figures=RunFigures()),
    )
    found = arm_figures(attempts)
    assert found.row("subject", "input_tokens") == FigureRow("subject", "input_tokens", 400, 2, 0)
    assert found.row("subject", "tool_calls") == FigureRow("subject", "tool_calls", 1, 1, 1)
    assert found.row("baseline", "turns") == FigureRow("baseline", "turns", None, 0, 1)
    assert Figures.parse(found.to_json()) == found
    assert arm_figures(attempts[:2]).row("baseline", "turns") is None


def test_figures_no_run_could_have_used_are_unknown_and_the_report_still_builds(evals: Path) -> None:
    """An agent writes its own totals: two runs each claiming 2^53 - 1 tokens must not break the report."""
    huge = 2**53 - 1
    claimed = document([agent_step(1, metrics=True)], {"total_prompt_tokens": huge, "total_completion_tokens": 1})
    assert run_figures(claimed, None).input_tokens is None
    runs = tuple(
        attempt(run.case, run.arm, run.attempt, run.passed, seconds=run.seconds, figures=RunFigures(huge, huge, 1, 1))
        for run in better_attempts()
    )
    built = build_report(inputs(evals, runs))
    figures = Figures.parse(read(built.report_bytes)["meta"][META_KEY])
    assert figures.row("subject", "input_tokens") == FigureRow("subject", "input_tokens", None, 0, 6)
    assert figures.row("subject", "turns") == FigureRow("subject", "turns", 6, 6, 0)


def with_figures() -> tuple[Any, ...]:
    out = []
    for run in better_attempts():
        subject = run.arm is Arm.SUBJECT
        figures = RunFigures(1200, 300, 3, 2) if subject else RunFigures(800, 200, 2, 0)
        if not subject and run.case == "greeting" and run.attempt == 1:
            figures = RunFigures(turns=1)
        out.append(attempt(run.case, run.arm, run.attempt, run.passed, seconds=run.seconds, figures=figures))
    return tuple(out)


def test_report_json_carries_the_figures_in_meta_and_still_checks(evals: Path) -> None:
    built = build_report(inputs(evals, with_figures()))
    value = read(built.report_bytes)
    assert isinstance(value, dict)
    assert validate(value, built.artifacts) == []
    figures = Figures.parse(value["meta"][META_KEY])
    assert figures.row("subject", "input_tokens") == FigureRow("subject", "input_tokens", 7200, 6, 0)
    assert figures.row("baseline", "input_tokens") == FigureRow("baseline", "input_tokens", 4000, 5, 1)
    assert figures.row("baseline", "turns") == FigureRow("baseline", "turns", 11, 6, 0)
    assert not {row.metric for row in figures.rows} & {m.metric for m in built.report.measurements}


def test_every_reader_shows_them_per_run_and_says_what_is_unknown(evals: Path) -> None:
    built = build_report(inputs(evals, with_figures()))
    again = view_of(Report.parse_bytes(built.report_bytes))  # a trainer holding report.json alone
    assert again.subject.figures == built.view.subject.figures
    lines = words.figures_lines(again)
    assert lines == (
        "With the extension per run: 1,200 tokens in, 300 tokens out, 3 model calls, 2 tool calls",
        "Without it per run: 800 tokens in, 200 tokens out, 1.8 model calls, 0 tool calls (over the runs that "
        "reported them; unknown: tokens in for 1 of 6 runs; tokens out for 1 of 6 runs; tool calls for 1 of 6 runs)",
    )
    page = built.html.decode()
    assert "<th>Tokens in per run</th>" in page
    assert '<td class="n">1,200</td><td class="n">300</td><td class="n">3</td><td class="n">2</td>' in page
    assert lines[1] in page
    assert "unknown tokens in, unknown tokens out, 1 model call, unknown tool calls" in page


def test_a_report_without_figures_shows_no_figures_line_and_unknown_cells(evals: Path) -> None:
    built = build_report(inputs(evals))
    value = read(built.report_bytes)
    assert isinstance(value, dict)
    del value["meta"][META_KEY]
    older = view_of(Report.parse(value))
    assert older.subject.figures == ()
    assert words.figures_lines(older) == ()
    assert words.figure_text(older.subject.figure("turns")) == "unknown"


def test_a_run_line_says_each_figure() -> None:
    line = RunLine(S, 1, "completed", None, True, 1.0, None, 1.0, None, RunFigures(12345, 6, None, 0))
    assert line.figure_words == "12,345 tokens in, 6 tokens out, unknown model calls, 0 tool calls"
    one = RunLine(S, 1, "completed", None, True, 1.0, None, 1.0, None, RunFigures(1, 1, 1, 1))
    assert one.figure_words == "1 token in, 1 token out, 1 model call, 1 tool call"
