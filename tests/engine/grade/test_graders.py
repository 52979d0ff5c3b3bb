"""Grading a run (runner.md §13.6): each structural grader and each rule, the subject-only rules in both
arms, outcomes that are not graded or fail everything, weights, the workspace reader, bounded patterns,
globs, and the grades document."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from eval_runner.engine.grade.graders import (
    GRADES_SCHEMA,
    NOT_GRADED,
    RECEIPT_LIMITATION,
    RECEIPT_UNSUPPORTED,
    FocusError,
    GraderResult,
    RunGrades,
    RunView,
    WorkspaceDirectory,
    grade_run,
    graded_run,
    grades_bytes,
    grades_document,
    grades_path,
    receipt_limitation,
)
from eval_runner.engine.grade.patterns import PatternRunner, glob_matches
from eval_runner.engine.grade.votes import Doors
from eval_runner.engine.run.trajectory import Trajectory, parse_log
from eval_runner.engine.testset.cases import Case, CaseFile, CaseFiles, load_suite, parse_case
from eval_runner.engine.verdict.scores import Arm, CaseKind, OutcomeWord
from tests.support.paths import EXAMPLE

PATTERNS = PatternRunner()


def case_of(graders: dict[str, str], prompt: str = "Where is the config?", kind: str = "should-fire") -> Case:
    """A case from grader files `{name: front matter and body}`."""
    text = f'+++\nv = "openagents.eval-case.v1"\nkind = "{kind}"\n+++\n\n{prompt}\n'
    files = tuple(CaseFile(f"{name}.md", source.encode()) for name, source in sorted(graders.items()))
    return parse_case("c", "c", Path("/nonexistent"), CaseFiles(text.encode(), None, files, ()))


def grader(front: str, body: str = "") -> str:
    return f"+++\n{front}\n+++\n\n{body}\n"


def call(name: str, arguments: Any = None, **fields: Any) -> dict[str, Any]:
    body = {"id": f"call-{name}", "name": name, "arguments": arguments or {}, "output": "", "outcome": "Completed"}
    return {**body, "milliseconds": 1, **fields}


def trajectory(*steps: tuple[str, str] | tuple[str, str, dict[str, Any]]) -> Trajectory:
    """A log of `(source, message[, call])` steps, read into a trajectory."""
    records: list[dict[str, Any]] = [
        {
            "record": "session",
            "schema_version": "ATIF-v1.8",
            "at": 1_000,
            "session": {"id": "s1", "model": "m1", "door": "d", "repository": "/repo", "version": "0.1.0"},
        }
    ]
    for index, item in enumerate(steps):
        step: dict[str, Any] = {"at": 2_000 + index, "source": item[0], "message": item[1]}
        if len(item) == 3:
            step["call"] = item[2]
        records.append({"record": "step", "step": step})
    records.append({"record": "end", "at": 9_000, "state": "ended"})
    return parse_log(b"".join(json.dumps(record).encode() + b"\n" for record in records), whole=True)


SAID = trajectory(("User", "Where is the config?"), ("Agent", "It lives in settings/production.toml. Hello!"))


def completed(**fields: Any) -> RunView:
    return RunView("completed", trajectory=fields.pop("trajectory", SAID), **fields)


async def one(source: str, view: RunView, arm: Arm = Arm.SUBJECT) -> GraderResult:
    grades = await grade_run(case_of({"g": source}), arm, view, Doors(), patterns=PATTERNS)
    assert len(grades.results) == 1
    return grades.results[0]


# ---------------------------------------------------------------------------------------------------- regex


async def test_a_regex_reads_the_final_message_by_default() -> None:
    result = await one(grader('type = "regex"', r"settings/production\.toml"), completed())
    assert (result.passed, result.explanation) == (True, "1 matches in last_message; wanted at least one match")
    assert result.type == "regex"
    assert (result.scored, result.weight, result.votes) == (True, 1.0, ())
    missed = await one(grader('type = "regex"', "staging"), completed())
    assert (missed.passed, missed.explanation) == (False, "0 matches in last_message; wanted at least one match")


async def test_a_regex_over_the_trajectory_reads_the_whole_document() -> None:
    # The user's words are in the document but not in the final message.
    source = grader('type = "regex"\ntarget = "trajectory"', "Where is the config")
    assert (await one(source, completed())).passed
    assert not (await one(grader('type = "regex"', "Where is the config"), completed())).passed
    steps = await one(grader('type = "regex"\ntarget = "trajectory"', '"schema_version":"ATIF-v1.8"'), completed())
    assert steps.passed


async def test_a_regex_over_files_reads_the_created_paths_one_a_line() -> None:
    view = completed(created_files=("notes/summary.md", "out.txt"))
    assert (await one(grader('type = "regex"\ntarget = "files"\nflags = "m"', r"^out\.txt$"), view)).passed
    assert (await one(grader('type = "regex"\ntarget = "files"\nflags = "m"', r"^summary"), view)).passed is False
    empty = await one(grader('type = "regex"\ntarget = "files"\nmatch = "not_contains"', "."), completed())
    assert empty.passed


async def test_a_regex_over_a_file_reads_that_workspace_file(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "summary.md").write_text("The crate has six files.\n")
    view = completed(workspace=WorkspaceDirectory(tmp_path))
    found = await one(grader('type = "regex"\ntarget = { file = "docs/summary.md" }', "six files"), view)
    assert (found.passed, found.explanation) == (True, "1 matches in file docs/summary.md; wanted at least one match")
    absent = await one(grader('type = "regex"\ntarget = { file = "docs/missing.md" }', "six"), view)
    assert (absent.passed, absent.explanation) == (False, "docs/missing.md does not exist in the workspace")
    unkept = await one(grader('type = "regex"\ntarget = { file = "docs/summary.md" }', "six"), completed())
    assert (unkept.passed, unkept.explanation) == (False, "the run kept no workspace to read")


@pytest.mark.parametrize(
    ("flags", "pattern", "text", "passed"),
    [
        ("", "hello", "Hello there", False),
        ("i", "hello", "Hello there", True),
        ("", "^there", "Hello\nthere", False),
        ("m", "^there", "Hello\nthere", True),
        ("", "Hello.there", "Hello\nthere", False),
        ("s", "Hello.there", "Hello\nthere", True),
        ("", "Hel lo # a comment", "Hello", False),
        ("x", "Hel lo # a comment", "Hello", True),
        ("imsx", "^ HELLO . THERE $", "hello\nthere", True),
    ],
)
async def test_each_regex_flag(flags: str, pattern: str, text: str, passed: bool) -> None:
    view = completed(trajectory=trajectory(("Agent", text)))
    front = f'type = "regex"\nflags = "{flags}"' if flags else 'type = "regex"'
    assert (await one(grader(front, pattern), view)).passed is passed


@pytest.mark.parametrize(
    ("match", "passed", "explanation"),
    [
        ("contains", True, "2 matches in last_message; wanted at least one match"),
        ("not_contains", False, "2 matches in last_message; wanted no match"),
        ("count:2", True, "2 matches in last_message; wanted exactly 2"),
        ("count:1", False, "2 matches in last_message; wanted exactly 1"),
        ("count:0", False, "2 matches in last_message; wanted exactly 0"),
    ],
)
async def test_each_match_mode(match: str, passed: bool, explanation: str) -> None:
    view = completed(trajectory=trajectory(("Agent", "a cat and a cat")))
    result = await one(grader(f'type = "regex"\nmatch = "{match}"', "cat"), view)
    assert (result.passed, result.explanation) == (passed, explanation)


async def test_not_contains_and_count_zero_pass_on_no_match() -> None:
    view = completed(trajectory=trajectory(("Agent", "nothing here")))
    assert (await one(grader('type = "regex"\nmatch = "not_contains"', "cat"), view)).passed
    assert (await one(grader('type = "regex"\nmatch = "count:0"', "cat"), view)).passed


async def test_a_run_without_a_trajectory_fails_every_grader_that_reads_it() -> None:
    view = RunView("completed", created_files=("a.txt",))
    for source in (
        grader('type = "regex"\nmatch = "not_contains"', "x"),
        grader('type = "regex"\ntarget = "trajectory"\nmatch = "not_contains"', "x"),
        grader('type = "operation_used"\noperation = "read"\nmin = 0'),
        grader('type = "operation_order"\nbefore = "a"\nafter = "b"'),
    ):
        result = await one(source, view)
        assert (result.passed, result.explanation) == (False, "the run wrote no trajectory")
    assert (await one(grader('type = "regex"\ntarget = "files"', "a"), view)).passed


async def test_a_final_message_of_content_parts_does_not_count_and_an_empty_one_is_empty_text() -> None:
    view = completed(trajectory=trajectory(("User", "hi")))
    assert view.last_message is None
    assert (await one(grader('type = "regex"\nmatch = "count:0"', "."), view)).passed


# --------------------------------------------------------------------------------------- operations


TOOLS = trajectory(
    ("User", "Map the repository"),
    ("Agent", "", call("read_file", {"path": "src/lib.rs"})),
    ("Agent", "", call("repo_map", {"operation": "map", "depth": 2}, extra={"step": "repo_map"})),
    ("Agent", "", call("read_file", {"path": "src/tables.rs"})),
    ("Agent", "", call("shell", {"command": "cargo test --quiet"})),
    ("Agent", "It is a Rust crate."),
)


@pytest.mark.parametrize(
    ("front", "passed", "explanation"),
    [
        ('operation = "read_file"', True, "read_file ran 2 times; wanted at least 1"),
        ('operation = "read_file"\nmin = 3', False, "read_file ran 2 times; wanted at least 3"),
        ('operation = "read_file"\nmax = 1', False, "read_file ran 2 times; wanted exactly 1"),
        ('operation = "read_file"\nmin = 2\nmax = 2', True, "read_file ran 2 times; wanted exactly 2"),
        ('operation = "read_file"\nmin = 0\nmax = 5', True, "read_file ran 2 times; wanted 0 to 5"),
        ('operation = "write_file"\nmin = 0\nmax = 0', True, "write_file ran 0 times; wanted exactly 0"),
        ('operation = "write_file"', False, "write_file ran 0 times; wanted at least 1"),
        ('operation = "repo_map"', True, "repo_map ran 1 times; wanted at least 1"),
        ('operation = "map"', True, "map ran 1 times; wanted at least 1"),
        ('operation = "read_file"\ninput_match = "tables"', True, "read_file ran 1 times; wanted at least 1"),
        ('operation = "read_file"\ninput_match = "tables"\nmin = 2', False, "read_file ran 1 times; wanted at least 2"),
        ('operation = "read_file"\ninput_match = "^\\\\{\\"path\\""', True, "read_file ran 2 times; wanted at least 1"),
        ('operation = "shell"\ninput_match = "^cargo test"', True, "shell ran 1 times; wanted at least 1"),
        ('operation = "repo_map"\ninput_match = "\\"depth\\":2"', True, "repo_map ran 1 times; wanted at least 1"),
    ],
)
async def test_operation_used_counts_calls_within_min_and_max(front: str, passed: bool, explanation: str) -> None:
    result = await one(grader(f'type = "operation_used"\n{front}'), completed(trajectory=TOOLS))
    assert (result.passed, result.explanation) == (passed, explanation)


@pytest.mark.parametrize(
    ("before", "after", "passed", "explanation"),
    [
        ("read_file", "repo_map", True, "read_file ran first (call 1), then repo_map (call 2)"),
        ("repo_map", "read_file", False, "read_file ran first (call 1), before repo_map (call 2)"),
        ("repo_map", "shell", True, "repo_map ran first (call 2), then shell (call 4)"),
        ("write_file", "shell", False, "write_file never ran"),
        ("shell", "write_file", False, "write_file never ran"),
    ],
)
async def test_operation_order_compares_first_calls(before: str, after: str, passed: bool, explanation: str) -> None:
    source = grader(f'type = "operation_order"\nbefore = "{before}"\nafter = "{after}"')
    result = await one(source, completed(trajectory=TOOLS))
    assert (result.passed, result.explanation) == (passed, explanation)


# -------------------------------------------------------------------------------------------- files


@pytest.mark.parametrize(
    ("path", "exists", "passed", "explanation"),
    [
        ("summary.md", "true", True, "created summary.md"),
        ("*.md", "true", True, "created summary.md"),
        ("docs/*.md", "true", True, "created docs/x.md"),
        ("**/*.rs", "true", False, "no created file matches **/*.rs"),
        ("*.md", "false", False, "created summary.md, which matches *.md"),
        ("**/*.rs", "false", True, "no created file matches **/*.rs"),
        ("docs/**", "false", False, "created docs/x.md, which matches docs/**"),
        ("summary.m?", "true", True, "created summary.md"),
    ],
)
async def test_file_exists_matches_created_paths_by_glob(
    path: str, exists: str, passed: bool, explanation: str
) -> None:
    view = completed(created_files=("summary.md", "docs/x.md"))
    result = await one(grader(f'type = "file_exists"\npath = "{path}"\nexists = {exists}'), view)
    assert (result.passed, result.explanation) == (passed, explanation)


async def test_file_exists_counts_only_present_files_and_shows_names_as_json_holds_them() -> None:
    # The run records which created paths are present (a link leaving the workspace is not); a name that
    # is not UTF-8 is matched, explained and written as `collect.shown_path` gives it.
    odd = os.fsdecode(b"odd-\xff.md")
    view = completed(created_files=("answer.md", odd), present_files=(odd,))
    result = await one(grader('type = "file_exists"\npath = "answer.md"'), view)
    assert (result.passed, result.explanation) == (False, "no created file matches answer.md")
    result = await one(grader('type = "file_exists"\npath = "answer.md"\nexists = false'), view)
    assert (result.passed, result.explanation) == (True, "no created file matches answer.md")
    result = await one(grader('type = "file_exists"\npath = "odd-*.md"'), view)
    assert (result.passed, result.explanation) == (True, "created odd-\\xff.md")
    listed = await one(grader('type = "regex"\ntarget = "files"', r"odd-\\xff\.md$"), view)
    assert (listed.passed, listed.explanation) == (True, "1 matches in files; wanted at least one match")
    document = json.loads(grades_bytes("c", Arm.SUBJECT, 1, view, NOT_GRADED))
    assert document["created_files"] == ["answer.md", "odd-\\xff.md"]


def test_the_glob_language() -> None:
    assert glob_matches("sm?ke", "smoke")
    assert not glob_matches("sm?ke", "sm/ke")
    assert glob_matches("*", "")
    assert not glob_matches("*.md", "docs/notes.md")
    assert glob_matches("**/*.md", "notes.md")
    assert glob_matches("**/*.md", "docs/deep/notes.md")
    assert glob_matches("a/**/b", "a/b")
    assert glob_matches("a/**/b", "a/x/y/b")
    assert not glob_matches("a/**/b", "a/xb")
    assert glob_matches("out/**", "out/a/b.txt")
    assert not glob_matches("out/**", "in/a.txt")
    assert glob_matches("[ab]", "[ab]")
    assert not glob_matches("[ab]", "a")
    long = "d/" * 600 + "f.md"
    assert glob_matches("**/*.md", long)
    assert glob_matches(long, long)


# ------------------------------------------------------------------------------------------ receipt


async def test_a_receipt_grader_fails_and_the_limitation_says_why() -> None:
    result = await one(grader('type = "receipt"\noperation = "repo_map"'), completed(trajectory=TOOLS))
    assert (result.passed, result.explanation) == (False, RECEIPT_UNSUPPORTED)
    assert receipt_limitation([case_of({"g": grader('type = "receipt"\noperation = "x"')})]) == RECEIPT_LIMITATION
    assert receipt_limitation([case_of({"g": grader('type = "regex"', "x")})]) is None


# ------------------------------------------------------------------------------------ outcomes and arms


MIXED = {
    "said": grader('type = "regex"', "Hello"),
    "mapped": grader('type = "operation_used"\noperation = "repo_map"'),
    "spoken": grader('type = "regex"\narm = "subject-only"', "Rust"),
    "guard": grader('type = "operation_used"\noperation = "repo_map"\nmin = 0\nmax = 0\narm = "both"'),
}
EXTENSION = frozenset({"repo_map"})


@pytest.mark.parametrize("outcome", ["cancelled", "unknown"])
async def test_cancelled_and_unknown_runs_are_not_graded(outcome: Any) -> None:
    grades = await grade_run(case_of(MIXED), Arm.SUBJECT, RunView(outcome, trajectory=SAID), Doors(), EXTENSION)
    assert grades == NOT_GRADED
    assert (grades.graded, grades.results, grades.score, grades.passed) == (False, (), None, None)


async def test_an_errored_run_fails_every_grader_with_its_reason() -> None:
    view = RunView("errored", "timeout", trajectory=SAID, created_files=("x",))
    grades = await grade_run(case_of(MIXED), Arm.SUBJECT, view, Doors(), EXTENSION)
    assert [r.explanation for r in grades.results] == ["the run ended with timeout"] * 4
    assert not any(r.passed for r in grades.results)
    assert (grades.graded, grades.score, grades.passed) == (True, 0.0, False)


async def test_subject_only_graders_report_unscored_in_the_subject_arm_and_are_skipped_in_the_baseline() -> None:
    case = case_of(MIXED)
    subject = await grade_run(case, Arm.SUBJECT, completed(trajectory=TOOLS), Doors(), EXTENSION)
    assert [(r.name, r.scored, r.passed) for r in subject.results] == [
        ("guard", True, False),
        ("mapped", False, True),
        ("said", True, False),
        ("spoken", False, True),
    ]
    assert (subject.score, subject.passed) == (0.0, False)
    baseline = await grade_run(case, Arm.BASELINE, completed(), Doors(), EXTENSION)
    assert [(r.name, r.scored, r.passed) for r in baseline.results] == [("guard", True, True), ("said", True, True)]
    assert (baseline.score, baseline.passed) == (1.0, True)


async def test_an_operation_the_extension_does_not_supply_is_not_subject_only() -> None:
    case = case_of({"mapped": grader('type = "operation_used"\noperation = "repo_map"')})
    baseline = await grade_run(case, Arm.BASELINE, completed(trajectory=TOOLS), Doors(), frozenset({"other"}))
    assert [(r.name, r.scored, r.passed) for r in baseline.results] == [("mapped", True, True)]


async def test_a_case_whose_every_grader_is_subject_only_scores_in_the_subject_arm() -> None:
    case = case_of(
        {
            "mapped": grader('type = "operation_used"\noperation = "repo_map"'),
            "spoken": grader('type = "regex"\narm = "subject-only"', "Rust"),
        }
    )
    subject = await grade_run(case, Arm.SUBJECT, completed(trajectory=TOOLS), Doors(), EXTENSION)
    assert [(r.scored, r.passed) for r in subject.results] == [(True, True), (True, True)]
    assert (subject.score, subject.passed) == (1.0, True)
    baseline = await grade_run(case, Arm.BASELINE, completed(trajectory=TOOLS), Doors(), EXTENSION)
    assert baseline == RunGrades(True, (), None, None)


async def test_a_subject_run_with_only_unscored_graders_has_no_score() -> None:
    case = case_of({"mapped": grader('type = "operation_used"\noperation = "repo_map"\narm = "subject-only"')})
    grades = RunGrades.of(
        [
            GraderResult("mapped", "operation_used", 1.0, False, True, "ran"),
            GraderResult("x", "regex", 2.0, False, False, ""),
        ]
    )
    assert (grades.graded, grades.score, grades.passed) == (True, None, None)
    assert case.graders[0].subject_only(())


async def test_the_run_score_is_the_weighted_mean_of_scored_graders() -> None:
    case = case_of(
        {
            "a": grader('type = "regex"\nweight = 3', "Hello"),
            "b": grader('type = "regex"\nweight = 1', "absent"),
            "c": grader('type = "regex"\nweight = 0.5\narm = "subject-only"', "absent"),
        }
    )
    grades = await grade_run(case, Arm.SUBJECT, completed(), Doors())
    assert [(r.name, r.weight, r.scored, r.passed) for r in grades.results] == [
        ("a", 3.0, True, True),
        ("b", 1.0, True, False),
        ("c", 0.5, False, False),
    ]
    assert grades.score == 0.75
    assert grades.passed is False
    passing = await grade_run(case_of({"a": grader('type = "regex"\nweight = 3', "Hello")}), Arm.SUBJECT, completed())
    assert (passing.score, passing.passed) == (1.0, True)


def test_a_run_view_keeps_reasons_for_errored_runs_only() -> None:
    with pytest.raises(ValueError, match="reason"):
        RunView("errored")
    with pytest.raises(ValueError, match="reason"):
        RunView("completed", "timeout")
    with pytest.raises(ValueError, match="outcome"):
        RunView("finished")  # type: ignore[arg-type]
    assert RunView("errored", "env_var_rejected").coverage is OutcomeWord.REFUSED
    assert RunView("errored", "auth_failed").coverage is OutcomeWord.FAILED
    assert RunView("cancelled").coverage is OutcomeWord.CANCELLED
    assert completed().last_message == "It lives in settings/production.toml. Hello!"


# ------------------------------------------------------------------------------------- the workspace


def test_the_workspace_reader_stays_inside_and_bounded(tmp_path: Path) -> None:
    root = tmp_path / "cwd"
    root.mkdir()
    (tmp_path / "secret.txt").write_text("outside")
    (root / "ok.txt").write_text("inside ✓")
    (root / "big.txt").write_bytes(b"a" * ((1 << 20) + 1))
    (root / "exact.txt").write_bytes(b"a" * (1 << 20))
    (root / "binary.bin").write_bytes(b"\xff\xfe")
    (root / "dir").mkdir()
    (root / "escape").symlink_to(tmp_path / "secret.txt")
    (root / "inner").symlink_to(root / "ok.txt")
    os.mkfifo(root / "fifo")
    reader = WorkspaceDirectory(root)
    assert reader.read_text("ok.txt") == "inside ✓"
    assert reader.read_text("inner") == "inside ✓"
    assert len(reader.read_text("exact.txt")) == 1 << 20
    for path, words in [
        ("big.txt", "a file focus reads at most 1 MiB"),
        ("binary.bin", "is not UTF-8 text"),
        ("dir", "is not a file"),
        ("escape", "resolves outside the workspace"),
        ("fifo", "is not a file"),
        ("none.txt", "does not exist in the workspace"),
        ("../secret.txt", "must not contain empty"),
        ("/etc/passwd", "relative path inside the workspace"),
    ]:
        with pytest.raises(FocusError, match=words):
            reader.read_text(path)


# ----------------------------------------------------------------------------------- bounded patterns


async def test_a_pattern_that_backtracks_without_bound_is_stopped_and_fails_its_grader() -> None:
    # The look-ahead keeps it from RE2 (linear, tests/engine/grade/test_patterns.py): Python's `re` runs it.
    view = completed(trajectory=trajectory(("Agent", "a" * 40 + "!")))
    source = grader('type = "regex"\nmatch = "not_contains"', "^(?=a)(a+)+$")
    grades = await grade_run(case_of({"g": source}), Arm.SUBJECT, view, patterns=PatternRunner(seconds=0.5))
    result = grades.results[0]
    assert result.passed is False
    assert result.explanation.startswith("the pattern ran past 0.5 s and was stopped")
    assert result.explanation.endswith("over last_message")


async def test_a_focus_larger_than_the_bound_fails_rather_than_being_cut() -> None:
    view = completed(trajectory=trajectory(("Agent", "x" * 2000)))
    source = grader('type = "regex"\nmatch = "not_contains"', "y")
    grades = await grade_run(case_of({"g": source}), Arm.SUBJECT, view, patterns=PatternRunner(max_text_bytes=1000))
    assert grades.results[0].passed is False
    assert "the text is 2000 bytes; a pattern reads at most 1000 bytes" in grades.results[0].explanation


async def test_patterns_count_non_overlapping_matches_and_search_each_input() -> None:
    assert await PATTERNS.count("aa", "", "aaaaa") == 2
    assert await PATTERNS.count("", "", "abc") == 4
    assert await PATTERNS.count("é", "i", "É é ✓") == 2
    assert await PATTERNS.matching("^b", "", ["ab", "bc", "b"]) == 2
    assert await PATTERNS.matching("x", "", []) == 0


# ----------------------------------------------------------------------------------- grades document


async def test_the_grades_document_records_the_run_and_each_grader() -> None:
    case = case_of(MIXED)
    view = completed(trajectory=TOOLS, created_files=("summary.md",))
    grades = await grade_run(case, Arm.SUBJECT, view, Doors(), EXTENSION)
    document = grades_document("c", Arm.SUBJECT, 2, view, grades, cost_usd=0.001, seconds=3.5)
    assert document["v"] == GRADES_SCHEMA
    assert set(document) == {
        "v",
        "requires",
        "case",
        "arm",
        "attempt",
        "outcome",
        "reason",
        "score",
        "passed",
        "cost_usd",
        "seconds",
        "created_files",
        "graders",
    }
    assert {key: document[key] for key in ("requires", "case", "arm", "attempt", "outcome", "reason")} == {
        "requires": [],
        "case": "c",
        "arm": "subject",
        "attempt": 2,
        "outcome": "completed",
        "reason": None,
    }
    assert (document["score"], document["passed"], document["cost_usd"], document["seconds"]) == (
        0.0,
        False,
        0.001,
        3.5,
    )
    assert document["created_files"] == ["summary.md"]
    assert document["graders"][1] == {
        "name": "mapped",
        "type": "operation_used",
        "weight": 1.0,
        "scored": False,
        "passed": True,
        "explanation": "repo_map ran 1 times; wanted at least 1",
    }
    data = grades_bytes("c", Arm.SUBJECT, 2, view, grades, cost_usd=0.001, seconds=3.5)
    assert data.endswith(b"}\n")
    assert b'\n  "arm": "subject",\n' in data
    assert json.loads(data) == document
    assert grades_path("c", Arm.BASELINE, 3) == "grades/c/baseline-3.json"


async def test_an_ungraded_run_has_a_document_and_a_graded_run_without_a_score() -> None:
    case = case_of(MIXED, kind="should-not-fire")
    view = RunView("cancelled")
    grades = await grade_run(case, Arm.BASELINE, view, Doors(), EXTENSION)
    document = grades_document("c", Arm.BASELINE, 1, view, grades)
    assert grades.graded is False
    assert (document["outcome"], document["reason"], document["score"], document["graders"]) == (
        "cancelled",
        None,
        None,
        [],
    )
    run = graded_run(case, Arm.BASELINE, 1, view, grades, seconds=0.0)
    assert (run.kind, run.outcome, run.score, run.passed) == (
        CaseKind.SHOULD_NOT_FIRE,
        OutcomeWord.CANCELLED,
        None,
        None,
    )
    errored = RunView("errored", "unconfined_host")
    assert grades_document("c", Arm.SUBJECT, 1, errored, NOT_GRADED)["reason"] == "unconfined_host"
    refused = graded_run(case, Arm.SUBJECT, 1, errored, await grade_run(case, Arm.SUBJECT, errored, Doors(), EXTENSION))
    assert (refused.outcome, refused.score, refused.passed) == (OutcomeWord.REFUSED, 0.0, False)
    with pytest.raises(ValueError, match="attempt"):
        grades_document("c", Arm.SUBJECT, 0, view, grades)


# ----------------------------------------------------------------------------------- the example extension


EXAMPLE_EVALS = EXAMPLE / "evals"


async def test_the_example_extensions_cases_separate_the_arms() -> None:
    suite = load_suite(EXAMPLE_EVALS)
    overview, greeting = suite.case("overview"), suite.case("greeting")
    assert overview is not None
    assert greeting is not None
    operations = frozenset({"codebase-brief", "repo_map"})
    mapped = trajectory(
        ("User", overview.prompt),
        ("Agent", "", call("repo_map", {"operation": "map"}, extra={"step": "repo_map", "program": "codebase-brief"})),
        ("Agent", "It is a Rust crate of six files; the largest is src/tables.rs."),
    )
    unmapped = trajectory(("User", overview.prompt), ("Agent", "I would have to look at the files."))
    subject = await grade_run(overview, Arm.SUBJECT, completed(trajectory=mapped), Doors(), operations)
    baseline = await grade_run(overview, Arm.BASELINE, completed(trajectory=unmapped), Doors(), operations)
    assert [(r.name, r.passed) for r in subject.results] == [("language", True), ("largest", True), ("surveyed", True)]
    assert (subject.score, subject.passed) == (1.0, True)
    assert (baseline.score, baseline.passed) == (0.0, False)
    hello = trajectory(("User", greeting.prompt), ("Agent", "Welcome aboard, glad you are here!"))
    for arm in (Arm.SUBJECT, Arm.BASELINE):
        greeted = await grade_run(greeting, arm, completed(trajectory=hello), Doors(), operations)
        assert [(r.name, r.scored, r.passed) for r in greeted.results] == [
            ("reply", True, True),
            ("untouched", True, True),
        ]
    fired = await grade_run(greeting, Arm.SUBJECT, completed(trajectory=mapped), Doors(), operations)
    assert [(r.name, r.passed) for r in fired.results] == [("reply", False), ("untouched", False)]
