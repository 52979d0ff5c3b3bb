"""`report.html`: one self-contained page a person reads on a phone (runner.md §13.10).

The verdict in words (Better / Worse / No clear change), the headline, the statistics that stand
beside the verdict (statistics.md §C3), the notes, a with/without table per case, time and cost per
arm, the gate's criteria, each run, and the limitations. Styles are inline; there is no script, no
font, no image and no request to anywhere: the only links are relative, to each run's
`trajectory.json` in the same results directory. Every piece of text that came from a suite, a run or
an identity is HTML-escaped, attribute values included.

Pure: `render` returns the page's text; `engine.report_build` builds the `ReportPage` it reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from eval_runner.engine.verdict.gate import Criterion, Judgement, Verdict
from eval_runner.engine.verdict.scores import Arm, ArmSummary, CaseArm, CaseScore, Scores
from eval_runner.engine.verdict.statistics import ALPHA, Evidence

_STYLE = """\
:root{--bg:#fbfaf7;--fg:#1d1c1a;--muted:#6b675f;--line:#e2ded5;--good:#23703a;--bad:#a4282a;\
--mid:#8a6a12;--card:#fff}
@media (prefers-color-scheme:dark){:root{--bg:#141311;--fg:#ece9e2;--muted:#a09a8f;--line:#34312b;\
--good:#6fcf8a;--bad:#f08a86;--mid:#e5c15a;--card:#1c1b18}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);\
font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;-webkit-text-size-adjust:100%}
main{max-width:880px;margin:0 auto;padding:20px 14px 48px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px}
.muted{color:var(--muted)}.good{color:var(--good)}.bad{color:var(--bad)}.mid{color:var(--mid)}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:14px 16px;margin:14px 0}
.verdict{font-size:28px;font-weight:700;margin:0}
.wrap{overflow-x:auto;-webkit-overflow-scrolling:touch}
table{border-collapse:collapse;width:100%;font-size:15px}
th,td{text-align:left;padding:7px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{font-weight:600;color:var(--muted)}
td.n{font-variant-numeric:tabular-nums;white-space:nowrap}
ul{padding-left:20px}li{margin:4px 0}
details{margin:4px 0}summary{cursor:pointer}
code{font:13px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace;overflow-wrap:anywhere}
small{font-size:13px}
@media (max-width:520px){body{font-size:15px}table{font-size:14px}th,td{padding:6px 5px}}
"""

_VERDICT_CLASS = {Verdict.PASS: "good", Verdict.FAIL: "bad", Verdict.INCONCLUSIVE: "mid"}
_JUDGEMENT_CLASS = {Judgement.PASSED: "good", Judgement.FAILED: "bad", Judgement.UNVERIFIABLE: "mid"}


@dataclass(frozen=True, slots=True)
class RunLine:
    """One attempt as the page lists it; `trajectory` is the relative link, when the run kept one."""

    arm: Arm
    attempt: int
    outcome: str
    reason: str | None
    passed: bool | None
    score: float | None
    cost_usd: float | None
    seconds: float | None
    trajectory: str | None


@dataclass(frozen=True, slots=True)
class CaseRow:
    score: CaseScore
    runs: tuple[RunLine, ...]


@dataclass(frozen=True, slots=True)
class ReportPage:
    """What the page shows; built from the same values as the report."""

    subject: str
    suite: str
    evaluator: str
    report_digest: str
    suite_digest: str
    gate_id: str
    gate_digest: str
    verdict: Verdict
    criteria: tuple[Criterion, ...]
    scores: Scores
    evidence: Evidence | None
    notes: tuple[str, ...]
    limitations: tuple[str, ...]
    partial: str | None
    cases: tuple[CaseRow, ...]


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _score(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.2f}"


def _signed(value: float | None) -> str:
    return "unknown" if value is None else f"{value:+.2f}".replace("-", "−")


def _money(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.4f}"


def _time(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.1f} s"


def _pp(value: float) -> str:
    points = round(value * 100)
    return "0 pp" if points == 0 else f"{points:+d} pp".replace("-", "−")


def _short(qualified: str) -> str:
    """`<pubkey>:<package>/<component>` as a person reads it: the part after the key."""
    return qualified.split(":", 1)[-1]


def _p(value: float) -> str:
    return "p < 0.001" if value < 0.001 else f"p = {value:.3f}"


def _pass_word(passed: bool | None) -> str:
    if passed is True:
        return '<span class="good">passed</span>'
    if passed is False:
        return '<span class="bad">failed</span>'
    return '<span class="mid">unknown</span>'


def _arm_cell(side: CaseArm | None) -> str:
    if side is None:
        return '<span class="muted">not run</span>'
    runs = f"{side.runs_passed} of {side.planned} runs · score {_score(side.score)}"
    return f"{_pass_word(side.passed)}<br><small>{runs}</small>"


def render(page: ReportPage) -> str:
    """The page's HTML text."""
    out: list[str] = [
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n',
        '<meta name="viewport" content="width=device-width,initial-scale=1">\n',
        f"<title>Extension test: {_e(page.verdict.word)}</title>\n<style>\n{_STYLE}</style>\n</head>\n<body>\n<main>\n",
        "<h1>Extension test</h1>\n",
        f'<p class="muted">{_e(_short(page.subject))} · suite {_e(_short(page.suite))}</p>\n',
    ]
    _headline(out, page)
    _statistics(out, page.evidence)
    if page.notes:
        out.append("<h2>Notes</h2>\n<ul>\n")
        out.extend(f"<li>{_e(note)}</li>\n" for note in page.notes)
        out.append("</ul>\n")
    _per_case(out, page.cases)
    _per_arm(out, page.scores)
    _criteria(out, page.criteria)
    _runs(out, page.cases)
    if page.limitations:
        out.append("<h2>Limitations</h2>\n<ul>\n")
        out.extend(f"<li>{_e(text)}</li>\n" for text in page.limitations)
        out.append("</ul>\n")
    out.append(
        '<h2>About this result</h2>\n<p class="muted"><small>'
        f"Extension <code>{_e(page.subject)}</code><br>"
        f"Suite <code>{_e(page.suite)}</code> <code>{_e(page.suite_digest)}</code><br>"
        f"Evaluator <code>{_e(page.evaluator)}</code><br>"
        f"Report <code>{_e(page.report_digest)}</code></small></p>\n"
    )
    out.append("</main>\n</body>\n</html>\n")
    return "".join(out)


def _headline(out: list[str], page: ReportPage) -> None:
    scores = page.scores
    total = len(scores.cases)
    line = f"Passes {scores.subject.cases_passed} of {total} tests with the extension"
    if scores.baseline is not None:
        line += f", {scores.baseline.cases_passed} of {scores.baseline.coverage.planned} without"
        line += f". Change in mean score: {_signed(scores.change)}."
    else:
        line += ". No run without it, so there is nothing to compare with."
    out.append(
        f'<section class="card">\n<p class="verdict {_VERDICT_CLASS[page.verdict]}">{_e(page.verdict.word)}</p>\n'
        f"<p>{_e(line)}</p>\n"
    )
    if page.partial is not None:
        out.append(f'<p class="mid">Partial: {_e(page.partial)}</p>\n')
    out.append(
        f'<p class="muted"><small>Decided by the gate <code>{_e(page.gate_id)}</code> '
        f"<code>{_e(page.gate_digest)}</code>.</small></p>\n</section>\n"
    )


def _statistics(out: list[str], found: Evidence | None) -> None:
    if found is None:
        return
    alpha = float(ALPHA)
    out.append('<h2>Beside the verdict</h2>\n<section class="card">\n<ul>\n')
    out.append(
        f"<li><b>{_p(found.p_helps)}</b> that it helps, <b>{_p(found.p_harms)}</b> that it harms "
        '<small class="muted">(how often a result at least this far that way would come about if the '
        "extension changed nothing; exact stratified permutation test over the compared cases)</small></li>\n"
    )
    if found.delta_pass_rate is not None and found.delta_low_95 is not None and found.delta_high_95 is not None:
        out.append(
            f"<li>Pass rate with − without: <b>{_pp(found.delta_pass_rate)}</b> "
            f"(95 % interval {_pp(found.delta_low_95)} to {_pp(found.delta_high_95)}; "
            f"{found.passes_with} of {found.runs_with} runs against "
            f"{found.passes_without} of {found.runs_without})</li>\n"
        )
    else:
        out.append("<li>Pass rate with − without: unknown (no scored run in an arm)</li>\n")
    out.append(
        f"<li>Cases improved: <b>{found.cases_improved} of {found.cases}</b> ({found.cases_worsened} worsened)</li>\n"
    )
    if found.min_detectable_effect is None:
        out.append(
            f'<li><b class="mid">Underpowered</b>: with these cases and runs, no result could reach '
            f"p ≤ {alpha:g}.</li>\n"
        )
    else:
        out.append(
            f"<li>Smallest change this design can detect: <b>{_pp(found.min_detectable_effect)}</b> "
            f"(p ≤ {alpha:g})</li>\n"
        )
    out.append(
        '</ul>\n<p class="muted"><small>These numbers stand beside the verdict; they do not change it.'
        "</small></p>\n</section>\n"
    )


def _per_case(out: list[str], rows: Sequence[CaseRow]) -> None:
    out.append(
        '<h2>Tests</h2>\n<div class="wrap"><table>\n'
        "<tr><th>Test</th><th>With the extension</th><th>Without it</th><th>Change</th></tr>\n"
    )
    for row in rows:
        case = row.score
        note = " · with the extension only" if case.subject_only else ""
        out.append(
            f'<tr><td><code>{_e(case.id)}</code><br><small class="muted">{_e(case.kind.value)}{note}</small></td>'
            f"<td>{_arm_cell(case.subject)}</td><td>{_arm_cell(case.baseline)}</td>"
            f'<td class="n">{_signed(case.change)}</td></tr>\n'
        )
    out.append("</table></div>\n")


def _per_arm(out: list[str], scores: Scores) -> None:
    out.append(
        '<h2>Time and cost</h2>\n<div class="wrap"><table>\n'
        "<tr><th></th><th>Tests passed</th><th>Mean score</th><th>Cost</th><th>Time</th></tr>\n"
    )
    arms: tuple[tuple[str, ArmSummary | None], ...] = (
        ("With the extension", scores.subject),
        ("Without it", scores.baseline),
    )
    runs: list[str] = []
    for label, summary in arms:
        if summary is None:
            continue
        c = summary.coverage
        out.append(
            f'<tr><td>{label}</td><td class="n">{summary.cases_passed} of {c.planned}</td>'
            f'<td class="n">{_score(summary.mean_score)}</td><td class="n">{_money(summary.cost_usd)}</td>'
            f'<td class="n">{_time(summary.seconds)}</td></tr>\n'
        )
        others = [
            f"{count} {word}"
            for count, word in (
                (c.failed, "failed"),
                (c.refused, "refused"),
                (c.cancelled, "cancelled"),
                (c.unknown, "unknown"),
            )
            if count
        ]
        runs.append(
            f"{label}: {c.completed} of {c.attempted} runs completed" + (f" ({', '.join(others)})" if others else "")
        )
    out.append("</table></div>\n")
    if scores.baseline is not None:
        for label, measure, show in (
            ("Time per run", scores.comparison.seconds, _time),
            ("Cost per run", scores.comparison.cost_usd, _money),
        ):
            runs.append(
                f"{label}: {show(measure.subject)} with, {show(measure.baseline)} without "
                f"(spread {show(measure.spread)})"
            )
    out.append(f'<p class="muted"><small>{"<br>".join(_e(line) for line in runs)}</small></p>\n')


def _criteria(out: list[str], criteria: Sequence[Criterion]) -> None:
    out.append('<h2>Why</h2>\n<div class="wrap"><table>\n<tr><th>Criterion</th><th>Result</th><th>Detail</th></tr>\n')
    for criterion in criteria:
        out.append(
            f"<tr><td><code>{_e(criterion.name)}</code></td>"
            f'<td class="{_JUDGEMENT_CLASS[criterion.judgement]}">{_e(criterion.judgement.value)}</td>'
            f"<td><small>{_e(criterion.detail)}</small></td></tr>\n"
        )
    out.append("</table></div>\n")


def _runs(out: list[str], rows: Sequence[CaseRow]) -> None:
    out.append("<h2>Runs</h2>\n")
    for row in rows:
        out.append(f"<details>\n<summary><code>{_e(row.score.id)}</code> · {len(row.runs)} runs</summary>\n<ul>\n")
        for run in row.runs:
            arm = "with the extension" if run.arm is Arm.SUBJECT else "without it"
            reason = f" ({_e(run.reason)})" if run.reason else ""
            link = f' · <a href="{_e(run.trajectory)}">trajectory</a>' if run.trajectory else ""
            out.append(
                f"<li>Run {run.attempt} {arm}: {_pass_word(run.passed)} · {_e(run.outcome)}{reason} · "
                f"score {_score(run.score)} · {_money(run.cost_usd)} · {_time(run.seconds)}{link}</li>\n"
            )
        out.append("</ul>\n</details>\n")
