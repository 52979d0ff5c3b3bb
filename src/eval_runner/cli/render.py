"""What `eval run` shows in a terminal: a live progress bar, then the verdict table and the lines beside it.

The same facts as `report.html` (`engine.report_html`), in the same words where there are words: the
verdict (Better / Worse / No clear change), the headline, the statistics beside the verdict, the notes,
time and cost per arm. The progress bar is rich's on a terminal; when stderr is not a terminal (a log,
CI, a pipe) each finished run is one plain line instead, so nothing is drawn with control codes. Text
that came from a suite (case names) is never read as rich markup.

Rendering only: the facts come from `engine.suite_run.SuiteOutcome`; the caller picks the consoles.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from eval_runner.engine.report.build import BuiltReport
from eval_runner.engine.suite_run import Finished, ProgressEvent, Started, SuiteOutcome
from eval_runner.engine.verdict.gate import Decision, Judgement, Verdict
from eval_runner.engine.verdict.scores import Arm, ArmSummary, CaseArm, Scores
from eval_runner.engine.verdict.statistics import ALPHA, Evidence

_VERDICT_STYLE = {Verdict.PASS: "bold green", Verdict.FAIL: "bold red", Verdict.INCONCLUSIVE: "bold yellow"}
_ARM_WORDS = {Arm.SUBJECT: "with", Arm.BASELINE: "without"}


class ProgressView:
    """The progress of a suite over `total` planned attempts, advancing on each `Finished`.

    Use as a context manager and pass the instance as the suite's `on_progress`.
    """

    def __init__(self, total: int, console: Console) -> None:
        self.total = total
        self.done = 0
        self.running = 0
        self._console = console
        self._live = console.is_terminal
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> ProgressView:
        if self._live:
            self._progress = Progress(
                TextColumn("{task.description}", markup=False),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[last]}", markup=False),
                console=self._console,
            )
            self._task = self._progress.add_task("runs", total=self.total, last="")
            self._progress.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._progress is not None:
            self._progress.stop()

    def __call__(self, event: ProgressEvent) -> None:
        if isinstance(event, Started):
            self.running += 1
            return
        self.running = max(0, self.running - 1)
        self.done += 1
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, advance=1, last=finished_words(event))
        else:
            self._console.print(
                f"run {self.done}/{self.total}  {finished_words(event)}", markup=False, highlight=False, soft_wrap=True
            )


def finished_words(event: Finished) -> str:
    """One finished attempt in words: `overview with #2 completed 0.4 s`."""
    return f"{event.case} {_ARM_WORDS[event.arm]} #{event.attempt} {event.outcome} {event.seconds:.1f} s"


# --- the summary -----------------------------------------------------------------------------------


def show_outcome(console: Console, outcome: SuiteOutcome) -> None:
    """The per-case table, the verdict in words and every line beside it."""
    built = outcome.built
    scores = built.scores
    console.print(case_table(scores))
    verdict = built.decision.verdict
    console.print(Text.assemble(("Verdict  ", "bold"), (verdict.word, _VERDICT_STYLE[verdict])))
    lines = [headline(scores)]
    if outcome.cancelled or built.limitations.partial is not None:
        lines.append(f"Partial: {built.limitations.partial or 'the run was stopped'}")
    lines += why_lines(built.decision)
    stats = statistics_line(built.evidence)
    if stats is not None:
        lines.append(stats)
    lines += [f"Note: {note}" for note in built.notes]
    lines += arm_lines(scores)
    lines.append(wall_line(built))
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def result_paths(results_dir: Path) -> tuple[str, str]:
    """The `report  <path>` and `html    <path>` lines."""
    return f"report  {results_dir / 'report.json'}", f"html    {results_dir / 'report.html'}"


def case_table(scores: Scores) -> Table:
    """Per case: kind, runs passed with / without (of the planned runs), score with / without, change."""
    table = Table(title="Tests, with the extension and without it", title_justify="left")
    table.add_column("\nCase", overflow="fold")
    table.add_column("\nKind", no_wrap=True)
    table.add_column("Passed\nwith", justify="right")
    table.add_column("Passed\nwithout", justify="right")
    table.add_column("Score\nwith", justify="right")
    table.add_column("Score\nwithout", justify="right")
    table.add_column("\nChange", justify="right")
    for case in scores.cases:
        kind = case.kind.value + (" (with only)" if case.subject_only else "")
        table.add_row(
            Text(case.id),
            kind,
            _runs(case.subject),
            _runs(case.baseline),
            _score(case.subject),
            _score(case.baseline),
            _signed(case.change),
        )
    return table


def headline(scores: Scores) -> str:
    """`Passes 2 of 2 tests with the extension, 1 of 2 without. Change in mean score: +0.50.`"""
    line = f"Passes {scores.subject.cases_passed} of {len(scores.cases)} tests with the extension"
    if scores.baseline is None:
        return line + ". No run without it, so there is nothing to compare with."
    return (
        f"{line}, {scores.baseline.cases_passed} of {scores.baseline.coverage.planned} without. "
        f"Change in mean score: {_signed(scores.change)}."
    )


def why_lines(decision: Decision) -> list[str]:
    """The criteria that kept the verdict from Better: failed ones, else unverifiable ones."""
    for judgement in (Judgement.FAILED, Judgement.UNVERIFIABLE):
        found = [c for c in decision.criteria if c.judgement is judgement and not c.detail.startswith("not judged")]
        if found:
            return [f"Why: {c.detail} ({c.name} {judgement.value})" for c in found]
    return []


def statistics_line(found: Evidence | None) -> str | None:
    """p that it helps, Δ pass rate with its 95 % interval, cases improved, and the detectable effect."""
    if found is None:
        return None
    if found.cases == 0:
        return "Statistics: no case was scored in both arms"
    parts = [f"{_p(found.p_helps)} that it helps"]
    if found.delta_pass_rate is not None and found.delta_low_95 is not None and found.delta_high_95 is not None:
        parts.append(
            f"Δ pass rate {_pp(found.delta_pass_rate)} "
            f"(95 % interval {_pp(found.delta_low_95)} to {_pp(found.delta_high_95)})"
        )
    parts.append(f"{found.cases_improved} of {found.cases} cases improved ({found.cases_worsened} worsened)")
    if found.min_detectable_effect is None:
        parts.append(f"underpowered: no result could reach p ≤ {float(ALPHA):g} with these cases and runs")
    else:
        parts.append(f"MDE {_pp(found.min_detectable_effect)} at p ≤ {float(ALPHA):g}")
    return "Statistics: " + " · ".join(parts)


def arm_lines(scores: Scores) -> list[str]:
    """Time and cost per arm (totals over its runs), then per run as the gate and the notes read them
    (over the compared cases, the spread between repeats beside them), as report.html shows them."""
    arms: Sequence[tuple[str, ArmSummary | None]] = (
        ("with the extension", scores.subject),
        ("without it", scores.baseline),
    )
    out = [
        f"Time and cost {label}: {_time(summary.seconds)}, {_money(summary.cost_usd)} "
        f"over {summary.coverage.attempted} runs"
        for label, summary in arms
        if summary is not None
    ]
    if scores.baseline is not None:
        for label, measure, show in (
            ("Time per run", scores.comparison.seconds, _time),
            ("Cost per run", scores.comparison.cost_usd, _money),
        ):
            out.append(
                f"{label}: {show(measure.subject)} with, {show(measure.baseline)} without "
                f"(spread {show(measure.spread)})"
            )
    return out


def wall_line(built: BuiltReport) -> str:
    """How long the whole suite took, to the second (the report's own times)."""
    return f"Wall time {built.report.ended_at - built.report.started_at} s"


# --- words and numbers -----------------------------------------------------------------------------


def _runs(side: CaseArm | None) -> str:
    return "not run" if side is None else f"{side.runs_passed}/{side.planned}"


def _score(side: CaseArm | None) -> str:
    if side is None:
        return "not run"
    return "unknown" if side.score is None else f"{side.score:.2f}"


def _signed(value: float | None) -> str:
    return "unknown" if value is None else f"{value:+.2f}"


def _money(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.4f}"


def _time(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.1f} s"


def _pp(value: float) -> str:
    points = round(value * 100)
    return "0 pp" if points == 0 else f"{points:+d} pp"


def _p(value: float) -> str:
    return "p < 0.001" if value < 0.001 else f"p = {value:.3f}"
