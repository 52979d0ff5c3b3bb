"""What `eval run` shows in a terminal: a live progress bar, then the verdict table and the lines beside it.

Every number and sentence comes from the report's shared view (`engine.report.view`), as report.html and
`trainer run` show them; the per-case table is built here once for both terminals. When stderr is not a
terminal (a log, CI, a pipe) each finished run is one plain line, with no control codes; text from a
suite is never read as rich markup.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from eval_runner.engine.report import view as words
from eval_runner.engine.report.view import ReportView
from eval_runner.engine.suite_run import Finished, ProgressEvent, Started, SuiteOutcome
from eval_runner.engine.verdict.gate import Decision, Judgement, Verdict
from eval_runner.engine.verdict.scores import Arm

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
    """One finished attempt in words, with the run's own time: `overview with #2 completed 0.4 s`."""
    return f"{event.case} {_ARM_WORDS[event.arm]} #{event.attempt} {event.outcome} {words.seconds_text(event.seconds)}"


# --- the summary -----------------------------------------------------------------------------------


def show_outcome(console: Console, outcome: SuiteOutcome) -> None:
    """The per-case table, the verdict in words and every line beside it."""
    built = outcome.built
    view = built.view
    console.print(case_table(view))
    console.print(verdict_text(view.verdict))
    warning = words.stand_in_line(view.stand_ins, view.verdict)
    if warning is not None:
        console.print(warning, style="bold yellow", markup=False, highlight=False, soft_wrap=True)
    lines = [words.headline(view)]
    if outcome.cancelled or view.partial is not None:
        lines.append(f"Partial: {view.partial or 'the run was stopped'}")
    lines += why_lines(built.decision)
    stats = words.statistics_line(view.statistics)
    if stats is not None:
        lines.append(stats)
    lines += [f"Note: {note}" for note in view.notes]
    lines += time_lines(view)
    lines.append(wall_line(outcome))
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def verdict_text(verdict: Verdict, suffix: str = "") -> Text:
    """`Verdict  Better`, the word in its colour."""
    return Text.assemble(("Verdict  ", "bold"), (verdict.word, _VERDICT_STYLE[verdict]), suffix)


def result_paths(results_dir: Path) -> tuple[str, str]:
    """The `report  <path>` and `html    <path>` lines."""
    return f"report  {results_dir / 'report.json'}", f"html    {results_dir / 'report.html'}"


def case_table(view: ReportView) -> Table:
    """Per case: kind, runs passed with / without (of the runs planned), score with / without, change."""
    table = Table(title="Tests, with the extension and without it", title_justify="left")
    #: A narrow terminal folds the kind before a case's name, up to this many characters of it.
    name_width = min(max((len(case.id) for case in view.cases), default=4), 24)
    for index, name in enumerate(words.CASE_COLUMNS):
        first, _, second = name.rpartition(" ")
        header = f"{first}\n{second}" if first else f"\n{name}"
        if index == 0:
            table.add_column(header, overflow="fold", min_width=name_width)
        elif index == 1:
            table.add_column(header, overflow="fold")
        else:
            table.add_column(header, justify="right")
    for case in view.cases:
        cells = words.case_cells(case)
        table.add_row(Text(cells[0]), *cells[1:])
    return table


def why_lines(decision: Decision) -> list[str]:
    """The criteria that kept the verdict from Better: failed ones, else unverifiable ones."""
    for judgement in (Judgement.FAILED, Judgement.UNVERIFIABLE):
        found = [c for c in decision.criteria if c.judgement is judgement and not c.detail.startswith("not judged")]
        if found:
            return [f"Why: {c.detail} ({c.name} {judgement.value})" for c in found]
    return []


def time_lines(view: ReportView) -> list[str]:
    """Time and cost per run of each arm (what the progress lines show), its tokens, model calls and tool
    calls per run, then time and cost per round of the compared cases (what the notes compare)."""
    return [
        *(words.arm_line(arm) for arm in words.arms(view)),
        *words.figures_lines(view),
        *words.round_lines(view.rounds),
    ]


def wall_line(outcome: SuiteOutcome) -> str:
    """How long the suite took on the clock, and what that covers."""
    seconds = outcome.seconds
    if seconds is None:
        report = outcome.built.report
        return (
            f"Wall time {report.ended_at - report.started_at} s (report.json's started_at to ended_at, whole seconds)"
        )
    line = f"Wall time {words.seconds_text(seconds)}: the suite's runs, grading and report"
    if outcome.setup_seconds is not None:
        before = words.seconds_text(outcome.setup_seconds)
        line += f" ({before} before them checking the sandbox and opening the door; start-up not counted)"
    return line
