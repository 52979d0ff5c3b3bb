"""Scores: graded runs in, case scores, arm summaries and the comparison the gate reads out.

The rules are runner.md §13.6 (end) and §13.7, and they follow the reference's `ext_eval::score` exactly,
down to the order of float additions, because the numbers land in a report that other readers recompute
(decisions.md, "Scores, verdict, notes and evidence"). A pass is unknown, never guessed, while missing
runs could still tip a case's majority. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from eval_runner.errors import EvalRunnerError


class CaseKind(StrEnum):
    """Whether the extension ought to act on a case."""

    SHOULD_FIRE = "should-fire"
    SHOULD_NOT_FIRE = "should-not-fire"


class Arm(StrEnum):
    """The subject arm runs with the extension admitted; the baseline arm without it."""

    SUBJECT = "subject"
    BASELINE = "baseline"


class OutcomeWord(StrEnum):
    """How a run ended, in the coverage vocabulary (runner.md §13.7)."""

    COMPLETED = "completed"
    REFUSED = "refused"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"


#: A per-run measure the comparison reads.
RunMeasure = Literal["score", "cost_usd", "seconds"]

#: Runs that ended this way were never graded, so they carry no score (§13.6).
UNGRADED = frozenset({OutcomeWord.CANCELLED, OutcomeWord.UNKNOWN})


class ScoreError(EvalRunnerError, ValueError):
    """Graded runs that do not fit the plan, or a record that contradicts itself.

    `case`, `arm` and `attempt` name the run when one is at fault.
    """

    def __init__(self, message: str, *, case: str | None = None, arm: Arm | None = None, attempt: int | None = None):
        super().__init__(message)
        self.case = case
        self.arm = arm
        self.attempt = attempt

    @classmethod
    def at(cls, run: GradedRun, message: str) -> ScoreError:
        """An error naming `run`."""
        return cls(message, case=run.case, arm=run.arm, attempt=run.attempt)


def measured(value: float | None) -> float | None:
    """A cost or a time as the reference keeps it: a non-finite or negative reading is unknown."""
    if value is None or not math.isfinite(value) or value < 0:
        return None
    return value


@dataclass(frozen=True, slots=True)
class GradedRun:
    """One run after grading.

    `score` is the weighted mean of the scored graders' passes (0..1) and `passed` whether every
    scored grader passed; both are absent together, when the run was not graded (cancelled or
    unknown) or had no scored grader. `cost_usd` and `seconds` are absent when unknown; pass readings
    through `measured` first, since a negative or non-finite value is refused here.
    """

    case: str
    kind: CaseKind
    arm: Arm
    attempt: int
    outcome: OutcomeWord
    score: float | None
    passed: bool | None
    cost_usd: float | None
    seconds: float | None

    def __post_init__(self) -> None:
        if self.attempt < 1:
            raise ScoreError.at(self, "an attempt is numbered from 1")
        if (self.score is None) != (self.passed is None):
            raise ScoreError.at(self, "a run's score and pass are present together or not at all")
        if self.score is not None and not (math.isfinite(self.score) and 0.0 <= self.score <= 1.0):
            raise ScoreError.at(self, "a run's score must be from 0 to 1")
        if self.score is not None and self.outcome in UNGRADED:
            raise ScoreError.at(self, f"a {self.outcome} run is not graded, so it has no score")
        for name, value in (("cost_usd", self.cost_usd), ("seconds", self.seconds)):
            if value is not None and measured(value) is None:
                raise ScoreError.at(self, f"{name} must be finite and not negative, or unknown")


@dataclass(frozen=True, slots=True)
class PlannedCase:
    """A case as planned: its id, kind, runs per arm, and whether only the subject arm runs it.

    `subject_only` is true when every grader of the case is subject-only (§13.2): the baseline arm
    does not run it and it is scored in the subject arm alone, never compared.
    """

    id: str
    kind: CaseKind
    runs: int
    subject_only: bool = False

    def __post_init__(self) -> None:
        if self.runs < 1:
            raise ScoreError("a case plans at least one run per arm", case=self.id)


@dataclass(frozen=True, slots=True)
class CaseArm:
    """One case in one arm."""

    planned: int
    scored: int
    runs_passed: int
    score: float | None
    passed: bool | None

    @property
    def failed(self) -> int:
        """Scored runs that did not pass."""
        return self.scored - self.runs_passed

    @classmethod
    def of(cls, runs: Sequence[GradedRun], planned: int) -> CaseArm:
        """Scores a case's runs in one arm against its planned run count (§13.7)."""
        scored = [run for run in runs if run.score is not None]
        runs_passed = sum(1 for run in scored if run.passed is True)
        failed = len(scored) - runs_passed
        passed: bool | None
        if not scored:
            passed = None
        elif 2 * runs_passed > planned:
            passed = True
        elif 2 * (planned - failed) <= planned:
            passed = False
        else:
            passed = None
        return cls(
            planned=planned,
            scored=len(scored),
            runs_passed=runs_passed,
            score=mean(run.score for run in scored if run.score is not None),
            passed=passed,
        )


@dataclass(frozen=True, slots=True)
class CaseScore:
    """One case across both arms. `baseline` is absent when the baseline arm did not run the case."""

    id: str
    kind: CaseKind
    compared: bool
    subject_only: bool
    subject: CaseArm
    baseline: CaseArm | None
    change: float | None

    def arm(self, arm: Arm) -> CaseArm | None:
        return self.subject if arm is Arm.SUBJECT else self.baseline


@dataclass(frozen=True, slots=True)
class Coverage:
    """NIP-EVAL coverage for one arm: `planned`/`excluded` count cases, the rest count runs."""

    planned: int = 0
    attempted: int = 0
    completed: int = 0
    refused: int = 0
    failed: int = 0
    cancelled: int = 0
    unknown: int = 0
    excluded: int = 0


@dataclass(frozen=True, slots=True)
class ArmSummary:
    """One arm across the suite.

    `cases_scored` counts cases whose pass is decided; `cost_usd`/`seconds` are totals over every
    run of the arm, absent when any run's value is unknown (`*_unknown` says how many).
    """

    cases_scored: int
    cases_passed: int
    cases_unknown: int
    mean_score: float | None
    cost_usd: float | None
    cost_unknown: int
    seconds: float | None
    seconds_unknown: int
    coverage: Coverage


@dataclass(frozen=True, slots=True)
class ArmMeasure:
    """A measure per run for each arm, and the spread between repeats (the larger arm's)."""

    subject: float | None
    baseline: float | None
    spread: float | None


@dataclass(frozen=True, slots=True)
class Comparison:
    """What the gate reads (§13.7), over compared cases only.

    `runs` is the fewest scored runs in either arm of any compared case (0 when none);
    `should_not_fire_lost` names the compared should-not-fire cases the baseline passed and the
    subject failed.
    """

    baseline_present: bool
    cases: int
    runs: int
    subject_passed: int
    baseline_passed: int
    should_not_fire_lost: tuple[str, ...]
    mean_score: ArmMeasure
    cost_usd: ArmMeasure
    seconds: ArmMeasure


@dataclass(frozen=True, slots=True)
class Scores:
    """Everything scoring concludes. `cases` is in suite order; `change` is over compared cases."""

    cases: tuple[CaseScore, ...]
    subject: ArmSummary
    baseline: ArmSummary | None
    change: float | None
    comparison: Comparison

    @property
    def subject_only_cases(self) -> tuple[str, ...]:
        """Cases scored with the extension only and excluded from the change."""
        return tuple(case.id for case in self.cases if case.subject_only)

    @property
    def compared_cases(self) -> tuple[CaseScore, ...]:
        return tuple(case for case in self.cases if case.compared)


def mean(values: Iterable[float]) -> float | None:
    """The mean, folded left to right as the reference does; absent for no values."""
    total = 0.0
    count = 0
    for value in values:
        total += value
        count += 1
    return total / count if count else None


def spread(values: Sequence[float] | None) -> float | None:
    """The spread between repeats: highest minus lowest; absent for fewer than two repeats."""
    if values is None or len(values) < 2:
        return None
    return max(values) - min(values)


def plan_runs(cases: Sequence[PlannedCase], runs: Iterable[GradedRun], *, baseline: bool) -> tuple[GradedRun, ...]:
    """Every planned run in plan order, a missing one recorded as `unknown`.

    Plan order is case order, then the subject arm's attempts 1..runs, then the baseline's (§13.2).

    Raises:
        ScoreError: a run the plan lacks, two records for one run, a duplicate case id, or a run whose
            kind differs from its case's.
    """
    by_id: dict[str, PlannedCase] = {}
    for case in cases:
        if case.id in by_id:
            raise ScoreError(f"the case `{case.id}` is planned twice", case=case.id)
        by_id[case.id] = case
    found: dict[tuple[str, Arm, int], GradedRun] = {}
    for run in runs:
        planned = by_id.get(run.case)
        if (
            planned is None
            or run.attempt > planned.runs
            or (run.arm is Arm.BASELINE and not _baseline_runs(planned, baseline=baseline))
        ):
            raise ScoreError.at(
                run, f"a run of `{run.case}` in the {run.arm} arm, attempt {run.attempt}, is not in the plan"
            )
        if run.kind != planned.kind:
            raise ScoreError.at(run, f"a run of `{run.case}` says {run.kind}, and the case is {planned.kind}")
        key = (run.case, run.arm, run.attempt)
        if key in found:
            raise ScoreError.at(run, f"two records for `{run.case}` in the {run.arm} arm, attempt {run.attempt}")
        found[key] = run
    ordered: list[GradedRun] = []
    for case in cases:
        arms = (Arm.SUBJECT, Arm.BASELINE) if _baseline_runs(case, baseline=baseline) else (Arm.SUBJECT,)
        for arm in arms:
            for attempt in range(1, case.runs + 1):
                recorded = found.get((case.id, arm, attempt))
                if recorded is None:
                    recorded = GradedRun(case.id, case.kind, arm, attempt, OutcomeWord.UNKNOWN, None, None, None, None)
                ordered.append(recorded)
    return tuple(ordered)


def score_suite(cases: Sequence[PlannedCase], runs: Iterable[GradedRun], *, baseline: bool) -> Scores:
    """Scores graded runs against the plan (§13.7).

    `baseline` says whether the run had a baseline arm at all; without one there is no comparison
    to speak of, and `Comparison.baseline_present` is false.

    Raises:
        ScoreError: as `plan_runs`.
    """
    ordered = plan_runs(cases, runs, baseline=baseline)
    scored_cases: list[CaseScore] = []
    for case in cases:
        subject = CaseArm.of(_runs_of(ordered, case.id, Arm.SUBJECT), case.runs)
        base = (
            CaseArm.of(_runs_of(ordered, case.id, Arm.BASELINE), case.runs)
            if _baseline_runs(case, baseline=baseline)
            else None
        )
        compared = (
            base is not None
            and base.score is not None
            and base.passed is not None
            and subject.score is not None
            and subject.passed is not None
        )
        change = None
        if compared and base is not None and base.score is not None and subject.score is not None:
            change = subject.score - base.score
        scored_cases.append(
            CaseScore(
                id=case.id,
                kind=case.kind,
                compared=compared,
                subject_only=case.subject_only,
                subject=subject,
                baseline=base,
                change=change,
            )
        )
    compared_cases = [case for case in scored_cases if case.compared]
    subject_mean = mean(case.subject.score for case in compared_cases if case.subject.score is not None)
    baseline_mean = mean(
        case.baseline.score for case in compared_cases if case.baseline is not None and case.baseline.score is not None
    )
    change = subject_mean - baseline_mean if subject_mean is not None and baseline_mean is not None else None
    return Scores(
        cases=tuple(scored_cases),
        subject=_summary(scored_cases, ordered, Arm.SUBJECT),
        baseline=_summary(scored_cases, ordered, Arm.BASELINE) if baseline else None,
        change=change,
        comparison=_comparison(compared_cases, ordered, baseline_present=baseline),
    )


def _baseline_runs(case: PlannedCase, *, baseline: bool) -> bool:
    return baseline and not case.subject_only


def _runs_of(runs: Sequence[GradedRun], case: str, arm: Arm) -> list[GradedRun]:
    return [run for run in runs if run.case == case and run.arm is arm]


def _summary(cases: Sequence[CaseScore], runs: Sequence[GradedRun], arm: Arm) -> ArmSummary:
    arms = [side for side in (case.arm(arm) for case in cases) if side is not None]
    arm_runs = [run for run in runs if run.arm is arm]
    words = [run.outcome for run in arm_runs]
    coverage = Coverage(
        planned=len(arms),
        attempted=len(arm_runs),
        completed=words.count(OutcomeWord.COMPLETED),
        refused=words.count(OutcomeWord.REFUSED),
        failed=words.count(OutcomeWord.FAILED),
        cancelled=words.count(OutcomeWord.CANCELLED),
        unknown=words.count(OutcomeWord.UNKNOWN),
        excluded=len(cases) - len(arms),
    )
    cost_unknown = sum(1 for run in arm_runs if run.cost_usd is None)
    seconds_unknown = sum(1 for run in arm_runs if run.seconds is None)
    return ArmSummary(
        cases_scored=sum(1 for side in arms if side.passed is not None),
        cases_passed=sum(1 for side in arms if side.passed is True),
        cases_unknown=sum(1 for side in arms if side.passed is None),
        mean_score=mean(side.score for side in arms if side.score is not None),
        cost_usd=_total(run.cost_usd for run in arm_runs) if cost_unknown == 0 else None,
        cost_unknown=cost_unknown,
        seconds=_total(run.seconds for run in arm_runs) if seconds_unknown == 0 else None,
        seconds_unknown=seconds_unknown,
        coverage=coverage,
    )


def _total(values: Iterable[float | None]) -> float:
    total = 0.0
    for value in values:
        if value is not None:
            total += value
    return total


def _comparison(compared: Sequence[CaseScore], runs: Sequence[GradedRun], *, baseline_present: bool) -> Comparison:
    ids = {case.id for case in compared}
    fewest = min(
        (side.scored for case in compared for side in (case.subject, case.baseline) if side is not None),
        default=0,
    )
    lost = tuple(
        case.id
        for case in compared
        if case.kind is CaseKind.SHOULD_NOT_FIRE
        and case.baseline is not None
        and case.baseline.passed is True
        and case.subject.passed is False
    )
    in_compared = [run for run in runs if run.case in ids]
    return Comparison(
        baseline_present=baseline_present,
        cases=len(compared),
        runs=fewest,
        subject_passed=sum(1 for case in compared if case.subject.passed is True),
        baseline_passed=sum(1 for case in compared if case.baseline is not None and case.baseline.passed is True),
        should_not_fire_lost=lost,
        mean_score=_measure(in_compared, "score", total=False),
        cost_usd=_measure(in_compared, "cost_usd", total=True),
        seconds=_measure(in_compared, "seconds", total=True),
    )


def _measure(runs: Sequence[GradedRun], field: RunMeasure, *, total: bool) -> ArmMeasure:
    subject = attempt_series(runs, Arm.SUBJECT, field, total=total)
    baseline = attempt_series(runs, Arm.BASELINE, field, total=total)
    subject_spread, baseline_spread = spread(subject), spread(baseline)
    return ArmMeasure(
        subject=mean(subject) if subject is not None else None,
        baseline=mean(baseline) if baseline is not None else None,
        spread=max(subject_spread, baseline_spread)
        if subject_spread is not None and baseline_spread is not None
        else None,
    )


def _value(run: GradedRun, field: RunMeasure) -> float | None:
    if field == "score":
        return run.score
    if field == "cost_usd":
        return run.cost_usd
    return run.seconds


def attempt_series(runs: Sequence[GradedRun], arm: Arm, field: RunMeasure, *, total: bool) -> tuple[float, ...] | None:
    """Per attempt number (ascending), over `runs` of `arm`: the mean of a run measure, or its total.

    `field` is `score`, `cost_usd` or `seconds`. A mean skips runs without the value and attempts with
    none; a total is unknown as a whole when any run lacks the value, since a partial sum is not a
    total. Absent when no attempt has a value.
    """
    by_attempt: dict[int, list[float | None]] = {}
    for run in runs:
        if run.arm is arm:
            by_attempt.setdefault(run.attempt, []).append(_value(run, field))
    series: list[float] = []
    for attempt in sorted(by_attempt):
        values = by_attempt[attempt]
        if total:
            if any(value is None for value in values):
                return None
            series.append(_total(values))
        else:
            average = mean(value for value in values if value is not None)
            if average is not None:
                series.append(average)
    return tuple(series) if series else None
