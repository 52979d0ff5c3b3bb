"""Typed errors of the Nostr primitives.

Every parser and verifier in this package raises only a subclass of
`NostrError`, carrying a stable `code` (what a caller branches on), a `path`
(where in the input the problem is, written like `tags[2][1]`;
empty for the whole input) and a plain `message` (for a person).
Messages never echo key material or payload bytes.
"""

from __future__ import annotations


class NostrError(Exception):
    """Base of every error raised by `eval_runner.nostr`."""

    code: str
    path: str
    message: str

    def __init__(self, code: str, path: str, message: str) -> None:
        super().__init__(code, path, message)
        self.code = code
        self.path = path
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.path or '(document)'}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.path!r}, {self.message!r})"


class KeyFormatError(NostrError):
    """A secret or public key that is not well formed (code `invalid_key`)."""


class EventError(NostrError):
    """A NIP-01 event problem: `malformed`, `invalid_id` or `invalid_signature`."""


class Nip44Error(NostrError):
    """A NIP-44 v2 failure: `invalid_key`, `invalid_argument`, `encrypt_failed` or `decrypt_failed`."""


class Nip98Error(NostrError):
    """A NIP-98 authorization to refuse with HTTP 401.

    Codes: `missing`, `malformed`, `invalid_event`, `wrong_kind`, `expired`, `url_mismatch`,
    `method_mismatch`, `payload_mismatch`.
    """


class FrameError(NostrError):
    """A relay protocol frame that is not one this package understands: `malformed`, `unknown_type`, `too_large`."""
