"""One view of a report for every reader: `eval run`'s terminal, `trainer run`, and report.html.

The three used to format their own numbers and rows, and drifted apart. Now each renders a `ReportView`,
which `view_of` builds from the report record itself (its measurements, coverage, headline and `meta`, so
a trainer holding only report.json sees what the runner saw) plus what only the builder knows (notes,
limitations, time and cost per round, statistics left out of report.json). Every number and sentence the
readers share is formatted here. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from eval_runner.contracts.errors import ContractError
from eval_runner.contracts.report import Counts, MeasuredArm, Report
from eval_runner.contracts.report_figures import FigureRow, Figures
from eval_runner.contracts.report_statistics import META_KEY as STATISTICS_KEY
from eval_runner.contracts.report_statistics import Statistics
from eval_runner.contracts.strict_json import JsonValue
from eval_runner.engine.report.inputs import StandIn
from eval_runner.engine.verdict.gate import Verdict
from eval_runner.engine.verdict.scores import ArmMeasure, Comparison
from eval_runner.engine.verdict.statistics import ALPHA, Evidence

#: The `meta` key that names the parts that were stand-ins: a sorted list of `StandIn` words.
STAND_INS_KEY = "eval_runner_stand_ins"
#: The limitation each stand-in adds to report.json.
STAND_IN_LIMITATIONS = {
    StandIn.AGENT: (
        "The agent was a stand-in (eval-runner's stand-in agent, which does no reasoning): "
        "this result says nothing about a real agent."
    ),
    StandIn.DOOR: (
        "The model door was a stand-in (eval-runner's offline stand-in door, which answers from a fixed "
        "table): this result says nothing about a real model."
    ),
}
_STAND_IN_WORDS = {StandIn.AGENT: ("the agent", "a real agent"), StandIn.DOOR: ("the model door", "a real model")}
#: The per-case table every reader shows, column by column (`case_cells`).
CASE_COLUMNS = ("Case", "Kind", "Passed with", "Passed without", "Score with", "Score without", "Change")
MINUS = "\u2212"


# --- the view ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArmCell:
    """One case in one arm, as the report counts it: runs planned, scored and passed; the mean score."""

    planned: int
    scored: int
    runs_passed: int | None
    score: float | None

    @property
    def pass_rate(self) -> float | None:
        """Runs passed over runs planned."""
        if self.runs_passed is None or self.planned == 0:
            return None
        return self.runs_passed / self.planned

    @property
    def passed(self) -> bool | None:
        """Whether the case passed in this arm: `scores.CaseArm.of`'s rule, recounted from the report's counts."""
        if self.runs_passed is None or self.scored == 0:
            return None
        failed = self.scored - self.runs_passed
        if 2 * self.runs_passed > self.planned:
            return True
        if 2 * (self.planned - failed) <= self.planned:
            return False
        return None


@dataclass(frozen=True, slots=True)
class CaseView:
    """One case: its cells with and without the extension (None: the report has no count), its change.
    `subject_only`: a baseline ran, but not this case; `baseline_planned`: a baseline ran this case."""

    id: str
    kind: str
    with_extension: ArmCell | None
    without: ArmCell | None
    change: float | None
    subject_only: bool
    baseline_planned: bool


#: The figures per arm (`contracts.report_figures`), as readers name them.
FIGURE_WORDS = {
    "input_tokens": "tokens in",
    "output_tokens": "tokens out",
    "turns": "model calls",
    "tool_calls": "tool calls",
}
FIGURE_ONE = {
    "input_tokens": "token in",
    "output_tokens": "token out",
    "turns": "model call",
    "tool_calls": "tool call",
}


@dataclass(frozen=True, slots=True)
class ArmView:
    """One arm over the suite; `seconds` and `cost_usd` are totals over its runs (unknown if any run lacks one);
    `figures` its tokens, model calls and tool calls from `meta` (empty for a report that carries none)."""

    with_extension: bool
    cases: int
    cases_passed: int | None
    mean_score: float | None
    seconds: float | None
    cost_usd: float | None
    counts: Counts
    figures: tuple[FigureRow, ...] = ()

    def figure(self, metric: str) -> FigureRow | None:
        return next((row for row in self.figures if row.metric == metric), None)

    @property
    def label(self) -> str:
        return "With the extension" if self.with_extension else "Without it"

    @property
    def runs(self) -> int:
        return self.counts.attempted

    @property
    def seconds_per_run(self) -> float | None:
        return None if self.seconds is None or self.runs == 0 else self.seconds / self.runs

    @property
    def cost_per_run(self) -> float | None:
        return None if self.cost_usd is None or self.runs == 0 else self.cost_usd / self.runs


@dataclass(frozen=True, slots=True)
class RoundView:
    """Time and cost per round, every compared case run once, as the notes compare them
    (`scores.attempt_series`: per attempt number the total over the compared cases, then the mean)."""

    cases: int
    seconds: ArmMeasure
    cost_usd: ArmMeasure


@dataclass(frozen=True, slots=True)
class StatisticsView:
    """The statistics beside the verdict (statistics.md §C3); `runs` is (passes with, runs with, passes
    without, runs without) when known (report.json does not carry them)."""

    cases: int
    p_helps: float
    p_harms: float
    delta_pass_rate: float | None
    delta_low_95: float | None
    delta_high_95: float | None
    cases_improved: int
    cases_worsened: int
    min_detectable_effect: float | None
    runs: tuple[int, int, int, int] | None = None

    @classmethod
    def of_evidence(cls, found: Evidence) -> StatisticsView:
        return cls(
            cases=found.cases,
            p_helps=found.p_helps,
            p_harms=found.p_harms,
            delta_pass_rate=found.delta_pass_rate,
            delta_low_95=found.delta_low_95,
            delta_high_95=found.delta_high_95,
            cases_improved=found.cases_improved,
            cases_worsened=found.cases_worsened,
            min_detectable_effect=found.min_detectable_effect,
            runs=(found.passes_with, found.runs_with, found.passes_without, found.runs_without),
        )

    @classmethod
    def of_statistics(cls, statistics: Statistics) -> StatisticsView | None:
        """From report.json's `meta` rows; None when a row this view needs is missing."""
        rows = {row.metric: row for row in statistics.rows}
        needed = ("p_helps", "p_harms", "cases_improved", "cases_worsened")
        if any(name not in rows or rows[name].value is None for name in needed):
            return None

        def value(name: str) -> float | None:
            row = rows.get(name)
            return None if row is None or row.value is None else float(row.value)

        return cls(
            cases=rows["p_helps"].denominator,
            p_helps=float(rows["p_helps"].value or 0),
            p_harms=float(rows["p_harms"].value or 0),
            delta_pass_rate=value("delta_pass_rate"),
            delta_low_95=value("delta_low_95"),
            delta_high_95=value("delta_high_95"),
            cases_improved=int(rows["cases_improved"].value or 0),
            cases_worsened=int(rows["cases_worsened"].value or 0),
            min_detectable_effect=value("min_detectable_effect"),
        )


@dataclass(frozen=True, slots=True)
class ReportView:
    """Everything a reader shows of one report. `total` is the suite's cases (the headline's)."""

    verdict: Verdict
    cases: tuple[CaseView, ...]
    total: int
    subject_passed: int
    baseline_passed: int | None
    subject: ArmView
    baseline: ArmView | None
    change: float | None
    rounds: RoundView | None
    statistics: StatisticsView | None
    notes: tuple[str, ...]
    limitations: tuple[str, ...]
    partial: str | None
    stand_ins: tuple[StandIn, ...]


def view_of(
    report: Report,
    *,
    notes: Iterable[str] = (),
    limitations: Iterable[str] = (),
    partial: str | None = None,
    evidence: Evidence | None = None,
    rounds: Comparison | None = None,
) -> ReportView:
    """The view of `report`. `evidence` stands in for the statistics in `meta` (they may have been left out
    of report.json); `rounds` is the scores' comparison, when the reader has it (report.json has not)."""
    found = {(item.arm, item.metric): item for item in report.measurements}
    has_baseline = report.baseline is not None

    def value(arm: MeasuredArm, metric: str) -> float | None:
        item = found.get((arm, metric))
        return None if item is None or item.value is None else float(item.value)

    def cell(arm: MeasuredArm, case: str) -> ArmCell | None:
        passed = found.get((arm, f"case.{case}.runs_passed"))
        if passed is None:
            return None
        score = found.get((arm, f"case.{case}.score"))
        return ArmCell(
            planned=passed.denominator,
            scored=0 if score is None else score.denominator,
            runs_passed=None if passed.value is None else int(passed.value),
            score=None if score is None or score.value is None else float(score.value),
        )

    figures = Figures.from_meta(report.meta_extra)

    def arm(which: MeasuredArm, counts: Counts) -> ArmView:
        passed = found.get((which, "cases_passed"))
        rows = () if figures is None else tuple(row for row in figures.rows if row.arm == which.value)
        return ArmView(
            with_extension=which is MeasuredArm.SUBJECT,
            cases=counts.planned,
            cases_passed=None if passed is None or passed.value is None else int(passed.value),
            mean_score=value(which, "mean_score"),
            seconds=value(which, "seconds"),
            cost_usd=value(which, "cost_usd"),
            counts=counts,
            figures=rows,
        )

    cases = []
    for case in report.ext_eval.cases:
        subject_cell = cell(MeasuredArm.SUBJECT, case.id)
        baseline_cell = cell(MeasuredArm.BASELINE, case.id) if has_baseline else None
        subject_only = has_baseline and subject_cell is not None and baseline_cell is None
        cases.append(
            CaseView(
                id=case.id,
                kind=case.kind.value,
                with_extension=subject_cell,
                without=baseline_cell,
                change=value(MeasuredArm.COMPARISON, f"case.{case.id}.change"),
                subject_only=subject_only,
                baseline_planned=has_baseline and not subject_only,
            )
        )
    coverage = report.coverage
    headline = report.ext_eval.headline
    statistics = None
    if evidence is not None:
        statistics = StatisticsView.of_evidence(evidence)
    elif has_baseline:
        statistics = _meta_statistics(report)
    return ReportView(
        verdict=Verdict(report.verdict.value),
        cases=tuple(cases),
        total=headline.total,
        subject_passed=headline.subject_passed,
        baseline_passed=headline.baseline_passed,
        subject=arm(MeasuredArm.SUBJECT, coverage.subject),
        baseline=None if coverage.baseline is None else arm(MeasuredArm.BASELINE, coverage.baseline),
        change=value(MeasuredArm.COMPARISON, "change"),
        rounds=None
        if rounds is None or not rounds.baseline_present
        else RoundView(rounds.cases, rounds.seconds, rounds.cost_usd),
        statistics=statistics,
        notes=tuple(notes),
        limitations=tuple(limitations),
        partial=partial,
        stand_ins=stand_ins_of(report),
    )


def _meta_statistics(report: Report) -> StatisticsView | None:
    value = report.meta_extra.get(STATISTICS_KEY)
    if value is None:
        return None
    try:
        return StatisticsView.of_statistics(Statistics.parse(value))
    except ContractError:
        return None


# --- stand-ins -----------------------------------------------------------------------------------------


def stand_ins_meta(stand_ins: Iterable[StandIn]) -> dict[str, JsonValue]:
    """The `meta` entry naming the stand-ins; empty when there were none (the report stays the reference's)."""
    words: list[JsonValue] = [part.value for part in StandIn if part in set(stand_ins)]
    return {STAND_INS_KEY: words} if words else {}


def stand_ins_of(report: Report) -> tuple[StandIn, ...]:
    """The stand-ins a report's `meta` names, in `StandIn` order; words this version does not know are left out."""
    value = report.meta_extra.get(STAND_INS_KEY)
    named = set(value) if isinstance(value, list) and all(isinstance(item, str) for item in value) else set()
    return tuple(part for part in StandIn if part.value in named)


def stand_in_limitations(stand_ins: Iterable[StandIn]) -> tuple[str, ...]:
    parts = set(stand_ins)
    return tuple(STAND_IN_LIMITATIONS[part] for part in StandIn if part in parts)


def stand_in_line(stand_ins: Iterable[StandIn], verdict: Verdict) -> str | None:
    """The warning beside the verdict when any part was a stand-in, so a stand-in "Better" never passes
    for a real one; None when there were none."""
    parts = [part for part in StandIn if part in set(stand_ins)]
    if not parts:
        return None
    names = " and ".join(_STAND_IN_WORDS[part][0] for part in parts)
    was = "was a stand-in" if len(parts) == 1 else "were stand-ins"
    reals = " or ".join(_STAND_IN_WORDS[part][1] for part in parts)
    return f"Stand-in run: {names} {was}, so this “{verdict.word}” says nothing about {reals}."


# --- sentences -----------------------------------------------------------------------------------------


def headline_words(
    subject_passed: int,
    total: int,
    baseline: tuple[int, int] | None,
    change: float | None,
    *,
    with_change: bool = True,
) -> str:
    """`Passes 2 of 2 tests with the extension, 1 of 2 without. Change in mean score: +0.50.`; `baseline` is
    (passed, planned) of the cases the baseline ran."""
    line = f"Passes {subject_passed} of {total} tests with the extension"
    if baseline is None:
        return line + ". No run without it, so there is nothing to compare with."
    line += f", {baseline[0]} of {baseline[1]} without."
    return line + f" Change in mean score: {signed_text(change)}." if with_change else line


def headline(view: ReportView) -> str:
    baseline = None
    if view.baseline is not None:
        baseline = (view.baseline_passed or 0, view.baseline.cases)
    return headline_words(view.subject_passed, view.total, baseline, view.change)


def case_cells(case: CaseView) -> tuple[str, ...]:
    """One row of the per-case table, as `CASE_COLUMNS` names its cells."""
    kind = case.kind + (" (with only)" if case.subject_only else "")
    return (
        case.id,
        kind,
        runs_text(case.with_extension),
        runs_text(case.without, ran=case.baseline_planned),
        cell_score_text(case.with_extension),
        cell_score_text(case.without, ran=case.baseline_planned),
        signed_text(case.change),
    )


def statistics_parts(found: StatisticsView) -> tuple[str, ...]:
    """The statistics beside the verdict, one phrase each: both p-values, Δ pass rate with its 95 % interval,
    cases improved, and the smallest change the design can detect."""
    if found.cases == 0:
        return ("no case was scored in both arms",)
    alpha = f"p ≤ {float(ALPHA):g}"
    parts = [f"{p_text(found.p_helps)} that it helps, {p_text(found.p_harms)} that it harms"]
    if found.delta_pass_rate is not None and found.delta_low_95 is not None and found.delta_high_95 is not None:
        parts.append(
            f"Δ pass rate {points_text(found.delta_pass_rate)} "
            f"(95 % interval {points_text(found.delta_low_95)} to {points_text(found.delta_high_95)})"
        )
    else:
        parts.append("Δ pass rate unknown (no scored run in an arm)")
    parts.append(f"{found.cases_improved} of {found.cases} cases improved ({found.cases_worsened} worsened)")
    if found.min_detectable_effect is None:
        parts.append(f"underpowered: no result could reach {alpha} with these cases and runs")
    else:
        parts.append(f"smallest change this design can detect {points_text(found.min_detectable_effect)} at {alpha}")
    return tuple(parts)


def statistics_line(found: StatisticsView | None) -> str | None:
    return None if found is None else "Statistics: " + " · ".join(statistics_parts(found))


def arm_line(arm: ArmView) -> str:
    """`With the extension: 0.2 s and $0.0010 per run (1.2 s and $0.0060 over 6 runs)`: each run's own
    time and cost, the figures the per-run progress lines show."""
    return (
        f"{arm.label}: {seconds_text(arm.seconds_per_run)} and {money_text(arm.cost_per_run)} per run "
        f"({seconds_text(arm.seconds)} and {money_text(arm.cost_usd)} over {arm.runs} runs)"
    )


def figures_line(arm: ArmView) -> str | None:
    """`With the extension per run: 1,200 tokens in, 300 tokens out, 3 model calls, 2 tool calls` (means over
    the runs that reported each), then which figures some runs did not report; None when the report has none."""
    if not arm.figures:
        return None
    parts = [counted(figure_text(arm.figure(metric)), metric) for metric in FIGURE_WORDS]
    line = f"{arm.label} per run: {', '.join(parts)}"
    missing = [
        f"{words} for {row.unknown_count} of {row.unknown_count + row.denominator} runs"
        for metric, words in FIGURE_WORDS.items()
        if (row := arm.figure(metric)) is not None and row.unknown_count and row.denominator
    ]
    return line + (f" (over the runs that reported them; unknown: {'; '.join(missing)})" if missing else "")


def figures_lines(view: ReportView) -> tuple[str, ...]:
    return tuple(line for line in (figures_line(arm) for arm in arms(view)) if line is not None)


def round_lines(rounds: RoundView | None) -> tuple[str, ...]:
    """Time and cost per round of the compared cases, with the spread between rounds (what the notes compare)."""
    if rounds is None:
        return ()
    what = f"per round (the {rounds.cases} compared cases once each)"
    return tuple(
        f"{label} {what}: {show(measure.subject)} with, {show(measure.baseline)} without "
        f"(spread {show(measure.spread)})"
        for label, measure, show in (
            ("Time", rounds.seconds, seconds_text),
            ("Cost", rounds.cost_usd, money_text),
        )
    )


def coverage_line(arm: ArmView) -> str:
    """`With the extension: 6 of 6 runs completed (1 failed)`."""
    c = arm.counts
    others = [
        f"{count} {word}"
        for count, word in (
            (c.failed, "failed"),
            (c.refused, "refused"),
            (c.cancelled, "cancelled"),
            (c.unknown, "unknown"),
        )
        if count
    ]
    tail = f" ({', '.join(others)})" if others else ""
    return f"{arm.label}: {c.completed} of {c.attempted} runs completed{tail}"


def arms(view: ReportView) -> tuple[ArmView, ...]:
    return (view.subject,) if view.baseline is None else (view.subject, view.baseline)


# --- numbers -------------------------------------------------------------------------------------------


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value


def score_text(value: float | None) -> str:
    value = _finite(value)
    return "unknown" if value is None else f"{value:.2f}"


def signed_text(value: float | None) -> str:
    """`+0.50`, `−0.25` (a minus sign), `+0.00` for anything that rounds to zero."""
    value = _finite(value)
    if value is None:
        return "unknown"
    text = f"{value:+.2f}"
    return "+0.00" if text == "-0.00" else text.replace("-", MINUS)


def money_text(value: float | None) -> str:
    value = _finite(value)
    return "unknown" if value is None else f"${value:.4f}"


def seconds_text(value: float | None) -> str:
    value = _finite(value)
    return "unknown" if value is None else f"{value:.1f} s"


def points_text(value: float) -> str:
    """A proportion as percentage points: `+50 pp`, `−20 pp`, `0 pp`."""
    points = round(value * 100)
    return "0 pp" if points == 0 else f"{points:+d} pp".replace("-", MINUS)


def percent_text(value: float | None) -> str:
    value = _finite(value)
    return "unknown" if value is None else f"{round(value * 100)} %"


def figure_text(row: FigureRow | None) -> str:
    """A figure per run: `1,234`, `2.5` (a mean that is not whole), `unknown`."""
    return count_text(None if row is None else row.per_run)


def counted(text: str, metric: str) -> str:
    """`3 model calls`, `1 model call`, `unknown tokens in`: a figure's text and its words."""
    return f"{text} {FIGURE_ONE[metric] if text == '1' else FIGURE_WORDS[metric]}"


def count_text(value: float | None) -> str:
    value = _finite(value)
    if value is None:
        return "unknown"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def p_text(value: float) -> str:
    return "p < 0.001" if value < 0.001 else f"p = {value:.3f}"


def runs_text(cell: ArmCell | None, *, ran: bool = True) -> str:
    """Runs passed of runs planned, `2/3`."""
    if cell is None:
        return "unknown" if ran else "not run"
    return "unknown" if cell.runs_passed is None else f"{cell.runs_passed}/{cell.planned}"


def rate_text(cell: ArmCell | None, *, ran: bool = True) -> str:
    """Runs passed and the pass rate, `2/3 · 67 %`."""
    if cell is None or cell.pass_rate is None:
        return runs_text(cell, ran=ran)
    return f"{runs_text(cell)} · {percent_text(cell.pass_rate)}"


def cell_score_text(cell: ArmCell | None, *, ran: bool = True) -> str:
    if cell is None:
        return "unknown" if ran else "not run"
    return score_text(cell.score)
