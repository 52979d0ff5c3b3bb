"""`evals/evals.json` (the Agent Skills evaluation convention) read as our cases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eval_runner.engine.grade.spec import FocusKind, JudgeGrader, MatchMode, RegexGrader
from eval_runner.engine.testset.cases import CaseKind, Operation
from eval_runner.engine.testset.evals_json import fixture_path, parse_evals_json
from eval_runner.engine.testset.foreign import FormatCode, FormatError

FILES = {"evals/files/sales.csv": b"month,revenue\n", "data/extra.txt": b"x"}


def read(path: str, file: str, key: str) -> bytes | None:
    return FILES.get(path)


def cases_of(value: Any, skill: str | None = "csv-analyzer") -> list[Any]:
    evals = parse_evals_json(json.dumps(value).encode(), read, skill)
    return [case.to_case(Path("/x/evals")) for case in evals]


def test_an_eval_becomes_a_should_fire_case_with_its_assertions_as_graders() -> None:
    (case,) = cases_of(
        {
            "skill_name": "csv-analyzer",
            "evals": [
                {
                    "id": 1,
                    "prompt": "Find the top 3 months in sales.csv.",
                    "expected_output": "A chart of the top months.",
                    "files": ["evals/files/sales.csv", "data/extra.txt"],
                    "assertions": [
                        "The output names the top month",
                        {"name": "no trace", "type": "not_contains", "value": "Traceback (most recent"},
                        {"type": "contains", "value": "a+b [c]"},
                    ],
                }
            ],
        }
    )
    assert case.name == "eval-1"
    assert case.kind is CaseKind.SHOULD_FIRE
    assert case.prompt == "Find the top 3 months in sales.csv."
    assert case.description == "A chart of the top months."
    assert case.run.allowed_operations == (Operation.READ, Operation.WRITE)
    assert [(fixture.name, fixture.data) for fixture in case.fixtures] == [
        ("data/extra.txt", b"x"),
        ("sales.csv", b"month,revenue\n"),
    ]
    graders = {grader.name: grader for grader in case.graders}
    assert set(graders) == {"assertion-1", "no-trace", "assertion-3"}
    judge = graders["assertion-1"]
    assert isinstance(judge, JudgeGrader)
    assert judge.criteria == "The output names the top month"
    trace = graders["no-trace"]
    assert isinstance(trace, RegexGrader)
    assert trace.match.mode is MatchMode.NOT_CONTAINS
    assert trace.target.kind is FocusKind.LAST_MESSAGE
    literal = graders["assertion-3"]
    assert isinstance(literal, RegexGrader)
    assert literal.compile().search("so a+b [c] it is")
    assert not literal.compile().search("aab c")


def test_skill_creators_expectations_and_a_bare_expected_output_are_judged() -> None:
    first, second = cases_of(
        {
            "evals": [
                {"id": "pdf-fill", "prompt": "Fill it.", "expectations": ["The form is filled"]},
                {"id": 2, "prompt": "Say hi.", "expected_output": "A greeting", "should_trigger": False},
            ]
        }
    )
    assert first.name == "pdf-fill"
    assert [(g.name, g.criteria) for g in first.graders if isinstance(g, JudgeGrader)] == [
        ("assertion-1", "The form is filled")
    ]
    assert second.kind is CaseKind.SHOULD_NOT_FIRE
    assert [(g.name, g.criteria) for g in second.graders if isinstance(g, JudgeGrader)] == [
        ("expected-output", "A greeting")
    ]


@pytest.mark.parametrize(
    ("value", "code", "key"),
    [
        ([], FormatCode.MALFORMED, None),
        ({"evals": [], "skill_name": "csv-analyzer"}, FormatCode.MALFORMED, "evals"),
        (
            {"skill_name": "other", "evals": [{"id": 1, "prompt": "p", "assertions": ["a"]}]},
            FormatCode.MALFORMED,
            "skill_name",
        ),
        ({"skill": "x", "evals": []}, FormatCode.UNKNOWN_KEY, "skill"),
        ({"evals": [{"prompt": "p", "assertions": ["a"]}]}, FormatCode.MALFORMED, "evals[0].id"),
        ({"evals": [{"id": True, "prompt": "p", "assertions": ["a"]}]}, FormatCode.MALFORMED, "evals[0].id"),
        ({"evals": [{"id": 1, "assertions": ["a"]}]}, FormatCode.MISSING, "evals[0].prompt"),
        ({"evals": [{"id": 1, "prompt": " "}]}, FormatCode.MALFORMED, "evals[0].prompt"),
        ({"evals": [{"id": 1, "prompt": "p"}]}, FormatCode.MISSING, "evals[0].assertions"),
        (
            {"evals": [{"id": 1, "prompt": "p", "assertions": [{"type": "regex", "value": "a"}]}]},
            FormatCode.UNSUPPORTED,
            "evals[0].assertions[0].type",
        ),
        (
            {"evals": [{"id": 1, "prompt": "p", "assertions": [{"type": "contains"}]}]},
            FormatCode.MISSING,
            "evals[0].assertions[0].value",
        ),
        (
            {"evals": [{"id": 1, "prompt": "p", "assertions": [{"type": "contains", "value": "v", "x": 1}]}]},
            FormatCode.UNKNOWN_KEY,
            "evals[0].assertions[0].x",
        ),
        ({"evals": [{"id": 1, "prompt": "p", "assertions": "a"}]}, FormatCode.MALFORMED, "evals[0].assertions"),
        (
            {"evals": [{"id": 1, "prompt": "p", "assertions": ["a"], "files": ["gone.txt"]}]},
            FormatCode.MISSING,
            "evals[0].files[0]",
        ),
        (
            {"evals": [{"id": 1, "prompt": "p", "assertions": ["a"], "should_trigger": "no"}]},
            FormatCode.MALFORMED,
            "evals[0].should_trigger",
        ),
        (
            {"evals": [{"id": 1, "prompt": "p", "assertions": ["a"]}, {"id": 1, "prompt": "q", "assertions": ["b"]}]},
            FormatCode.MALFORMED,
            "evals[1].id",
        ),
        (
            {"evals": [{"id": 1, "prompt": "p", "assertions": ["a"], "prompt_file": "p.md"}]},
            FormatCode.UNKNOWN_KEY,
            "evals[0].prompt_file",
        ),
    ],
)
def test_a_bad_evals_json_is_a_typed_error_naming_the_field(value: Any, code: FormatCode, key: str | None) -> None:
    with pytest.raises(FormatError) as caught:
        cases_of(value)
    assert (caught.value.code, caught.value.file, caught.value.key) == (code, "evals/evals.json", key)


def test_bytes_that_are_not_json_or_have_a_key_twice_are_malformed() -> None:
    for data in (b"{", b'{"evals": [], "evals": []}', b"\xff", b"[" * 100_000):
        with pytest.raises(FormatError) as caught:
            parse_evals_json(data, read, None)
        assert caught.value.code is FormatCode.MALFORMED


def test_input_files_land_without_the_evals_prefix() -> None:
    assert fixture_path("evals/files/a/b.csv") == "a/b.csv"
    assert fixture_path("evals/a.csv") == "a.csv"
    assert fixture_path("data/a.csv") == "data/a.csv"


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
EVAL = st.fixed_dictionaries(
    {"id": st.integers(-2, 5) | st.text(max_size=8), "prompt": st.text(max_size=20)},
    optional={
        "assertions": st.lists(
            st.text(max_size=10)
            | st.fixed_dictionaries(
                {"type": st.sampled_from(["contains", "not_contains", "x"]), "value": st.text(max_size=10)}
            ),
            max_size=3,
        ),
        "files": st.lists(st.sampled_from([*FILES, "../etc/passwd", "/abs", "evals/files/"]), max_size=2),
        "should_trigger": JSON,
        "expected_output": JSON,
    },
)


@settings(max_examples=300, deadline=None)
@given(JSON | st.fixed_dictionaries({"evals": st.lists(EVAL, max_size=3)}, optional={"skill_name": JSON}))
def test_reading_any_evals_json_never_crashes(value: Any) -> None:
    try:
        cases = cases_of(value)
    except FormatError as error:
        assert error.code in FormatCode  # noqa: PT017 - hypothesis drives this, not pytest.raises
        return
    assert cases
    assert len({case.name for case in cases}) == len(cases)
