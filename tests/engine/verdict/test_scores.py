"""Case scores, arm summaries and the comparison follow runner.md §13.7 and the reference's scoring."""

from __future__ import annotations

import math

import pytest

from eval_runner.engine.verdict.scores import (
    Arm,
    CaseArm,
    CaseKind,
    GradedRun,
    OutcomeWord,
    PlannedCase,
    ScoreError,
    attempt_series,
    mean,
    measured,
    score_suite,
    spread,
)

FIRE = CaseKind.SHOULD_FIRE
QUIET = CaseKind.SHOULD_NOT_FIRE
S, B = Arm.SUBJECT, Arm.BASELINE


def run(
    case: str = "c",
    arm: Arm = S,
    attempt: int = 1,
    passed: bool | None = True,
    *,
    kind: CaseKind = FIRE,
    score: float | None = None,
    outcome: OutcomeWord | None = None,
    cost: float | None = 0.001,
    seconds: float | None = 10.0,
) -> GradedRun:
    if score is None and passed is not None:
        score = 1.0 if passed else 0.0
    if outcome is None and passed is None:
        outcome, cost, seconds = OutcomeWord.UNKNOWN, None, None  # never ran to an end: nothing measured
    elif outcome is None:
        outcome = OutcomeWord.COMPLETED
    return GradedRun(case, kind, arm, attempt, outcome, score, passed, cost, seconds)


def arm_runs(case: str, arm: Arm, passes: list[bool | None], **kw: object) -> list[GradedRun]:
    return [run(case, arm, i + 1, p, **kw) for i, p in enumerate(passes)]  # type: ignore[arg-type]


# --- the case pass rule ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("passes", "planned", "expected"),
    [
        ([True, True, False], 3, True),  # 2 of 3
        ([True, False, False], 3, False),  # 1 of 3
        ([True, False, None], 3, None),  # 1 passed, 1 failed, 1 unscored: the unscored one could tip it
        ([True, True, None], 3, True),  # two passes decide it whatever the third did
        ([False, False, None], 3, False),  # two fails decide it too
        ([None, None, None], 3, None),  # nothing scored
        ([True, None, None], 3, None),  # 1 passed, 2 unscored: 2·(3−0) > 3
        ([False, None, None], 3, None),  # 1 failed, 2 unscored: 2·(3−1) = 4 > 3
        ([True, False], 2, False),  # an even split is not a majority
        ([True, True, True], 3, True),
        ([True], 1, True),
        ([False], 1, False),
    ],
)
def test_a_case_passes_on_a_majority_of_planned_runs(
    passes: list[bool | None], planned: int, expected: bool | None
) -> None:
    assert CaseArm.of(arm_runs("c", S, passes), planned).passed is expected


def test_case_arm_counts_and_score() -> None:
    runs = [run(attempt=1, score=0.5, passed=False), run(attempt=2, score=1.0), run(attempt=3, passed=None)]
    side = CaseArm.of(runs, 3)
    assert (side.planned, side.scored, side.runs_passed, side.failed) == (3, 2, 1, 1)
    assert side.score == 0.75
    assert side.passed is None


def test_a_case_with_no_scored_run_has_no_score_and_no_pass() -> None:
    side = CaseArm.of([], 3)
    assert side.score is None
    assert side.passed is None


# --- spread and series -----------------------------------------------------------------------------


def test_spread_needs_two_repeats() -> None:
    assert spread(None) is None
    assert spread(()) is None
    assert spread((0.5,)) is None
    assert spread((0.5, 0.75, 0.25)) == 0.5


def test_mean_is_absent_for_nothing() -> None:
    assert mean([]) is None
    assert mean([1.0, 2.0]) == 1.5


def test_measured_keeps_only_finite_non_negative_values() -> None:
    assert measured(0.0) == 0.0
    assert measured(1.5) == 1.5
    assert measured(None) is None
    assert measured(-0.1) is None
    assert measured(math.inf) is None
    assert measured(math.nan) is None


def test_score_series_skips_missing_scores_and_cost_series_is_unknown_when_any_is() -> None:
    runs = [
        run("a", S, 1, True, cost=1.0),
        run("b", S, 1, False, cost=2.0),
        run("a", S, 2, None, cost=None),
        run("b", S, 2, True, cost=3.0),
    ]
    assert attempt_series(runs, S, "score", total=False) == (0.5, 1.0)
    assert attempt_series(runs, S, "cost_usd", total=True) is None
    assert attempt_series(runs[:2], S, "cost_usd", total=True) == (3.0,)
    assert attempt_series(runs, B, "score", total=False) is None


# --- the plan --------------------------------------------------------------------------------------


def test_missing_planned_runs_count_as_unknown() -> None:
    cases = [PlannedCase("c", FIRE, 3)]
    scores = score_suite(cases, [run("c", S, 1, True)], baseline=True)
    coverage = scores.subject.coverage
    assert (coverage.attempted, coverage.completed, coverage.unknown) == (3, 1, 2)
    assert scores.baseline is not None
    assert (scores.baseline.coverage.attempted, scores.baseline.coverage.unknown) == (3, 3)
    assert scores.subject.cost_usd is None
    assert scores.subject.cost_unknown == 2


@pytest.mark.parametrize(
    "bad",
    [
        run("nope", S, 1),  # no such case
        run("c", S, 4),  # beyond the planned runs
        run("only", B, 1),  # a subject-only case has no baseline runs
        run("c", S, 1, kind=QUIET),  # the wrong kind
    ],
)
def test_runs_the_plan_lacks_are_refused(bad: GradedRun) -> None:
    cases = [PlannedCase("c", FIRE, 3), PlannedCase("only", FIRE, 3, subject_only=True)]
    with pytest.raises(ScoreError) as caught:
        score_suite(cases, [bad], baseline=True)
    assert caught.value.case == bad.case
    assert caught.value.attempt == bad.attempt


def test_baseline_runs_are_refused_when_no_baseline_arm_ran() -> None:
    with pytest.raises(ScoreError, match="not in the plan"):
        score_suite([PlannedCase("c", FIRE, 1)], [run("c", B, 1)], baseline=False)


def test_two_records_for_one_run_are_refused() -> None:
    with pytest.raises(ScoreError, match="two records"):
        score_suite([PlannedCase("c", FIRE, 3)], [run("c", S, 1), run("c", S, 1, False)], baseline=True)


def test_a_case_planned_twice_is_refused() -> None:
    with pytest.raises(ScoreError, match="planned twice"):
        score_suite([PlannedCase("c", FIRE, 3), PlannedCase("c", FIRE, 3)], [], baseline=True)


@pytest.mark.parametrize(
    "make",
    [
        lambda: GradedRun("c", FIRE, S, 0, OutcomeWord.COMPLETED, 1.0, True, None, None),
        lambda: GradedRun("c", FIRE, S, 1, OutcomeWord.COMPLETED, 1.0, None, None, None),
        lambda: GradedRun("c", FIRE, S, 1, OutcomeWord.COMPLETED, None, True, None, None),
        lambda: GradedRun("c", FIRE, S, 1, OutcomeWord.COMPLETED, 1.5, True, None, None),
        lambda: GradedRun("c", FIRE, S, 1, OutcomeWord.CANCELLED, 0.0, False, None, None),
        lambda: GradedRun("c", FIRE, S, 1, OutcomeWord.COMPLETED, 1.0, True, -1.0, None),
        lambda: GradedRun("c", FIRE, S, 1, OutcomeWord.COMPLETED, 1.0, True, None, math.nan),
        lambda: PlannedCase("c", FIRE, 0),
    ],
)
def test_records_that_contradict_themselves_are_refused(make: object) -> None:
    with pytest.raises(ScoreError):
        make()  # type: ignore[operator]


def test_an_errored_run_is_scored_as_a_failure() -> None:
    refused = GradedRun("c", FIRE, S, 1, OutcomeWord.REFUSED, 0.0, False, None, 1.0)
    scores = score_suite([PlannedCase("c", FIRE, 1)], [refused], baseline=False)
    assert scores.cases[0].subject.passed is False
    assert scores.subject.coverage.refused == 1


# --- a whole suite ---------------------------------------------------------------------------------


def suite() -> tuple[list[PlannedCase], list[GradedRun]]:
    """Three compared cases, one subject-only case, one case the baseline never decides."""
    cases = [
        PlannedCase("fire", FIRE, 3),
        PlannedCase("quiet", QUIET, 3),
        PlannedCase("hard", FIRE, 3),
        PlannedCase("only", FIRE, 3, subject_only=True),
        PlannedCase("flaky", FIRE, 3),
    ]
    runs: list[GradedRun] = []
    runs += arm_runs("fire", S, [True, True, False], cost=0.002, seconds=20.0)
    runs += arm_runs("fire", B, [False, False, True], cost=0.001, seconds=10.0)
    runs += arm_runs("quiet", S, [False, False, True], kind=QUIET, cost=0.002, seconds=20.0)
    runs += arm_runs("quiet", B, [True, True, True], kind=QUIET, cost=0.001, seconds=10.0)
    runs += arm_runs("hard", S, [False, False, False], cost=0.002, seconds=20.0)
    runs += arm_runs("hard", B, [False, False, False], cost=0.001, seconds=10.0)
    runs += arm_runs("only", S, [True, True, True], cost=None, seconds=None)
    runs += arm_runs("flaky", S, [True, True, True], cost=0.002, seconds=20.0)
    runs += arm_runs("flaky", B, [True, False, None], cost=0.001, seconds=10.0)
    return cases, runs


def test_subject_only_and_undecided_cases_are_not_compared() -> None:
    cases, runs = suite()
    scores = score_suite(cases, runs, baseline=True)
    assert [case.id for case in scores.compared_cases] == ["fire", "quiet", "hard"]
    assert scores.subject_only_cases == ("only",)
    only = scores.cases[3]
    assert only.baseline is None
    assert only.change is None
    flaky = scores.cases[4]
    assert flaky.baseline is not None
    assert flaky.baseline.passed is None
    assert flaky.compared is False
    assert flaky.change is None


def test_the_comparison_reads_compared_cases_only() -> None:
    cases, runs = suite()
    cmp = score_suite(cases, runs, baseline=True).comparison
    assert cmp.baseline_present is True
    assert cmp.cases == 3
    assert cmp.runs == 3
    # fire passes with, not without; quiet the other way round; hard neither. `only` and `flaky`
    # pass with the extension but are not compared, so they count for neither arm.
    assert (cmp.subject_passed, cmp.baseline_passed) == (1, 1)
    assert cmp.should_not_fire_lost == ("quiet",)
    # Per attempt over fire, quiet, hard: subject (1,0,0) (1,0,0) (0,1,0); baseline (0,1,0) (0,1,0) (1,1,0).
    assert cmp.mean_score.subject == pytest.approx(1 / 3)
    assert cmp.mean_score.baseline == pytest.approx(4 / 9)
    assert cmp.mean_score.spread == pytest.approx(1 / 3)
    # Three compared runs per attempt: totals 0.006 and 60 s with, 0.003 and 30 s without; no spread.
    assert cmp.cost_usd.subject == pytest.approx(0.006)
    assert cmp.cost_usd.baseline == pytest.approx(0.003)
    assert cmp.cost_usd.spread == 0.0
    assert cmp.seconds.subject == pytest.approx(60.0)
    assert cmp.seconds.baseline == pytest.approx(30.0)


def test_case_change_and_suite_change_are_over_compared_cases() -> None:
    cases, runs = suite()
    scores = score_suite(cases, runs, baseline=True)
    changes = {case.id: case.change for case in scores.cases}
    assert changes["fire"] == pytest.approx(1 / 3)
    assert changes["quiet"] == pytest.approx(-2 / 3)
    assert changes["hard"] == 0.0
    assert scores.change == pytest.approx((1 / 3 - 2 / 3 + 0) / 3)


def test_arm_summaries_and_coverage() -> None:
    cases, runs = suite()
    scores = score_suite(cases, runs, baseline=True)
    subject, baseline = scores.subject, scores.baseline
    assert baseline is not None
    # Subject: fire, only, flaky pass; quiet, hard fail; all five decided.
    assert (subject.cases_scored, subject.cases_passed, subject.cases_unknown) == (5, 3, 0)
    assert subject.mean_score == pytest.approx((2 / 3 + 1 / 3 + 0 + 1 + 1) / 5)
    assert subject.cost_usd is None  # `only` has no cost
    assert subject.cost_unknown == 3
    assert subject.coverage.planned == 5
    assert subject.coverage.attempted == 15
    assert subject.coverage.completed == 15
    assert subject.coverage.excluded == 0
    # Baseline: four cases (not `only`), flaky undecided.
    assert (baseline.cases_scored, baseline.cases_passed, baseline.cases_unknown) == (3, 1, 1)
    assert baseline.coverage.planned == 4
    assert baseline.coverage.excluded == 1
    assert baseline.coverage.attempted == 12
    assert (baseline.coverage.completed, baseline.coverage.unknown) == (11, 1)
    assert baseline.cost_usd is None  # flaky's unknown run has no cost
    assert baseline.seconds is None


def test_totals_are_sums_of_every_run_when_all_are_known() -> None:
    cases = [PlannedCase("a", FIRE, 2), PlannedCase("b", FIRE, 2)]
    runs = arm_runs("a", S, [True, False], cost=0.25, seconds=1.5) + arm_runs("b", S, [True, True], cost=0.5, seconds=2)
    summary = score_suite(cases, runs, baseline=False).subject
    assert summary.cost_usd == 1.5
    assert summary.seconds == 7.0


def test_no_baseline_arm_means_no_baseline_summary_and_an_absent_comparison() -> None:
    cases, runs = suite()
    subject_runs = [r for r in runs if r.arm is S]
    scores = score_suite(cases, subject_runs, baseline=False)
    assert scores.baseline is None
    assert scores.change is None
    cmp = scores.comparison
    assert (cmp.baseline_present, cmp.cases, cmp.runs) == (False, 0, 0)
    assert cmp.mean_score.subject is None
    assert cmp.mean_score.spread is None


def test_runs_is_the_fewest_scored_runs_of_any_compared_case() -> None:
    cases = [PlannedCase("a", FIRE, 3), PlannedCase("b", FIRE, 3)]
    runs = (
        arm_runs("a", S, [True, True, True])
        + arm_runs("a", B, [False, False, False])
        + arm_runs("b", S, [True, True, None])  # two scored, decided
        + arm_runs("b", B, [False, False, False])
    )
    cmp = score_suite(cases, runs, baseline=True).comparison
    assert cmp.cases == 2
    assert cmp.runs == 2


def test_one_attempt_has_no_spread() -> None:
    cases = [PlannedCase("a", FIRE, 1)]
    runs = [run("a", S, 1, True), run("a", B, 1, False)]
    cmp = score_suite(cases, runs, baseline=True).comparison
    assert cmp.runs == 1
    assert cmp.mean_score.subject == 1.0
    assert cmp.mean_score.baseline == 0.0
    assert cmp.mean_score.spread is None
    assert cmp.seconds.spread is None


def test_spread_is_the_larger_arm_spread() -> None:
    cases = [PlannedCase("a", FIRE, 3)]
    runs = [
        *arm_runs("a", S, [True, True, True], seconds=None),
        run("a", B, 1, True, seconds=10.0),
        run("a", B, 2, True, seconds=14.0),
        run("a", B, 3, False, seconds=12.0),
    ]
    cmp = score_suite(cases, runs, baseline=True).comparison
    assert cmp.mean_score.spread == 1.0  # subject (1,1,1) spreads 0, baseline (1,1,0) spreads 1
    assert cmp.seconds.subject is None  # the subject arm never measured its time
    assert cmp.seconds.baseline == 12.0
    assert cmp.seconds.spread is None  # unknown when either arm's is


def test_a_should_not_fire_case_lost_needs_a_baseline_pass_and_a_subject_fail() -> None:
    cases = [PlannedCase("q1", QUIET, 3), PlannedCase("q2", QUIET, 3), PlannedCase("f", FIRE, 3)]
    runs = (
        arm_runs("q1", S, [False, False, False], kind=QUIET)
        + arm_runs("q1", B, [False, False, False], kind=QUIET)  # both fail: not lost
        + arm_runs("q2", S, [True, True, False], kind=QUIET)
        + arm_runs("q2", B, [True, True, True], kind=QUIET)  # both pass: not lost
        + arm_runs("f", S, [False, False, False])
        + arm_runs("f", B, [True, True, True])  # should-fire: fewer passes, but not "lost"
    )
    assert score_suite(cases, runs, baseline=True).comparison.should_not_fire_lost == ()
