"""The Agent Skills evaluation convention, `evals/evals.json`, read as our cases.

    {"skill_name": "csv-analyzer",
     "evals": [{"id": 1, "prompt": "...", "expected_output": "...", "files": ["evals/files/a.csv"],
                "assertions": ["The output names the top month",
                               {"name": "no-error", "type": "not_contains", "value": "Traceback"}]}]}

Each eval is one should-fire case (`should_trigger: false` makes it should-not-fire) named
`eval-<id>`: a string assertion (or an `expectations` entry, skill-creator's word) becomes a `judge`
grader asked of the judge door; a typed `contains` / `not_contains` assertion a `regex` grader on the
last message over the literal text; with no assertion at all, `expected_output` is judged; each of
`files` becomes a fixture at its path with a leading `evals/files/` (or `evals/`) dropped. The mapping
and the sources it follows are in decisions.md ("Test sets in the agents' own formats").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from eval_runner.engine.testset.cases import CaseFile, CaseKind
from eval_runner.engine.testset.foreign import (
    ForeignCase,
    ForeignGrader,
    FormatCode,
    FormatError,
    GraderKeys,
    case_name,
    fixture,
    literal_pattern,
    utf8_text,
)

EVALS_FILE = "evals/evals.json"
MAX_EVALS = 256
MAX_ASSERTIONS = 64
TOP_KEYS = ("skill_name", "evals")
EVAL_KEYS = ("id", "name", "prompt", "expected_output", "files", "assertions", "expectations", "should_trigger")
ASSERTION_KEYS = ("name", "type", "value", "description")
TYPED = ("contains", "not_contains")
#: Reads a file the test set names, relative to the skill's directory: its bytes, or None when absent.
FileReader = Callable[[str, str, str], bytes | None]


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"the key `{key}` is given twice")
        found[key] = value
    return found


def _json(data: bytes, file: str) -> Any:
    text = utf8_text(data, file)
    try:
        return json.loads(text, object_pairs_hook=_pairs)
    except (ValueError, RecursionError) as error:
        raise FormatError(FormatCode.MALFORMED, file, None, f"JSON does not parse: {error}") from None


def _check_keys(value: dict[str, Any], allowed: tuple[str, ...], file: str, at: str) -> None:
    for key in sorted(value):
        if key not in allowed:
            raise FormatError(
                FormatCode.UNKNOWN_KEY,
                file,
                f"{at}{key}",
                f"unknown key `{at}{key}`; the keys read are {', '.join(allowed)}",
            )


def _text(value: Any, file: str, key: str, *, required: bool) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise FormatError(
            FormatCode.MISSING if value is None else FormatCode.MALFORMED,
            file,
            key,
            f"`{key}` must be a non-empty string",
        )
    return value


def fixture_path(path: str) -> str:
    """Where an input file lands in the workspace: its path with a leading `evals/files/` or `evals/` dropped."""
    for prefix in ("evals/files/", "evals/"):
        if path.startswith(prefix) and len(path) > len(prefix):
            return path[len(prefix) :]
    return path


def parse_evals_json(
    data: bytes, read: FileReader, skill_name: str | None, file: str = EVALS_FILE
) -> list[ForeignCase]:
    """The cases of an `evals.json`; `read(path, file, key)` gives an input file's bytes; `skill_name`
    is the extension's skill, which `skill_name` in the file must name when it names one."""
    found = _json(data, file)
    if not isinstance(found, dict):
        raise FormatError(FormatCode.MALFORMED, file, None, "an evals.json is a JSON object with `evals`")
    _check_keys(found, TOP_KEYS, file, "")
    named = _text(found.get("skill_name"), file, "skill_name", required=False)
    if named is not None and skill_name is not None and named != skill_name:
        raise FormatError(
            FormatCode.MALFORMED, file, "skill_name", f"the evals are for `{named}`, and this skill is `{skill_name}`"
        )
    evals = found.get("evals")
    if evals is None:
        raise FormatError(FormatCode.MISSING, file, "evals", "an evals.json needs `evals`, a list of test cases")
    if not isinstance(evals, list) or not evals:
        raise FormatError(FormatCode.MALFORMED, file, "evals", "`evals` must be a non-empty list")
    if len(evals) > MAX_EVALS:
        raise FormatError(FormatCode.TOO_LARGE, file, "evals", f"`evals` holds at most {MAX_EVALS} cases")
    taken: set[str] = set()
    ids: set[str] = set()
    return [_case(entry, index, read, file, taken, ids) for index, entry in enumerate(evals)]


def _case(entry: Any, index: int, read: FileReader, file: str, taken: set[str], ids: set[str]) -> ForeignCase:
    at = f"evals[{index}]"
    if not isinstance(entry, dict):
        raise FormatError(FormatCode.MALFORMED, file, at, f"`{at}` must be an object")
    _check_keys(entry, EVAL_KEYS, file, f"{at}.")
    ident = entry.get("id")
    if isinstance(ident, int) and not isinstance(ident, bool) and 0 <= ident < 10**12:
        raw = f"eval-{ident}"
    elif isinstance(ident, str) and ident.strip():
        raw = ident
    else:
        raise FormatError(FormatCode.MALFORMED, file, f"{at}.id", f"`{at}.id` must be a whole number or a string")
    if raw in ids:
        raise FormatError(FormatCode.MALFORMED, file, f"{at}.id", f"a second eval has the id {ident!r}")
    ids.add(raw)
    prompt = _text(entry.get("prompt"), file, f"{at}.prompt", required=True)
    assert prompt is not None
    expected = _text(entry.get("expected_output"), file, f"{at}.expected_output", required=False)
    label = _text(entry.get("name"), file, f"{at}.name", required=False)
    trigger = entry.get("should_trigger", True)
    if not isinstance(trigger, bool):
        raise FormatError(FormatCode.MALFORMED, file, f"{at}.should_trigger", "`should_trigger` must be true or false")
    origin = f"{file}#{at}"
    graders = _graders(entry, at, file, expected)
    words = label or expected
    return ForeignCase(
        name=case_name(raw, taken),
        prompt=prompt,
        origin=origin,
        kind=CaseKind.SHOULD_FIRE if trigger else CaseKind.SHOULD_NOT_FIRE,
        description=" ".join(words.split())[:1024] if words else None,
        graders=graders,
        fixtures=_fixtures(entry.get("files"), at, file, read),
    )


def _graders(entry: dict[str, Any], at: str, file: str, expected: str | None) -> tuple[ForeignGrader, ...]:
    items: list[tuple[str, Any]] = []
    for key in ("assertions", "expectations"):
        value = entry.get(key)
        if value is None:
            continue
        if not isinstance(value, list):
            raise FormatError(FormatCode.MALFORMED, file, f"{at}.{key}", f"`{key}` must be a list")
        items.extend((f"{at}.{key}[{number}]", item) for number, item in enumerate(value))
    if len(items) > MAX_ASSERTIONS:
        raise FormatError(FormatCode.TOO_LARGE, file, f"{at}.assertions", f"a case has at most {MAX_ASSERTIONS}")
    names: set[str] = set()
    out: list[ForeignGrader] = []
    for number, (key, item) in enumerate(items, start=1):
        if isinstance(item, str):
            criteria = _text(item, file, key, required=True)
            assert criteria is not None
            out.append(ForeignGrader(case_name(f"assertion-{number}", names), {"type": "judge", "criteria": criteria}))
            continue
        if not isinstance(item, dict):
            raise FormatError(FormatCode.MALFORMED, file, key, "an assertion is a string or {name, type, value}")
        _check_keys(item, ASSERTION_KEYS, file, f"{key}.")
        kind = item.get("type")
        if kind not in TYPED:
            raise FormatError(
                FormatCode.UNSUPPORTED, file, f"{key}.type", f"an assertion's type is {' or '.join(TYPED)}"
            )
        value = _text(item.get("value"), file, f"{key}.value", required=True)
        assert value is not None
        label = _text(item.get("name"), file, f"{key}.name", required=False) or f"assertion-{number}"
        keys: GraderKeys = {
            "type": "regex",
            "pattern": literal_pattern(value),
            "target": "last_message",
        }
        if kind == "not_contains":
            keys["match"] = "not_contains"
        out.append(ForeignGrader(case_name(label, names), keys))
    if not out and expected is not None:
        out.append(ForeignGrader("expected-output", {"type": "judge", "criteria": expected}))
    if not out:
        raise FormatError(
            FormatCode.MISSING, file, f"{at}.assertions", "the eval has no assertions and no expected_output to judge"
        )
    return tuple(out)


def _fixtures(value: Any, at: str, file: str, read: FileReader) -> tuple[CaseFile, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise FormatError(FormatCode.MALFORMED, file, f"{at}.files", "`files` must be a list of paths")
    out: dict[str, CaseFile] = {}
    for number, path in enumerate(value):
        key = f"{at}.files[{number}]"
        if not isinstance(path, str) or not path:
            raise FormatError(FormatCode.MALFORMED, file, key, "an input file is a path relative to the skill")
        data = read(path, file, key)
        if data is None:
            raise FormatError(FormatCode.MISSING, file, key, f"`{path}` is not in the skill's directory")
        placed = fixture(fixture_path(path), data, file, key)
        if placed.name in out:
            raise FormatError(FormatCode.MALFORMED, file, key, f"two input files land at `{placed.name}`")
        out[placed.name] = placed
    return tuple(out.values())
