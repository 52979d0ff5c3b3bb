"""report.html: one self-contained page; the verdict in words, the statistics beside it, everything escaped."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from eval_runner.engine.report.build import build_report
from eval_runner.engine.report.html import CaseRow, ReportPage, RunLine, render
from eval_runner.engine.report.inputs import RunSetup
from eval_runner.engine.verdict.gate import Verdict, decision
from eval_runner.engine.verdict.scores import Arm, CaseKind, GradedRun, OutcomeWord, PlannedCase, score_suite
from eval_runner.engine.verdict.statistics import evidence, strata_of
from tests.engine.report.test_build import TWO_CASES, attempt, better_attempts, inputs, write_cases

HOSTILE = "<script>alert('x')</script>"


@pytest.fixture
def evals(tmp_path: Path) -> Path:
    return write_cases(tmp_path / "evals", TWO_CASES)


def page_with(case_id: str, *, verdict: Verdict | None = None, partial: str | None = None) -> ReportPage:
    plan = (PlannedCase(case_id, CaseKind.SHOULD_FIRE, 2), PlannedCase("quiet", CaseKind.SHOULD_NOT_FIRE, 2))
    runs = [
        GradedRun(case.id, case.kind, arm, n, OutcomeWord.COMPLETED, score, score == 1.0, 0.01, 5.0)
        for case in plan
        for arm in Arm
        for n in (1, 2)
        for score in [1.0 if arm is Arm.SUBJECT or case.id == "quiet" else 0.0]
    ]
    scores = score_suite(plan, runs, baseline=True)
    decided = decision(scores.comparison)
    line = RunLine(Arm.SUBJECT, 1, "completed", None, True, 1.0, 0.01, 5.0, f"runs/{case_id}/subject-1/trajectory.json")
    return ReportPage(
        subject="00" * 32 + ":tool/tool",
        suite="ab" * 32 + ":tool-tests/suite",
        evaluator="cd" * 32,
        report_digest="sha256:" + "0" * 64,
        suite_digest="sha256:" + "1" * 64,
        gate_id="ext-eval-v2",
        gate_digest="sha256:" + "2" * 64,
        verdict=verdict or decided.verdict,
        criteria=decided.criteria,
        scores=scores,
        evidence=evidence(strata_of(scores)),
        notes=(f"Faster: {HOSTILE}",),
        limitations=(f"A limitation naming {HOSTILE}.",),
        partial=partial,
        cases=tuple(CaseRow(case, (line,)) for case in scores.cases),
    )


def test_every_text_is_escaped(evals: Path) -> None:
    html = render(page_with(HOSTILE, partial=HOSTILE))
    assert "<script" not in html
    assert HOSTILE not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    # Attribute values too: the trajectory link of a case named like that.
    assert 'href="runs/&lt;script&gt;' in html


@pytest.mark.parametrize(
    ("verdict", "word", "style"),
    [
        (Verdict.PASS, "Better", "good"),
        (Verdict.FAIL, "Worse", "bad"),
        (Verdict.INCONCLUSIVE, "No clear change", "mid"),
    ],
)
def test_the_verdict_is_in_words(verdict: Verdict, word: str, style: str) -> None:
    html = render(page_with("case", verdict=verdict))
    assert f'<p class="verdict {style}">{word}</p>' in html
    assert f"<title>Extension test: {word}</title>" in html


def test_the_page_is_self_contained_and_readable_on_a_phone() -> None:
    html = render(page_with("case"))
    assert html.startswith("<!doctype html>")
    assert '<meta name="viewport" content="width=device-width,initial-scale=1">' in html
    assert "<style>" in html
    for outside in ("<script", "<link", "<img", "<iframe", "src=", "url(", "@import", "http:", "https:", "//"):
        assert outside not in html, outside
    hrefs = re.findall(r'href="([^"]*)"', html)
    assert hrefs
    assert all(href.startswith("runs/") for href in hrefs)


def test_a_built_report_page_carries_the_verdict_the_table_and_the_statistics(evals: Path) -> None:
    built = build_report(inputs(evals))
    html = built.html.decode("utf-8")
    assert '<p class="verdict good">Better</p>' in html
    assert "Passes 2 of 2 tests with the extension, 1 of 2 without. Change in mean score: +0.50." in html
    # The per-case with/without table.
    assert "<th>With the extension</th><th>Without it</th><th>Change</th>" in html
    assert "3 of 3 runs · score 1.00" in html
    assert "0 of 3 runs · score 0.00" in html
    # The statistics beside the verdict.
    assert "<b>p = 0.050</b> that it helps" in html
    assert "<b>p = 1.000</b> that it harms" in html
    assert "Pass rate with − without: <b>+50 pp</b> (95 % interval" in html
    assert "Cases improved: <b>1 of 2</b>" in html
    assert "Smallest change this design can detect" in html
    # Notes, time and cost per arm, limitations.
    assert "<li>Faster: 24.2 s against 60.0 s per run</li>" in html
    assert "$0.0600" in html
    assert "72.6 s" in html
    assert "180.0 s" in html
    assert "overriding the cases&#x27; runs." in html
    assert built.report_ref.digest in html


def test_an_underpowered_design_says_so(evals: Path) -> None:
    attempts = tuple(a for a in better_attempts() if a.attempt == 1)
    built = build_report(inputs(evals, attempts, setup=RunSetup(runs=1)))
    html = built.html.decode("utf-8")
    assert '<b class="mid">Underpowered</b>: with these cases and runs, no result could reach p ≤ 0.05.' in html
    assert '<p class="verdict mid">No clear change</p>' in html


def test_a_page_without_a_baseline_shows_no_comparison(evals: Path) -> None:
    attempts = tuple(a for a in better_attempts() if a.arm is Arm.SUBJECT)
    built = build_report(inputs(evals, attempts, setup=RunSetup(runs=3, baseline=False)))
    html = built.html.decode("utf-8")
    assert "Beside the verdict" not in html
    assert "No run without it, so there is nothing to compare with." in html
    assert '<span class="muted">not run</span>' in html


def test_an_extra_limitation_and_a_partial_reason_are_escaped(evals: Path) -> None:
    attempts = list(better_attempts())
    attempts[0] = attempt("greeting", Arm.SUBJECT, 1, None, end=attempts[0].end, seconds=None, cost=None)
    built = build_report(
        dataclasses.replace(inputs(evals, tuple(attempts)), extra_limitations=(HOSTILE,), partial=HOSTILE)
    )
    html = built.html.decode("utf-8")
    assert "<script" not in html
    assert html.count("&lt;script&gt;") == 2
