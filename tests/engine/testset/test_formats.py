"""Finding an extension's test set in its author's format, and the pieces every format shares."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eval_runner.contracts.case_id import is_case_id
from eval_runner.engine.grade.patterns import answer, job_for
from eval_runner.engine.grade.spec import RegexGrader
from eval_runner.engine.testset.cases import CaseKind
from eval_runner.engine.testset.documents import case_manifest, case_release_files
from eval_runner.engine.testset.foreign import FormatCode, FormatError, case_name, literal_pattern, read_inside
from eval_runner.engine.testset.formats import TestSetFormat, load_test_set
from eval_runner.engine.testset.frontmatter import TestSetError
from tests.support.paths import REPO

SKILL_EXAMPLE = REPO / "examples" / "brief"
TIDY = "---\nname: tidy\ndescription: Tidies.\n---\nTidy.\n"


def copy_example(tmp_path: Path) -> Path:
    root = tmp_path / "brief"
    shutil.copytree(SKILL_EXAMPLE, root)
    return root


def without_case_dirs(root: Path) -> Path:
    for name in ("overview", "greeting"):
        shutil.rmtree(root / "evals" / name)
    return root


def test_the_example_runs_its_case_directories_and_says_its_evals_json_was_not_read() -> None:
    loaded = load_test_set(SKILL_EXAMPLE, skill_name="brief")
    assert loaded.format is TestSetFormat.CASES
    assert [case.name for case in loaded.suite.cases] == ["greeting", "overview"]
    assert loaded.notices == ("test set: also found evals/evals.json, which was not read; one test set per extension",)


def test_the_examples_evals_json_is_the_same_test_in_the_agent_skills_format(tmp_path: Path) -> None:
    ours = load_test_set(SKILL_EXAMPLE, skill_name="brief").suite
    theirs = load_test_set(without_case_dirs(copy_example(tmp_path)), skill_name="brief")
    assert theirs.format is TestSetFormat.EVALS_JSON
    assert theirs.notices == ("test set: 2 cases read from evals/evals.json",)
    by_kind = (sorted(suite.cases, key=lambda case: case.kind) for suite in (ours, theirs.suite))
    pairs = zip(*by_kind, strict=True)
    for mine, translated in pairs:
        assert (" ".join(mine.prompt.split()), mine.kind) == (translated.prompt, translated.kind)
        assert [(f.name, f.data) for f in mine.fixtures] == [(f.name, f.data) for f in translated.fixtures]
    overview = next(case for case in theirs.suite.cases if case.kind is CaseKind.SHOULD_FIRE)
    answer_text = "It is a Rust crate of six files; the largest is src/tables.rs."  # the stand-in door's
    for grader in overview.graders:
        assert isinstance(grader, RegexGrader)
        assert grader.compile().search(answer_text)
    # A translated suite is a suite like any other: its manifest and release files are built from its bytes.
    assert case_manifest(theirs.suite)
    assert ("evals/eval-1/graders/language.md", overview.files.graders[0].data) in case_release_files(theirs.suite)


def test_a_vally_spec_beside_skill_md_or_under_evals_is_read(tmp_path: Path) -> None:
    root = tmp_path / "tidy"
    (root / "fixtures").mkdir(parents=True)
    (root / "SKILL.md").write_text(TIDY)
    (root / "fixtures/mess.txt").write_text("mess")
    spec = (
        "stimuli:\n  - name: tidy-up\n    prompt: Tidy mess.txt\n"
        "    environment:\n      files:\n        - {src: fixtures/mess.txt, dest: mess.txt}\n"
        "    graders:\n      - {type: file-exists, config: {path: mess.txt}}\n"
    )
    (root / "eval.yaml").write_text(spec)
    loaded = load_test_set(root, skill_name="tidy")
    assert loaded.format is TestSetFormat.VALLY
    (case,) = loaded.suite.cases
    assert (case.name, [(f.name, f.data) for f in case.fixtures]) == ("tidy-up", [("mess.txt", b"mess")])
    (root / "eval.yaml").unlink()
    (root / "evals").mkdir()
    (root / "evals/fixtures").mkdir()
    (root / "evals/fixtures/mess.txt").write_text("under evals")
    (root / "evals/eval.yml").write_text(spec)
    (case,) = load_test_set(root, skill_name="tidy").suite.cases
    assert case.fixtures[0].data == b"under evals"  # a spec's files are relative to the spec


def test_an_input_file_through_a_link_or_out_of_the_extension_is_refused(tmp_path: Path) -> None:
    root = without_case_dirs(copy_example(tmp_path))
    (tmp_path / "secret").write_text("no")
    (root / "evals/files/README.md").unlink()
    os.symlink(tmp_path / "secret", root / "evals/files/README.md")
    with pytest.raises(FormatError) as caught:
        load_test_set(root, skill_name="brief")
    assert (caught.value.code, caught.value.file, caught.value.key) == (
        FormatCode.OUTSIDE,
        "evals/evals.json",
        "evals[0].files[1]",
    )
    with pytest.raises(FormatError) as caught:
        read_inside(root, "../secret", "evals/evals.json", "evals[0].files[0]")
    assert caught.value.code is FormatCode.OUTSIDE


def test_a_case_format_error_and_no_test_set_at_all_keep_their_own_words(tmp_path: Path) -> None:
    root = tmp_path / "tidy"
    root.mkdir()
    (root / "SKILL.md").write_text(TIDY)
    with pytest.raises(TestSetError, match="there are no tests yet"):
        load_test_set(root, skill_name="tidy")
    (root / "evals/broken").mkdir(parents=True)
    (root / "evals/broken/prompt.md").write_text("no front matter, no graders\n")
    with pytest.raises(TestSetError, match="declares no `v`"):
        load_test_set(root, skill_name="tidy")


def test_names_from_other_formats_fit_our_grammar_and_never_collide() -> None:
    taken: set[str] = set()
    names = [case_name(raw, taken) for raw in ("Say hi!", "Say hi?", ".hidden", "", "results", "a" * 80)]
    assert names == ["Say-hi", "Say-hi-2", "hidden", "case", "case-results", "a" * 64]


@settings(max_examples=400, deadline=None)
@given(st.text(min_size=1, max_size=30), st.text(max_size=60))
def test_a_literal_pattern_matches_exactly_where_the_text_occurs_under_re2_and_re(text: str, haystack: str) -> None:
    pattern = literal_pattern(text)
    found = text in haystack
    assert (re.search(pattern, haystack) is not None) == found
    job = job_for("search", pattern, "", [haystack])
    assert job.engine == "re2"  # RE2 takes every escape, so graders over literal text run in linear time
    assert (answer(job) > 0) == found


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=80), max_size=6))
def test_any_names_become_distinct_case_names_in_our_grammar(raws: list[str]) -> None:
    taken: set[str] = set()
    names = [case_name(raw, taken) for raw in raws]
    assert len(set(names)) == len(names)
    assert all(is_case_id(name, 64) for name in names)
