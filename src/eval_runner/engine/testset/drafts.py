"""Writing a chat draft's cases out as case files, byte for byte (wire.md §5.5, runner.md §10.3 step 3).

The hosted runner stages a draft suite by writing each case's whole `prompt.md` text and each grader's
whole `graders/<name>.md` text exactly as the draft carries them, then loads the directory like any
other test set. Inputs are plain typed values (`DraftCase`) or anything shaped like them, such as
`contracts.draft.DraftCase`, so this module does not depend on how a draft was parsed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from eval_runner.contracts.case_id import MAX_GRADER_NAME_BYTES, is_case_id
from eval_runner.engine.testset.cases import GRADERS_DIR, PROMPT_FILE
from eval_runner.engine.testset.frontmatter import TestSetError


class DraftGraderText(Protocol):
    """A draft grader: its name and the whole `graders/<name>.md` text (`contracts.draft.Grader`)."""

    @property
    def name(self) -> str: ...

    @property
    def text(self) -> str: ...


class DraftCaseText(Protocol):
    """A draft case: its id, the whole `prompt.md` text and its graders (`contracts.draft.DraftCase`)."""

    @property
    def id(self) -> str: ...

    @property
    def prompt(self) -> str: ...

    @property
    def graders(self) -> Sequence[DraftGraderText]: ...


@dataclass(frozen=True, slots=True)
class DraftGrader:
    name: str
    text: str


@dataclass(frozen=True, slots=True)
class DraftCase:
    id: str
    prompt: str
    graders: tuple[DraftGrader, ...]


def write_draft(cases: Sequence[DraftCaseText], evals_dir: Path) -> list[Path]:
    """Write each draft case out as `evals/<id>/prompt.md` and `evals/<id>/graders/<name>.md` with
    exactly the draft's text as UTF-8 (wire.md §5.5). An existing case directory is an error; ids and
    grader names must be in the case-id grammar, so nothing is written outside `evals_dir`.
    Returns the case directories written."""
    evals_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for index, case in enumerate(cases):
        if not is_case_id(case.id):
            raise TestSetError(f"cases[{index}]", "id", f"`{case.id}` is not a case id")
        target = evals_dir / case.id
        try:
            target.mkdir()
        except FileExistsError:
            raise TestSetError(case.id, None, "the case directory already exists") from None
        _write_new(target / PROMPT_FILE, case.prompt, f"{case.id}/{PROMPT_FILE}")
        if case.graders:
            (target / GRADERS_DIR).mkdir()
        for grader in case.graders:
            if not is_case_id(grader.name, MAX_GRADER_NAME_BYTES):
                raise TestSetError(f"{case.id}/{GRADERS_DIR}", "name", f"`{grader.name}` is not a grader name")
            _write_new(
                target / GRADERS_DIR / f"{grader.name}.md", grader.text, f"{case.id}/{GRADERS_DIR}/{grader.name}.md"
            )
        written.append(target)
    return written


def _write_new(path: Path, text: str, file: str) -> None:
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise TestSetError(file, None, "the text is not valid Unicode") from None
    try:
        with path.open("xb") as handle:
            handle.write(data)
    except FileExistsError:
        raise TestSetError(file, None, "the file already exists") from None
