"""A marginal run's arms (runner.md §12): with Coder's defaults both arms admit the defaults' programs and
skills and the subject arm adds the subject (nothing when the subject is itself a default); both locks name
the defaults, the report's `meta.ext_eval.defaults` names the release, and `run.json`'s subject lock does
not (its lock is the subject's alone, as the reference writes it)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from eval_runner.contracts.coder_defaults import LOCK_SCHEMA
from eval_runner.contracts.refs import ArtifactRef, DefinitionRef, EventRef
from eval_runner.contracts.report_documents import ArmLock
from eval_runner.engine.report.build import build_report
from eval_runner.engine.report.inputs import Defaults
from eval_runner.engine.suite_run import admitted, guidance
from eval_runner.engine.testset.adopted import AdoptedDefaults
from eval_runner.engine.testset.cases import load_suite
from eval_runner.engine.testset.catalog import Program, Skill, Subject
from eval_runner.engine.verdict.scores import Arm
from tests.support.report_inputs import RUNNER, TWO_CASES, inputs, subject, write_cases

RELEASE = EventRef(id="55" * 32, pubkey="66" * 32, kind=3184)
LOCK = b'{"v":"openagents.coder-defaults-lock.v1"}'


def other_tool() -> Subject:
    record = b'{"v": 1, "slug": "lint-guide"}\n'
    return Subject(
        slug="lint-guide",
        definition=DefinitionRef(
            id=f"{RUNNER}:lint-guide/lint-guide",
            artifact=ArtifactRef.of_bytes(record, "application/json", "openagents.coder-package.v1"),
        ),
        package_lock={"v": 1, "slug": "lint-guide"},
        programs=(Program("lint-guide", b'{"definition": {"steps": []}}'),),
        skills=(Skill("lint", b"Run the linter in your head.\n"),),
    )


def test_without_defaults_the_baseline_admits_nothing() -> None:
    tool = subject()
    assert admitted(tool, Arm.SUBJECT) == (tool.programs, tool.skills)
    assert admitted(tool, Arm.BASELINE) == ((), ())


def test_both_arms_admit_the_defaults_and_the_subject_arm_adds_the_subject(tmp_path: Path) -> None:
    tool, default = subject(), other_tool()
    defaults = AdoptedDefaults(release=RELEASE, lock=LOCK, subjects=(default,))
    assert admitted(tool, Arm.BASELINE, defaults) == (default.programs, default.skills)
    assert admitted(tool, Arm.SUBJECT, defaults) == (
        (*default.programs, *tool.programs),
        (*default.skills, *tool.skills),
    )
    case = load_suite(write_cases(tmp_path / "evals", TWO_CASES)).cases[0]
    baseline = guidance(tool, case, Arm.BASELINE, defaults)
    assert baseline is not None
    assert "### lint (sha256:" in baseline
    assert "### brief" not in baseline
    assert guidance(tool, case, Arm.BASELINE) is None


def test_a_subject_that_is_a_default_adds_nothing_so_both_arms_hold_the_same(tmp_path: Path) -> None:
    tool = subject()
    defaults = AdoptedDefaults(release=RELEASE, lock=LOCK, subjects=(tool,))
    assert admitted(tool, Arm.SUBJECT, defaults) == admitted(tool, Arm.BASELINE, defaults)
    case = load_suite(write_cases(tmp_path / "evals", TWO_CASES)).cases[0]
    assert guidance(tool, case, Arm.SUBJECT, defaults) == guidance(tool, case, Arm.BASELINE, defaults)


def test_a_new_version_of_an_adopted_tool_is_what_its_arm_runs(tmp_path: Path) -> None:
    adopted = subject()
    record = b'{"v": 2, "slug": "repo-map"}\n'
    newer = dataclasses.replace(
        adopted,
        definition=DefinitionRef(
            id=adopted.definition.id,
            artifact=ArtifactRef.of_bytes(record, "application/json", "openagents.coder-package.v1"),
        ),
        programs=tuple(Program(p.slug, p.data + b" ") for p in adopted.programs),
        skills=tuple(Skill(s.name, s.data + b"\nNewer.\n") for s in adopted.skills),
    )
    assert newer.programs
    assert newer.skills
    defaults = AdoptedDefaults(release=RELEASE, lock=LOCK, subjects=(adopted,))
    assert not defaults.holds(newer)
    assert admitted(newer, Arm.BASELINE, defaults) == (adopted.programs, adopted.skills)
    assert admitted(newer, Arm.SUBJECT, defaults) == (newer.programs, newer.skills)


def test_both_locks_and_the_report_name_the_defaults(tmp_path: Path) -> None:
    evals = write_cases(tmp_path / "evals", TWO_CASES)
    plain = build_report(inputs(evals))
    defaults = AdoptedDefaults(release=RELEASE, lock=LOCK, subjects=(other_tool(),))
    marginal = build_report(inputs(evals, defaults=Defaults(defaults.release, defaults.lock_json())))
    assert plain.report.ext_eval.defaults is None
    assert marginal.report.ext_eval.defaults == RELEASE
    assert json.loads(marginal.report_bytes)["meta"]["ext_eval"]["defaults"] == RELEASE.to_json()
    for arm in ("subject", "baseline"):
        lock = ArmLock.parse_bytes(marginal.artifacts[f"{arm}-lock.json"])
        assert isinstance(lock.defaults, dict)
        assert lock.defaults["release"] == RELEASE.to_json()
        assert lock.defaults["lock"] == ArtifactRef.of_bytes(LOCK, "application/json", LOCK_SCHEMA).to_json()
        subjects = lock.defaults["subjects"]
        assert isinstance(subjects, list)
        assert [item["definition"]["id"] for item in subjects] == [other_tool().definition.id]
        assert marginal.artifacts[f"{arm}-lock.json"] != plain.artifacts[f"{arm}-lock.json"]
    assert marginal.report.subject.lock != plain.report.subject.lock
    assert marginal.report.baseline is not None
    assert plain.report.baseline is not None
    assert marginal.report.baseline.lock != plain.report.baseline.lock
    assert json.loads(marginal.run_json)["subject_lock"] == json.loads(plain.run_json)["subject_lock"]
    # Another defaults release is another line of results: the locks change again.
    moved = dataclasses.replace(defaults, release=EventRef(id="77" * 32, pubkey="66" * 32, kind=3184))
    again = build_report(inputs(evals, defaults=Defaults(moved.release, moved.lock_json())))
    assert again.report.subject.lock != marginal.report.subject.lock
