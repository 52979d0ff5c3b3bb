"""A report's measurements: the reference's per arm, per case and comparison rows (wire.md §13.3), and the
statistics that stand beside the verdict (statistics.md §C3) in `meta` (`contracts.report_statistics`).

The reference's rows keep its order and denominators (`ext-eval` `report::measurements`): per arm
`cases_passed` (over cases decided, unknown = cases undecided), `mean_score` (over cases with a score),
`cost_usd` and `seconds` (over attempts, unknown = attempts without the value), then per case
`case.<id>.score` and `case.<id>.runs_passed`; with a baseline, `comparison` `change` (over compared
cases, unknown = cases both arms ran but not compared) and `case.<id>.change`.

The statistics are rows of their own, never measurements (the reference's validator refuses a metric the
suite's `metrics.json` does not define), named as `statistics.Evidence.as_measurements` names them:
`p_helps`, `p_harms`, `p_helps_mid`, `p_harms_mid` (one-sided, exact stratified permutation test),
`delta_pass_rate`, `delta_low_95`, `delta_high_95` (pooled pass rate with − without and its Newcombe
interval, over runs), `cases_improved`, `cases_worsened` (breadth) and `min_detectable_effect` (null
when the design is underpowered), over the runs document. Pure.
"""

from __future__ import annotations

import math

from eval_runner.contracts.refs import ArtifactRef
from eval_runner.contracts.report import MeasuredArm, Measurement
from eval_runner.contracts.report_statistics import StatisticRow, Statistics
from eval_runner.engine.verdict.scores import Arm as RunSide
from eval_runner.engine.verdict.scores import Scores
from eval_runner.engine.verdict.statistics import Evidence


def measurement(
    arm: MeasuredArm, metric: str, value: float | None, denominator: int, unknown: int, runs_ref: ArtifactRef
) -> Measurement:
    if value is not None and not math.isfinite(value):
        value = None
    return Measurement(arm, metric, value, denominator, unknown, None, (runs_ref,))


def measurements(scores: Scores, runs_ref: ArtifactRef) -> tuple[Measurement, ...]:
    """The reference's measurements (wire.md §13.3), in its order and with its denominators."""
    out: list[Measurement] = []
    for arm, summary in ((MeasuredArm.SUBJECT, scores.subject), (MeasuredArm.BASELINE, scores.baseline)):
        if summary is None:
            continue
        side = RunSide(arm.value)
        sides = [s for s in (case.arm(side) for case in scores.cases) if s is not None]
        with_score = sum(1 for s in sides if s.score is not None)
        planned, attempted = summary.coverage.planned, summary.coverage.attempted
        out += [
            measurement(
                arm, "cases_passed", summary.cases_passed, summary.cases_scored, summary.cases_unknown, runs_ref
            ),
            measurement(arm, "mean_score", summary.mean_score, with_score, planned - with_score, runs_ref),
            measurement(arm, "cost_usd", summary.cost_usd, attempted, summary.cost_unknown, runs_ref),
            measurement(arm, "seconds", summary.seconds, attempted, summary.seconds_unknown, runs_ref),
        ]
        for case in scores.cases:
            s = case.arm(side)
            if s is None:
                continue
            missing = s.planned - s.scored
            out.append(measurement(arm, f"case.{case.id}.score", s.score, s.scored, missing, runs_ref))
            out.append(measurement(arm, f"case.{case.id}.runs_passed", s.runs_passed, s.planned, missing, runs_ref))
    if scores.baseline is not None:
        both = [case for case in scores.cases if case.baseline is not None]
        compared = sum(1 for case in both if case.compared)
        comparison = MeasuredArm.COMPARISON
        out.append(measurement(comparison, "change", scores.change, compared, len(both) - compared, runs_ref))
        for case in both:
            out.append(
                measurement(
                    comparison,
                    f"case.{case.id}.change",
                    case.change,
                    int(case.compared),
                    int(not case.compared),
                    runs_ref,
                )
            )
    return tuple(out)


#: Evidence metrics whose denominator is runs rather than cases.
_RUN_METRICS = frozenset({"delta_pass_rate", "delta_low_95", "delta_high_95"})


def statistics(scores: Scores, found: Evidence, runs_ref: ArtifactRef) -> Statistics:
    """statistics.md §C3 beside the verdict. `unknown_count` counts what the evidence could not use: cases run
    in both arms but not compared, or their arms' unscored runs."""
    both = [case for case in scores.cases if case.baseline is not None]
    uncompared = sum(1 for case in both if not case.compared)
    planned_runs = sum(case.subject.planned + case.baseline.planned for case in both if case.baseline is not None)
    unused_runs = planned_runs - found.runs_with - found.runs_without
    rows = tuple(
        StatisticRow(
            metric,
            None if value is None or not math.isfinite(value) else value,
            denominator,
            unused_runs if metric in _RUN_METRICS else uncompared,
        )
        for metric, value, denominator in found.as_measurements()
    )
    return Statistics(runs=runs_ref, rows=rows)
