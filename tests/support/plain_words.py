"""What a person reads from the runner is written for Python users: no idiom of the Rust reference leaks in.

`rust_idioms` names what it finds: an `Option` printed as `Some(3)` or `None without`, an I/O error's
`(os error 2)`, a value quoted the way Rust's `{:?}` quotes it (escapes inside double quotes, `\\u{1b}`), or
the Rust standard library's own wording of an I/O error.
"""

from __future__ import annotations

import re
from typing import Final

IDIOMS: Final = {
    "an Option printed as Some(...)": re.compile(r"\bSome\("),
    "an Option printed as None": re.compile(r"\bNone without\b"),
    "an I/O error's (os error N)": re.compile(r"\(os error \d+\)"),
    "{:?}-style quoting": re.compile(r'"(?:[^"\\\n]|\\.)*\\["\\nrt0](?:[^"\\\n]|\\.)*"|\\u\{[0-9a-fA-F]+\}'),
    "Rust's I/O wording": re.compile(r"stream did not contain valid UTF-8"),
}


def rust_idioms(text: str) -> list[str]:
    """The names of the Rust idioms found in `text` (empty when it reads plainly)."""
    return [name for name, pattern in IDIOMS.items() if pattern.search(text)]


def assert_plain(*texts: str) -> None:
    for text in texts:
        found = rust_idioms(text)
        assert not found, f"{text!r} has {', '.join(found)}"
