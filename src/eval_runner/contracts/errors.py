"""The one error every contract parser raises: a refusal code, the field path, and a plain message.

Parsers never raise anything else (no KeyError, no TypeError escapes): the service maps the code
straight onto a wire refusal, and a person reads the message. The codes are the shared refusal
vocabulary of wire.md §4.4, plus the execution layer's `busy` and the hosted profile's `too_large`
and `over_quota`.
"""

from __future__ import annotations

from enum import StrEnum


class Code(StrEnum):
    """Refusal codes (wire.md §4.4, §7.6)."""

    MALFORMED = "malformed"
    UNSUPPORTED_VERSION = "unsupported_version"
    UNSUPPORTED_FEATURE = "unsupported_feature"
    NOT_ADMITTED = "not_admitted"
    UNAVAILABLE = "unavailable"
    CONTENT_UNAVAILABLE = "content_unavailable"
    IDENTITY_MISMATCH = "identity_mismatch"
    INCOMPATIBLE = "incompatible"
    REVOKED = "revoked"
    STALE = "stale"
    CANNOT_ENFORCE = "cannot_enforce"
    LIMIT_EXCEEDED = "limit_exceeded"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    CONFLICT = "conflict"
    BUSY = "busy"
    TOO_LARGE = "too_large"
    OVER_QUOTA = "over_quota"


class ContractError(Exception):
    """A document that does not satisfy its contract.

    `path` names the field the way a person would find it: `input.runs`, `cases[2].graders[0].name`;
    the empty string is the document itself.
    """

    def __init__(self, code: Code, path: str, message: str) -> None:
        self.code = code
        self.path = path
        self.message = message
        super().__init__(f"{code}: {path or '(document)'}: {message}")

    def __repr__(self) -> str:
        return f"ContractError({self.code.value!r}, {self.path!r}, {self.message!r})"

    @property
    def detail(self) -> str:
        """`<code>: <path>: <message>` — the form the runner puts in a refusal message (wire.md §7.1)."""
        return str(self)
