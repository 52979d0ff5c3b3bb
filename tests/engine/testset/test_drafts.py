"""Drafts are written out to case files byte for byte, and the written set loads like any other."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval_runner.engine.testset.cases import CaseKind, load_suite
from eval_runner.engine.testset.drafts import DraftCase, DraftGrader, write_draft
from eval_runner.engine.testset.frontmatter import TestSetError

# Deliberately awkward bytes: a BOM, CRLF line ends, trailing blanks, non-ASCII text, no final newline.
PROMPT = (
    '\ufeff+++\r\nv = "openagents.eval-case.v1"\r\nkind = "should-not-fire"\r\n+++\r\n\r\n'
    "Grüß dich — say hello.   \r\n\r\n"
)
GRADER = '+++\ntype = "regex"\nflags = "i"\n+++\n\n\\b(hello|hi)\\b'


def test_a_draft_is_written_out_byte_for_byte_and_loads(tmp_path: Path) -> None:
    evals = tmp_path / "staging" / "evals"
    cases = [
        DraftCase("greeting", PROMPT, (DraftGrader("reply", GRADER),)),
        DraftCase(
            "overview-0",
            '+++\nv = "openagents.eval-case.v1"\n+++\n\nGive me an overview of the repository.\n',
            (DraftGrader("said", '+++\ntype = "regex"\ntarget = "last_message"\n+++\n\nRust\n'),),
        ),
    ]
    written = write_draft(cases, evals)
    assert written == [evals / "greeting", evals / "overview-0"]
    assert (evals / "greeting/prompt.md").read_bytes() == PROMPT.encode("utf-8")
    assert (evals / "greeting/graders/reply.md").read_bytes() == GRADER.encode("utf-8")
    assert sorted(p.name for p in (evals / "greeting").iterdir()) == ["graders", "prompt.md"]
    suite = load_suite(evals)
    greeting = suite.cases[0]
    assert greeting.kind is CaseKind.SHOULD_NOT_FIRE
    assert greeting.prompt == "Grüß dich — say hello."
    assert greeting.files.prompt == PROMPT.encode("utf-8")
    assert greeting.files.graders[0].data == GRADER.encode("utf-8")


def test_an_existing_case_directory_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "greeting").mkdir()
    with pytest.raises(TestSetError) as caught:
        write_draft([DraftCase("greeting", PROMPT, (DraftGrader("reply", GRADER),))], tmp_path)
    assert caught.value.file == "greeting"
    assert "already exists" in caught.value.message
    assert list((tmp_path / "greeting").iterdir()) == []


@pytest.mark.parametrize("ident", ["../escape", ".hidden", "results", "a/b", ""])
def test_a_case_id_outside_the_grammar_writes_nothing(tmp_path: Path, ident: str) -> None:
    with pytest.raises(TestSetError) as caught:
        write_draft([DraftCase(ident, PROMPT, ())], tmp_path / "evals")
    assert caught.value.key == "id"
    assert list((tmp_path / "evals").iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evals"]


@pytest.mark.parametrize("name", ["../x", "a/b", ".x", "n" * 65])
def test_a_grader_name_outside_the_grammar_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(TestSetError) as caught:
        write_draft([DraftCase("c", PROMPT, (DraftGrader(name, GRADER),))], tmp_path)
    assert caught.value.key == "name"
    assert not (tmp_path / "x").exists()


def test_a_lone_surrogate_cannot_be_written(tmp_path: Path) -> None:
    with pytest.raises(TestSetError) as caught:
        write_draft([DraftCase("c", "hi \ud800", ())], tmp_path)
    assert caught.value.file == "c/prompt.md"
