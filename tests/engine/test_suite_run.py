"""The whole engine, end to end: the example extension's test set run in real bubblewrap sandboxes by the
stand-in agent against the stand-in door, both arms, graded, scored, judged and reported.

The example is built so that the skill is what makes the should-fire case pass (the stand-in door names
the crate's language only when the guidance carries the skill) and the program is what the should-not-fire
guard watches; so with the extension the agent passes both cases and without it only the greeting.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval_runner import stand_ins
from eval_runner.contracts.report import Report
from eval_runner.contracts.report_statistics import Statistics
from eval_runner.contracts.strict_json import read
from eval_runner.engine.report.inputs import StandIn
from eval_runner.engine.report.view import STAND_IN_LIMITATIONS, STAND_INS_KEY
from eval_runner.engine.run.confinement import probe
from eval_runner.engine.run.sandbox import Confinement, Unconfined
from eval_runner.engine.suite_run import (
    DoorSettings,
    Finished,
    ProgressEvent,
    Started,
    SuiteAuthor,
    SuitePlan,
    plan_attempts,
    run_suite,
)
from eval_runner.engine.testset.cases import load_suite
from eval_runner.engine.testset.catalog import Tool, resolve_extension
from eval_runner.stand_ins.door import StandInDoor
from tests.support.paths import EXAMPLE
from tests.support.results_walk import verify_every_ref
from tests.support.sandboxed_runs import fresh_temp_root, host_confinement

AGENT = stand_ins.AGENT
DOOR_KEY = "door-key-that-must-never-be-kept-7f3a9c"


@pytest.fixture
def confinement() -> Confinement:
    return host_confinement()


@pytest.fixture
def temp_root() -> Iterator[Path]:
    yield from fresh_temp_root()


@pytest.fixture
def tool() -> Tool:
    return resolve_extension(EXAMPLE)


def plan_for(
    tool: Tool,
    door_url: str,
    temp_root: Path,
    results: Path,
    runs: int,
    concurrency: int = 4,
    stand_ins: frozenset[StandIn] = frozenset(),
) -> SuitePlan:
    return SuitePlan(
        suite=load_suite(EXAMPLE / "evals"),
        subject=tool.subject,
        agent=AGENT,
        door=DoorSettings(door_url, DOOR_KEY, "stand-in"),
        author=SuiteAuthor(tool.definition.author, f"{tool.subject.slug}-tests", "suite", "0" * 64),
        temp_root=temp_root,
        results_base=results,
        runs=runs,
        concurrency=concurrency,
        subject_definition=tool.record,
        hosted=False,
        stand_ins=stand_ins,
    )


async def test_the_extension_helps_on_the_example(
    tool: Tool, confinement: Confinement, temp_root: Path, tmp_path: Path
) -> None:
    events: list[ProgressEvent] = []
    async with StandInDoor(DOOR_KEY) as door:
        plan = plan_for(tool, door.url, temp_root, tmp_path / "results", runs=3, stand_ins=frozenset(StandIn))
        outcome = await run_suite(plan, confinement=confinement, on_progress=events.append)
        door_calls = len(door.calls)

    built = outcome.built
    report = Report.parse_bytes((outcome.results_dir / "report.json").read_bytes())
    assert (outcome.results_dir / "report.json").read_bytes() == built.report_bytes
    assert built.report_ref.matches(built.report_bytes)

    # Per case and arm: the should-fire case passes with the extension only; the greeting holds in both.
    by_case = {case.id: case for case in built.scores.cases}
    overview, greeting = by_case["overview"], by_case["greeting"]
    assert overview.subject.passed is True
    assert overview.subject.runs_passed == 3
    assert overview.baseline is not None
    assert overview.baseline.passed is False
    assert overview.baseline.runs_passed == 0
    assert greeting.subject.passed is True
    assert greeting.baseline is not None
    assert greeting.baseline.passed is True

    assert report.verdict.value == "pass"
    headline = report.ext_eval.headline
    assert (headline.subject_passed, headline.baseline_passed, headline.total) == (2, 1, 2)
    assert built.decision.verdict.word == "Better"

    # Every run really went through the door, and every attempt is accounted for in plan order.
    assert door_calls == 12
    finished = [event for event in events if isinstance(event, Finished)]
    assert len(finished) == 12
    assert all(event.outcome == "completed" for event in finished)
    assert len([event for event in events if isinstance(event, Started)]) == 12
    planned = [(p.case.name, p.arm, p.attempt) for p in plan_attempts(plan.suite, plan.subject, 3)]
    assert [(a.case, a.arm, a.attempt) for a in built.attempts] == planned

    # The beyond-the-reference statistics stand beside the verdict, in meta where readers accept them.
    found = Statistics.from_meta(report.meta_extra)
    assert found is not None
    assert found.value("p_helps") == pytest.approx(0.05)
    assert found.value("cases_improved") == 1

    # Every artifact the report names is in the results directory, byte for byte.
    checked, _ = verify_every_ref(outcome.results_dir, built.report_bytes)
    assert checked > 40
    html = (outcome.results_dir / "report.html").read_text()
    assert "Better" in html
    assert ":" not in outcome.results_dir.name

    # Both parts were stand-ins, and every place a person reads the result says so.
    limitations = read((outcome.results_dir / "artifacts" / "limitations.json").read_bytes())
    assert isinstance(limitations, dict)
    said = limitations["limitations"]
    assert isinstance(said, list)
    assert all(sentence in said for sentence in STAND_IN_LIMITATIONS.values())
    assert report.meta_extra[STAND_INS_KEY] == ["agent", "door"]
    assert '<p class="banner">Stand-in run: the agent and the model door were stand-ins' in html

    # The suite's wall time covers its longest run; each run's own time is what the progress lines say.
    assert outcome.seconds is not None
    assert outcome.seconds >= max(event.seconds for event in finished)
    assert outcome.setup_seconds is None

    # The door key is in nothing the run kept.
    for path in outcome.results_dir.rglob("*"):
        if path.is_file():
            assert DOOR_KEY.encode() not in path.read_bytes(), path


async def test_a_cancel_stops_the_suite_and_the_report_says_so(
    tool: Tool, confinement: Confinement, temp_root: Path, tmp_path: Path
) -> None:
    cancel = asyncio.Event()
    seen: list[ProgressEvent] = []

    def on_progress(event: ProgressEvent) -> None:
        seen.append(event)
        if isinstance(event, Finished):
            cancel.set()  # stop after the first finished run

    async with StandInDoor(DOOR_KEY) as door:
        plan = plan_for(tool, door.url, temp_root, tmp_path / "results", runs=3, concurrency=1)
        outcome = await run_suite(plan, confinement=confinement, on_progress=on_progress, cancel=cancel)

    assert outcome.cancelled
    ends = [attempt.end.value for attempt in outcome.built.attempts]
    assert ends[0] == "completed"
    assert set(ends[1:]) == {"cancelled"}
    limitations = read((outcome.results_dir / "artifacts" / "limitations.json").read_bytes())
    assert limitations["partial"] == "the operator stopped the run"
    assert outcome.built.report.verdict.value == "inconclusive"


async def test_an_unconfined_host_runs_nothing(tool: Tool, temp_root: Path, tmp_path: Path) -> None:
    unconfined = await probe(temp_root, bwrap="/nonexistent/bwrap")
    assert isinstance(unconfined, Unconfined)
    events: list[ProgressEvent] = []
    async with StandInDoor(DOOR_KEY) as door:
        plan = plan_for(tool, door.url, temp_root, tmp_path / "results", runs=2)
        outcome = await run_suite(plan, confinement=unconfined, on_progress=events.append)
        assert door.calls == []
    assert events == []
    assert {(a.end.value, a.reason) for a in outcome.built.attempts} == {("errored", "unconfined_host")}
    assert outcome.built.view.stand_ins == ()
    assert not any("stand-in" in sentence for sentence in outcome.built.limitations.limitations)
    runs = json.loads((outcome.results_dir / "artifacts" / "runs.json").read_text())["runs"]
    assert {run["outcome"] for run in runs} == {"refused"}
