"""Grading one run: every grader of its case over what the run left, into per-grader results and the run's
score (runner.md §13.2, §13.6, §13.11).

`grade_run` is runner.md §13.6's whole rule set; door graders ask through `votes.py`, and patterns run
through `patterns.py` (pass one `PatternRunner` for many runs so its worker is reused). `RunView` is
deliberately small and independent of the sandbox: the outcome word and reason, the trajectory, the
created paths (and which of them `file_exists` counts), a workspace reader for `{file}` focuses, the
prompt. The grades document (`openagents.ext-eval-grades.v1`) has the reference's shape. Where we differ:
created names that are not UTF-8 and links under `file_exists` (decisions.md, "The sandbox, the bridge
and one run"), and receipt graders, which always fail (decisions.md, "The doors graders ask").
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from eval_runner.contracts import strict_json
from eval_runner.engine.grade.patterns import PatternError, PatternRunner, glob_matches
from eval_runner.engine.grade.spec import (
    DecisionGrader,
    FileExistsGrader,
    Focus,
    FocusKind,
    GraderSpec,
    JudgeGrader,
    MatchMode,
    OperationOrderGrader,
    OperationUsedGrader,
    ReceiptGrader,
    RegexGrader,
    workspace_path_problem,
)
from eval_runner.engine.grade.votes import (
    NO_DOORS,
    Checked,
    Doors,
    JsonValue,
    Vote,
    decision_state,
    failed,
    grade_decision,
    grade_judge,
    judge_record,
)
from eval_runner.engine.run.collect import shown_path
from eval_runner.engine.run.trajectory import Trajectory
from eval_runner.engine.testset.cases import Case
from eval_runner.engine.verdict.scores import Arm, CaseKind, GradedRun, OutcomeWord
from eval_runner.errors import EvalRunnerError

GRADES_SCHEMA = "openagents.ext-eval-grades.v1"
MAX_FILE_BYTES = 1 << 20
NO_TRAJECTORY = "the run wrote no trajectory"
NO_WORKSPACE = "the run kept no workspace to read"
RECEIPT_UNSUPPORTED = "receipt replay is not supported"
RECEIPT_LIMITATION = (
    "Receipt graders were not checked: this runner cannot replay Wasm invocation receipts, "
    'so every receipt grader failed with "receipt replay is not supported".'
)
#: Reasons of an errored run that coverage counts as refused rather than failed (runner.md §13.7).
REFUSED_REASONS = frozenset({"refused", "unconfined_host", "env_var_rejected"})

RunOutcomeWord = Literal["completed", "errored", "cancelled", "unknown"]


class FocusError(EvalRunnerError):
    """A focus could not be read; the message is the reason its grader fails with."""


class WorkspaceReader(Protocol):
    """Reads one file of the run's workspace for a `{ file = "<path>" }` focus. Raises only `FocusError`."""

    def read_text(self, path: str) -> str: ...


@dataclass(frozen=True, slots=True)
class WorkspaceDirectory:
    """The run's workspace on disk. A file is read only when its resolved path stays inside `root`, it is a
    regular file of at most `max_bytes`, and it is UTF-8. It is opened non-blocking, so a FIFO the agent
    left in place of a file is refused rather than waited on."""

    root: Path
    max_bytes: int = MAX_FILE_BYTES

    def read_text(self, path: str) -> str:
        problem = workspace_path_problem(path)
        if problem is not None:
            raise FocusError(f"the path {problem}")
        try:
            root = self.root.resolve(strict=True)
        except (OSError, RuntimeError) as error:
            raise FocusError(f"the workspace can't be read ({type(error).__name__})") from None
        try:
            full = (root / path).resolve(strict=True)
        except (OSError, RuntimeError):
            raise FocusError(f"{path} does not exist in the workspace") from None
        if not full.is_relative_to(root):
            raise FocusError(f"{path} resolves outside the workspace")
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(full, flags)
        except OSError as error:
            raise FocusError(f"{path} can't be read ({error.strerror or type(error).__name__})") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise FocusError(f"{path} is not a file")
            if info.st_size > self.max_bytes:
                raise FocusError(f"{path} is {info.st_size} bytes; a file focus reads at most 1 MiB")
            chunks, size = [], 0
            while size <= self.max_bytes:
                chunk = os.read(fd, self.max_bytes + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            data = b"".join(chunks)
        except OSError as error:
            raise FocusError(f"{path} can't be read ({error.strerror or type(error).__name__})") from None
        finally:
            os.close(fd)
        if len(data) > self.max_bytes:
            raise FocusError(f"{path} is over {self.max_bytes} bytes; a file focus reads at most 1 MiB")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise FocusError(f"{path} is not UTF-8 text") from None


@dataclass(frozen=True, slots=True)
class RunView:
    """What grading reads of one run. `reason` is set exactly when the outcome is `errored`;
    `created_files` are workspace-relative paths in the order the run recorded them; `present_files` those
    of them `file_exists` counts (None: all of them, a view built from paths alone); `prompt` is the task
    the agent was given (None: the case's prompt)."""

    outcome: RunOutcomeWord
    reason: str | None = None
    trajectory: Trajectory | None = None
    created_files: tuple[str, ...] = ()
    workspace: WorkspaceReader | None = None
    prompt: str | None = None
    present_files: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.outcome not in ("completed", "errored", "cancelled", "unknown"):
            raise ValueError(f"unknown run outcome {self.outcome!r}")
        if (self.outcome == "errored") != bool(self.reason):
            raise ValueError("an errored run has a reason, and only an errored run does")

    @property
    def last_message(self) -> str | None:
        """The trajectory's final agent message (what `last_message` reads)."""
        return None if self.trajectory is None else self.trajectory.final_message

    @property
    def graded(self) -> bool:
        return self.outcome in ("completed", "errored")

    @property
    def coverage(self) -> OutcomeWord:
        """The outcome in the coverage vocabulary (runner.md §13.7)."""
        if self.outcome == "errored":
            return OutcomeWord.REFUSED if self.reason in REFUSED_REASONS else OutcomeWord.FAILED
        return OutcomeWord(self.outcome)


@dataclass(frozen=True, slots=True)
class GraderResult:
    """One grader's verdict on one run. `scored` false: it reports but does not count (a subject-only
    grader beside others); `votes` are the door answers of a `decision` or `judge` grader."""

    name: str
    type: str
    weight: float
    scored: bool
    passed: bool
    explanation: str
    votes: tuple[Vote, ...] = ()

    def to_json(self) -> dict[str, JsonValue]:
        value: dict[str, JsonValue] = {
            "name": self.name,
            "type": self.type,
            "weight": self.weight,
            "scored": self.scored,
            "passed": self.passed,
            "explanation": self.explanation,
        }
        if self.votes:
            value["votes"] = [vote.to_json() for vote in self.votes]
        return value


@dataclass(frozen=True, slots=True)
class RunGrades:
    """A run's grader results with its score (0..1) and pass; both None when not graded or nothing scored."""

    graded: bool
    results: tuple[GraderResult, ...]
    score: float | None
    passed: bool | None

    @classmethod
    def of(cls, results: Iterable[GraderResult]) -> RunGrades:
        kept = tuple(results)
        weight = total = 0.0
        passed = True
        scored = False
        for result in kept:
            if result.scored:
                scored = True
                weight += result.weight
                total += result.weight if result.passed else 0.0
                passed = passed and result.passed
        if not scored:
            return cls(True, kept, None, None)
        return cls(True, kept, min(total / weight, 1.0), passed)


NOT_GRADED = RunGrades(False, (), None, None)


async def grade_run(
    case: Case,
    arm: Arm,
    view: RunView,
    doors: Doors = NO_DOORS,
    extension_operations: Collection[str] = frozenset(),
    *,
    patterns: PatternRunner | None = None,
) -> RunGrades:
    """Grades one run of `case` in `arm` (module docstring). Graders run one at a time in case order, so
    door calls happen in a fixed order."""
    if not view.graded:
        return NOT_GRADED
    if patterns is None:
        async with PatternRunner() as runner:
            return await grade_run(case, arm, view, doors, extension_operations, patterns=runner)
    every_one_subject_only = case.subject_only(extension_operations)
    results = []
    for grader in case.graders:
        subject_only = grader.subject_only(extension_operations)
        if arm is Arm.BASELINE and subject_only:
            continue
        if view.outcome == "errored":
            checked = failed(f"the run ended with {view.reason}")
        else:
            checked = await check(grader, case, view, doors, patterns)
        results.append(
            GraderResult(
                name=grader.name,
                type=grader.type_word,
                weight=grader.weight,
                scored=not subject_only or every_one_subject_only,
                passed=checked.passed,
                explanation=checked.explanation,
                votes=checked.votes,
            )
        )
    return RunGrades.of(results)


async def check(grader: GraderSpec, case: Case, view: RunView, doors: Doors, patterns: PatternRunner) -> Checked:
    """One grader over a run that completed."""
    try:
        if isinstance(grader, RegexGrader):
            return await _regex(grader, view, patterns)
        if isinstance(grader, OperationUsedGrader):
            return await _operation_used(grader, view, patterns)
        if isinstance(grader, OperationOrderGrader):
            return _operation_order(grader, view)
        if isinstance(grader, FileExistsGrader):
            return _file_exists(grader, view)
        if isinstance(grader, DecisionGrader):
            if doors.decision is None:
                return await grade_decision(grader, {}, None)
            task = case.prompt if view.prompt is None else view.prompt
            state = decision_state(task, grader.focus.describe(), focus_value(grader.focus, view))
            return await grade_decision(grader, state, doors.decision)
        if isinstance(grader, JudgeGrader):
            if doors.judge is None:
                return await grade_judge(grader, "", None)
            return await grade_judge(grader, judge_record(focus_value(grader.focus, view)), doors.judge)
        if isinstance(grader, ReceiptGrader):
            return failed(RECEIPT_UNSUPPORTED)
    except (FocusError, PatternError) as error:
        return failed(str(error))
    raise TypeError(f"unknown grader {type(grader).__name__}")  # pragma: no cover - GraderSpec is closed


# --------------------------------------------------------------------------------------------------- focus


def _trajectory(view: RunView) -> Trajectory:
    if view.trajectory is None:
        raise FocusError(NO_TRAJECTORY)
    return view.trajectory


def focus_value(focus: Focus, view: RunView) -> JsonValue:
    """The focus as a door sees it: the final message, the trajectory's door view (first and last steps),
    the created paths joined by newlines, or a workspace file's text."""
    if focus.kind is FocusKind.LAST_MESSAGE:
        return _trajectory(view).final_message or ""
    if focus.kind is FocusKind.TRAJECTORY:
        return _trajectory(view).door_view()
    if focus.kind is FocusKind.FILES:
        return "\n".join(shown_path(path) for path in view.created_files)
    if view.workspace is None:
        raise FocusError(NO_WORKSPACE)
    assert focus.path is not None
    return view.workspace.read_text(focus.path)


def focus_text(focus: Focus, view: RunView) -> str:
    """The focus as a regex reads it; the `trajectory` focus is the whole document as JSON text."""
    if focus.kind is FocusKind.TRAJECTORY:
        return _trajectory(view).document_text()
    value = focus_value(focus, view)
    assert isinstance(value, str)
    return value


# ------------------------------------------------------------------------------------------ structural checks


async def _regex(grader: RegexGrader, view: RunView, patterns: PatternRunner) -> Checked:
    text = focus_text(grader.target, view)
    try:
        count = await patterns.count(grader.pattern, grader.flags, text)
    except PatternError as error:
        return failed(f"{error} over {grader.target.describe()}")
    match grader.match.mode:
        case MatchMode.CONTAINS:
            passed, wanted = count > 0, "at least one match"
        case MatchMode.NOT_CONTAINS:
            passed, wanted = count == 0, "no match"
        case MatchMode.COUNT:
            passed, wanted = count == grader.match.count, f"exactly {grader.match.count}"
    return Checked(passed, f"{count} matches in {grader.target.describe()}; wanted {wanted}")


async def _operation_used(grader: OperationUsedGrader, view: RunView, patterns: PatternRunner) -> Checked:
    calls = _trajectory(view).calls_to(grader.operation)
    if grader.input_match is None:
        count = len(calls)
    else:
        count = await patterns.matching(grader.input_match, "", [call.input_text for call in calls])
    low, high = grader.min, grader.max
    if high is None:
        wanted = f"at least {low}"
    elif high == low:
        wanted = f"exactly {low}"
    else:
        wanted = f"{low} to {high}"
    within = count >= low and (high is None or count <= high)
    return Checked(within, f"{grader.operation} ran {count} times; wanted {wanted}")


def _operation_order(grader: OperationOrderGrader, view: RunView) -> Checked:
    calls = _trajectory(view).calls
    before = next((index for index, call in enumerate(calls) if call.is_operation(grader.before)), None)
    after = next((index for index, call in enumerate(calls) if call.is_operation(grader.after)), None)
    if before is None:
        return failed(f"{grader.before} never ran")
    if after is None:
        return failed(f"{grader.after} never ran")
    if before < after:
        return Checked(True, f"{grader.before} ran first (call {before + 1}), then {grader.after} (call {after + 1})")
    return failed(f"{grader.after} ran first (call {after + 1}), before {grader.before} (call {before + 1})")


def _file_exists(grader: FileExistsGrader, view: RunView) -> Checked:
    present = view.created_files if view.present_files is None else view.present_files
    shown = (shown_path(path) for path in present)
    found = next((path for path in shown if glob_matches(grader.path, path)), None)
    if grader.exists:
        if found is None:
            return failed(f"no created file matches {grader.path}")
        return Checked(True, f"created {found}")
    if found is None:
        return Checked(True, f"no created file matches {grader.path}")
    return failed(f"created {found}, which matches {grader.path}")


# ------------------------------------------------------------------------------------------ grades document


def grades_path(case: str, arm: Arm, attempt: int) -> str:
    """Where a run's grades live under `artifacts/`."""
    return f"grades/{case}/{arm.value}-{attempt}.json"


def grades_document(
    case: str,
    arm: Arm,
    attempt: int,
    view: RunView,
    grades: RunGrades,
    *,
    cost_usd: float | None = None,
    seconds: float | None = None,
) -> dict[str, JsonValue]:
    """The grades document of one run (module docstring)."""
    if attempt < 1:
        raise ValueError("an attempt is numbered from 1")
    return {
        "v": GRADES_SCHEMA,
        "requires": [],
        "case": case,
        "arm": arm.value,
        "attempt": attempt,
        "outcome": view.coverage.value,
        "reason": view.reason,
        "score": grades.score,
        "passed": grades.passed,
        "cost_usd": cost_usd,
        "seconds": seconds,
        "created_files": [shown_path(path) for path in view.created_files],
        "graders": [result.to_json() for result in grades.results],
    }


def grades_bytes(
    case: str,
    arm: Arm,
    attempt: int,
    view: RunView,
    grades: RunGrades,
    *,
    cost_usd: float | None = None,
    seconds: float | None = None,
) -> bytes:
    """The grades document as kept: pretty JSON, sorted keys, trailing newline."""
    return strict_json.pretty(grades_document(case, arm, attempt, view, grades, cost_usd=cost_usd, seconds=seconds))


def graded_run(
    case: Case,
    arm: Arm,
    attempt: int,
    view: RunView,
    grades: RunGrades,
    *,
    cost_usd: float | None = None,
    seconds: float | None = None,
) -> GradedRun:
    """The record `engine/verdict/scores.py` reads for this run."""
    return GradedRun(
        case=case.name,
        kind=CaseKind(case.kind.value),
        arm=arm,
        attempt=attempt,
        outcome=view.coverage,
        score=grades.score,
        passed=grades.passed,
        cost_usd=cost_usd,
        seconds=seconds,
    )


def receipt_limitation(cases: Sequence[Case]) -> str | None:
    """`RECEIPT_LIMITATION` when any case holds a receipt grader, else None."""
    holds = any(isinstance(grader, ReceiptGrader) for case in cases for grader in case.graders)
    return RECEIPT_LIMITATION if holds else None
