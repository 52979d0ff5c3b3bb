"""The `ext-eval-v2` verdict: every branch of runner.md's "Verdict rule", and the gate file's bounds."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import pytest

from eval_runner.engine.verdict.gate import (
    CEILING,
    EXT_EVAL_V2,
    GAIN,
    KEPT,
    MORE,
    PASSES,
    Gate,
    GateError,
    Judgement,
    Verdict,
    decide,
    decision,
)
from eval_runner.engine.verdict.scores import ArmMeasure, Comparison
from tests.support.paths import TESTS

GATES = TESTS / "vectors" / "reference" / "gates"


def better(**changes: Any) -> Comparison:
    """A comparison that reads Better under ext-eval-v2; each test moves one thing."""
    base = Comparison(
        baseline_present=True,
        cases=4,
        runs=3,
        subject_passed=3,
        baseline_passed=1,
        should_not_fire_lost=(),
        mean_score=ArmMeasure(subject=0.8, baseline=0.4, spread=0.2),
        cost_usd=ArmMeasure(subject=0.012, baseline=0.010, spread=0.001),
        seconds=ArmMeasure(subject=40.0, baseline=30.0, spread=5.0),
    )
    return dataclasses.replace(base, **changes)


def judgement(cmp: Comparison, name: str) -> Judgement:
    return next(c.judgement for c in decision(cmp).criteria if c.name == name)


def test_the_reference_example_is_better() -> None:
    assert decide(better()) is Verdict.PASS
    assert all(c.judgement is Judgement.PASSED for c in decision(better()).criteria)


def test_verdict_words() -> None:
    assert [(v.value, v.word) for v in Verdict] == [
        ("pass", "Better"),
        ("fail", "Worse"),
        ("inconclusive", "No clear change"),
    ]


# --- rank 1 floors ---------------------------------------------------------------------------------


def test_no_baseline_is_inconclusive_even_with_everything_else_better() -> None:
    cmp = better(baseline_present=False)
    assert decide(cmp) is Verdict.INCONCLUSIVE
    criteria = decision(cmp).criteria
    assert criteria[0].name == "baseline_arm_ran"
    assert criteria[0].judgement is Judgement.UNVERIFIABLE
    assert all(c.judgement is Judgement.UNVERIFIABLE for c in criteria)
    assert all(c.detail.startswith("not judged: no baseline arm ran") for c in criteria[1:])


@pytest.mark.parametrize("runs", [0, 1])
def test_fewer_than_two_runs_is_inconclusive(runs: int) -> None:
    assert decide(better(runs=runs)) is Verdict.INCONCLUSIVE
    assert judgement(better(runs=runs), "runs_per_arm>=2") is Judgement.UNVERIFIABLE


def test_one_run_is_inconclusive_even_when_the_subject_passes_fewer() -> None:
    # The floor blocks everything after it, Worse included.
    assert decide(better(runs=1, subject_passed=0, baseline_passed=4)) is Verdict.INCONCLUSIVE
    assert decide(better(runs=1, should_not_fire_lost=("quiet",))) is Verdict.INCONCLUSIVE


def test_two_runs_meet_the_floor() -> None:
    assert decide(better(runs=2)) is Verdict.PASS
    assert judgement(better(runs=2), "runs_per_arm>=2") is Judgement.PASSED


def test_no_compared_case_is_inconclusive() -> None:
    cmp = better(cases=0, subject_passed=0, baseline_passed=1)
    assert decide(cmp) is Verdict.INCONCLUSIVE
    assert judgement(cmp, "compared_cases>=1") is Judgement.UNVERIFIABLE


# --- rank 1 judgements -----------------------------------------------------------------------------


def test_fewer_cases_passed_is_worse() -> None:
    cmp = better(subject_passed=1, baseline_passed=2)
    assert decide(cmp) is Verdict.FAIL
    assert judgement(cmp, PASSES) is Judgement.FAILED


def test_a_lost_should_not_fire_case_is_worse_even_with_more_passes() -> None:
    cmp = better(should_not_fire_lost=("small-talk",))
    assert decide(cmp) is Verdict.FAIL
    assert judgement(cmp, PASSES) is Judgement.PASSED
    assert judgement(cmp, KEPT) is Judgement.FAILED
    assert "small-talk" in next(c.detail for c in decision(cmp).criteria if c.name == KEPT)


def test_worse_beats_an_unknown_spread() -> None:
    cmp = better(subject_passed=0, mean_score=ArmMeasure(0.1, 0.4, None))
    assert decide(cmp) is Verdict.FAIL


# --- rank 2: the only way to Better ----------------------------------------------------------------


def test_equal_passes_are_inconclusive_however_large_the_score_gain() -> None:
    cmp = better(subject_passed=2, baseline_passed=2, mean_score=ArmMeasure(1.0, 0.0, 0.0))
    assert decide(cmp) is Verdict.INCONCLUSIVE
    assert judgement(cmp, PASSES) is Judgement.PASSED
    assert judgement(cmp, MORE) is Judgement.UNVERIFIABLE


def test_more_passes_but_a_gain_within_the_spread_is_inconclusive() -> None:
    # Binary-exact values: a gain of 0.25 equals one spread, which is not larger than it.
    cmp = better(mean_score=ArmMeasure(0.75, 0.5, 0.25))
    assert decide(cmp) is Verdict.INCONCLUSIVE
    assert judgement(cmp, GAIN) is Judgement.UNVERIFIABLE
    assert decide(better(mean_score=ArmMeasure(0.75, 0.25, 0.25))) is Verdict.PASS


@pytest.mark.parametrize("score", [ArmMeasure(0.8, 0.4, None), ArmMeasure(None, 0.4, 0.1), ArmMeasure(0.8, None, 0.1)])
def test_an_unknown_score_or_spread_is_inconclusive(score: ArmMeasure) -> None:
    cmp = better(mean_score=score)
    assert decide(cmp) is Verdict.INCONCLUSIVE
    assert judgement(cmp, GAIN) is Judgement.UNVERIFIABLE


def test_cost_above_the_ceiling_is_inconclusive() -> None:
    # Ceiling = 0.010 · 1.5 + 1.0 · 0.001 = 0.016.
    assert decide(better(cost_usd=ArmMeasure(0.016, 0.010, 0.001))) is Verdict.PASS
    cmp = better(cost_usd=ArmMeasure(0.0161, 0.010, 0.001))
    assert decide(cmp) is Verdict.INCONCLUSIVE
    assert judgement(cmp, CEILING) is Judgement.UNVERIFIABLE


def test_time_above_the_ceiling_is_inconclusive_and_an_unknown_spread_counts_as_zero() -> None:
    # Ceiling = 30 · 1.5 + 0 = 45.
    assert decide(better(seconds=ArmMeasure(45.0, 30.0, None))) is Verdict.PASS
    assert decide(better(seconds=ArmMeasure(45.5, 30.0, None))) is Verdict.INCONCLUSIVE
    # With a spread of 5 the same time is within 50.
    assert decide(better(seconds=ArmMeasure(45.5, 30.0, 5.0))) is Verdict.PASS


@pytest.mark.parametrize(
    "changes",
    [
        {"cost_usd": ArmMeasure(None, 0.010, None)},
        {"cost_usd": ArmMeasure(9.0, None, None)},
        {"seconds": ArmMeasure(None, None, None)},
        {"cost_usd": ArmMeasure(None, None, None), "seconds": ArmMeasure(999.0, None, None)},
    ],
)
def test_unknown_cost_or_time_does_not_block(changes: dict[str, ArmMeasure]) -> None:
    cmp = better(**changes)
    assert decide(cmp) is Verdict.PASS
    assert "unknown" in next(c.detail for c in decision(cmp).criteria if c.name == CEILING)


def test_faster_and_cheaper_alone_is_never_better() -> None:
    cmp = better(
        subject_passed=1,
        baseline_passed=1,
        mean_score=ArmMeasure(0.4, 0.4, 0.0),
        cost_usd=ArmMeasure(0.001, 0.010, 0.0),
        seconds=ArmMeasure(3.0, 30.0, 0.0),
    )
    assert decide(cmp) is Verdict.INCONCLUSIVE


def test_the_criteria_are_named_ranked_and_ordered() -> None:
    criteria = decision(better()).criteria
    assert [(c.name, c.rank) for c in criteria] == [
        ("baseline_arm_ran", 1),
        ("runs_per_arm>=2", 1),
        ("compared_cases>=1", 1),
        (PASSES, 1),
        (KEPT, 1),
        (MORE, 2),
        (GAIN, 2),
        (CEILING, 2),
    ]
    gain = criteria[6]
    assert gain.detail == "mean score 0.4000 to 0.8000, gain +0.4000 against a spread bound of 0.2000"


def test_decision_and_decide_agree() -> None:
    for cmp in (better(), better(runs=1), better(subject_passed=0), better(mean_score=ArmMeasure(0.5, 0.4, 0.2))):
        assert decision(cmp).verdict is decide(cmp)


def test_the_gate_bounds_are_read_from_the_gate() -> None:
    loose = Gate(id="loose", min_runs=1, spread_multiple=0.0, max_increase=10.0)
    cmp = better(runs=1, mean_score=ArmMeasure(0.41, 0.4, 0.2), cost_usd=ArmMeasure(0.1, 0.01, 0.0))
    assert decide(cmp) is Verdict.INCONCLUSIVE
    assert decide(cmp, loose) is Verdict.PASS


# --- the gate file ---------------------------------------------------------------------------------


def gate_file(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((GATES / name).read_bytes())
    return document


def test_the_vendored_gate_files_are_the_reference_bytes() -> None:
    expected = {
        "ext-eval-v2.json": "73e17f106b1e445884f93741416cafa63ce4f59b4b6ab3074481d6754073ad39",
        "ext-eval-v1.json": "4d01333575a8c27f06e59ace8c98d54a5ee55bf6211731fe3aa5e344ef79bfd3",
        "ext-eval-cost-v1.json": "5f910c3b848a926a120b6d98b2d400efde1cd97d0eaf28cc67c9303cfdc4db51",
    }
    assert {name: hashlib.sha256((GATES / name).read_bytes()).hexdigest() for name in expected} == expected


def test_ext_eval_v2_matches_its_gate_file() -> None:
    assert Gate.from_document(gate_file("ext-eval-v2.json")) == EXT_EVAL_V2
    assert (EXT_EVAL_V2.min_runs, EXT_EVAL_V2.spread_multiple, EXT_EVAL_V2.max_increase) == (2, 1.0, 0.5)


@pytest.mark.parametrize("name", ["ext-eval-v1.json", "ext-eval-cost-v1.json"])
def test_other_extension_rules_are_refused(name: str) -> None:
    with pytest.raises(GateError):
        Gate.from_document(gate_file(name))


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.update(schema="openagents.gym.gate.v1"),
        lambda d: d["rule"].update(decides="chat_router"),
        lambda d: d["rule"]["min_runs"].update(value=1.5),
        lambda d: d["rule"]["spread_multiple"].update(value="1"),
        lambda d: d["rule"]["max_increase"].update(value=-0.5),
        lambda d: d.pop("id"),
    ],
)
def test_malformed_gate_documents_are_refused(edit: Any) -> None:
    document = gate_file("ext-eval-v2.json")
    edit(document)
    with pytest.raises(GateError):
        Gate.from_document(document)
