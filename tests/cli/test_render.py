"""The three readers of one report agree: `eval run`'s terminal (built view), `trainer run` (a view rebuilt
from the sealed report.json alone) and report.html show the same numbers and words, and each says when a
part was a stand-in."""

from __future__ import annotations

import dataclasses
import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from eval_runner.cli.render import case_table, show_outcome
from eval_runner.cli.trainer import run_json, show_run
from eval_runner.contracts.answers import ResultBody
from eval_runner.contracts.execution import Binding
from eval_runner.contracts.outputs import RunOutput
from eval_runner.contracts.refs import ArtifactRef, EventRef
from eval_runner.contracts.report import Report
from eval_runner.engine.report import view as words
from eval_runner.engine.report.build import BuiltReport, build_report
from eval_runner.engine.report.inputs import StandIn
from eval_runner.engine.report.view import ReportView, view_of
from eval_runner.engine.suite_run import SuiteOutcome
from eval_runner.nostr import SecretKey, sign
from eval_runner.trainer.client import Request, RunAnswer, build_request, extension_tool, run_input, suite_draft
from tests.support.paths import EXAMPLE
from tests.support.report_inputs import TWO_CASES, inputs, write_cases

RUNNER = SecretKey.generate().public_key().to_hex()


@pytest.fixture
def evals(tmp_path: Path) -> Path:
    return write_cases(tmp_path / "evals", TWO_CASES)


def answered(built: BuiltReport) -> RunAnswer:
    """A completed run's answer naming `built`'s report, as the trainer binds it."""
    draft = suite_draft(EXAMPLE / "evals", extension_tool(EXAMPLE).draft_tool()).draft
    body = build_request(RUNNER, run_input(draft), request_id="req-1")
    event = sign(SecretKey.generate(), 25920, [["p", RUNNER]], "x", 1_790_000_000)
    answer = RunAnswer(Request(RUNNER, body, [event]))
    output = RunOutput(
        report=built.report_ref,
        sealed=EventRef("77" * 32, RUNNER, 3188),
        headline=built.report.ext_eval.headline,
        verdict=built.report.verdict.value,
        notes=built.notes,
    )
    answer.result = ResultBody.completed(Binding("req-1", 1, "req-1"), ArtifactRef.of_bytes(b"r", "x/y"), output)
    return answer


def printed(draw: object) -> str:
    sink = io.StringIO()
    console = Console(file=sink, width=160, force_terminal=False)
    console.print(draw)
    return sink.getvalue()


def terminal(built: BuiltReport, tmp_path: Path) -> str:
    sink = io.StringIO()
    show_outcome(Console(file=sink, width=160), SuiteOutcome(built, tmp_path, cancelled=False, seconds=1.25))
    return sink.getvalue()


def trainer(built: BuiltReport, view: ReportView | None, stand_ins: frozenset[StandIn] = frozenset()) -> str:
    sink = io.StringIO()
    show_run(Console(file=sink, width=160), answered(built), view, None, 60, stand_ins=stand_ins)
    return sink.getvalue()


def test_the_terminal_the_trainer_and_the_page_show_the_same_numbers(evals: Path, tmp_path: Path) -> None:
    built = build_report(inputs(evals))
    rebuilt = view_of(Report.parse_bytes(built.report_bytes), notes=built.notes)  # what the trainer holds
    local, remote = terminal(built, tmp_path), trainer(built, rebuilt)
    html = built.html.decode("utf-8")

    # The same table, cell for cell, in both terminals.
    table = printed(case_table(built.view))
    assert table == printed(case_table(rebuilt))
    assert table in local
    assert table in remote
    rows = [line for line in table.splitlines() if line.startswith("│")]
    assert [re.split(r"\s*│\s*", row.strip("│ ")) for row in rows] == [
        ["greeting", "should-not-fire", "3/3", "3/3", "1.00", "1.00", "+0.00"],
        ["overview", "should-fire", "3/3", "0/3", "1.00", "0.00", "+1.00"],
    ]
    # The page shows each of those cells for its case.
    for case in built.view.cases:
        cells = words.case_cells(case)
        row = re.search(rf"<tr><td><code>{cells[0]}</code>.*?</tr>", html, re.DOTALL)
        assert row is not None
        for shown in (f"{cells[2]} runs passed · score {cells[4]}", f"{cells[3]} runs passed · score {cells[5]}"):
            assert shown in row.group(0)
        assert f'<td class="n">{cells[6]}</td>' in row.group(0)

    # The same headline, statistics and time per run, in the same words.
    for line in (
        "Passes 2 of 2 tests with the extension, 1 of 2 without. Change in mean score: +0.50.",
        "p = 0.050 that it helps, p = 1.000 that it harms",
        "Δ pass rate +50 pp (95 % interval 0 pp to +81 pp)",
        "With the extension: 12.1 s and $0.0100 per run (72.6 s and $0.0600 over 6 runs)",
        "Without it: 30.0 s and $0.0100 per run (180.0 s and $0.0600 over 6 runs)",
        "Faster: 24.2 s against 60.0 s per run",
    ):
        assert line in local, line
        assert line in remote, line
        assert line in html, line
    assert "Verdict  Better\n" in local
    assert "Verdict  Better  (pass)\n" in remote
    assert "Wall time 1.2 s: the suite's runs, grading and report\n" in local
    assert "Stand-in" not in local + remote


def test_a_stand_in_report_says_so_beside_the_verdict_everywhere(evals: Path, tmp_path: Path) -> None:
    built = build_report(inputs(evals, stand_ins=frozenset(StandIn)))
    rebuilt = view_of(Report.parse_bytes(built.report_bytes), notes=built.notes)
    line = (
        "Stand-in run: the agent and the model door were stand-ins, so this “Better” says nothing about "
        "a real agent or a real model."
    )
    for shown, verdict in (
        (terminal(built, tmp_path), "Verdict  Better"),
        (trainer(built, rebuilt), "Verdict  Better"),
    ):
        lines = shown.splitlines()
        at = next(i for i, text in enumerate(lines) if text.startswith(verdict))
        assert lines[at + 1] == line
    assert f'<p class="banner">{line}</p>' in built.html.decode("utf-8")


def test_the_trainer_says_stand_ins_its_caller_knows_of_even_when_the_report_cannot_be_read(evals: Path) -> None:
    """The demo knows its agent and door are stand-ins whatever the runner's report says."""
    built = build_report(inputs(evals))
    shown = trainer(built, None, stand_ins=frozenset({StandIn.DOOR}))
    assert "Stand-in run: the model door was a stand-in, so this “Better” says nothing about a real model." in shown
    assert "Passes 2 of 2 tests with the extension, 1 of 2 without.\n" in shown  # the result's own headline


def test_the_trainers_json_rows_come_from_the_same_view(evals: Path) -> None:
    built = build_report(inputs(evals))
    rebuilt = view_of(Report.parse_bytes(built.report_bytes))
    found = run_json("ws://relay", answered(built), rebuilt, None, [], 60)
    assert found["cases"] == [
        {
            "id": "greeting",
            "kind": "should-not-fire",
            "with": {"passed": 3, "runs": 3},
            "without": {"passed": 3, "runs": 3},
        },
        {
            "id": "overview",
            "kind": "should-fire",
            "with": {"passed": 3, "runs": 3},
            "without": {"passed": 0, "runs": 3},
        },
    ]
    assert found["stand_ins"] == []
    assert dataclasses.replace(rebuilt, notes=built.notes).cases == built.view.cases
    stand_in = build_report(inputs(evals, stand_ins=frozenset({StandIn.AGENT})))
    marked = run_json(
        "ws://relay", answered(stand_in), view_of(Report.parse_bytes(stand_in.report_bytes)), None, [], 60
    )
    assert marked["stand_ins"] == ["agent"]
