"""Evidence beside the verdict: how sure can anyone be that the extension helps? (statistics.md §C3)

The gate (`gate.py`) decides with the reference's spread rule; this module adds the numbers a careful
reader wants next to it, computed exactly at these tiny sizes (≤ 8 cases, 1–3 runs per arm): the exact
stratified permutation test (`p_helps`, `p_harms` and their mid-p versions, with integers until the end),
Δ with its 95 % Newcombe hybrid-score interval (Newcombe 1998, method 10, from two Wilson intervals),
breadth, and the minimum detectable effect, found by a search pruned on `p_helps` never rising when one
case gains a pass. What they count and how, and why they never change the verdict, are in decisions.md
("Scores, verdict, notes and evidence"). Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from math import comb
from statistics import NormalDist

from eval_runner.engine.verdict.scores import Scores

#: The significance level the evidence is read at.
ALPHA = Fraction(1, 20)
#: Confidence of the interval on Δ.
CONFIDENCE = 0.95


@dataclass(frozen=True, slots=True)
class Stratum:
    """One case's passes and scored runs in each arm."""

    case: str
    passes_with: int
    runs_with: int
    passes_without: int
    runs_without: int

    def __post_init__(self) -> None:
        for passes, runs in ((self.passes_with, self.runs_with), (self.passes_without, self.runs_without)):
            if runs < 0 or not 0 <= passes <= runs:
                raise ValueError(f"case {self.case}: passes must be from 0 to the runs ({passes} of {runs})")

    @property
    def improved(self) -> bool:
        return self.passes_with * self.runs_without > self.passes_without * self.runs_with

    @property
    def worsened(self) -> bool:
        return self.passes_with * self.runs_without < self.passes_without * self.runs_with


def strata_of(scores: Scores) -> tuple[Stratum, ...]:
    """The compared cases of a scored suite, as strata (scored runs and passes per arm)."""
    return tuple(
        Stratum(
            case=case.id,
            passes_with=case.subject.runs_passed,
            runs_with=case.subject.scored,
            passes_without=case.baseline.runs_passed,
            runs_without=case.baseline.scored,
        )
        for case in scores.cases
        if case.compared and case.baseline is not None
    )


# --- the exact stratified test ---------------------------------------------------------------------


def _weights(runs_with: int, runs_without: int, total_passes: int) -> list[int]:
    """Integer weights C(t, k)·C(N − t, n − k) of X = k for k = 0..n; they sum to C(N, n)."""
    others = runs_with + runs_without - total_passes
    return [comb(total_passes, k) * comb(others, runs_with - k) for k in range(runs_with + 1)]


def _convolve(left: Sequence[int], right: Sequence[int]) -> list[int]:
    out = [0] * (len(left) + len(right) - 1)
    for i, a in enumerate(left):
        if a:
            for j, b in enumerate(right):
                out[i + j] += a * b
    return out


def _denominator(strata: Sequence[Stratum]) -> int:
    return math.prod(comb(s.runs_with + s.runs_without, s.runs_with) for s in strata)


def null_distribution(strata: Sequence[Stratum]) -> tuple[Fraction, ...]:
    """P(S = s) for s = 0..Σ runs_with under no effect, conditional on each case's total passes."""
    weights = [1]
    for stratum in strata:
        weights = _convolve(weights, _weights(stratum.runs_with, stratum.runs_without, _total(stratum)))
    denominator = _denominator(strata)
    return tuple(Fraction(weight, denominator) for weight in weights)


@dataclass(frozen=True, slots=True)
class ExactTest:
    """The exact stratified permutation test's one-sided p-values, exact, and the observed S."""

    observed: int
    p_helps: Fraction
    p_harms: Fraction
    p_helps_mid: Fraction
    p_harms_mid: Fraction


def exact_test(strata: Sequence[Stratum]) -> ExactTest:
    """One-sided p for "helps" P(S ≥ s_obs) and "harms" P(S ≤ s_obs), with mid-p, exactly."""
    distribution = null_distribution(strata)
    observed = sum(stratum.passes_with for stratum in strata)
    at = distribution[observed]
    above = sum(distribution[observed + 1 :], Fraction(0))
    below = sum(distribution[:observed], Fraction(0))
    return ExactTest(
        observed=observed,
        p_helps=above + at,
        p_harms=below + at,
        p_helps_mid=above + at / 2,
        p_harms_mid=below + at / 2,
    )


def _total(stratum: Stratum) -> int:
    return stratum.passes_with + stratum.passes_without


# --- Δ and its interval ----------------------------------------------------------------------------


def wilson(passes: int, runs: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval for a binomial proportion, clamped to [0, 1]."""
    if runs <= 0 or not 0 <= passes <= runs:
        raise ValueError(f"a Wilson interval needs 0 ≤ passes ≤ runs and runs > 0 ({passes} of {runs})")
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    z2 = z * z
    denominator = runs + z2
    centre = (passes + z2 / 2) / denominator
    half = z * math.sqrt(passes * (runs - passes) / runs + z2 / 4) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe(
    passes_with: int, runs_with: int, passes_without: int, runs_without: int, confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """Δ = p_with − p_without and its Newcombe hybrid-score interval (1998, method 10): (Δ, low, high)."""
    p1, p2 = passes_with / runs_with, passes_without / runs_without
    low1, high1 = wilson(passes_with, runs_with, confidence)
    low2, high2 = wilson(passes_without, runs_without, confidence)
    delta = p1 - p2
    low = delta - math.sqrt((p1 - low1) ** 2 + (high2 - p2) ** 2)
    high = delta + math.sqrt((high1 - p1) ** 2 + (p2 - low2) ** 2)
    return delta, max(-1.0, low), min(1.0, high)


# --- the minimum detectable effect -----------------------------------------------------------------


def min_detectable_effect(strata: Sequence[Stratum], alpha: Fraction = ALPHA) -> float | None:
    """The smallest pooled Δ this design could show at `p_helps` ≤ α, or None (see the module doc)."""
    runs_with = sum(s.runs_with for s in strata)
    runs_without = sum(s.runs_without for s in strata)
    if runs_with == 0 or runs_without == 0:
        return None
    passes = _fewest_significant_passes(strata, alpha)
    if passes is None:
        return None
    return passes / runs_with - sum(s.passes_without for s in strata) / runs_without


def _fewest_significant_passes(strata: Sequence[Stratum], alpha: Fraction) -> int | None:
    """The least Σx_i over with-arm outcomes whose exact p_helps ≤ α, or None when none reaches it."""
    # Identical strata are exchangeable: enumerate their outcomes as non-decreasing runs only.
    kinds = sorted(((s.runs_with, s.runs_without, s.passes_without) for s in strata), reverse=True)
    # laws[i][x]: the weights of stratum i's X when x of its with-arm runs pass.
    laws = [[_weights(n, m, x + y) for x in range(n + 1)] for n, m, y in kinds]
    count = len(kinds)
    # best_rest[i]: the law of Σ over strata i.. when every remaining with-arm run passes.
    best_rest: list[list[int]] = [[1] for _ in range(count + 1)]
    for i in range(count - 1, -1, -1):
        best_rest[i] = _convolve(laws[i][kinds[i][0]], best_rest[i + 1])
    most_rest = [sum(n for n, _, _ in kinds[i:]) for i in range(count + 1)]
    # p ≤ α ⇔ tail · α.denominator ≤ α.numerator · Π C(N_i, n_i).
    bound = alpha.numerator * math.prod(comb(n + m, n) for n, m, _ in kinds)

    def significant(law: Sequence[int], observed: int) -> bool:
        return sum(law[observed:]) * alpha.denominator <= bound

    best: int | None = None

    def search(i: int, law: list[int], passes: int, floor: int) -> None:
        nonlocal best
        if best is not None and passes >= best:
            return
        # Even every remaining run passing cannot reach α: nothing below this node can.
        if not significant(_convolve(law, best_rest[i]), passes + most_rest[i]):
            return
        if i == count:
            best = passes
            return
        same_as_next = i + 1 < count and kinds[i + 1] == kinds[i]
        for x in range(floor, kinds[i][0] + 1):
            search(i + 1, _convolve(law, laws[i][x]), passes + x, x if same_as_next else 0)

    search(0, [1], 0, 0)
    return best


# --- the evidence record ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Evidence:
    """The numbers written as `comparison` measurements beside the verdict.

    Rates and Δ are proportions (−1..1); `delta_*` are absent when an arm has no scored run, and
    `min_detectable_effect` is absent when the design is underpowered.
    """

    cases: int
    runs_with: int
    runs_without: int
    passes_with: int
    passes_without: int
    p_helps: float
    p_harms: float
    p_helps_mid: float
    p_harms_mid: float
    delta_pass_rate: float | None
    delta_low_95: float | None
    delta_high_95: float | None
    cases_improved: int
    cases_worsened: int
    min_detectable_effect: float | None

    @property
    def underpowered(self) -> bool:
        """No improvement in the subject arm could have reached significance in this design."""
        return self.min_detectable_effect is None

    def as_measurements(self) -> tuple[tuple[str, float | None, int], ...]:
        """(metric, value, denominator) triples for the report's `comparison` arm.

        Denominators: the compared cases for the p-values, breadth and the detectable effect; the
        pooled scored runs of both arms for Δ and its interval.
        """
        runs = self.runs_with + self.runs_without
        return (
            ("p_helps", self.p_helps, self.cases),
            ("p_harms", self.p_harms, self.cases),
            ("p_helps_mid", self.p_helps_mid, self.cases),
            ("p_harms_mid", self.p_harms_mid, self.cases),
            ("delta_pass_rate", self.delta_pass_rate, runs),
            ("delta_low_95", self.delta_low_95, runs),
            ("delta_high_95", self.delta_high_95, runs),
            ("cases_improved", self.cases_improved, self.cases),
            ("cases_worsened", self.cases_worsened, self.cases),
            ("min_detectable_effect", self.min_detectable_effect, self.cases),
        )


def evidence(strata: Sequence[Stratum], alpha: Fraction = ALPHA) -> Evidence:
    """Everything above for one set of strata (usually `strata_of(scores)`)."""
    test = exact_test(strata)
    runs_with = sum(s.runs_with for s in strata)
    runs_without = sum(s.runs_without for s in strata)
    passes_with = sum(s.passes_with for s in strata)
    passes_without = sum(s.passes_without for s in strata)
    delta: float | None = None
    low: float | None = None
    high: float | None = None
    if runs_with > 0 and runs_without > 0:
        delta, low, high = newcombe(passes_with, runs_with, passes_without, runs_without)
    return Evidence(
        cases=len(strata),
        runs_with=runs_with,
        runs_without=runs_without,
        passes_with=passes_with,
        passes_without=passes_without,
        p_helps=float(test.p_helps),
        p_harms=float(test.p_harms),
        p_helps_mid=float(test.p_helps_mid),
        p_harms_mid=float(test.p_harms_mid),
        delta_pass_rate=delta,
        delta_low_95=low,
        delta_high_95=high,
        cases_improved=sum(1 for s in strata if s.improved),
        cases_worsened=sum(1 for s in strata if s.worsened),
        min_detectable_effect=min_detectable_effect(strata, alpha),
    )
