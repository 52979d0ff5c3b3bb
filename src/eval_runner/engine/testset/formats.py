"""Finding an extension's test set in whichever format its author wrote: our case directories under
`evals/`, the Agent Skills convention `evals/evals.json`, or a Vally `eval.yaml` (beside SKILL.md or
under `evals/`). One test set per extension, taken in that order; another one found beside it is
named in a notice and not read (decisions.md, "Test sets in the agents' own formats").
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from eval_runner.engine.testset.cases import Suite, case_dirs, load_suite
from eval_runner.engine.testset.evals_json import EVALS_FILE, parse_evals_json
from eval_runner.engine.testset.foreign import ForeignCase, FormatCode, FormatError, read_inside
from eval_runner.engine.testset.vally import EVAL_FILES, parse_eval_yaml

EVALS_DIR = "evals"


class TestSetFormat(StrEnum):
    """The format an extension's test set was read from."""

    __test__ = False

    CASES = "case directories"
    EVALS_JSON = "evals/evals.json"
    VALLY = "eval.yaml"


@dataclass(frozen=True, slots=True)
class LoadedTestSet:
    """The suite, the format it was read from, and what a person should know about that, a line each."""

    suite: Suite
    format: TestSetFormat
    notices: tuple[str, ...] = ()


def _vally_spec(root: Path) -> str | None:
    for folder in ("", f"{EVALS_DIR}/"):
        for name in EVAL_FILES:
            if (root / f"{folder}{name}").is_file():
                return f"{folder}{name}"
    return None


def found_formats(root: Path) -> list[TestSetFormat]:
    """The test-set formats present in `root`, in the order they are taken."""
    found = []
    evals = root / EVALS_DIR
    if evals.is_dir() and case_dirs(evals):
        found.append(TestSetFormat.CASES)
    if (root / EVALS_FILE).is_file():
        found.append(TestSetFormat.EVALS_JSON)
    if _vally_spec(root) is not None:
        found.append(TestSetFormat.VALLY)
    return found


def load_test_set(root: Path, *, skill_name: str | None = None, allow_todo: bool = False) -> LoadedTestSet:
    """The test set of the extension directory `root`; `skill_name` is its skill (a SKILL.md's name), which
    a test set in another format may name. Raises `TestSetError` (a `FormatError` for another format)."""
    evals = root / EVALS_DIR
    found = found_formats(root)
    if not found:
        return LoadedTestSet(load_suite(evals, allow_todo=allow_todo), TestSetFormat.CASES)
    chosen, *others = found
    notices = [
        f"test set: also found {other.value}, which was not read; one test set per extension" for other in others
    ]
    if chosen is TestSetFormat.CASES:
        return LoadedTestSet(load_suite(evals, allow_todo=allow_todo), chosen, tuple(notices))
    if chosen is TestSetFormat.EVALS_JSON:
        data = read_inside(root, EVALS_FILE, EVALS_FILE, None)
        if data is None:
            raise FormatError(FormatCode.MISSING, EVALS_FILE, None, "disappeared while it was read")
        cases = parse_evals_json(data, lambda path, file, key: read_inside(root, path, file, key), skill_name)
        notices.insert(0, f"test set: {len(cases)} cases read from {EVALS_FILE}")
        return LoadedTestSet(_suite(evals, cases), chosen, tuple(notices))
    spec = _vally_spec(root)
    assert spec is not None
    data = read_inside(root, spec, spec, None)
    if data is None:
        raise FormatError(FormatCode.MISSING, spec, None, "disappeared while it was read")
    folder = spec.rpartition("/")[0]

    def read(src: str, file: str, key: str) -> bytes | None:
        return read_inside(root, f"{folder}/{src}" if folder else src, file, key)

    read_set = parse_eval_yaml(data, read, skill_name, spec)
    notices.insert(0, f"test set: {len(read_set.cases)} stimuli read from {spec}")
    notices.extend(read_set.notices)
    return LoadedTestSet(_suite(evals, list(read_set.cases)), chosen, tuple(notices))


def _suite(evals: Path, cases: list[ForeignCase]) -> Suite:
    return Suite(dir=evals, cases=tuple(case.to_case(evals) for case in cases))
