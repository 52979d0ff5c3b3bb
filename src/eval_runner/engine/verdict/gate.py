"""The verdict: the `ext-eval-v2` gate over the comparison, with the criteria that say why.

The rule is runner.md's "Verdict rule" pseudo-code, implemented exactly; the criterion names and details
follow the reference gate (`gym::gate`) so a report or page can show the same reasons (decisions.md,
"Scores, verdict, notes and evidence"). Pure: no I/O. The gate's numbers come from its committed file
(`Gate.from_document`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from eval_runner.engine.verdict.scores import ArmMeasure, Comparison
from eval_runner.errors import EvalRunnerError


class Verdict(StrEnum):
    """The gate's decision, in wire words; `word` is what the phone shows."""

    PASS = "pass"  # noqa: S105 - a verdict word, not a password
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"

    @property
    def word(self) -> str:
        return _WORDS[self]


_WORDS = {Verdict.PASS: "Better", Verdict.FAIL: "Worse", Verdict.INCONCLUSIVE: "No clear change"}


class Judgement(StrEnum):
    """One criterion's result."""

    PASSED = "passed"
    FAILED = "failed"
    UNVERIFIABLE = "unverifiable"


@dataclass(frozen=True, slots=True)
class Criterion:
    """One criterion: its name, rank (1 = floors and Worse, 2 = the way to Better), result and why."""

    name: str
    rank: int
    judgement: Judgement
    detail: str


class GateError(EvalRunnerError, ValueError):
    """A gate document that is not an `ext-eval-v2`-shaped extension evaluation gate."""


@dataclass(frozen=True, slots=True)
class Gate:
    """The bounds of a correctness-primary extension evaluation gate.

    `min_runs`: fewest scored runs per arm of any compared case; `spread_multiple`: how many spreads
    a score gain must clear (and the slack on cost/time); `max_increase`: how much more cost or time
    per run the subject may take relative to the baseline, as a fraction.
    """

    id: str
    min_runs: int
    spread_multiple: float
    max_increase: float

    def __post_init__(self) -> None:
        if self.min_runs < 0:
            raise GateError(f"gate {self.id}: min_runs must not be negative")
        for name in ("spread_multiple", "max_increase"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise GateError(f"gate {self.id}: {name} must be a finite number, not negative")

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> Gate:
        """The bounds of a parsed gate file (`openagents.gym.gate.v2`).

        Raises:
            GateError: another schema, a rule that does not decide `ext_eval`, a cost-primary rule
                (`primary`), or a missing or non-numeric bound (`max_increase` included: the
                `ext-eval-v1` rule without it is not this rule).
        """
        gate_id = document.get("id")
        if not isinstance(gate_id, str):
            raise GateError("a gate names its id")
        if document.get("schema") != "openagents.gym.gate.v2":
            raise GateError(f"gate {gate_id}: schema must be openagents.gym.gate.v2")
        rule = document.get("rule")
        if not isinstance(rule, Mapping) or rule.get("decides") != "ext_eval":
            raise GateError(f"gate {gate_id}: the rule does not decide ext_eval")
        if "primary" in rule:
            raise GateError(f"gate {gate_id}: a cost-primary rule is not the correctness-primary rule")

        def bound(name: str) -> float:
            entry = rule.get(name)
            value = entry.get("value") if isinstance(entry, Mapping) else None
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise GateError(f"gate {gate_id}: rule.{name}.value must be a number")
            return float(value)

        min_runs = bound("min_runs")
        if not min_runs.is_integer():
            raise GateError(f"gate {gate_id}: rule.min_runs.value must be a whole number")
        return cls(
            id=gate_id,
            min_runs=int(min_runs),
            spread_multiple=bound("spread_multiple"),
            max_increase=bound("max_increase"),
        )


#: The gate the hosted runner always uses (runner.md §22).
EXT_EVAL_V2 = Gate(id="ext-eval-v2", min_runs=2, spread_multiple=1.0, max_increase=0.5)

PASSES = "subject_passes_at_least_as_many_cases"
KEPT = "subject_keeps_every_should_not_fire_case"
MORE = "subject_passes_more_cases"
GAIN = "score_gain_clears_the_spread"
CEILING = "cost_and_time_not_materially_worse"


@dataclass(frozen=True, slots=True)
class Decision:
    """The verdict and every criterion behind it, in the order judged."""

    verdict: Verdict
    criteria: tuple[Criterion, ...]


def judge(comparison: Comparison, gate: Gate = EXT_EVAL_V2) -> tuple[Criterion, ...]:
    """Every criterion of the gate over `comparison`, floors first."""
    criteria: list[Criterion] = []
    blocked: str | None = None
    if comparison.baseline_present:
        criteria.append(_passed("baseline_arm_ran", 1, "the cases ran with the extension and without it"))
    else:
        blocked = "no baseline arm ran, so there is nothing to compare with"
        criteria.append(_unverifiable("baseline_arm_ran", 1, blocked))
    if blocked is None:
        name = f"runs_per_arm>={gate.min_runs}"
        if comparison.runs < gate.min_runs:
            blocked = f"runs_per_arm is {comparison.runs}, below the floor of {gate.min_runs}"
            criteria.append(_unverifiable(name, 1, f"{blocked}, which is too few to tell"))
        else:
            criteria.append(_passed(name, 1, f"runs_per_arm is {comparison.runs}, at or above {gate.min_runs}"))
    if blocked is None:
        if comparison.cases == 0:
            blocked = "no case was scored in both arms"
            criteria.append(_unverifiable("compared_cases>=1", 1, blocked))
        else:
            criteria.append(_passed("compared_cases>=1", 1, f"{comparison.cases} cases scored in both arms"))
    if blocked is not None:
        for name, rank in ((PASSES, 1), (KEPT, 1), (MORE, 2), (GAIN, 2), (CEILING, 2)):
            criteria.append(_unverifiable(name, rank, f"not judged: {blocked}"))
        return tuple(criteria)

    subject, baseline, cases = comparison.subject_passed, comparison.baseline_passed, comparison.cases
    tally = f"{subject} of {cases} with the extension, {baseline} of {cases} without"
    criteria.append(Criterion(PASSES, 1, Judgement.FAILED if subject < baseline else Judgement.PASSED, tally))
    lost = comparison.should_not_fire_lost
    criteria.append(
        Criterion(
            KEPT,
            1,
            Judgement.FAILED if lost else Judgement.PASSED,
            "the subject lost should-not-fire cases the baseline passed: " + ", ".join(lost)
            if lost
            else "every should-not-fire case the baseline passed, the subject passed too",
        )
    )
    criteria.append(Criterion(MORE, 2, Judgement.PASSED if subject > baseline else Judgement.UNVERIFIABLE, tally))
    criteria.append(_score_gain(comparison.mean_score, gate))
    criteria.append(_ceiling(comparison, gate))
    return tuple(criteria)


def verdict_of(criteria: tuple[Criterion, ...]) -> Verdict:
    """Failed beats unverifiable beats passed."""
    judgements = {criterion.judgement for criterion in criteria}
    if Judgement.FAILED in judgements:
        return Verdict.FAIL
    if Judgement.UNVERIFIABLE in judgements:
        return Verdict.INCONCLUSIVE
    return Verdict.PASS


def decide(comparison: Comparison, gate: Gate = EXT_EVAL_V2) -> Verdict:
    """The gate's verdict over `comparison` (runner.md, "Verdict rule")."""
    return verdict_of(judge(comparison, gate))


def decision(comparison: Comparison, gate: Gate = EXT_EVAL_V2) -> Decision:
    """The verdict together with the criteria, for a report or page that says why."""
    criteria = judge(comparison, gate)
    return Decision(verdict=verdict_of(criteria), criteria=criteria)


def _score_gain(score: ArmMeasure, gate: Gate) -> Criterion:
    if score.subject is None or score.baseline is None or score.spread is None:
        return _unverifiable(GAIN, 2, "the mean score or its spread is unknown")
    gain = score.subject - score.baseline
    bound = gate.spread_multiple * score.spread
    return Criterion(
        GAIN,
        2,
        Judgement.PASSED if gain > bound else Judgement.UNVERIFIABLE,
        f"mean score {score.baseline:.4f} to {score.subject:.4f}, gain {gain:+.4f} "
        f"against a spread bound of {bound:.4f}",
    )


def _ceiling(comparison: Comparison, gate: Gate) -> Criterion:
    notes: list[str] = []
    worse = False
    for label, measure in (("cost", comparison.cost_usd), ("time", comparison.seconds)):
        if measure.subject is None or measure.baseline is None:
            notes.append(f"{label} unknown")
            continue
        spread = measure.spread if measure.spread is not None else 0.0
        ceiling = measure.baseline * (1 + gate.max_increase) + gate.spread_multiple * spread
        if measure.subject > ceiling:
            worse = True
        notes.append(f"{label} {measure.baseline:.4f} to {measure.subject:.4f} per attempt, ceiling {ceiling:.4f}")
    return Criterion(CEILING, 2, Judgement.UNVERIFIABLE if worse else Judgement.PASSED, "; ".join(notes))


def _passed(name: str, rank: int, detail: str) -> Criterion:
    return Criterion(name, rank, Judgement.PASSED, detail)


def _unverifiable(name: str, rank: int, detail: str) -> Criterion:
    return Criterion(name, rank, Judgement.UNVERIFIABLE, detail)
