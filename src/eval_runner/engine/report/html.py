"""report.html: the page a person reads, on a phone too, drawn from the shared `ReportView` (engine/report/view.py).

jinja2 renders `templates/report.html.j2` with autoescape on, so text from a suite, a run or an identity is
escaped wherever it lands, attributes included. The page is self-contained: styles and the chart (inline
SVG) are in it; no script, font, image or request to anywhere; its only links are relative, to each run's
trajectory.json in the same results directory. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import jinja2

from eval_runner.engine.report import view as words
from eval_runner.engine.report.inputs import RunFigures
from eval_runner.engine.report.view import ArmCell, ReportView
from eval_runner.engine.verdict.gate import Criterion, Judgement, Verdict
from eval_runner.engine.verdict.scores import Arm

_TONE: dict[object, str] = {
    Verdict.PASS: "good",
    Verdict.FAIL: "bad",
    Verdict.INCONCLUSIVE: "mid",
    Judgement.PASSED: "good",
    Judgement.FAILED: "bad",
    Judgement.UNVERIFIABLE: "mid",
}
#: The chart's geometry in viewBox units; the SVG scales to the page's width.
CHART_WIDTH = 360
BAR_X = 62
BAR_WIDTH = 200
VALUE_X = 268
CASE_HEIGHT = 54
#: A case name longer than this is cut in the chart (the table below shows it whole).
CHART_NAME_CHARS = 48


@dataclass(frozen=True, slots=True)
class RunLine:
    """One attempt as the page lists it; `trajectory` is the relative link, when the run kept one."""

    arm: Arm
    attempt: int
    outcome: str
    reason: str | None
    passed: bool | None
    score: float | None
    cost_usd: float | None
    seconds: float | None
    trajectory: str | None
    figures: RunFigures = field(default_factory=RunFigures)

    @property
    def figure_words(self) -> str:
        """`1,200 tokens in, 300 tokens out, 3 model calls, 2 tool calls` (`unknown` where nobody said)."""
        return ", ".join(
            words.counted(words.count_text(getattr(self.figures, metric)), metric) for metric in words.FIGURE_WORDS
        )


@dataclass(frozen=True, slots=True)
class ReportPage:
    """What the page shows: the shared view, who and what it is about, the gate's criteria, and each
    case's runs (`(case id, runs)` in plan order)."""

    view: ReportView
    subject: str
    suite: str
    evaluator: str
    report_digest: str
    suite_digest: str
    gate_id: str
    gate_digest: str
    criteria: tuple[Criterion, ...]
    runs: tuple[tuple[str, tuple[RunLine, ...]], ...]


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    y: int
    width: str | None
    tone: str
    value: str


@dataclass(frozen=True, slots=True)
class ChartCase:
    name: str
    y: int
    bars: tuple[Bar, ...]


@dataclass(frozen=True, slots=True)
class Chart:
    """Per case, the pass rate with and without the extension as two bars (one SVG group per case)."""

    cases: tuple[ChartCase, ...]
    width: int = CHART_WIDTH
    bar_x: int = BAR_X
    bar_width: int = BAR_WIDTH
    value_x: int = VALUE_X

    @property
    def height(self) -> int:
        return len(self.cases) * CASE_HEIGHT + 4


def chart(view: ReportView) -> Chart:
    cases = []
    for index, case in enumerate(view.cases):
        name = case.id if len(case.id) <= CHART_NAME_CHARS else case.id[: CHART_NAME_CHARS - 1] + "…"
        bars = (
            _bar("with", 18, case.with_extension, "with", ran=True),
            _bar("without", 34, case.without, "without", ran=case.baseline_planned),
        )
        cases.append(ChartCase(name=name, y=index * CASE_HEIGHT, bars=bars))
    return Chart(cases=tuple(cases))


def _bar(label: str, y: int, cell: ArmCell | None, tone: str, *, ran: bool) -> Bar:
    rate = None if cell is None else cell.pass_rate
    width = None if rate is None else f"{max(0.0, min(1.0, rate)) * BAR_WIDTH:.1f}"
    return Bar(label=label, y=y, width=width, tone=tone, value=words.rate_text(cell, ran=ran))


def render(page: ReportPage) -> str:
    """The page's HTML text."""
    view = page.view
    return _template().render(
        page=page,
        view=view,
        headline=words.headline(view),
        stand_in=words.stand_in_line(view.stand_ins, view.verdict),
        statistics=() if view.statistics is None else words.statistics_parts(view.statistics),
        chart=chart(view),
        arms=words.arms(view),
        time_lines=(
            *(words.arm_line(arm) for arm in words.arms(view)),
            *words.figures_lines(view),
            *words.round_lines(view.rounds),
            *(words.coverage_line(arm) for arm in words.arms(view)),
        ),
    )


def _short(qualified: str) -> str:
    """`<pubkey>:<package>/<component>` as a person reads it: the part after the key."""
    return qualified.split(":", 1)[-1]


@cache
def _template() -> jinja2.Template:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("eval_runner.engine.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    environment.filters.update(
        short=_short,
        tone=lambda value: _TONE[value],
        score=words.score_text,
        signed=words.signed_text,
        money=words.money_text,
        secs=words.seconds_text,
        runs=words.runs_text,
        figure=words.figure_text,
        arm_words=lambda arm: "with the extension" if arm is Arm.SUBJECT else "without it",
    )
    return environment.get_template("report.html.j2")
