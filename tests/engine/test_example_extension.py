"""The example extension under examples/: it resolves as a catalog tool, its test set loads and fits the
hosted runner, and its graders say what the stand-in agent and door make of each arm."""

from __future__ import annotations

import re

from eval_runner.engine.grade.spec import FocusKind, OperationUsedGrader, RegexGrader
from eval_runner.engine.testset.cases import Case, CaseKind, Operation, load_suite
from eval_runner.engine.testset.catalog import LOCAL_KEY, Catalog, resolve_extension
from eval_runner.engine.testset.documents import suite_documents
from tests.support.paths import EXAMPLE

ROOT = EXAMPLE
GUEST_ID = "a" * 64 + ":openagents/repo-map"
GUEST_DIGEST = "sha256:0f788d7adacbe189aed5c8be9aa96a13e2568074f3db213d708c5ac7254a1536"
# The stand-in door's answers (runner.md §21): with the skill, without it, and for anything else.
SKILLED = "It is a Rust crate of six files; the largest is src/tables.rs."
UNSKILLED = "I would have to look at the files."
GREETING = "Welcome aboard, glad you are here!"
SKILL_PHRASE = "name its main language"


def test_the_example_resolves_as_a_catalog_tool() -> None:
    tool = resolve_extension(ROOT)
    assert tool.name == "Codebase brief"
    assert tool.definition.id == f"{LOCAL_KEY}:codebase-brief/codebase-brief"
    assert [(alias.id, alias.artifact.digest) for alias in tool.aliases] == [(GUEST_ID, GUEST_DIGEST)]
    assert [skill.name for skill in tool.subject.skills] == ["brief"]
    assert SKILL_PHRASE in tool.subject.skills[0].data.decode()
    assert "repo_map" in tool.subject.operations()
    catalog = Catalog.load([ROOT])
    assert catalog.find(tool.aliases[0]) == tool
    assert catalog.by_id(GUEST_ID) == tool


def passes(case: Case, arm_reply: str, trajectory: str, operations: list[str]) -> bool:
    """What the scored graders decide for one run, as the evaluator would (regex and operation counts)."""
    verdicts = []
    for grader in case.graders:
        if isinstance(grader, RegexGrader):
            text = trajectory if grader.target.kind is FocusKind.TRAJECTORY else arm_reply
            verdicts.append(grader.compile().search(text) is not None)
        elif isinstance(grader, OperationUsedGrader):
            count = operations.count(grader.operation)
            verdicts.append(grader.min <= count and (grader.max is None or count <= grader.max))
    return all(verdicts)


def test_the_test_set_fits_the_hosted_runner_and_separates_the_arms() -> None:
    tool = resolve_extension(ROOT)
    operations = tool.subject.operations()
    suite = load_suite(ROOT / "evals")
    assert 1 <= len(suite.cases) <= 8
    for case in suite.cases:
        assert case.run.allowed_operations == (Operation.READ, Operation.WRITE)
        assert case.warnings() == []
        assert not case.subject_only(operations)
    fire = [case for case in suite.cases if case.kind is CaseKind.SHOULD_FIRE]
    quiet = [case for case in suite.cases if case.kind is CaseKind.SHOULD_NOT_FIRE]
    assert fire
    assert quiet
    assert any(case.fixtures for case in fire)
    for case in fire:
        assert any(isinstance(g, RegexGrader) and g.target.kind is FocusKind.TRAJECTORY for g in case.graders)
        # The stand-in agent runs the programs only when the prompt mentions these words.
        assert re.search("repository|callers", case.prompt)
        subject_trajectory = '{"steps": [{"tool_calls": [{"function_name": "repo_map"}]}]}'
        assert passes(case, SKILLED, subject_trajectory, ["repo_map"])
        assert not passes(case, UNSKILLED, '{"steps": []}', [])
    for case in quiet:
        assert not re.search("repository|callers", case.prompt)
        guard = [g for g in case.graders if isinstance(g, OperationUsedGrader)]
        assert guard
        assert all(g.max == 0 and g.operation in operations and not g.subject_only(operations) for g in guard)
        assert passes(case, GREETING, '{"steps": []}', [])


def test_the_overview_fixtures_are_the_crate_the_door_describes() -> None:
    overview = load_suite(ROOT / "evals").case("overview")
    assert overview is not None
    sizes = {fixture.name: len(fixture.data) for fixture in overview.fixtures}
    assert len(sizes) == 6
    assert max(sizes, key=lambda name: sizes[name]) == "src/tables.rs"


def test_the_suite_documents_build() -> None:
    documents = suite_documents(
        load_suite(ROOT / "evals"), author="ab" * 32, package="codebase-brief-tests", component="suite", gate_file=b"{}"
    )
    assert documents.suite.schema == "openagents.eval-suite.v1"
    assert documents.cases.size == len(documents.files["cases.json"])
