"""The evidence beside the verdict: statistics.md §C2's worked examples, Newcombe's published intervals,
brute-force checks of the exact test and the detectable effect, and properties that must always hold."""

from __future__ import annotations

import itertools
from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eval_runner.engine.verdict.scores import Arm, CaseKind, GradedRun, OutcomeWord, PlannedCase, score_suite
from eval_runner.engine.verdict.statistics import (
    ALPHA,
    Stratum,
    evidence,
    exact_test,
    min_detectable_effect,
    newcombe,
    null_distribution,
    strata_of,
    wilson,
)


def cases(count: int, passes_with: int, passes_without: int, runs: int = 3) -> list[Stratum]:
    return [Stratum(f"c{i}", passes_with, runs, passes_without, runs) for i in range(count)]


# --- statistics.md §C2, worked examples (one-sided p; mid-p in brackets) -----------------------------


def test_one_case_all_against_none_just_reaches_five_percent() -> None:
    tied = cases(4, 3, 3) + cases(3, 0, 0)
    test = exact_test(cases(1, 3, 0) + tied)
    assert test.p_helps == Fraction(1, 20)  # 0.050
    assert test.p_helps_mid == Fraction(1, 40)  # (0.025)


def test_two_cases_all_against_none() -> None:
    assert round(float(exact_test(cases(2, 3, 0)).p_helps), 4) == 0.0025


@pytest.mark.parametrize("tied", [(2, 2), (1, 1)])
def test_four_cases_three_against_one_with_four_informative_ties(tied: tuple[int, int]) -> None:
    strata = cases(4, 3, 1) + cases(4, *tied)
    assert round(float(exact_test(strata).p_helps), 4) == 0.0235


@pytest.mark.parametrize("others", [[], cases(4, 3, 3), cases(4, 0, 0)])
def test_four_cases_three_against_one_alone_or_with_uninformative_ties(others: list[Stratum]) -> None:
    assert round(float(exact_test(cases(4, 3, 1) + others).p_helps), 4) == 0.0016


def test_eight_cases_two_against_one() -> None:
    assert round(float(exact_test(cases(8, 2, 1)).p_helps), 4) == 0.0309


def test_fifteen_against_eight_spread_evenly() -> None:
    test = exact_test(cases(7, 2, 1) + cases(1, 1, 1))
    assert round(float(test.p_helps), 3) == 0.054
    assert round(float(test.p_helps_mid), 3) == 0.035


# --- the exact test against brute force ------------------------------------------------------------


def brute_force_null(strata: list[Stratum]) -> dict[int, Fraction]:
    """Every equally likely relabelling of each case's runs between the arms, enumerated."""
    per_case: list[Counter[int]] = []
    for s in strata:
        outcomes = [1] * (s.passes_with + s.passes_without) + [0] * (
            s.runs_with + s.runs_without - s.passes_with - s.passes_without
        )
        per_case.append(
            Counter(
                sum(outcomes[i] for i in chosen) for chosen in itertools.combinations(range(len(outcomes)), s.runs_with)
            )
        )
    total: Counter[int] = Counter({0: 1})
    for counts in per_case:
        step: Counter[int] = Counter()
        for a, wa in total.items():
            for b, wb in counts.items():
                step[a + b] += wa * wb
        total = step
    weight = sum(total.values())
    return {s: Fraction(w, weight) for s, w in total.items()}


@pytest.mark.parametrize(
    "strata",
    [
        cases(3, 2, 1),
        [Stratum("a", 3, 3, 0, 2), Stratum("b", 1, 2, 2, 3), Stratum("c", 0, 1, 1, 1)],
        [Stratum("a", 2, 3, 2, 3), Stratum("b", 0, 3, 3, 3)],
        [Stratum("a", 1, 2, 0, 0)],  # no baseline runs: S is fixed
    ],
)
def test_the_null_distribution_matches_enumeration(strata: list[Stratum]) -> None:
    exact = null_distribution(strata)
    brute = brute_force_null(strata)
    assert {s: p for s, p in enumerate(exact) if p} == brute
    assert sum(exact) == 1
    observed = sum(s.passes_with for s in strata)
    assert exact_test(strata).p_helps == sum(p for s, p in brute.items() if s >= observed)
    assert exact_test(strata).p_harms == sum(p for s, p in brute.items() if s <= observed)


def test_no_strata_give_no_evidence_either_way() -> None:
    test = exact_test([])
    assert (test.p_helps, test.p_harms) == (Fraction(1), Fraction(1))
    found = evidence([])
    assert found.delta_pass_rate is None
    assert found.delta_low_95 is None
    assert found.underpowered


def test_swapping_the_arms_swaps_helps_and_harms() -> None:
    strata = [Stratum("a", 3, 3, 1, 3), Stratum("b", 0, 2, 2, 3), Stratum("c", 2, 3, 2, 2)]
    swapped = [Stratum(s.case, s.passes_without, s.runs_without, s.passes_with, s.runs_with) for s in strata]
    one, other = exact_test(strata), exact_test(swapped)
    assert one.p_helps != one.p_harms
    assert (one.p_helps, one.p_harms) == (other.p_harms, other.p_helps)
    assert (one.p_helps_mid, one.p_harms_mid) == (other.p_harms_mid, other.p_helps_mid)


def test_harm_is_seen_too() -> None:
    assert exact_test(cases(2, 0, 3)).p_harms == Fraction(1, 400)


# --- Δ and the Newcombe interval -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("with_", "without", "delta", "low", "high"),
    [
        (18, 12, 25, -2, 48),  # statistics.md §C2, 24 vs 24
        (20, 8, 50, 22, 68),
        (12, 12, 0, -26, 26),
    ],
)
def test_newcombe_at_24_against_24(with_: int, without: int, delta: int, low: int, high: int) -> None:
    found = newcombe(with_, 24, without, 24)
    assert [round(100 * v) for v in found] == pytest.approx([delta, low, high], abs=1)


@pytest.mark.parametrize(
    ("counts", "low", "high"),
    [
        ((56, 70, 48, 80), 0.0524, 0.3339),  # Newcombe 1998, Statistics in Medicine 17:873, Table II
        ((9, 10, 3, 10), 0.1705, 0.8090),
        ((6, 7, 2, 7), 0.0582, 0.8062),
        ((5, 56, 0, 29), -0.0381, 0.1926),
    ],
)
def test_newcombe_reproduces_the_published_method_10_intervals(
    counts: tuple[int, int, int, int], low: float, high: float
) -> None:
    _, found_low, found_high = newcombe(*counts)
    assert (round(found_low, 4), round(found_high, 4)) == (low, high)


def test_wilson_interval_known_values() -> None:
    assert tuple(round(v, 4) for v in wilson(81, 263)) == (0.2553, 0.3662)
    assert tuple(round(v, 4) for v in wilson(0, 10)) == (0.0, 0.2775)
    with pytest.raises(ValueError, match="Wilson"):
        wilson(1, 0)


# --- the minimum detectable effect -----------------------------------------------------------------


def brute_force_mde(strata: list[Stratum]) -> float | None:
    runs_with = sum(s.runs_with for s in strata)
    rate_without = sum(s.passes_without for s in strata) / sum(s.runs_without for s in strata)
    best: int | None = None
    for xs in itertools.product(*(range(s.runs_with + 1) for s in strata)):
        trial = [
            Stratum(s.case, x, s.runs_with, s.passes_without, s.runs_without) for s, x in zip(strata, xs, strict=True)
        ]
        if exact_test(trial).p_helps <= ALPHA and (best is None or sum(xs) < best):
            best = sum(xs)
    return None if best is None else best / runs_with - rate_without


@pytest.mark.parametrize(
    "strata",
    [
        cases(1, 0, 0),  # one case can reach 0.05 only by 3/3 against 0/3
        cases(2, 0, 1),
        cases(4, 0, 2),
        cases(3, 0, 3),  # a ceiling: nothing can improve
        [Stratum("a", 0, 3, 0, 3), Stratum("b", 0, 2, 1, 3), Stratum("c", 0, 3, 2, 2), Stratum("d", 0, 1, 0, 1)],
        [Stratum("a", 0, 3, 1, 3), Stratum("b", 0, 3, 1, 3), Stratum("c", 0, 3, 0, 2), Stratum("d", 0, 3, 3, 3)],
    ],
)
def test_the_detectable_effect_matches_an_exhaustive_search(strata: list[Stratum]) -> None:
    assert min_detectable_effect(strata) == brute_force_mde(strata)


def test_the_detectable_effect_examples() -> None:
    # One case at 0/3 needs all three passes with the extension: +100 pp on its own.
    assert min_detectable_effect(cases(1, 0, 0)) == 1.0
    # Eight cases at 0/3: one of them going 3/3 is enough (p = 0.05): 3 of 24 = +12.5 pp.
    assert min_detectable_effect(cases(8, 0, 0)) == 0.125
    # Four cases alone can still reach 0.05 through one case: 3 of 12.
    assert min_detectable_effect(cases(4, 0, 0)) == 0.25


@pytest.mark.parametrize("strata", [cases(8, 3, 3), cases(7, 3, 3) + cases(1, 3, 2), cases(3, 1, 1, runs=1), []])
def test_an_underpowered_design_says_so(strata: list[Stratum]) -> None:
    assert min_detectable_effect(strata) is None
    assert evidence(strata).underpowered


def test_the_detectable_effect_is_a_property_of_the_design_not_of_the_result() -> None:
    design = [Stratum("a", 0, 3, 1, 3), Stratum("b", 0, 3, 0, 3), Stratum("c", 0, 3, 2, 3)]
    result = [Stratum(s.case, 3, 3, s.passes_without, 3) for s in design]
    assert min_detectable_effect(design) == min_detectable_effect(result)


# --- the evidence record ---------------------------------------------------------------------------


def test_evidence_for_a_suite() -> None:
    strata = cases(4, 3, 1) + cases(2, 2, 2) + [Stratum("w", 0, 3, 2, 3)]
    found = evidence(strata)
    assert (found.cases, found.runs_with, found.runs_without) == (7, 21, 21)
    assert (found.passes_with, found.passes_without) == (16, 10)
    assert (found.cases_improved, found.cases_worsened) == (4, 1)
    assert found.delta_pass_rate == pytest.approx(6 / 21)
    assert found.delta_low_95 is not None
    assert found.delta_high_95 is not None
    assert found.delta_low_95 < 6 / 21 < found.delta_high_95
    assert found.p_helps == pytest.approx(float(exact_test(strata).p_helps))
    assert not found.underpowered


def test_breadth_compares_rates_when_run_counts_differ() -> None:
    # 2 of 3 against 1 of 1 is a lower rate with the extension, though more passes.
    found = evidence([Stratum("a", 2, 3, 1, 1), Stratum("b", 1, 2, 1, 3)])
    assert (found.cases_improved, found.cases_worsened) == (1, 1)


def test_measurements_name_every_metric_with_its_denominator() -> None:
    found = evidence(cases(2, 3, 0) + cases(1, 1, 1))
    rows = {metric: (value, denominator) for metric, value, denominator in found.as_measurements()}
    assert list(rows) == [
        "p_helps",
        "p_harms",
        "p_helps_mid",
        "p_harms_mid",
        "delta_pass_rate",
        "delta_low_95",
        "delta_high_95",
        "cases_improved",
        "cases_worsened",
        "min_detectable_effect",
    ]
    assert rows["p_helps"] == (found.p_helps, 3)
    assert rows["delta_pass_rate"][0] == pytest.approx(6 / 9)
    assert rows["delta_pass_rate"][1] == 18
    assert rows["cases_improved"] == (2, 3)
    assert rows["min_detectable_effect"][1] == 3


def test_strata_come_from_the_compared_cases_scored_runs() -> None:
    planned = [
        PlannedCase("a", CaseKind.SHOULD_FIRE, 3),
        PlannedCase("b", CaseKind.SHOULD_FIRE, 3),
        PlannedCase("only", CaseKind.SHOULD_FIRE, 3, subject_only=True),
    ]

    def run(case: str, arm: Arm, attempt: int, passed: bool | None) -> GradedRun:
        if passed is None:
            return GradedRun(case, CaseKind.SHOULD_FIRE, arm, attempt, OutcomeWord.UNKNOWN, None, None, None, None)
        return GradedRun(
            case, CaseKind.SHOULD_FIRE, arm, attempt, OutcomeWord.COMPLETED, float(passed), passed, 0.0, 1.0
        )

    pattern: dict[tuple[str, Arm], list[bool | None]] = {
        ("a", Arm.SUBJECT): [True, True, None],
        ("a", Arm.BASELINE): [False, False, True],
        ("b", Arm.SUBJECT): [True, True, True],
        ("b", Arm.BASELINE): [True, True, True],
        ("only", Arm.SUBJECT): [True, True, True],
    }
    runs = [run(case, arm, i + 1, p) for (case, arm), passes in pattern.items() for i, p in enumerate(passes)]
    strata = strata_of(score_suite(planned, runs, baseline=True))
    assert strata == (Stratum("a", 2, 2, 1, 3), Stratum("b", 3, 3, 3, 3))


# --- properties ------------------------------------------------------------------------------------


@st.composite
def strata_lists(draw: st.DrawFn) -> list[Stratum]:
    count = draw(st.integers(min_value=0, max_value=8))
    out = []
    for i in range(count):
        runs_with = draw(st.integers(min_value=1, max_value=3))
        runs_without = draw(st.integers(min_value=1, max_value=3))
        out.append(
            Stratum(
                f"c{i}",
                draw(st.integers(min_value=0, max_value=runs_with)),
                runs_with,
                draw(st.integers(min_value=0, max_value=runs_without)),
                runs_without,
            )
        )
    return out


@settings(max_examples=150, deadline=None)
@given(strata_lists())
def test_p_values_are_probabilities_that_overlap_at_the_observation(strata: list[Stratum]) -> None:
    test = exact_test(strata)
    for p in (test.p_helps, test.p_harms, test.p_helps_mid, test.p_harms_mid):
        assert 0 <= p <= 1
    at = null_distribution(strata)[test.observed]
    assert test.p_helps + test.p_harms == 1 + at >= 1
    assert test.p_helps_mid + test.p_harms_mid == 1
    assert test.p_helps_mid <= test.p_helps


@settings(max_examples=150, deadline=None)
@given(strata_lists())
def test_the_interval_contains_delta_and_stays_within_one(strata: list[Stratum]) -> None:
    found = evidence(strata)
    if not strata:
        return
    assert found.delta_pass_rate is not None
    assert found.delta_low_95 is not None
    assert found.delta_high_95 is not None
    assert -1.0 <= found.delta_low_95 <= found.delta_pass_rate <= found.delta_high_95 <= 1.0


@settings(max_examples=100, deadline=None)
@given(strata_lists(), st.data())
def test_one_more_pass_with_the_extension_never_raises_p_helps(strata: list[Stratum], data: st.DataObject) -> None:
    # The detectable-effect search prunes on this monotonicity; check it rather than trust it.
    raisable = [i for i, s in enumerate(strata) if s.passes_with < s.runs_with]
    if not raisable:
        return
    i = data.draw(st.sampled_from(raisable))
    s = strata[i]
    raised = [
        *strata[:i],
        Stratum(s.case, s.passes_with + 1, s.runs_with, s.passes_without, s.runs_without),
        *strata[i + 1 :],
    ]
    assert exact_test(raised).p_helps <= exact_test(strata).p_helps


@settings(max_examples=60, deadline=None)
@given(strata_lists().filter(lambda strata: len(strata) <= 4))
def test_the_detectable_effect_matches_exhaustive_search_on_random_designs(strata: list[Stratum]) -> None:
    if not strata:
        assert min_detectable_effect(strata) is None
        return
    assert min_detectable_effect(strata) == brute_force_mde(strata)
