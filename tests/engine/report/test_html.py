"""report.html: one self-contained page from the shared view; the verdict in words, the statistics beside it,
a chart per case, a banner for stand-ins, and every text escaped by the template engine."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from eval_runner.engine.report.build import BuiltReport, build_report
from eval_runner.engine.report.html import ReportPage, RunLine, render
from eval_runner.engine.report.inputs import Attempt, RunSetup, StandIn
from eval_runner.engine.report.view import ReportView
from eval_runner.engine.verdict.gate import Criterion, Judgement, Verdict
from eval_runner.engine.verdict.scores import Arm
from tests.support.report_inputs import AUTHOR, attempt, better_attempts, inputs

HOSTILE = "<script>alert('x')</script>"
ESCAPED = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"
#: What the reference's `the_html_is_self_contained` forbids, and more.
OUTSIDE = (
    "http://",
    "https://",
    "//cdn",
    "<script",
    "<link",
    "<img",
    "<iframe",
    "@import",
    "url(",
    " src=",
    "src=",
    "http:",
    "https:",
    "//",
)


def page_of(built: BuiltReport, view: ReportView | None = None) -> ReportPage:
    """The page `build_report` rendered, rebuilt from its view (or from `view`)."""
    html = built.html.decode("utf-8")
    digest = re.search(r"Report <code>(sha256:[0-9a-f]{64})</code>", html)
    assert digest is not None
    return ReportPage(
        view=built.view if view is None else view,
        subject=built.report.subject.definition.id,
        suite=f"{AUTHOR}:repo-map-tests/suite",
        evaluator=built.report.evaluator,
        report_digest=digest.group(1),
        suite_digest=built.report.suite.digest,
        gate_id="ext-eval-v2",
        gate_digest=built.gate_digest,
        criteria=built.decision.criteria,
        runs=tuple(
            (case.id, tuple(_line(a) for a in built.attempts if a.case == case.id)) for case in built.view.cases
        ),
    )


def _line(a: Attempt) -> RunLine:
    return RunLine(a.arm, a.attempt, a.coverage_word.value, a.reason, a.passed, a.score, a.cost_usd, a.seconds, None)


def test_the_page_rebuilt_from_its_view_is_the_page_built(evals: Path) -> None:
    built = build_report(inputs(evals))
    page = page_of(built)
    page = dataclasses.replace(
        page,
        runs=tuple(
            (
                case_id,
                tuple(
                    dataclasses.replace(run, trajectory=f"runs/{case_id}/{run.arm.value}-{run.attempt}/trajectory.json")
                    for run in runs
                ),
            )
            for case_id, runs in page.runs
        ),
    )
    assert render(page) == built.html.decode("utf-8")


def test_every_text_is_escaped_by_the_template(evals: Path) -> None:
    built = build_report(inputs(evals))
    hostile_case = dataclasses.replace(built.view.cases[0], id=HOSTILE, kind=HOSTILE)
    hostile = dataclasses.replace(
        built.view,
        cases=(hostile_case, *built.view.cases[1:]),
        notes=(f"Faster: {HOSTILE}",),
        limitations=(f"A limitation naming {HOSTILE}.",),
        partial=HOSTILE,
    )
    page = page_of(built, hostile)
    run = RunLine(Arm.SUBJECT, 1, HOSTILE, HOSTILE, True, 1.0, 0.01, 5.0, f"runs/{HOSTILE}/subject-1/trajectory.json")
    explanation = Criterion(HOSTILE, 1, Judgement.FAILED, f"the grader explained: {HOSTILE}")
    page = dataclasses.replace(page, runs=((HOSTILE, (run,)),), criteria=(explanation,), gate_id=HOSTILE)
    html = render(page)
    assert "<script" not in html
    assert HOSTILE not in html
    # case id (table, chart, runs), kind, note, limitation, partial, outcome, reason, link, criterion, detail, gate
    assert html.count(ESCAPED) >= 12
    assert f'href="runs/{ESCAPED}/subject-1/trajectory.json"' in html


@pytest.mark.parametrize(
    ("verdict", "word", "style"),
    [
        (Verdict.PASS, "Better", "good"),
        (Verdict.FAIL, "Worse", "bad"),
        (Verdict.INCONCLUSIVE, "No clear change", "mid"),
    ],
)
def test_the_verdict_is_in_words(evals: Path, verdict: Verdict, word: str, style: str) -> None:
    built = build_report(inputs(evals))
    html = render(page_of(built, dataclasses.replace(built.view, verdict=verdict)))
    assert f'<p class="verdict {style}">{word}</p>' in html
    assert f"<title>Extension test: {word}</title>" in html


def test_the_page_is_self_contained_and_readable_on_a_phone(evals: Path) -> None:
    built = build_report(inputs(evals, stand_ins=frozenset(StandIn)))
    html = built.html.decode("utf-8")
    assert html.startswith("<!doctype html>")
    assert '<meta name="viewport" content="width=device-width,initial-scale=1">' in html
    assert "<style>" in html
    for outside in OUTSIDE:
        assert outside not in html, outside
    hrefs = re.findall(r'href="([^"]*)"', html)
    assert len(hrefs) == 12
    assert all(href.startswith("runs/") and href.endswith("/trajectory.json") for href in hrefs)


def test_the_chart_draws_both_pass_rates_per_case(evals: Path) -> None:
    html = build_report(inputs(evals)).html.decode("utf-8")
    [svg] = re.findall(r"<svg .*?</svg>", html, re.DOTALL)
    opening = svg[: svg.index(">")]
    assert 'viewBox="0 0 360 112"' in opening
    assert "width=" not in opening  # it scales to the page; no fixed pixel width
    assert "height=" not in opening
    groups = re.findall(r'<g class="case"[^>]*>(.*?)</g>', svg, re.DOTALL)
    assert len(groups) == 2
    greeting, overview = groups
    assert ">greeting</text>" in greeting
    assert ">overview</text>" in overview
    assert '<rect class="with" x="62" y="18" width="200.0"' in overview
    assert '<rect class="without" x="62" y="34" width="0.0"' in overview
    assert ">3/3 · 100 %</text>" in overview
    assert ">0/3 · 0 %</text>" in overview
    assert overview.count(">with</text>") == 1
    assert overview.count(">without</text>") == 1


def test_a_built_report_page_carries_the_verdict_the_table_and_the_statistics(evals: Path) -> None:
    built = build_report(inputs(evals))
    html = built.html.decode("utf-8")
    assert '<p class="verdict good">Better</p>' in html
    assert "Passes 2 of 2 tests with the extension, 1 of 2 without. Change in mean score: +0.50." in html
    assert "Stand-in" not in html
    # The per-case with/without table.
    assert "<th>With the extension</th><th>Without it</th><th>Change</th>" in html
    assert '<span class="good">passed</span><br><small>3/3 runs passed · score 1.00</small>' in html
    assert '<span class="bad">failed</span><br><small>0/3 runs passed · score 0.00</small>' in html
    # The statistics beside the verdict.
    assert "<li>p = 0.050 that it helps, p = 1.000 that it harms</li>" in html
    assert "<li>Δ pass rate +50 pp (95 % interval 0 pp to +81 pp)</li>" in html
    assert "<li>1 of 2 cases improved (0 worsened)</li>" in html
    assert "<li>smallest change this design can detect +50 pp at p ≤ 0.05</li>" in html
    assert "<li>Runs passed: 6 of 6 with the extension, 3 of 6 without</li>" in html
    # Notes, time and cost per run and per round, coverage, the gate, limitations.
    assert "<li>Faster: 24.2 s against 60.0 s per run</li>" in html
    assert "With the extension: 12.1 s and $0.0100 per run (72.6 s and $0.0600 over 6 runs)<br>" in html
    assert "Time per round (the 2 compared cases once each): 24.2 s with, 60.0 s without (spread 0.2 s)" in html
    assert "Without it: 6 of 6 runs completed<br>" in html
    assert f"<code>{built.gate_digest}</code>" in html
    assert "overriding the cases&#39; runs." in html
    assert built.report_ref.digest in html


def test_a_stand_in_run_has_a_banner_above_the_verdict(evals: Path) -> None:
    html = build_report(inputs(evals, stand_ins=frozenset({StandIn.DOOR}))).html.decode("utf-8")
    banner = (
        '<p class="banner">Stand-in run: the model door was a stand-in, so this “Better” says nothing '
        "about a real model.</p>"
    )
    assert banner in html
    assert html.index(banner) < html.index('<p class="verdict good">Better</p>')
    assert "<li>The model door was a stand-in (eval-runner&#39;s offline stand-in door" in html


def test_an_underpowered_design_says_so(evals: Path) -> None:
    attempts = tuple(a for a in better_attempts() if a.attempt == 1)
    built = build_report(inputs(evals, attempts, setup=RunSetup(runs=1)))
    html = built.html.decode("utf-8")
    assert "<li>underpowered: no result could reach p ≤ 0.05 with these cases and runs</li>" in html
    assert '<p class="verdict mid">No clear change</p>' in html


def test_a_page_without_a_baseline_shows_no_comparison(evals: Path) -> None:
    attempts = tuple(a for a in better_attempts() if a.arm is Arm.SUBJECT)
    built = build_report(inputs(evals, attempts, setup=RunSetup(runs=3, baseline=False)))
    html = built.html.decode("utf-8")
    assert "Beside the verdict" not in html
    assert "No run without it, so there is nothing to compare with." in html
    assert '<span class="muted">not run</span>' in html
    assert ">not run</text>" in html


def test_an_extra_limitation_and_a_partial_reason_are_escaped(evals: Path) -> None:
    attempts = list(better_attempts())
    attempts[0] = attempt("greeting", Arm.SUBJECT, 1, None, end=attempts[0].end, seconds=None, cost=None)
    built = build_report(
        dataclasses.replace(inputs(evals, tuple(attempts)), extra_limitations=(HOSTILE,), partial=HOSTILE)
    )
    html = built.html.decode("utf-8")
    assert "<script" not in html
    assert html.count(ESCAPED) == 2
