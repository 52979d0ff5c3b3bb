"""What a case checks: one typed record per grader type, parsed and validated at load.

A grader comes from a `graders/<name>.md` file (TOML front matter plus a body) or from an entry of
`case.toml`'s `graders` list (runner.md "Case/test-set file format"). Running a grader is `graders.py`'s
job; this module only says what a grader is, so grading can match exhaustively on `GraderSpec`. Patterns
are checked here with Python's `re`, whose syntax `patterns.py` translates for RE2 (decisions.md, "Grader
patterns under RE2"); where the spec is silent we follow the reference's `ext-eval` grader parser
(decisions.md, "The test set").
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar, TypeAlias

from eval_runner.engine.testset.frontmatter import (
    Table,
    TestSetError,
    check_keys,
    check_name,
    is_blank,
    is_integer,
    is_number,
    trim,
)

COMMON_KEYS = ("type", "name", "weight", "arm")
#: The grader types v1 knows, in the order the spec lists them, with their own keys.
TYPE_KEYS: dict[str, tuple[str, ...]] = {
    "regex": ("pattern", "flags", "match", "target"),
    "operation_used": ("operation", "input_match", "min", "max"),
    "operation_order": ("before", "after"),
    "file_exists": ("path", "exists"),
    "decision": ("question", "threshold", "focus", "rubric"),
    "judge": ("criteria", "focus"),
    "receipt": ("operation",),
}
GRADER_TYPES = tuple(TYPE_KEYS)
REGEX_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}
QUESTION_KEYS = ("instructions", "levels", "options", "pass")
MIN_LEVELS, MAX_LEVELS = 2, 10
DEFAULT_THRESHOLD = 0.5
_COUNT = re.compile(r"^count:\+?([0-9]+)$")


class ArmRule(StrEnum):
    """Which arms a grader is scored in."""

    SUBJECT_ONLY = "subject-only"
    BOTH = "both"


class FocusKind(StrEnum):
    """What a `regex`, `decision` or `judge` grader reads."""

    LAST_MESSAGE = "last_message"
    TRAJECTORY = "trajectory"
    FILES = "files"
    FILE = "file"


@dataclass(frozen=True, slots=True)
class Focus:
    """A focus; `path` is set only for `{ file = "<path>" }` (relative, inside the workspace)."""

    kind: FocusKind
    path: str | None = None

    def describe(self) -> str:
        return f"file {self.path}" if self.kind is FocusKind.FILE else self.kind.value


LAST_MESSAGE = Focus(FocusKind.LAST_MESSAGE)


class MatchMode(StrEnum):
    CONTAINS = "contains"
    NOT_CONTAINS = "not_contains"
    COUNT = "count"


@dataclass(frozen=True, slots=True)
class Match:
    """How a `regex` grader counts matches: at least one, none, or exactly `count`."""

    mode: MatchMode
    count: int | None = None

    def describe(self) -> str:
        return f"count:{self.count}" if self.mode is MatchMode.COUNT else self.mode.value


@dataclass(frozen=True, slots=True)
class NoulQuestion:
    """A yes/no question; the probability is P(yes)."""

    instructions: str


@dataclass(frozen=True, slots=True)
class ScoreQuestion:
    """Ordered levels, lowest first (2 to 10); the probability is the level's index over the top one."""

    instructions: str
    levels: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ChoiceQuestion:
    """Named options (name, meaning); the probability is the mass on the `passing` options."""

    instructions: str
    options: tuple[tuple[str, str], ...]
    passing: tuple[str, ...]


DecisionQuestion: TypeAlias = NoulQuestion | ScoreQuestion | ChoiceQuestion


@dataclass(frozen=True, slots=True, kw_only=True)
class GraderCommon:
    """The keys every grader has. `arm` is `None` when the case wrote none; `origin` says where it was
    written (`<case>/graders/<file>.md` or `<case>/case.toml#graders[<i>]`)."""

    TYPE: ClassVar[str] = ""

    name: str
    weight: float = 1.0
    arm: ArmRule | None = None
    origin: str = ""

    @property
    def type_word(self) -> str:
        return self.TYPE

    @property
    def calls_a_door(self) -> bool:
        return False

    def subject_only(self, extension_operations: Collection[str]) -> bool:
        """Dropped from the baseline arm (runner.md §13.2): `arm = "subject-only"`, or no `arm` and an
        `operation_used` on an operation the extension supplies."""
        if self.arm is not None:
            return self.arm is ArmRule.SUBJECT_ONLY
        return isinstance(self, OperationUsedGrader) and self.operation in extension_operations


@dataclass(frozen=True, slots=True, kw_only=True)
class RegexGrader(GraderCommon):
    TYPE: ClassVar[str] = "regex"

    pattern: str
    flags: str = ""
    match: Match = Match(MatchMode.CONTAINS)
    target: Focus = LAST_MESSAGE

    def compile(self) -> re.Pattern[str]:
        return _compile(self.pattern, self.flags)


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationUsedGrader(GraderCommon):
    TYPE: ClassVar[str] = "operation_used"

    operation: str
    input_match: str | None = None
    min: int = 1
    max: int | None = None

    def input_regex(self) -> re.Pattern[str] | None:
        return None if self.input_match is None else _compile(self.input_match, "")


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationOrderGrader(GraderCommon):
    TYPE: ClassVar[str] = "operation_order"

    before: str
    after: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FileExistsGrader(GraderCommon):
    TYPE: ClassVar[str] = "file_exists"

    path: str
    exists: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionGrader(GraderCommon):
    TYPE: ClassVar[str] = "decision"

    question: DecisionQuestion
    threshold: float = DEFAULT_THRESHOLD
    focus: Focus = LAST_MESSAGE
    rubric: str | None = None

    @property
    def calls_a_door(self) -> bool:
        return True


@dataclass(frozen=True, slots=True, kw_only=True)
class JudgeGrader(GraderCommon):
    TYPE: ClassVar[str] = "judge"

    criteria: str
    focus: Focus = LAST_MESSAGE

    @property
    def calls_a_door(self) -> bool:
        return True


@dataclass(frozen=True, slots=True, kw_only=True)
class ReceiptGrader(GraderCommon):
    TYPE: ClassVar[str] = "receipt"

    operation: str


GraderSpec: TypeAlias = (
    RegexGrader
    | OperationUsedGrader
    | OperationOrderGrader
    | FileExistsGrader
    | DecisionGrader
    | JudgeGrader
    | ReceiptGrader
)


def _compile(pattern: str, flags: str) -> re.Pattern[str]:
    value = 0
    for flag in flags:
        value |= REGEX_FLAGS[flag]
    return re.compile(pattern, value)


class _Reader:
    """Reads one grader table, raising errors that name the file and the key (with `prefix`, the
    grader's place in `case.toml`)."""

    def __init__(self, table: Table, type_word: str, file: str, prefix: str) -> None:
        self.table = table
        self.type_word = type_word
        self.file = file
        self.prefix = prefix

    def fail(self, key: str, message: str) -> TestSetError:
        return TestSetError(self.file, f"{self.prefix}{key}", message)

    def text(self, key: str) -> str | None:
        value = self.table.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(key, f"`{key}` must be a string")
        if is_blank(value):
            raise self.fail(key, f"`{key}` is empty")
        return value

    def required(self, key: str) -> str:
        value = self.text(key)
        if value is None:
            raise self.fail(key, f"a {self.type_word} grader needs `{key}`")
        return value

    def from_body(self, key: str, body: str | None) -> str:
        value = self.text(key)
        if value is not None and body is not None:
            raise self.fail(key, f"`{key}` is given twice: in the frontmatter and as the body")
        if value is not None:
            return value
        if body is not None:
            return body
        raise self.fail(key, f"a {self.type_word} grader needs `{key}`, in the frontmatter or as the body")

    def count(self, key: str) -> int | None:
        value = self.table.get(key)
        if value is None:
            return None
        if not is_integer(value) or value < 0:
            raise self.fail(key, f"`{key}` must be a whole number, 0 or more")
        return int(value)

    def pattern(self, key: str, pattern: str, flags: str) -> None:
        for flag in flags:
            if flag not in REGEX_FLAGS:
                raise self.fail("flags", f"unknown regex flag `{flag}`; the flags are i, m, s, and x")
        try:
            _compile(pattern, flags)
        except (re.error, RecursionError, OverflowError) as error:
            raise self.fail(key, f"the pattern does not compile: {error}") from None

    def focus(self, key: str) -> Focus:
        value = self.table.get(key)
        if value is None:
            return LAST_MESSAGE
        if isinstance(value, str):
            if value in (FocusKind.LAST_MESSAGE, FocusKind.TRAJECTORY, FocusKind.FILES):
                return Focus(FocusKind(value))
            raise self.fail(
                key, f'`{key}` is `{value}`; it must be last_message, trajectory, files, or {{ file = "<path>" }}'
            )
        if isinstance(value, dict):
            check_keys(value, ("file",), self.file, f"{self.prefix}{key}.")
            path = value.get("file")
            if not isinstance(path, str):
                raise self.fail(f"{key}.file", f"`{key}.file` must be a path string")
            problem = workspace_path_problem(path)
            if problem is not None:
                raise self.fail(f"{key}.file", f"`{key}.file` {problem}")
            return Focus(FocusKind.FILE, path)
        raise self.fail(key, f"`{key}` must be a string or a table")

    def question(self) -> DecisionQuestion:
        value = self.table.get("question")
        if value is None:
            raise self.fail("question", "a decision grader needs `question`")
        if isinstance(value, str) and not is_blank(value):
            return NoulQuestion(value)
        if not isinstance(value, dict):
            raise self.fail("question", "`question` must be a non-empty string or a table")
        check_keys(value, QUESTION_KEYS, self.file, f"{self.prefix}question.")
        instructions = value.get("instructions")
        if not isinstance(instructions, str) or is_blank(instructions):
            raise self.fail("question.instructions", "`question.instructions` must be a non-empty string")
        levels, options = value.get("levels"), value.get("options")
        if levels is not None and options is not None:
            raise self.fail("question", "`question` has both `levels` (a Score) and `options` (a Choice); keep one")
        if options is None and "pass" in value:
            raise self.fail("question.pass", "`question.pass` belongs to a Choice with `options`")
        if levels is not None:
            found = self.strings(value, "levels")
            if not MIN_LEVELS <= len(found) <= MAX_LEVELS:
                raise self.fail(
                    "question.levels",
                    f"`question.levels` has {len(found)} levels; a Score has {MIN_LEVELS} to {MAX_LEVELS}",
                )
            return ScoreQuestion(instructions, found)
        if options is None:
            return NoulQuestion(instructions)
        if not isinstance(options, dict):
            raise self.fail("question.options", "`question.options` must be a table")
        named: list[tuple[str, str]] = []
        for name in sorted(options):
            meaning = options[name]
            if not isinstance(meaning, str) or is_blank(meaning):
                raise self.fail(f"question.options.{name}", f"`question.options.{name}` must describe the option")
            named.append((name, meaning))
        if len(named) < 2:
            raise self.fail("question.options", "`question.options` needs at least two options")
        passing = self.strings(value, "pass") if "pass" in value else ()
        if not passing:
            raise self.fail("question.pass", "`question.pass` names the options that count as a pass")
        for option in passing:
            if option not in options:
                raise self.fail("question.pass", f"`question.pass` names `{option}`, which is not an option")
        return ChoiceQuestion(instructions, tuple(named), passing)

    def strings(self, table: Table, key: str) -> tuple[str, ...]:
        items = table[key]
        if not isinstance(items, list):
            raise self.fail(f"question.{key}", f"`question.{key}` must be an array")
        if not all(isinstance(item, str) and not is_blank(item) for item in items):
            raise self.fail(f"question.{key}", f"`question.{key}` holds non-empty strings")
        return tuple(items)


def workspace_path_problem(path: str) -> str | None:
    """Why `path` does not name something inside the run's workspace, or `None` when it does."""
    if not path or path.startswith("/") or "\\" in path:
        return f"is `{path}`; it must be a relative path inside the workspace"
    if any(segment in ("", ".", "..") for segment in path.split("/")):
        return f"is `{path}`; it must not contain empty, `.`, or `..` segments"
    return None


def parse_grader(
    table: Table, body: str | None, default_name: str | None, *, file: str, prefix: str = "", origin: str | None = None
) -> GraderSpec:
    """One grader from its TOML table and (for a grader file) its Markdown body.

    `body` is the pattern of a `regex`, the rubric of a `decision`, the criteria of a `judge`;
    `default_name` is the file stem (a `case.toml` grader has none and needs `name`). Errors name
    `file` and the key, prefixed by `prefix` (`graders[0].` for a `case.toml` entry).
    """
    origin = file if origin is None else origin

    def fail(key: str, message: str) -> TestSetError:
        return TestSetError(file, f"{prefix}{key}", message)

    type_word = table.get("type")
    if type_word is None:
        raise fail("type", f"a grader needs a `type`; the types are {', '.join(GRADER_TYPES)}")
    if not isinstance(type_word, str):
        raise fail("type", "`type` must be a string")
    if type_word not in TYPE_KEYS:
        raise fail("type", f"unknown grader type `{type_word}`; the types are {', '.join(GRADER_TYPES)}")
    check_keys(table, COMMON_KEYS + TYPE_KEYS[type_word], file, prefix)

    name = table.get("name", default_name)
    if name is None:
        raise fail("name", "a grader in case.toml needs a `name`")
    if not isinstance(name, str):
        raise fail("name", "`name` must be a string")
    check_name(name, file, f"{prefix}name", "grader name")

    weight: float = 1.0
    if "weight" in table:
        raw = table["weight"]
        if not is_number(raw):
            raise fail("weight", "`weight` must be a number")
        weight = float(raw)
    if not math.isfinite(weight) or weight <= 0:
        raise fail("weight", f"`weight` must be greater than 0, got {weight:g}")

    arm_word = table.get("arm")
    arm = None
    if arm_word is not None:
        if arm_word not in (ArmRule.SUBJECT_ONLY, ArmRule.BOTH):
            raise fail("arm", '`arm` must be "subject-only" or "both"')
        arm = ArmRule(arm_word)

    trimmed = None if body is None else trim(body)
    found_body = trimmed if trimmed else None
    read = _Reader(table, type_word, file, prefix)

    if type_word == "regex":
        pattern = read.from_body("pattern", found_body)
        flags = read.text("flags") or ""
        read.pattern("pattern", pattern, flags)
        match = _match(read)
        return RegexGrader(
            pattern=pattern,
            flags=flags,
            match=match,
            target=read.focus("target"),
            name=name,
            weight=weight,
            arm=arm,
            origin=origin,
        )
    if type_word == "operation_used":
        operation = read.required("operation")
        input_match = read.text("input_match")
        if input_match is not None:
            read.pattern("input_match", input_match, "")
        low = read.count("min")
        low = 1 if low is None else low
        high = read.count("max")
        if high is not None and high < low:
            raise fail("max", f"`max` ({high}) is below `min` ({low})")
        return OperationUsedGrader(
            operation=operation,
            input_match=input_match,
            min=low,
            max=high,
            name=name,
            weight=weight,
            arm=arm,
            origin=origin,
        )
    if type_word == "operation_order":
        return OperationOrderGrader(
            before=read.required("before"),
            after=read.required("after"),
            name=name,
            weight=weight,
            arm=arm,
            origin=origin,
        )
    if type_word == "file_exists":
        path = read.required("path")
        exists = table.get("exists", True)
        if not isinstance(exists, bool):
            raise fail("exists", "`exists` must be true or false")
        return FileExistsGrader(path=path, exists=exists, name=name, weight=weight, arm=arm, origin=origin)
    if type_word == "decision":
        question = read.question()
        threshold = DEFAULT_THRESHOLD
        if "threshold" in table:
            raw = table["threshold"]
            if not is_number(raw) or not 0.0 <= float(raw) <= 1.0:
                raise fail("threshold", "`threshold` must be a number from 0 to 1")
            threshold = float(raw)
        rubric = read.text("rubric")
        if rubric is not None and found_body is not None:
            raise fail("rubric", "`rubric` is given twice: in the frontmatter and as the body")
        return DecisionGrader(
            question=question,
            threshold=threshold,
            focus=read.focus("focus"),
            rubric=rubric if rubric is not None else found_body,
            name=name,
            weight=weight,
            arm=arm,
            origin=origin,
        )
    if type_word == "judge":
        criteria = read.from_body("criteria", found_body)
        return JudgeGrader(
            criteria=criteria, focus=read.focus("focus"), name=name, weight=weight, arm=arm, origin=origin
        )
    return ReceiptGrader(operation=read.required("operation"), name=name, weight=weight, arm=arm, origin=origin)


def _match(read: _Reader) -> Match:
    word = read.text("match")
    if word is None or word == MatchMode.CONTAINS:
        return Match(MatchMode.CONTAINS)
    if word == MatchMode.NOT_CONTAINS:
        return Match(MatchMode.NOT_CONTAINS)
    counted = _COUNT.fullmatch(word)
    if counted is None:
        raise read.fail("match", f"`match` is `{word}`; it must be contains, not_contains, or count:N")
    return Match(MatchMode.COUNT, int(counted.group(1)))
