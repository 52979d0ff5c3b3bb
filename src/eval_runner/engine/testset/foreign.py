"""What the readers of other test-set formats share: their typed error, a YAML reader without aliases,
a bounded file reader that never leaves the extension, and the step that turns a case read from
another format into our own case files.

A case from `evals/evals.json` or a Vally `eval.yaml` becomes the exact `prompt.md` and grader files
a person would have written in our format (`ForeignCase.files`), then goes through the same
`parse_case` as every other case: one set of rules, and a suite that can be listed, released and
rebuilt byte for byte like any other. The mapping of each format is in decisions.md ("Test sets in
the agents' own formats").
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from eval_runner.contracts.case_id import is_case_id
from eval_runner.engine.testset.cases import (
    MAX_FILE_BYTES,
    MAX_FIXTURE_PATH_BYTES,
    MAX_FIXTURES,
    Case,
    CaseFile,
    CaseFiles,
    CaseKind,
    parse_case,
)
from eval_runner.engine.testset.frontmatter import CASE_SCHEMA, MAX_NAME_BYTES, TestSetError

#: Every case read from another format asks for these: agents that people use read and write files.
FOREIGN_OPERATIONS = ("read", "write")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NOT_NAME = re.compile(r"[^A-Za-z0-9._-]+")


class FormatCode(StrEnum):
    """Why a file in another format was refused (the `code` of a `FormatError`)."""

    MALFORMED = "malformed"  # not JSON / YAML / front matter at all, or the wrong shape
    MISSING = "missing"  # a required field or file is not there
    UNSUPPORTED = "unsupported"  # a real feature of the format this runner cannot honour
    UNKNOWN_KEY = "unknown_key"  # a key the format does not have
    TOO_LARGE = "too_large"  # past a size or count bound
    OUTSIDE = "outside"  # a path that leaves the extension, or goes through a link


class FormatError(TestSetError):
    """A file in another format that does not load: `code`, the file, the field path and a message."""

    __test__ = False

    def __init__(self, code: FormatCode, file: str, key: str | None, message: str) -> None:
        self.code = code
        super().__init__(file, key, message)

    def __repr__(self) -> str:
        return f"FormatError({self.code.value!r}, {self.file!r}, {self.key!r}, {self.message!r})"


class _NoAliasLoader(yaml.SafeLoader):
    """`yaml.safe_load`'s loader, refusing anchors' aliases: a few bytes of aliases can stand for
    an exponentially large document, and nothing a test set says needs one."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not accepted", mark)
        return super().compose_node(parent, index)


def load_yaml(text: str, file: str) -> Any:
    """A YAML document as `yaml.safe_load` reads it (no aliases); a typed error when it does not parse."""
    try:
        return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        raise FormatError(FormatCode.MALFORMED, file, None, f"YAML does not parse: {error}") from None
    except (ValueError, TypeError, RecursionError, OverflowError) as error:
        raise FormatError(FormatCode.MALFORMED, file, None, f"YAML does not parse: {error}") from None


def utf8_text(data: bytes, file: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError(FormatCode.MALFORMED, file, None, "the file is not UTF-8 text") from None
    return text.removeprefix("\ufeff")


def safe_relative(path: str) -> str | None:
    """`path` as `/`-separated segments that stay inside a root, or None: no absolute path, no empty,
    `.` or `..` segment, no backslash or control character."""
    if not path or path.startswith("/") or "\\" in path or _CONTROL.search(path):
        return None
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    return path


def read_inside(root: Path, relative: str, file: str, key: str | None) -> bytes | None:
    """The bytes of `root/relative`, at most 1 MiB, never through a link at any step; None when it
    does not exist. `file` and `key` name where the path was written, for errors."""
    if safe_relative(relative) is None:
        raise FormatError(FormatCode.OUTSIDE, file, key, f"`{relative}` is not a relative path inside the extension")
    at = root
    parts = relative.split("/")
    for index, part in enumerate(parts):
        at = at / part
        try:
            info = at.lstat()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise FormatError(FormatCode.MALFORMED, file, key, f"`{relative}`: {error.strerror or error}") from None
        if stat.S_ISLNK(info.st_mode):
            raise FormatError(FormatCode.OUTSIDE, file, key, f"`{relative}` goes through a link, which is not followed")
        last = index == len(parts) - 1
        if not last and not stat.S_ISDIR(info.st_mode):
            return None
        if last and not stat.S_ISREG(info.st_mode):
            raise FormatError(FormatCode.MALFORMED, file, key, f"`{relative}` is not a regular file")
    try:
        descriptor = os.open(at, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise FormatError(FormatCode.MALFORMED, file, key, f"`{relative}`: {error.strerror or error}") from None
    with os.fdopen(descriptor, "rb") as handle:
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise FormatError(FormatCode.TOO_LARGE, file, key, f"`{relative}` is larger than {MAX_FILE_BYTES} bytes")
    return data


def case_name(raw: str, taken: set[str]) -> str:
    """A case name in our grammar from another format's name: runs of other characters become `-`,
    at most 64 bytes, a leading `.` dropped, and `-2`, `-3`… when the name is taken."""
    base = _NOT_NAME.sub("-", raw).strip("-").lstrip(".")[:MAX_NAME_BYTES].strip("-") or "case"
    if not is_case_id(base, MAX_NAME_BYTES):
        base = f"case-{base}"[:MAX_NAME_BYTES]
    name, number = base, 1
    while name in taken or not is_case_id(name, MAX_NAME_BYTES):
        number += 1
        suffix = f"-{number}"
        name = f"{base[: MAX_NAME_BYTES - len(suffix)]}{suffix}"
    taken.add(name)
    return name


def literal_pattern(text: str) -> str:
    """A regex matching `text` literally under both Python's `re` and RE2: ASCII punctuation is
    escaped with a backslash, control characters are written `\\xHH`, everything else is itself."""
    out = []
    for char in text:
        if char.isascii() and not char.isalnum() and char not in " _":
            out.append(f"\\x{ord(char):02x}" if _CONTROL.fullmatch(char) else f"\\{char}")
        else:
            out.append(char)
    return "".join(out)


def toml_string(text: str) -> str:
    """`text` as a one-line TOML basic string."""
    out = ['"']
    for char in text:
        if char == '"':
            out.append('\\"')
        elif char == "\\":
            out.append("\\\\")
        elif _CONTROL.fullmatch(char):
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


#: The front matter keys of one grader file, as TOML values.
GraderKeys = dict[str, str | int | float | bool | dict[str, str]]


def _toml_value(value: str | int | float | bool | tuple[str, ...] | dict[str, str]) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{key} = {toml_string(item)}" for key, item in value.items()) + " }"
    return "[" + ", ".join(toml_string(item) for item in value) + "]"


@dataclass(frozen=True, slots=True)
class ForeignGrader:
    """One grader of ours, as the keys of its file's front matter (its name is the file stem)."""

    name: str
    keys: GraderKeys

    def text(self) -> str:
        lines = ["+++", *(f"{key} = {_toml_value(value)}" for key, value in self.keys.items()), "+++", ""]
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class ForeignCase:
    """A case read from another format, before it becomes our case files; `origin` is where it was
    written (`evals/evals.json#evals[0]`), for errors."""

    name: str
    prompt: str
    origin: str
    kind: CaseKind = CaseKind.SHOULD_FIRE
    description: str | None = None
    runs: int | None = None
    deadline_seconds: int | None = None
    graders: tuple[ForeignGrader, ...] = ()
    fixtures: tuple[CaseFile, ...] = ()
    tags: tuple[str, ...] = field(default=())

    def prompt_text(self) -> str:
        keys: dict[str, str | int | float | bool | tuple[str, ...] | dict[str, str]] = {"v": CASE_SCHEMA}
        if self.description:
            keys["description"] = self.description
        keys["kind"] = self.kind.value
        if self.tags:
            keys["tags"] = self.tags
        if self.runs is not None:
            keys["runs"] = self.runs
        front = [f"{key} = {_toml_value(value)}" for key, value in keys.items()]
        front += ["", "[run]", f"allowed_operations = {_toml_value(FOREIGN_OPERATIONS)}"]
        if self.deadline_seconds is not None:
            front.append(f"deadline_seconds = {self.deadline_seconds}")
        return "\n".join(["+++", *front, "+++", "", self.prompt.strip(), ""])

    def files(self) -> CaseFiles:
        if len(self.fixtures) > MAX_FIXTURES:
            raise FormatError(
                FormatCode.TOO_LARGE, self.origin, "files", f"a case has at most {MAX_FIXTURES} input files"
            )
        return CaseFiles(
            prompt=self.prompt_text().encode("utf-8"),
            case_toml=None,
            graders=tuple(
                CaseFile(f"{grader.name}.md", grader.text().encode("utf-8"))
                for grader in sorted(self.graders, key=lambda grader: grader.name)
            ),
            fixtures=tuple(sorted(self.fixtures, key=lambda fixture: fixture.name)),
        )

    def to_case(self, evals_dir: Path) -> Case:
        """Our case, parsed from the files this case becomes, with its errors pointing at `origin`."""
        if not self.graders:
            raise FormatError(FormatCode.MISSING, self.origin, None, "the case has nothing to grade it by")
        for fixture in self.fixtures:
            if len(fixture.name.encode("utf-8")) > MAX_FIXTURE_PATH_BYTES:
                raise FormatError(FormatCode.TOO_LARGE, self.origin, "files", f"`{fixture.name}` is too long a path")
        try:
            return parse_case(self.name, self.name, evals_dir / self.name, self.files())
        except FormatError:
            raise
        except TestSetError as error:
            raise FormatError(
                FormatCode.MALFORMED, self.origin, error.key, f"does not make a case: {error.message}"
            ) from None


def fixture(name: str, data: bytes, origin: str, key: str) -> CaseFile:
    """An input file placed at workspace path `name`."""
    if safe_relative(name) is None:
        raise FormatError(FormatCode.OUTSIDE, origin, key, f"`{name}` is not a relative path inside the workspace")
    return CaseFile(name, data)
