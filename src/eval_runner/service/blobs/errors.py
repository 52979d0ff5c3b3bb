"""The one error the blob store raises, with a code a caller branches on.

The message names the store's base URL and the digest, and says what went wrong in plain words; it never
holds a key, an authorization header, or the bytes, and text a server sent is quoted with `repr` and cut
short, so a hostile server cannot write into our logs.
"""

from __future__ import annotations

from typing import Final, Literal

from eval_runner.errors import CodedError

BlobCode = Literal[
    "content_unavailable",  # no store has the blob (every read base answered 404)
    "unavailable",  # a store could not be reached or answered with something unusable (5xx, timeout, redirect away)
    "too_large",  # over the blob bound, by Content-Length or by the bytes read, or the server's 413
    "identity_mismatch",  # bytes that do not digest to their name, or a descriptor naming other bytes
    "refused",  # the store refused the upload (400, 401, 403, 409, other 4xx)
    "rate_limited",  # 429 past the upload's patience
    "invalid_argument",  # a digest, base URL or media type that is not well formed
]

#: Worst first: when every read base fails, the error is the worst of their failures.
SEVERITY: Final[tuple[BlobCode, ...]] = (
    "identity_mismatch",
    "too_large",
    "unavailable",
    "rate_limited",
    "refused",
    "content_unavailable",
    "invalid_argument",
)
_MAX_QUOTED: Final = 200


class BlobError(CodedError):
    """A blob the store could not fetch or upload; `str()` is the plain message."""

    code: BlobCode

    def __init__(self, code: BlobCode, message: str) -> None:
        super().__init__(code, message)


def quoted(text: str) -> str:
    """Text a server sent, safe to put in a message: repr-quoted and at most 200 characters."""
    return repr(text[:_MAX_QUOTED])
