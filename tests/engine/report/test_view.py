"""The one view of a report: its formatters, a view rebuilt from report.json alone matching the builder's,
and the stand-ins carried in `meta` and the limitations."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from eval_runner.contracts.report import Report
from eval_runner.contracts.report_documents import Limitations
from eval_runner.contracts.strict_json import read
from eval_runner.engine.report import view as words
from eval_runner.engine.report.build import build_report
from eval_runner.engine.report.inputs import RunSetup, StandIn
from eval_runner.engine.report.view import ArmCell, StatisticsView, view_of
from eval_runner.engine.verdict.gate import Verdict
from eval_runner.engine.verdict.scores import Arm
from tests.support.report_inputs import attempt, better_attempts, inputs


@pytest.mark.parametrize(
    ("value", "signed", "points"),
    [
        (0.5, "+0.50", "+50 pp"),
        (-0.25, "−0.25", "−25 pp"),
        (-0.001, "+0.00", "0 pp"),
        (0.0, "+0.00", "0 pp"),
    ],
)
def test_signed_numbers_use_a_minus_sign_and_zero_has_one_form(value: float, signed: str, points: str) -> None:
    assert words.signed_text(value) == signed
    assert words.points_text(value) == points


def test_every_number_says_its_unit_and_unknown_is_a_word() -> None:
    assert words.seconds_text(0.34) == "0.3 s"
    assert words.seconds_text(12.04) == "12.0 s"
    assert words.money_text(0.006) == "$0.0060"
    assert words.percent_text(2 / 3) == "67 %"
    assert words.score_text(1.0) == "1.00"
    assert words.p_text(0.0004) == "p < 0.001"
    assert words.p_text(0.05) == "p = 0.050"
    for show in (words.seconds_text, words.money_text, words.percent_text, words.score_text, words.signed_text):
        assert show(None) == "unknown"
        assert show(float("nan")) == "unknown"
    cell = ArmCell(planned=3, scored=3, runs_passed=2, score=0.5)
    assert (words.runs_text(cell), words.rate_text(cell)) == ("2/3", "2/3 · 67 %")
    assert words.runs_text(None, ran=False) == "not run"
    assert words.runs_text(None) == "unknown"


def test_a_view_from_report_json_alone_is_the_builders_view(evals: Path) -> None:
    """What a trainer rebuilds from the sealed report.json is what `eval run` and report.html show."""
    built = build_report(inputs(evals))
    parsed = Report.parse_bytes(built.report_bytes)
    again = view_of(parsed, notes=built.notes)
    ours = built.view
    assert again.cases == ours.cases
    assert (again.subject, again.baseline) == (ours.subject, ours.baseline)
    assert (again.verdict, again.change, again.total) == (ours.verdict, ours.change, ours.total)
    assert words.headline(again) == words.headline(ours)
    assert again.statistics is not None
    assert ours.statistics is not None
    assert words.statistics_parts(again.statistics) == words.statistics_parts(ours.statistics)
    assert [words.case_cells(case) for case in again.cases] == [
        ("greeting", "should-not-fire", "3/3", "3/3", "1.00", "1.00", "+0.00"),
        ("overview", "should-fire", "3/3", "0/3", "1.00", "0.00", "+1.00"),
    ]
    assert [words.arm_line(arm) for arm in words.arms(again)] == [
        "With the extension: 12.1 s and $0.0100 per run (72.6 s and $0.0600 over 6 runs)",
        "Without it: 30.0 s and $0.0100 per run (180.0 s and $0.0600 over 6 runs)",
    ]


def test_a_case_passes_in_the_view_exactly_when_it_passes_in_the_scores(evals: Path) -> None:
    # greeting without the extension: one pass, one fail, one unscored of three: undecided.
    changed = {("greeting", Arm.BASELINE, 2): False, ("greeting", Arm.BASELINE, 3): None}
    attempts = tuple(
        attempt(a.case, a.arm, a.attempt, changed[a.key]) if a.key in changed else a for a in better_attempts()
    )
    built = build_report(inputs(evals, attempts))
    for case, scored in zip(built.view.cases, built.scores.cases, strict=True):
        assert case.with_extension is not None
        assert case.with_extension.passed is scored.subject.passed
        assert scored.baseline is not None
        assert case.without is not None
        assert case.without.passed is scored.baseline.passed
    assert [case.without.passed for case in built.view.cases if case.without is not None] == [None, False]


def test_time_per_round_says_what_it_sums(evals: Path) -> None:
    """The notes' `per run` is a round of every compared case; the view names it so (issue 8, item 11)."""
    view = build_report(inputs(evals)).view
    assert words.round_lines(view.rounds) == (
        "Time per round (the 2 compared cases once each): 24.2 s with, 60.0 s without (spread 0.2 s)",
        "Cost per round (the 2 compared cases once each): $0.0200 with, $0.0200 without (spread $0.0000)",
    )
    assert view.notes == ("Faster: 24.2 s against 60.0 s per run",)


def test_statistics_left_out_of_report_json_give_no_statistics_line() -> None:
    found = StatisticsView(
        cases=0,
        p_helps=1.0,
        p_harms=1.0,
        delta_pass_rate=None,
        delta_low_95=None,
        delta_high_95=None,
        cases_improved=0,
        cases_worsened=0,
        min_detectable_effect=None,
    )
    assert words.statistics_line(found) == "Statistics: no case was scored in both arms"
    assert words.statistics_line(None) is None


def test_no_baseline_has_no_without_column_values(evals: Path) -> None:
    attempts = tuple(a for a in better_attempts() if a.arm is Arm.SUBJECT)
    view = build_report(inputs(evals, attempts, setup=RunSetup(runs=3, baseline=False))).view
    assert view.baseline is None
    assert view.statistics is None
    assert words.headline(view) == (
        "Passes 2 of 2 tests with the extension. No run without it, so there is nothing to compare with."
    )
    assert words.case_cells(view.cases[0])[3:] == ("not run", "1.00", "not run", "unknown")


@pytest.mark.parametrize(
    ("parts", "line"),
    [
        ({StandIn.AGENT}, "Stand-in run: the agent was a stand-in, so this “Better” says nothing about a real agent."),
        (
            {StandIn.AGENT, StandIn.DOOR},
            "Stand-in run: the agent and the model door were stand-ins, so this “Better” says nothing about "
            "a real agent or a real model.",
        ),
    ],
)
def test_a_stand_in_is_said_in_report_json_and_beside_the_verdict(evals: Path, parts: set[StandIn], line: str) -> None:
    built = build_report(dataclasses.replace(inputs(evals), stand_ins=frozenset(parts)))
    value = read(built.report_bytes)
    assert isinstance(value, dict)
    meta = value["meta"]
    assert isinstance(meta, dict)
    assert meta[words.STAND_INS_KEY] == sorted(part.value for part in parts)
    limitations = Limitations.parse(read(built.artifacts["limitations.json"]))
    for part in parts:
        assert words.STAND_IN_LIMITATIONS[part] in limitations.limitations
    assert words.STAND_IN_LIMITATIONS[StandIn.AGENT] == (
        "The agent was a stand-in (eval-runner's stand-in agent, which does no reasoning): "
        "this result says nothing about a real agent."
    )
    # A reader holding report.json alone (the trainer) finds them too.
    again = view_of(Report.parse_bytes(built.report_bytes))
    assert set(again.stand_ins) == parts
    assert words.stand_in_line(again.stand_ins, Verdict.PASS) == line


def test_a_real_run_says_nothing_of_stand_ins(evals: Path) -> None:
    built = build_report(inputs(evals))
    value = read(built.report_bytes)
    assert isinstance(value, dict)
    meta = value["meta"]
    assert isinstance(meta, dict)
    assert words.STAND_INS_KEY not in meta
    assert built.view.stand_ins == ()
    assert words.stand_in_line((), Verdict.PASS) is None
    assert not any("stand-in" in text for text in built.limitations.limitations)
