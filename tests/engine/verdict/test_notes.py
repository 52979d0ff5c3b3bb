"""Notes beside the verdict (runner.md §13.9): time then cost, in plain words, only past the spread."""

from __future__ import annotations

import dataclasses

import pytest

from eval_runner.engine.verdict.notes import MAX_NOTE_CHARS, hosted_notes, notes
from eval_runner.engine.verdict.scores import ArmMeasure, Comparison

UNKNOWN = ArmMeasure(None, None, None)


def comparison(seconds: ArmMeasure = UNKNOWN, cost: ArmMeasure = UNKNOWN, *, baseline: bool = True) -> Comparison:
    return Comparison(
        baseline_present=baseline,
        cases=2,
        runs=3,
        subject_passed=1,
        baseline_passed=1,
        should_not_fire_lost=(),
        mean_score=ArmMeasure(0.5, 0.5, 0.0),
        cost_usd=cost,
        seconds=seconds,
    )


def test_the_wire_example_reads_as_the_reference_writes_it() -> None:
    assert notes(comparison(seconds=ArmMeasure(12.0, 30.0, 2.0))) == ("Faster: 12.0 s against 30.0 s per run",)


def test_seconds_come_before_cost() -> None:
    cmp = comparison(seconds=ArmMeasure(31.26, 17.0, 1.0), cost=ArmMeasure(0.001, 0.002, 0.0))
    assert notes(cmp) == (
        "Slower: 31.3 s against 17.0 s per run",
        "Cheaper: $0.0010 against $0.0020 per run",
    )


def test_costlier() -> None:
    assert notes(comparison(cost=ArmMeasure(0.03456, 0.01, None))) == ("Costlier: $0.0346 against $0.0100 per run",)


def test_no_baseline_means_no_notes() -> None:
    assert notes(comparison(seconds=ArmMeasure(12.0, 30.0, 2.0), baseline=False)) == ()


@pytest.mark.parametrize(
    "seconds",
    [
        ArmMeasure(12.0, 30.0, 18.0),  # the change equals the spread: not past it
        ArmMeasure(12.0, 30.0, 20.0),  # inside the spread
        ArmMeasure(30.0, 30.0, None),  # no change
        ArmMeasure(None, 30.0, 0.0),  # one arm unmeasured
        ArmMeasure(12.0, None, 0.0),
    ],
)
def test_no_note_within_the_spread_or_without_both_arms(seconds: ArmMeasure) -> None:
    assert notes(comparison(seconds=seconds)) == ()


def test_an_unknown_spread_counts_as_zero() -> None:
    assert notes(comparison(seconds=ArmMeasure(30.05, 30.0, None))) == ("Slower: 30.1 s against 30.0 s per run",)


def test_hosted_notes_drop_any_over_200_characters() -> None:
    huge = ArmMeasure(1e200, 1.0, None)  # a hundred-digit time, printed in full
    cmp = comparison(seconds=huge, cost=ArmMeasure(0.001, 0.002, 0.0))
    assert len(notes(cmp)[0]) > MAX_NOTE_CHARS
    assert hosted_notes(cmp) == ("Cheaper: $0.0010 against $0.0020 per run",)
    fine = dataclasses.replace(cmp, seconds=ArmMeasure(1.0, 2.0, 0.0))
    assert hosted_notes(fine) == notes(fine)
    assert all(len(note) <= MAX_NOTE_CHARS for note in hosted_notes(fine))


def test_a_change_too_small_to_print_gets_no_note() -> None:
    # Past a zero spread, but both print as 0.3 s: a note would read "Slower: 0.3 s against 0.3 s".
    assert notes(comparison(seconds=ArmMeasure(0.31, 0.29, 0.0))) == ()
    assert notes(comparison(cost=ArmMeasure(0.00101, 0.00099, 0.0))) == ()
