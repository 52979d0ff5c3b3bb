"""Notes beside the verdict: time and cost changes in plain words (runner.md §13.9).

The `ext-eval-v2` gate never keeps an extension for being faster or cheaper, so a reader learns of such
a change here instead, separate from the verdict: `Faster: 12.0 s against 30.0 s per run`. The wording
follows the reference's bytes, without the full stop wire.md's example adds, and a change too small to
show in the printed precision gets no note (decisions.md, "Scores, verdict, notes and evidence"). Pure.
"""

from __future__ import annotations

from collections.abc import Callable

from eval_runner.engine.verdict.scores import ArmMeasure, Comparison

#: The hosted runner keeps at most this many notes (§22)…
MAX_NOTES = 4
#: …and drops any longer than this many characters.
MAX_NOTE_CHARS = 200


def notes(comparison: Comparison) -> tuple[str, ...]:
    """Every note the comparison supports, seconds then cost."""
    if not comparison.baseline_present:
        return ()
    found = [
        _note(comparison.seconds, "Faster", "Slower", lambda value: f"{value:.1f} s"),
        _note(comparison.cost_usd, "Cheaper", "Costlier", lambda value: f"${value:.4f}"),
    ]
    return tuple(note for note in found if note is not None)


def hosted_notes(comparison: Comparison) -> tuple[str, ...]:
    """The notes a hosted result carries: the first four, then any over 200 characters dropped."""
    return tuple(note for note in notes(comparison)[:MAX_NOTES] if len(note) <= MAX_NOTE_CHARS)


def _note(measure: ArmMeasure, lower: str, higher: str, show: Callable[[float], str]) -> str | None:
    with_, without = measure.subject, measure.baseline
    if with_ is None or without is None:
        return None
    threshold = measure.spread if measure.spread is not None else 0.0
    if abs(with_ - without) <= threshold or with_ == without:
        return None
    shown_with, shown_without = show(with_), show(without)
    if shown_with == shown_without:
        # "Slower: 0.3 s against 0.3 s" tells a person nothing; the reference writes it, we don't.
        return None
    word = lower if with_ < without else higher
    return f"{word}: {shown_with} against {shown_without} per run"
