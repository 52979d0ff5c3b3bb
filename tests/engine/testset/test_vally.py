"""Microsoft Vally's `eval.yaml` read as our cases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from eval_runner.engine.grade.spec import (
    FileExistsGrader,
    FocusKind,
    JudgeGrader,
    MatchMode,
    OperationUsedGrader,
    RegexGrader,
)
from eval_runner.engine.testset.cases import Case, CaseKind
from eval_runner.engine.testset.foreign import FormatCode, FormatError
from eval_runner.engine.testset.vally import parse_eval_yaml

FILES = {"fixtures/input.txt": b"in", "fixtures/other.txt": b"other"}


def read(path: str, file: str, key: str) -> bytes | None:
    return FILES.get(path)


def loaded(value: Any, skill: str | None = "test-writer") -> tuple[list[Case], tuple[str, ...]]:
    data = yaml.safe_dump(value).encode() if not isinstance(value, bytes) else value
    read_set = parse_eval_yaml(data, read, skill)
    return [case.to_case(Path("/x/evals")) for case in read_set.cases], read_set.notices


def test_the_quickstart_spec_becomes_a_should_fire_case() -> None:
    spec = b"""
name: test-writer-eval
type: capability
config:
  runs: 2
  timeout: 120s
  model: gpt-5.5
stimuli:
  - name: basic-test-generation
    prompt: |
      Write unit tests for this function:
      function add(a, b) { return a + b; }
      Save the tests to a file called add.test.js.
    graders:
      - type: file-exists
        config:
          path: "add.test.js"
      - type: output-contains
        config:
          substring: "test"
    constraints:
      max_turns: 10
scoring:
  weights:
    file-exists: 1.0
    output-contains: 0.5
  threshold: 0.7
"""
    (case,), notices = loaded(spec)
    assert case.name == "basic-test-generation"
    assert case.kind is CaseKind.SHOULD_FIRE
    assert case.runs == 2
    assert case.run.deadline_seconds == 120
    assert case.prompt.startswith("Write unit tests")
    graders = {grader.name: grader for grader in case.graders}
    exists = graders["file-exists"]
    assert isinstance(exists, FileExistsGrader)
    assert (exists.path, exists.exists, exists.weight) == ("add.test.js", True, 1.0)
    contains = graders["output-contains"]
    assert isinstance(contains, RegexGrader)
    assert (contains.pattern, contains.weight, contains.target.kind) == ("test", 0.5, FocusKind.LAST_MESSAGE)
    assert any("max_turns is not enforced" in line for line in notices)
    assert any("threshold is not read" in line for line in notices)
    assert any("model" in line for line in notices)


def test_every_grader_kind_maps_onto_ours_and_a_disallowed_skill_makes_a_should_not_fire_case() -> None:
    spec = {
        "defaults": {"timeout": "2m"},
        "environment": {"files": [{"src": "fixtures/input.txt", "dest": "input.txt"}]},
        "stimuli": [
            {
                "name": "Say hello, please!",
                "prompt": "Say hello.",
                "rubric": ["Friendly", "One line"],
                "environment": {"files": [{"src": "fixtures/other.txt", "dest": "./docs/other.txt"}]},
                "constraints": {"max_duration": "30000ms"},
                "graders": [
                    {"type": "output-not-contains", "name": "no shouting", "config": {"substring": "HELLO!"}},
                    {"type": "output-matches", "config": {"pattern": "(?i)hel+o"}},
                    {"type": "file-not-exists", "config": {"path": "out.txt"}},
                    {"type": "file-contains", "config": {"path": "input.txt", "substring": "in"}},
                    {"type": "file-not-matches", "config": {"path": "input.txt", "pattern": "^x"}},
                    {"type": "skill-invocation", "config": {"disallowed": ["test-writer"], "required": ["greet"]}},
                    {"type": "prompt"},
                    {"type": "completed"},
                    {"type": "exit-success", "weight": 0},
                ],
            }
        ],
    }
    (case,), _ = loaded(spec)
    assert case.name == "Say-hello-please"
    assert case.description == "Say hello, please!"
    assert case.kind is CaseKind.SHOULD_NOT_FIRE
    assert case.run.deadline_seconds == 30
    assert [(f.name, f.data) for f in case.fixtures] == [("docs/other.txt", b"other"), ("input.txt", b"in")]
    graders = {grader.name: grader for grader in case.graders}
    assert "exit-success" not in graders  # a weight of 0 does not count
    shouting = graders["no-shouting"]
    assert isinstance(shouting, RegexGrader)
    assert shouting.match.mode is MatchMode.NOT_CONTAINS
    assert shouting.compile().search("HELLO!")
    assert not shouting.compile().search("HELLO")
    assert isinstance(graders["file-not-exists"], FileExistsGrader)
    assert not graders["file-not-exists"].exists
    file_contains = graders["file-contains"]
    assert isinstance(file_contains, RegexGrader)
    assert (file_contains.target.kind, file_contains.target.path) == (FocusKind.FILE, "input.txt")
    required = graders["skill-invocation-required-greet"]
    assert isinstance(required, OperationUsedGrader)
    assert (required.operation, required.min, required.max) == ("skill:greet", 1, None)
    disallowed = graders["skill-invocation-disallowed-test-writer"]
    assert isinstance(disallowed, OperationUsedGrader)
    assert (disallowed.operation, disallowed.max, disallowed.arm) == ("skill:test-writer", 0, "both")
    judge = graders["prompt"]
    assert isinstance(judge, JudgeGrader)
    assert judge.criteria == "- Friendly\n- One line"
    completed = graders["completed"]
    assert isinstance(completed, RegexGrader)
    assert completed.compile().search("x")
    assert not completed.compile().search(" \n")


def test_tags_say_should_not_fire_and_stimulus_names_stay_unique() -> None:
    spec = {
        "stimuli": [
            {"name": "same", "prompt": "a", "tags": {"kind": "should-not-fire"}, "graders": [{"type": "completed"}]},
            {"name": "same", "prompt": "b", "tags": {"should_trigger": False}, "graders": [{"type": "completed"}]},
            {"prompt": "c", "tags": ["smoke"], "graders": [{"type": "completed"}]},
        ]
    }
    cases, _ = loaded(spec)
    assert [case.name for case in cases] == ["same", "same-2", "stimulus-2"]
    assert [case.kind for case in cases] == [CaseKind.SHOULD_NOT_FIRE, CaseKind.SHOULD_NOT_FIRE, CaseKind.SHOULD_FIRE]
    assert cases[2].tags == ("smoke",)


GRADER = [{"type": "completed"}]


@pytest.mark.parametrize(
    ("value", "code", "key"),
    [
        ({}, FormatCode.MISSING, "stimuli"),
        ({"stimuli": []}, FormatCode.MALFORMED, "stimuli"),
        ({"stimulus": []}, FormatCode.UNKNOWN_KEY, "stimulus"),
        (
            {"config": {}, "defaults": {}, "stimuli": [{"prompt": "p", "graders": GRADER}]},
            FormatCode.MALFORMED,
            "defaults",
        ),
        (
            {"config": {"runs": 0}, "stimuli": [{"prompt": "p", "graders": GRADER}]},
            FormatCode.UNSUPPORTED,
            "config.runs",
        ),
        (
            {"config": {"runs": 11}, "stimuli": [{"prompt": "p", "graders": GRADER}]},
            FormatCode.TOO_LARGE,
            "config.runs",
        ),
        (
            {"config": {"timeout": "2 weeks"}, "stimuli": [{"prompt": "p", "graders": GRADER}]},
            FormatCode.MALFORMED,
            "config.timeout",
        ),
        (
            {"config": {"timeout": "1h"}, "stimuli": [{"prompt": "p", "graders": GRADER}]},
            FormatCode.TOO_LARGE,
            "config.timeout",
        ),
        (
            {"environment": {"commands": ["npm i"]}, "stimuli": [{"prompt": "p", "graders": GRADER}]},
            FormatCode.UNSUPPORTED,
            "environment.commands",
        ),
        (
            {"environment": {"files": [{"src": "gone", "dest": "x"}]}, "stimuli": [{"prompt": "p", "graders": GRADER}]},
            FormatCode.MISSING,
            "environment.files[0].src",
        ),
        (
            {
                "environment": {"files": [{"src": "fixtures/input.txt", "dest": "../x"}]},
                "stimuli": [{"prompt": "p", "graders": GRADER}],
            },
            FormatCode.OUTSIDE,
            "environment.files[0].dest",
        ),
        ({"stimuli": [{"graders": GRADER}]}, FormatCode.MISSING, "stimuli[0].prompt"),
        ({"stimuli": [{"prompt": "p"}]}, FormatCode.MISSING, "stimuli[0].graders"),
        ({"stimuli": [{"prompt": "p", "turns": [], "graders": GRADER}]}, FormatCode.UNSUPPORTED, "stimuli[0].turns"),
        (
            {"stimuli": [{"prompt": "p", "graders": [{"type": "tool-calls"}]}]},
            FormatCode.UNSUPPORTED,
            "stimuli[0].graders[0].type",
        ),
        (
            {"stimuli": [{"prompt": "p", "graders": [{"type": "output-contains"}]}]},
            FormatCode.MISSING,
            "stimuli[0].graders[0].config.substring",
        ),
        (
            {"stimuli": [{"prompt": "p", "graders": [{"type": "output-contains", "config": {"text": "a"}}]}]},
            FormatCode.UNKNOWN_KEY,
            "stimuli[0].graders[0].config.text",
        ),
        (
            {"stimuli": [{"prompt": "p", "graders": [{"type": "output-matches", "config": {"pattern": "("}}]}]},
            FormatCode.MALFORMED,
            "pattern",
        ),
        (
            {"stimuli": [{"prompt": "p", "graders": [{"type": "file-exists", "config": {"path": "/etc/passwd"}}]}]},
            FormatCode.OUTSIDE,
            "stimuli[0].graders[0].config.path",
        ),
        (
            {"stimuli": [{"prompt": "p", "graders": [{"type": "prompt"}]}]},
            FormatCode.MISSING,
            "stimuli[0].graders[0].config.prompt",
        ),
        (
            {"stimuli": [{"prompt": "p", "graders": [{"type": "skill-invocation", "config": {}}]}]},
            FormatCode.MISSING,
            "stimuli[0].graders[0].config",
        ),
        (
            {"stimuli": [{"prompt": "p", "graders": [{"type": "completed", "weight": -1}]}]},
            FormatCode.MALFORMED,
            "stimuli[0].graders[0].weight",
        ),
        (
            {"stimuli": [{"prompt": "p", "constraints": {"max_turns": "ten"}, "graders": GRADER}]},
            FormatCode.MALFORMED,
            "stimuli[0].constraints.max_turns",
        ),
    ],
)
def test_a_bad_eval_yaml_is_a_typed_error_naming_the_field(value: Any, code: FormatCode, key: str | None) -> None:
    with pytest.raises(FormatError) as caught:
        loaded(value)
    assert (caught.value.code, caught.value.key) == (code, key)
    assert caught.value.file.startswith("eval.yaml")


def test_yaml_that_does_not_parse_or_uses_aliases_is_malformed() -> None:
    for data in (b"stimuli: [", b"a: &x 1\nb: *x\n", b"\xff", b"[" * 10_000):
        with pytest.raises(FormatError) as caught:
            parse_eval_yaml(data, read, None)
        assert caught.value.code is FormatCode.MALFORMED


LEAF = st.none() | st.booleans() | st.integers(-3, 20) | st.text(max_size=12) | st.sampled_from(["2m", "5s", "x"])
ANY = st.recursive(
    LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
GRADERS = st.lists(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(
                ["output-contains", "file-exists", "skill-invocation", "prompt", "completed", "nope"]
            )
        },
        optional={
            "config": st.dictionaries(
                st.sampled_from(["substring", "path", "required", "disallowed", "prompt"]), ANY, max_size=2
            ),
            "weight": ANY,
            "name": ANY,
        },
    ),
    max_size=3,
)
STIMULUS = st.fixed_dictionaries(
    {"prompt": ANY, "graders": GRADERS},
    optional={"name": ANY, "tags": ANY, "constraints": ANY, "environment": ANY, "rubric": ANY},
)


@settings(max_examples=300, deadline=None)
@given(
    ANY | st.fixed_dictionaries({"stimuli": st.lists(STIMULUS, max_size=3)}, optional={"config": ANY, "scoring": ANY})
)
def test_reading_any_eval_yaml_never_crashes(value: Any) -> None:
    try:
        cases, _ = loaded(value)
    except FormatError as error:
        assert error.code in FormatCode  # noqa: PT017 - hypothesis drives this, not pytest.raises
        return
    assert len({case.name for case in cases}) == len(cases)
