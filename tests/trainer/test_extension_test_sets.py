"""`trainer run --extension DIR` alone sends the directory's test set in whichever format it holds it (our
case directories, the Agent Skills `evals/evals.json`, a Vally `eval.yaml`), read as `eval run` reads it."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from eval_runner.cli.parser import UsageError
from eval_runner.cli.trainer import build_input
from eval_runner.engine.testset.formats import load_test_set
from eval_runner.trainer.client import TrainerError, extension_tool
from eval_runner.trainer.requests import extension_draft
from tests.support.paths import EXAMPLE

SKILL_EXAMPLE = EXAMPLE.parent / "brief"
VALLY = b"""
name: brief-eval
stimuli:
  - name: overview
    prompt: Give me a short overview of the repository in this directory.
    graders:
      - type: output-contains
        config:
          substring: Rust
  - name: greeting
    prompt: Say hello to a new contributor, in one line.
    tags:
      kind: should-not-fire
    graders:
      - type: output-contains
        config:
          substring: glad
"""


def skill_copy(tmp_path: Path, *, keep: str) -> Path:
    """The SKILL.md example with only one of its test sets: `evals.json` or a Vally `eval.yaml`."""
    target = tmp_path / "brief"
    shutil.copytree(SKILL_EXAMPLE, target)
    for case in ("overview", "greeting"):
        shutil.rmtree(target / "evals" / case)
    if keep == "eval.yaml":
        (target / "evals" / "evals.json").unlink()
        (target / "eval.yaml").write_bytes(VALLY)
    return target


def arguments(extension: Path) -> argparse.Namespace:
    return argparse.Namespace(extension=extension, subject=None, draft=None, suite=None, runs=1)


def test_a_skill_directorys_evals_json_is_sent_as_the_draft(tmp_path: Path) -> None:
    root = skill_copy(tmp_path, keep="evals.json")
    tool = extension_tool(root)
    assert (tool.test_set, tool.skill_name) == (root, "brief")
    drafted = extension_draft(root, tool.draft_tool(), skill_name=tool.skill_name)
    assert [(case.id, case.kind) for case in drafted.draft.cases] == [
        ("eval-1", "should-fire"),
        ("eval-2", "should-not-fire"),
    ]
    loaded = {case.name: case for case in load_test_set(root, skill_name="brief").suite.cases}
    for case in drafted.draft.cases:
        assert case.prompt == loaded[case.id].files.prompt.decode()
        assert [grader.text for grader in case.graders] == [
            grader.data.decode() for grader in sorted(loaded[case.id].files.graders, key=lambda g: g.name)
        ]
    assert drafted.warnings[0] == "test set: 2 cases read from evals/evals.json"
    assert drafted.warnings[1].startswith("eval-1: its fixtures (6 files) stay behind")

    hosted, warnings = build_input(arguments(root))
    assert hosted.draft == drafted.draft
    assert hosted.subject == tool.definition
    assert warnings == list(drafted.warnings)


def test_a_vally_eval_yaml_is_sent_as_the_draft(tmp_path: Path) -> None:
    root = skill_copy(tmp_path, keep="eval.yaml")
    hosted, warnings = build_input(arguments(root))
    assert hosted.draft is not None
    assert [(case.id, case.kind) for case in hosted.draft.cases] == [
        ("overview", "should-fire"),
        ("greeting", "should-not-fire"),
    ]
    assert warnings[0] == "test set: 2 stimuli read from eval.yaml"


def test_case_directories_still_come_first(tmp_path: Path) -> None:
    hosted, warnings = build_input(arguments(SKILL_EXAMPLE))
    assert hosted.draft is not None
    assert [case.id for case in hosted.draft.cases] == ["greeting", "overview"]
    assert "test set: also found evals/evals.json, which was not read; one test set per extension" in warnings
    package, _ = build_input(arguments(EXAMPLE))
    assert package.draft is not None
    assert [case.id for case in package.draft.cases] == ["greeting", "overview"]


def test_a_bad_evals_json_names_the_directory_and_the_field(tmp_path: Path) -> None:
    root = skill_copy(tmp_path, keep="evals.json")
    evals = root / "evals" / "evals.json"
    evals.write_text(evals.read_text().replace('"skill_name": "brief"', '"skill_name": "other"'))
    with pytest.raises(TrainerError) as caught:
        build_input(arguments(root))
    assert caught.value.code == "input"
    assert caught.value.message.startswith(f"{root}: evals/evals.json")


def test_a_skill_directory_without_a_test_set_says_what_to_run(tmp_path: Path) -> None:
    root = tmp_path / "brief"
    root.mkdir()
    shutil.copy(SKILL_EXAMPLE / "SKILL.md", root / "SKILL.md")
    tool = extension_tool(root)
    assert (tool.test_set, tool.evals) == (None, None)
    with pytest.raises(UsageError, match="--extension DIR with a test set"):
        build_input(arguments(root))
