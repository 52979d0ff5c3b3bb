"""The case-id grammar (wire.md §14.1), shared by drafts, case manifests and grader names.

A case id becomes a directory name (`evals/<id>/`) and a grader name a file name (`graders/<name>.md`),
so the grammar is a plain directory name, and never a name case discovery skips. One definition here
keeps the draft, the case manifest and the engine's loader agreeing on what a case may be called.
"""

from __future__ import annotations

import re

from eval_runner.contracts import shape
from eval_runner.contracts.errors import Code
from eval_runner.contracts.strict_json import JsonValue

#: The character set and the no-leading-dot rule; the reserved names and length are checked apart.
CASE_ID = re.compile(r"^(?!\.)[A-Za-z0-9._-]{1,128}$")
MAX_CASE_ID_BYTES = 128
MAX_GRADER_NAME_BYTES = 64
#: Directory names case discovery skips; a case can never be called one of them.
RESERVED = frozenset({"results", "node_modules", ".git", ".openagents"})


def is_case_id(value: object, max_bytes: int = MAX_CASE_ID_BYTES) -> bool:
    return (
        isinstance(value, str)
        and CASE_ID.fullmatch(value) is not None
        and len(value) <= max_bytes
        and value not in RESERVED
    )


def case_id(value: JsonValue, path: str, *, max_bytes: int = MAX_CASE_ID_BYTES, code: Code = Code.MALFORMED) -> str:
    """A case id (or, with `max_bytes=64`, a grader name); anything else refuses with `code`."""
    if not is_case_id(value, max_bytes):
        raise shape.fail(
            path,
            f"must be a case id: 1–{max_bytes} ASCII letters, digits, '-', '_' or '.', "
            "not starting with '.' and not a reserved name",
            code,
        )
    assert isinstance(value, str)
    return value
