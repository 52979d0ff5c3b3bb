"""Reading case files: the `+++` TOML front matter, the typed error that names file and key, and the
small text rules the case format shares with the reference (runner.md "Case/test-set file format").

The reference reads case files with Rust's `str` methods, so the helpers here follow those and not
Python's: `trim` strips Unicode White_Space only (Python's `strip()` also strips U+001C–U+001F),
`lines` splits on `\\n` and drops one trailing `\\r` (Python's `splitlines` also splits on U+2028,
form feeds and more). TOML is read with the standard library's `tomllib` (TOML 1.0); a key set is
checked in sorted order, as the reference's `toml::Table` (a sorted map) iterates it.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from typing import Any

from eval_runner.contracts.case_id import is_case_id
from eval_runner.errors import EvalRunnerError

#: What a case file declares as `v`, and the prefix every version of it shares.
CASE_SCHEMA = "openagents.eval-case.v1"
CASE_SCHEMA_PREFIX = "openagents.eval-case.v"
FENCE = "+++"
BOM = "\ufeff"
#: Unicode White_Space, the set Rust's `str::trim` strips.
WHITE_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
#: Case and grader names become report keys and file names (runner.md §22).
MAX_NAME_BYTES = 64

#: A parsed TOML table. `Any` because TOML values are recursive; readers narrow them at once.
Table = dict[str, Any]


class TestSetError(EvalRunnerError):
    """A test set that does not load: the file (relative to the eval directory, `/`-separated), the key
    the problem is in (`None` when it is the file as a whole), and a plain message that also names it."""

    __test__ = False  # not a pytest test class, whatever its name says

    def __init__(self, file: str, key: str | None, message: str, *, line: int | None = None) -> None:
        self.file = file
        self.key = key
        self.message = message
        self.line = line
        where = file if line is None else f"{file}:{line}"
        super().__init__(f"{where}: {message}")

    def __repr__(self) -> str:
        return f"TestSetError({self.file!r}, {self.key!r}, {self.message!r})"


def trim(text: str) -> str:
    return text.strip(WHITE_SPACE)


def trim_start(text: str) -> str:
    return text.lstrip(WHITE_SPACE)


def trim_end(text: str) -> str:
    return text.rstrip(WHITE_SPACE)


def is_blank(text: str) -> bool:
    return not trim(text)


def lines(text: str) -> list[str]:
    """Rust's `str::lines`: split on `\\n`, drop one trailing `\\r`, no empty last line."""
    parts = text.split("\n")
    if parts[-1] == "":
        parts.pop()
    return [part[:-1] if part.endswith("\r") else part for part in parts]


def split(text: str, file: str) -> tuple[str | None, str]:
    """Split `+++` front matter from a Markdown body; a leading BOM is ignored.

    A file whose first line is not `+++` (trailing white space allowed) has no front matter and is all
    body. An opening fence that never closes is an error.
    """
    if text.startswith(BOM):
        text = text[len(BOM) :]
    pieces = _inclusive(text)
    if not pieces or trim_end(pieces[0]) != FENCE:
        return None, text
    start = len(pieces[0])
    offset = start
    for piece in pieces[1:]:
        if trim_end(piece) == FENCE:
            return text[start:offset], text[offset + len(piece) :]
        offset += len(piece)
    raise TestSetError(file, None, "the frontmatter opens with +++ and never closes")


def _inclusive(text: str) -> list[str]:
    """Rust's `split_inclusive('\\n')`: pieces keep their `\\n`; no empty last piece."""
    pieces = [piece + "\n" for piece in text.split("\n")]
    pieces[-1] = pieces[-1][:-1]
    if pieces[-1] == "":
        pieces.pop()
    return pieces


def utf8(data: bytes, file: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise TestSetError(file, None, "the file is not UTF-8 text") from None


def parse_table(text: str, file: str) -> Table:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise TestSetError(file, None, f"TOML does not parse: {error}") from None
    except (ValueError, RecursionError) as error:  # tomllib's own limits on hostile input
        raise TestSetError(file, None, f"TOML does not parse: {error}") from None


def check_keys(table: Table, allowed: Iterable[str], file: str, within: str = "") -> None:
    """Refuse a key outside `allowed`, naming the allowed set; `within` prefixes a nested table's keys."""
    allowed = tuple(allowed)
    for key in sorted(table):
        if key not in allowed:
            raise TestSetError(
                file,
                f"{within}{key}",
                f"unknown key `{within}{key}`; the allowed keys are {', '.join(allowed)}",
            )


def check_name(name: str, file: str, key: str, what: str) -> str:
    """A case or grader name: 1 to 64 of `A-Z a-z 0-9 . _ -`, not starting with `.`, and not a name
    case discovery skips (`contracts.case_id`), so it can always be a directory or file name."""
    if not is_case_id(name, MAX_NAME_BYTES):
        raise TestSetError(
            file,
            key,
            f"the {what} `{name}` must be 1 to {MAX_NAME_BYTES} letters, digits, `.`, `_`, or `-`, "
            "not start with `.`, and not be results, node_modules, .git or .openagents",
        )
    return name


def is_number(value: object) -> bool:
    """A TOML integer or float; TOML booleans are never numbers (Python's `bool` is an `int`)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
