"""NIP-01 events: id computation, signing, verification and strict parsing.

Every receiver in this protocol verifies id *and* signature before using an event (wire.md §2.1), so
`Event.verify` always recomputes the id from the fields rather than trusting the claimed one.
`Event.from_json` only checks shape; call `verify()` afterwards. Where NIP-01 leaves room it follows the
reference (decisions.md, "Nostr primitives: where NIP text, the reference and nostr-sdk leave room").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from coincurve import PublicKeyXOnly

from eval_runner.nostr.errors import EventError
from eval_runner.nostr.keys import SecretKey, is_lower_hex

KIND_MAX: Final = 65_535
CREATED_AT_MAX: Final = 2**64 - 1

Tags = tuple[tuple[str, ...], ...]

# A prebuilt encoder: json.dumps with non-default options builds a new one per call.
_PREIMAGE_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


@lru_cache(maxsize=4096)
def _xonly(pubkey_hex: str) -> PublicKeyXOnly:
    return PublicKeyXOnly(bytes.fromhex(pubkey_hex))


@lru_cache(maxsize=4096)
def _signature_holds(pubkey_hex: str, sig_hex: str, event_id: str) -> bool:
    """BIP-340 over the id. Remembered, because the runner checks each request twice (the listener, to
    remember its id; the pipeline, to open it) and the Schnorr check is most of the cost; the id itself is
    always recomputed from the fields, so a remembered answer only ever vouches for an event that hashes to it."""
    try:
        return bool(_xonly(pubkey_hex).verify(bytes.fromhex(sig_hex), bytes.fromhex(event_id)))
    except (ValueError, TypeError):
        return False


def _is_unicode(text: str) -> bool:
    """False for strings holding lone surrogates (possible after json.loads), which UTF-8 cannot carry."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def compute_id(pubkey: str, created_at: int, kind: int, tags: Sequence[Sequence[str]], content: str) -> str:
    """Lowercase hex SHA-256 of the compact `[0, pubkey, created_at, kind, tags, content]` array."""
    preimage = _PREIMAGE_ENCODER.encode([0, pubkey, created_at, kind, tags, content])
    try:
        encoded = preimage.encode("utf-8")
    except UnicodeEncodeError:
        raise EventError("malformed", "", "event text is not valid Unicode") from None
    return hashlib.sha256(encoded).hexdigest()


@dataclass(frozen=True, slots=True)
class Event:
    """A signed NIP-01 event; construct with `sign` or `Event.from_json`."""

    id: str
    pubkey: str
    created_at: int
    kind: int
    tags: Tags
    content: str
    sig: str

    def computed_id(self) -> str:
        return compute_id(self.pubkey, self.created_at, self.kind, self.tags, self.content)

    def verify(self) -> None:
        """Raise `EventError` (`invalid_id` / `invalid_signature`) unless id and signature hold."""
        if self.computed_id() != self.id:
            raise EventError("invalid_id", "id", "id is not the hash of the event")
        try:
            valid = _signature_holds(self.pubkey, self.sig, self.id)
        except TypeError:
            valid = False
        if not valid:
            raise EventError("invalid_signature", "sig", "signature does not verify for pubkey")

    def is_valid(self) -> bool:
        try:
            self.verify()
        except EventError:
            return False
        return True

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "pubkey": self.pubkey,
            "created_at": self.created_at,
            "kind": self.kind,
            "tags": [list(tag) for tag in self.tags],
            "content": self.content,
            "sig": self.sig,
        }

    @classmethod
    def from_json(cls, value: object) -> Event:
        """Strict shape parse of a decoded JSON object; raises `EventError("malformed", …)`."""
        if not isinstance(value, dict):
            raise EventError("malformed", "", "an event is a JSON object")
        event_id = _hex(_field(value, "id"), "id", 64)
        pubkey = _hex(_field(value, "pubkey"), "pubkey", 64)
        created_at = _integer(_field(value, "created_at"), "created_at", CREATED_AT_MAX)
        kind = _integer(_field(value, "kind"), "kind", KIND_MAX)
        tags = _tags(_field(value, "tags"))
        content = _field(value, "content")
        if not isinstance(content, str) or not _is_unicode(content):
            raise EventError("malformed", "content", "must be a Unicode string")
        sig = _hex(_field(value, "sig"), "sig", 128)
        return cls(event_id, pubkey, created_at, kind, tags, content, sig)


def _field(value: dict[object, object], name: str) -> object:
    if name not in value:
        raise EventError("malformed", name, "required field is missing")
    return value[name]


def _hex(value: object, path: str, length: int) -> str:
    if not is_lower_hex(value, length):
        raise EventError("malformed", path, f"must be {length} lowercase hex characters")
    return value


def _integer(value: object, path: str, high: int) -> int:
    if type(value) is not int or not 0 <= value <= high:
        raise EventError("malformed", path, f"must be an integer in 0..{high}")
    return value


def _tags(value: object) -> Tags:
    if not isinstance(value, list | tuple):
        raise EventError("malformed", "tags", "must be a list of lists of strings")
    tags: list[tuple[str, ...]] = []
    for index, tag in enumerate(value):
        if not isinstance(tag, list | tuple) or not tag:
            raise EventError("malformed", f"tags[{index}]", "must be a non-empty list of strings")
        for position, item in enumerate(tag):
            if not isinstance(item, str) or not _is_unicode(item):
                raise EventError("malformed", f"tags[{index}][{position}]", "must be a Unicode string")
        tags.append(tuple(tag))
    return tuple(tags)


def sign(secret: SecretKey, kind: int, tags: Sequence[Sequence[str]], content: str, created_at: int) -> Event:
    """Build and sign an event; `created_at` is passed in (unix seconds) so this stays pure."""
    checked_kind = _integer(kind, "kind", KIND_MAX)
    checked_created_at = _integer(created_at, "created_at", CREATED_AT_MAX)
    checked_tags = _tags(tags if isinstance(tags, list | tuple) else list(tags))
    if not isinstance(content, str) or not _is_unicode(content):
        raise EventError("malformed", "content", "must be a Unicode string")
    pubkey = secret.public_key().to_hex()
    event_id = compute_id(pubkey, checked_created_at, checked_kind, checked_tags, content)
    sig = secret.sign_schnorr(bytes.fromhex(event_id)).hex()
    return Event(event_id, pubkey, checked_created_at, checked_kind, checked_tags, content, sig)


def tag_values(event: Event, name: str) -> tuple[str, ...]:
    """The first values (`tag[1]`) of every tag called `name`, in order."""
    return tuple(tag[1] for tag in event.tags if len(tag) > 1 and tag[0] == name)


def first_tag_value(event: Event, name: str) -> str | None:
    """The first value of the first tag called `name` that has one."""
    for tag in event.tags:
        if len(tag) > 1 and tag[0] == name:
            return tag[1]
    return None
