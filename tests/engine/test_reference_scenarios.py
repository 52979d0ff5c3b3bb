"""The reference's own scenario suite, replayed through our engine in real sandboxes.

`tests/vectors/reference/ext-eval-scenarios/` holds the reference's tiny suite (four cases), its
hand-written ATIF trajectories and six scenarios, each with the report the reference's engine made of it
(`crates/ext-eval/tests/verdicts.rs`). Here every run of a scenario really runs: the stand-in agent, in
`replay` mode, asks the scripted stand-in door for its turn and plays it in its sandbox (writes the
trajectory, creates the files, reports the cost, or sleeps past a short deadline for the timed-out run);
the engine collects, grades with the reference test's fake decision door, scores, decides and reports.
As in the reference's test, a run nobody saw the end of is a planned attempt with no record.

Two readings are the scenario's, not ours, as they are in the reference's test: each run's seconds (the
reference gives them as data; ours would be how long a replay took, which is no one's figure) and the
identity (author, evaluator, subject). Compared with the expected report: the verdict, the headline, the
cases, the gate, the coverage and every measurement (arm, metric, value, denominator, unknown count, in
order); the report passes the reference validator's checks, and the statistics stay out of the
measurements. Timestamps, locks, configurations and the runs document name run-specific bytes and differ.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from eval_runner import stand_ins
from eval_runner.contracts.refs import ArtifactRef, DefinitionRef
from eval_runner.contracts.report_figures import META_KEY as FIGURES_KEY
from eval_runner.contracts.report_statistics import META_KEY as STATISTICS_KEY
from eval_runner.contracts.strict_json import read
from eval_runner.engine.grade.spec import DecisionQuestion
from eval_runner.engine.grade.votes import DecisionAnswer, Doors, NoulAnswer
from eval_runner.engine.run.sandbox import Confinement
from eval_runner.engine.suite_run import (
    DoorSettings,
    SuiteAuthor,
    SuiteOutcome,
    SuitePlan,
    evaluate,
    execute,
    gate_file,
    plan_attempts,
)
from eval_runner.engine.testset.cases import Suite, load_suite
from eval_runner.engine.testset.catalog import Program, Skill, Subject
from eval_runner.engine.testset.documents import suite_documents
from eval_runner.engine.verdict.scores import Arm
from eval_runner.stand_ins.door import Script, ScriptedAnswers, StandInDoor
from tests.support.paths import TESTS
from tests.support.reference_validator import validate
from tests.support.sandboxed_runs import fresh_temp_root, host_confinement

VECTORS = TESTS / "vectors" / "reference" / "ext-eval-scenarios"
SCENARIOS = ("better", "inconclusive-spread", "partial", "runs-1", "worse-fewer", "worse-should-not-fire")
AGENT = stand_ins.AGENT
#: The reference test's identity (`tests/common/mod.rs`).
AUTHOR = "5be6446aef0a9a6b1f2c3d4e5f6071829a4b5c6d7e8f90112233445566778899"
EVALUATOR = "0b1c2d3e4f506172894a5b6c7d8e9f00112233445566778899aabbccddeeff00"
RIGHT = "The callers of `parse_case` are `load` and `parse_all`."
DOOR_KEY = "scenario-door-key-never-kept-5d1e"
#: Every run's deadline: long enough for a replayed turn on a loaded host, short for the timed-out one.
DEADLINE_SECONDS = 5
SKILLS_HEADING = "## Extension skills"


class FixtureDecisionDoor:
    """STAND-IN decision door, as the reference test's: yes (0.9) when the run's last message names the
    callers, no (0.1) otherwise."""

    def describe(self) -> str:
        return "fake-decision"

    async def decide(self, state: Mapping[str, Any], question: DecisionQuestion, rubric: str | None) -> DecisionAnswer:
        return NoulAnswer(0.9 if state.get("run") == RIGHT else 0.1)


@pytest.fixture
def confinement() -> Confinement:
    return host_confinement()


@pytest.fixture
def temp_root() -> Iterator[Path]:
    yield from fresh_temp_root()


def scenario(name: str) -> dict[str, Any]:
    value = json.loads((VECTORS / "scenarios" / f"{name}.json").read_text())
    assert isinstance(value, dict)
    return value


def expected(name: str) -> dict[str, Any]:
    value = json.loads((VECTORS / "expected" / f"{name}.report.json").read_text())
    assert isinstance(value, dict)
    return value


def replayed_suite() -> Suite:
    """The reference's suite, every case's agent in replay mode under the short deadline."""
    suite = load_suite(VECTORS / "suite" / "evals")
    cases = tuple(
        dataclasses.replace(
            case,
            run=dataclasses.replace(
                case.run, deadline_seconds=DEADLINE_SECONDS, env=(*case.run.env, ("OA_EVAL_FAKE", "replay"))
            ),
        )
        for case in suite.cases
    )
    return dataclasses.replace(suite, cases=cases)


def subject() -> Subject:
    """The repo-map extension: a program whose step is the operation `repo-map.map`, and a skill."""
    program = {
        "definition": {"id": f"{AUTHOR}:repo-map/repo-map", "steps": [{"name": "map"}]},
        "binding": {"steps": {"map": {"module": {"operation": "repo-map.map"}}}},
    }
    return Subject(
        slug="repo-map",
        definition=DefinitionRef(
            id=f"{AUTHOR}:repo-map/repo-map",
            artifact=ArtifactRef.of_bytes(b"repo-map package", "application/json", "openagents.ext-package.v1"),
        ),
        package_lock={"v": 1, "slug": "repo-map"},
        programs=(Program("repo-map", json.dumps(program).encode()),),
        skills=(Skill("repo-map", b"Map the repository before you answer.\n"),),
    )


def entries(value: dict[str, Any], case: str, arm: Arm) -> list[dict[str, Any]]:
    """A case's runs in one arm, as the reference's `common::scenario` reads them."""
    runs = value["cases"].get(case, {}).get(arm.value, [])
    return [{"trajectory": entry} if isinstance(entry, str) else entry for entry in runs]


def turn(entry: dict[str, Any], value: dict[str, Any], arm: Arm) -> str:
    """What the scripted door tells the replaying agent to do for one run."""
    if entry.get("outcome") == "timeout":
        return json.dumps({"sleep": True})
    play: dict[str, Any] = {"cost_usd": entry.get("cost_usd", value["cost_usd"][arm.value])}
    if "trajectory" in entry:
        play["trajectory"] = json.loads((VECTORS / "trajectories" / f"{entry['trajectory']}.json").read_text())
    if "workspace" in entry:
        workspace = VECTORS / "workspaces" / entry["workspace"]
        play["files"] = {name: (workspace / name).read_text() for name in entry.get("created", [])}
    return json.dumps(play)


def scripted_door(suite: Suite, value: dict[str, Any]) -> ScriptedAnswers:
    scripts: list[Script] = []
    for case in suite.cases:
        marker = case.prompt.strip().splitlines()[0]
        for arm in Arm:
            replies = deque(
                turn(entry, value, arm) for entry in entries(value, case.name, arm) if entry.get("outcome") != "unknown"
            )
            found = SKILLS_HEADING if arm is Arm.SUBJECT else None
            lacks = None if arm is Arm.SUBJECT else SKILLS_HEADING
            scripts.append(Script(marker, replies, instructions_contain=found, instructions_lack=lacks))
    return ScriptedAnswers(scripts, fallback='{"error": "no turn scripted"}')


async def replay(name: str, confinement: Confinement, temp_root: Path, results: Path) -> SuiteOutcome:
    value = scenario(name)
    suite = replayed_suite()
    answers = scripted_door(suite, value)
    async with StandInDoor(DOOR_KEY, table=answers) as door:
        plan = SuitePlan(
            suite=suite,
            subject=subject(),
            agent=AGENT,
            door=DoorSettings(url=door.url, key=DOOR_KEY, model="fixture-model"),
            author=SuiteAuthor(author=AUTHOR, package="repo-map", component="eval-suite", evaluator=EVALUATOR),
            temp_root=temp_root,
            results_base=results,
            runs=value["runs"],
            concurrency=1,  # the door hands each case's turns out in attempt order
            subject_definition=b"repo-map package",
            hosted=False,
        )
        planned = plan_attempts(suite, plan.subject, plan.runs)
        seen = [p for p in planned if entries(value, p.case.name, p.arm)[p.attempt - 1].get("outcome") != "unknown"]
        doors = Doors(decision=FixtureDecisionDoor())
        done = await execute(plan, seen, confinement=confinement, doors=doors)
        assert answers.left == 0, "every scripted turn was played"
        # The scenario's seconds, not the replay's: the one reading a replay cannot reproduce.
        timed = []
        for attempt in done:
            entry = entries(value, attempt.case, attempt.arm)[attempt.attempt - 1]
            timed.append(
                dataclasses.replace(attempt, seconds=float(entry.get("seconds", value["seconds"][attempt.arm.value])))
            )
        return await evaluate(
            plan, timed, confinement=confinement, doors=doors, started_at=1_790_000_000, ended_at=1_790_000_900
        )


def rows(report: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(m["arm"], m["metric"], m["value"], m["denominator"], m["unknown_count"]) for m in report["measurements"]]


@pytest.mark.parametrize("name", SCENARIOS)
async def test_a_reference_scenario_replays_to_the_reference_report(
    name: str, confinement: Confinement, temp_root: Path, tmp_path: Path
) -> None:
    outcome = await replay(name, confinement, temp_root, tmp_path / "results")
    ours = read(outcome.built.report_bytes)
    theirs = expected(name)
    assert isinstance(ours, dict)

    assert ours["verdict"] == theirs["verdict"]
    for key in ("gate", "cases", "headline", "requester"):
        assert ours["meta"]["ext_eval"][key] == theirs["meta"]["ext_eval"][key], key
    assert ours["coverage"] == theirs["coverage"]
    assert rows(ours) == rows(theirs)
    assert ours["subject"]["definition"] == theirs["subject"]["definition"]
    assert ours["evaluator"] == theirs["evaluator"]

    # A phone or referee running the reference's checks accepts it; the statistics ride in meta.
    assert validate(ours, outcome.built.artifacts) == []
    assert set(ours["meta"]) <= {"ext_eval", STATISTICS_KEY, FIGURES_KEY}
    if name == "partial":
        assert outcome.built.limitations.partial == "1 run did not finish"


def test_the_reference_validator_refuses_a_metric_the_suite_does_not_define() -> None:
    """The rule our reports used to break: every measured metric is one `metrics.json` defines."""
    suite = load_suite(VECTORS / "suite" / "evals")
    documents = suite_documents(
        suite, author=AUTHOR, package="repo-map", component="eval-suite", gate_file=gate_file(), engine="ext-eval 0.1.0"
    )
    theirs = expected("better")
    report = {**theirs, "suite": documents.suite.to_json()}
    assert not [p for p in validate(report, documents.files) if "suite metric" in p]
    spoiled = json.loads(json.dumps(report))
    spoiled["measurements"].append({**spoiled["measurements"][-1], "metric": "p_helps"})
    assert any("`p_helps` is not a suite metric" in p for p in validate(spoiled, documents.files))


def test_our_suite_documents_are_the_references_in_its_key_order() -> None:
    """suite.json and every document under it hold what the reference's do: written in the key order the
    reference's test build uses, our suite.json has exactly the digest its expected reports name."""
    suite = load_suite(VECTORS / "suite" / "evals")
    documents = suite_documents(
        suite, author=AUTHOR, package="repo-map", component="eval-suite", gate_file=gate_file(), engine="ext-eval 0.1.0"
    )
    ordered = in_reference_order(documents.files)
    theirs = expected("better")
    data = ordered["suite.json"]
    assert ("sha256:" + hashlib.sha256(data).hexdigest(), len(data)) == (
        theirs["suite"]["digest"],
        theirs["suite"]["size"],
    )
    partition = ordered["partition.json"]
    assert "sha256:" + hashlib.sha256(partition).hexdigest() == theirs["partition"]["digest"]


#: Key order of each engine document in the reference (`ext-eval` `report::suite_artifacts`).
_ORDER = {
    "workload.json": ("v", "requires", "collection", "synthetic", "task_families", "sampling", "exclusions"),
    "labels.json": ("v", "requires", "source", "rubric", "procedure", "uncertainty"),
    "metrics.json": ("v", "requires", "metrics"),
    "environment.json": ("v", "requires", "engine"),
    "partition.json": ("v", "requires", "development", "held_out", "excluded"),
}
_SUITE_ORDER = (
    "v",
    "requires",
    "id",
    "purpose",
    "workload",
    "cases",
    "partition",
    "labels",
    "metrics",
    "acceptance",
    "environment",
)
_REF_ORDER = ("digest", "size", "media_type", "schema", "event")
_METRIC_ORDER = ("id", "unit", "direction", "population", "aggregation", "missing")


def _pretty(value: Any) -> bytes:
    return (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode()


def _ref(value: dict[str, Any], data: bytes | None = None) -> dict[str, Any]:
    ordered = {key: value[key] for key in _REF_ORDER if key in value}
    if data is not None:
        ordered.update(digest="sha256:" + hashlib.sha256(data).hexdigest(), size=len(data))
    return ordered


def in_reference_order(files: Mapping[str, bytes]) -> dict[str, bytes]:
    """Our documents re-written in the reference's insertion order, each reference re-pointed at the
    re-written bytes (the case manifest is JCS, whose order does not depend on the writer)."""
    out: dict[str, bytes] = {}
    for name, keys in _ORDER.items():
        value = json.loads(files[name])
        ordered = {key: value[key] for key in keys}
        if name == "metrics.json":
            ordered["metrics"] = [{key: metric[key] for key in _METRIC_ORDER} for metric in value["metrics"]]
        if name == "workload.json":
            families = value["task_families"]
            ordered["task_families"] = {kind: families[kind] for kind in ("should-fire", "should-not-fire")}
        out[name] = _pretty(ordered)
    suite = json.loads(files["suite.json"])
    ordered = {key: suite[key] for key in _SUITE_ORDER}
    for key in ("workload", "partition", "labels", "metrics", "environment"):
        ordered[key] = _ref(suite[key], out[f"{key}.json"])
    ordered["cases"] = _ref(suite["cases"])
    ordered["acceptance"] = {"id": suite["acceptance"]["id"], "artifact": _ref(suite["acceptance"]["artifact"])}
    out["suite.json"] = _pretty(ordered)
    return out


def test_every_vendored_file_is_the_one_its_readme_names() -> None:
    """The README's table (path, bytes, sha256) is the checksum of every vendored file."""
    listed: dict[str, tuple[int, str]] = {}
    for line in (VECTORS / "README.md").read_text().splitlines():
        cells = [cell.strip().strip("`") for cell in line.strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith(("expected/", "scenarios/", "suite/", "trajectories/", "work")):
            listed[cells[0]] = (int(cells[2]), cells[3])
    on_disk = {
        str(path.relative_to(VECTORS)): path
        for path in VECTORS.rglob("*")
        if path.is_file() and path != VECTORS / "README.md"
    }
    assert set(listed) == set(on_disk)
    for name, (size, digest) in listed.items():
        data = on_disk[name].read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (size, digest), name
