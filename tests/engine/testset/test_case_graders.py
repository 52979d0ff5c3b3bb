"""Grader specs: each type parses to its typed record, and each bad grader is refused naming file and key."""

from __future__ import annotations

import tomllib

import pytest

from eval_runner.engine.grade.spec import (
    ArmRule,
    ChoiceQuestion,
    DecisionGrader,
    FileExistsGrader,
    FocusKind,
    JudgeGrader,
    MatchMode,
    NoulQuestion,
    OperationOrderGrader,
    OperationUsedGrader,
    ReceiptGrader,
    RegexGrader,
    ScoreQuestion,
    parse_grader,
)
from eval_runner.engine.testset.frontmatter import TestSetError

FILE = "case/graders/g.md"


def parse(source: str, body: str | None = None, name: str | None = "g") -> object:
    return parse_grader(tomllib.loads(source), body, name, file=FILE)


def refused(source: str, body: str | None = None, name: str | None = "g") -> TestSetError:
    with pytest.raises(TestSetError) as caught:
        parse(source, body, name)
    assert caught.value.file == FILE
    return caught.value


def test_a_regex_takes_its_pattern_from_the_trimmed_body() -> None:
    grader = parse('type = "regex"\nflags = "i"', "\n  hello\n")
    assert isinstance(grader, RegexGrader)
    assert grader.pattern == "hello"
    assert grader.name == "g"
    assert grader.weight == 1.0
    assert grader.arm is None
    assert grader.target.kind is FocusKind.LAST_MESSAGE
    assert grader.compile().search("HeLLo there")


def test_regex_match_modes_and_targets() -> None:
    grader = parse('type = "regex"\nmatch = "count:2"\ntarget = "trajectory"', "x")
    assert isinstance(grader, RegexGrader)
    assert grader.match.mode is MatchMode.COUNT
    assert grader.match.count == 2
    assert grader.match.describe() == "count:2"
    assert grader.target.kind is FocusKind.TRAJECTORY
    filed = parse('type = "regex"\nmatch = "not_contains"\ntarget = { file = "out/a.md" }', "x")
    assert isinstance(filed, RegexGrader)
    assert filed.match.mode is MatchMode.NOT_CONTAINS
    assert filed.target.path == "out/a.md"
    assert filed.target.describe() == "file out/a.md"


@pytest.mark.parametrize(
    ("source", "body", "key", "words"),
    [
        ('type = "regex"\npattern = "a"', "b", "pattern", "given twice"),
        ('type = "regex"', None, "pattern", "in the frontmatter or as the body"),
        ('type = "regex"\nmatch = "count:two"', "x", "match", "count:N"),
        ('type = "regex"\nflags = "q"', "x", "flags", "the flags are i, m, s, and x"),
        ('type = "regex"\nflags = ""', "x", "flags", "is empty"),
        ('type = "regex"', "(", "pattern", "does not compile"),
        ('type = "regex"\ntarget = "elsewhere"', "x", "target", "last_message, trajectory, files"),
        ('type = "regex"\ntarget = { file = "../x" }', "x", "target.file", "segments"),
        ('type = "regex"\ntarget = { file = "/etc/passwd" }', "x", "target.file", "relative path"),
        ('type = "regex"\ntarget = { path = "x" }', "x", "target.path", "the allowed keys are file"),
        ('type = "regex"\ntarget = 3', "x", "target", "a string or a table"),
    ],
)
def test_bad_regex_graders_are_refused(source: str, body: str | None, key: str, words: str) -> None:
    error = refused(source, body)
    assert error.key == key
    assert words in error.message


def test_common_keys() -> None:
    grader = parse('type = "receipt"\noperation = "x"\nweight = 2.5\narm = "subject-only"\nname = "other"')
    assert isinstance(grader, ReceiptGrader)
    assert (grader.name, grader.weight, grader.arm) == ("other", 2.5, ArmRule.SUBJECT_ONLY)


@pytest.mark.parametrize(
    ("source", "key", "words"),
    [
        ('operation = "x"', "type", "needs a `type`; the types are regex, operation_used"),
        ('type = 3\noperation = "x"', "type", "must be a string"),
        ('type = "baseline"', "type", "unknown grader type `baseline`; the types are regex, operation_used"),
        ('type = "receipt"\noperation = "x"\nweight = 0', "weight", "greater than 0"),
        ('type = "receipt"\noperation = "x"\nweight = -1.5', "weight", "greater than 0"),
        ('type = "receipt"\noperation = "x"\nweight = nan', "weight", "greater than 0"),
        ('type = "receipt"\noperation = "x"\nweight = true', "weight", "must be a number"),
        ('type = "receipt"\noperation = "x"\narm = "baseline"', "arm", "subject-only"),
        ('type = "receipt"\noperation = "x"\nname = ".hidden"', "name", "grader name"),
        ('type = "receipt"\noperation = "x"\nname = 7', "name", "must be a string"),
        ('type = "receipt"', "operation", "needs `operation`"),
        ('type = "receipt"\noperation = "  "', "operation", "is empty"),
    ],
)
def test_bad_common_keys_are_refused(source: str, key: str, words: str) -> None:
    error = refused(source)
    assert error.key == key
    assert words in error.message


def test_an_unknown_key_names_the_allowed_set() -> None:
    error = refused('type = "file_exists"\npath = "a"\nglob = 1')
    assert error.key == "glob"
    assert "`glob`" in error.message
    assert "type, name, weight, arm, path, exists" in error.message


def test_a_case_toml_grader_needs_a_name_and_errors_carry_its_place() -> None:
    with pytest.raises(TestSetError) as caught:
        parse_grader({"type": "receipt", "operation": "x"}, None, None, file="c/case.toml", prefix="graders[1].")
    assert caught.value.file == "c/case.toml"
    assert caught.value.key == "graders[1].name"


def test_operation_used_bounds() -> None:
    grader = parse('type = "operation_used"\noperation = "shell"')
    assert isinstance(grader, OperationUsedGrader)
    assert (grader.min, grader.max, grader.input_match) == (1, None, None)
    bounded = parse('type = "operation_used"\noperation = "m"\nmin = 0\nmax = 0\ninput_match = "src/.*"')
    assert isinstance(bounded, OperationUsedGrader)
    assert (bounded.min, bounded.max) == (0, 0)
    regex = bounded.input_regex()
    assert regex is not None
    assert regex.search("src/a.rs")
    assert "below" in refused('type = "operation_used"\noperation = "s"\nmin = 2\nmax = 1').message
    assert refused('type = "operation_used"\noperation = "s"\nmin = -1').key == "min"
    assert refused('type = "operation_used"\noperation = "s"\nmax = 1.5').key == "max"
    assert refused('type = "operation_used"\noperation = "s"\ninput_match = "("').key == "input_match"


def test_operation_order_and_file_exists() -> None:
    order = parse('type = "operation_order"\nbefore = "a"\nafter = "b"')
    assert isinstance(order, OperationOrderGrader)
    assert (order.before, order.after) == ("a", "b")
    assert refused('type = "operation_order"\nbefore = "a"').key == "after"
    exists = parse('type = "file_exists"\npath = "*.md"\nexists = false')
    assert isinstance(exists, FileExistsGrader)
    assert exists.exists is False
    assert refused('type = "file_exists"\npath = "a"\nexists = "no"').key == "exists"


def test_decision_questions_are_typed() -> None:
    noul = parse('type = "decision"\nquestion = "Did it work?"\nthreshold = 0.7', "rubric text")
    assert isinstance(noul, DecisionGrader)
    assert noul.question == NoulQuestion("Did it work?")
    assert noul.threshold == 0.7
    assert noul.rubric == "rubric text"
    assert noul.calls_a_door
    score = parse('type = "decision"\nquestion = { instructions = "How well?", levels = ["no", "partly", "fully"] }')
    assert isinstance(score, DecisionGrader)
    assert score.question == ScoreQuestion("How well?", ("no", "partly", "fully"))
    assert score.threshold == 0.5
    choice = parse(
        'type = "decision"\n[question]\ninstructions = "Which?"\npass = ["fixed"]\n'
        '[question.options]\nfixed = "It fixed it"\nbroke = "It broke it"'
    )
    assert isinstance(choice, DecisionGrader)
    assert choice.question == ChoiceQuestion("Which?", (("broke", "It broke it"), ("fixed", "It fixed it")), ("fixed",))
    table_noul = parse('type = "decision"\nquestion = { instructions = "Plain?" }')
    assert isinstance(table_noul, DecisionGrader)
    assert table_noul.question == NoulQuestion("Plain?")


@pytest.mark.parametrize(
    ("source", "body", "key"),
    [
        ('type = "decision"\nthreshold = 0.5', None, "question"),
        ('type = "decision"\nquestion = "q"\nthreshold = 1.5', None, "threshold"),
        ('type = "decision"\nquestion = "q"\nrubric = "r"', "body", "rubric"),
        ('type = "decision"\nquestion = ""', None, "question"),
        ('type = "decision"\nquestion = { levels = ["a", "b"] }', None, "question.instructions"),
        ('type = "decision"\nquestion = { instructions = "q", levels = ["one"] }', None, "question.levels"),
        ('type = "decision"\nquestion = { instructions = "q", levels = "ab" }', None, "question.levels"),
        ('type = "decision"\nquestion = { instructions = "q", levels = ["a", ""] }', None, "question.levels"),
        ('type = "decision"\nquestion = { instructions = "q", pass = ["a"] }', None, "question.pass"),
        ('type = "decision"\nquestion = { instructions = "q", bogus = 1 }', None, "question.bogus"),
        (
            'type = "decision"\nquestion = { instructions = "q", levels = ["a", "b"], options = { a = "x", b = "y" } }',
            None,
            "question",
        ),
        (
            'type = "decision"\nquestion = { instructions = "q", options = { a = "x" }, pass = ["a"] }',
            None,
            "question.options",
        ),
        ('type = "decision"\nquestion = { instructions = "q", options = { a = "x", b = "y" } }', None, "question.pass"),
        (
            'type = "decision"\nquestion = { instructions = "q", options = { a = "x", b = "y" }, pass = ["c"] }',
            None,
            "question.pass",
        ),
        (
            'type = "decision"\nquestion = { instructions = "q", options = { a = "x", b = 1 }, pass = ["a"] }',
            None,
            "question.options.b",
        ),
    ],
)
def test_bad_decision_graders_are_refused(source: str, body: str | None, key: str) -> None:
    assert refused(source, body).key == key


def test_judge_and_subject_only() -> None:
    judge = parse('type = "judge"\nfocus = "files"', "It wrote a summary.")
    assert isinstance(judge, JudgeGrader)
    assert judge.criteria == "It wrote a summary."
    assert judge.focus.kind is FocusKind.FILES
    assert refused('type = "judge"').key == "criteria"
    operations = {"repo-map.map"}
    supplied = parse('type = "operation_used"\noperation = "repo-map.map"')
    assert isinstance(supplied, OperationUsedGrader)
    assert supplied.subject_only(operations)
    both = parse('type = "operation_used"\noperation = "repo-map.map"\narm = "both"')
    assert isinstance(both, OperationUsedGrader)
    assert not both.subject_only(operations)
    shell = parse('type = "operation_used"\noperation = "shell"')
    assert isinstance(shell, OperationUsedGrader)
    assert not shell.subject_only(operations)
    marked = parse('type = "regex"\narm = "subject-only"', "x")
    assert isinstance(marked, RegexGrader)
    assert marked.subject_only(operations)
