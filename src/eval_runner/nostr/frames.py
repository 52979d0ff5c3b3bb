"""NIP-01 relay protocol frames as typed records, plus subscription filters.

The runner is a relay *client*, so `parse_relay_frame` is the hot path; the client-side records parse too
(`parse_client_frame`) so tests and in-process fakes can speak both directions. Parsing is strict and
raises only `FrameError` (decisions.md, "Nostr primitives: where NIP text, the reference and nostr-sdk
leave room"); an event inside a frame is shape-checked only, and callers verify it (wire.md §2.1).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from eval_runner.nostr.errors import EventError, FrameError
from eval_runner.nostr.event import KIND_MAX, Event
from eval_runner.nostr.keys import is_lower_hex

SUB_ID_MAX: Final = 64
DEFAULT_MAX_CHARS: Final = 1_048_576
_TAG_LETTER: Final = re.compile(r"[a-zA-Z]")
_INT_MAX: Final = 2**64 - 1
_FILTER_FIELDS: Final = frozenset({"ids", "authors", "kinds", "since", "until", "limit"})
_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _fail(path: str, message: str) -> FrameError:
    return FrameError("malformed", path, message)


def _check_sub_id(value: object, path: str) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= SUB_ID_MAX:
        raise _fail(path, f"subscription id must be a string of 1..{SUB_ID_MAX} characters")
    return value


def _check_text(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise _fail(path, "must be a string")
    return value


def _check_int(value: object, path: str, high: int) -> int:
    if type(value) is not int or not 0 <= value <= high:
        raise _fail(path, f"must be an integer in 0..{high}")
    return value


def _check_event(value: object, path: str) -> Event:
    try:
        return Event.from_json(value)
    except EventError as error:
        raise _fail(f"{path}.{error.path}" if error.path else path, error.message) from None


@dataclass(frozen=True, slots=True)
class Filter:
    """A REQ filter. `None` means "no constraint"; an empty tuple matches nothing.

    `tags` holds tag filters as (letter, values) pairs, e.g. `(("p", (runner,)),)`
    for `"#p": [runner]`. Use `Filter.build` for keyword construction.
    """

    ids: tuple[str, ...] | None = None
    authors: tuple[str, ...] | None = None
    kinds: tuple[int, ...] | None = None
    since: int | None = None
    until: int | None = None
    limit: int | None = None
    tags: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __post_init__(self) -> None:
        for name in ("ids", "authors"):
            values = getattr(self, name)
            if values is not None:
                if not isinstance(values, tuple):
                    raise _fail(name, "must be a tuple")
                for index, item in enumerate(values):
                    if not is_lower_hex(item, 64):
                        raise _fail(f"{name}[{index}]", "must be 64 lowercase hex characters")
        if self.kinds is not None:
            if not isinstance(self.kinds, tuple):
                raise _fail("kinds", "must be a tuple")
            for index, kind in enumerate(self.kinds):
                _check_int(kind, f"kinds[{index}]", KIND_MAX)
        for name in ("since", "until", "limit"):
            value = getattr(self, name)
            if value is not None:
                _check_int(value, name, _INT_MAX)
        if not isinstance(self.tags, tuple):
            raise _fail("tags", "must be a tuple")
        seen: set[str] = set()
        for letter, values in self.tags:
            path = f"#{letter}"
            if not isinstance(letter, str) or not _TAG_LETTER.fullmatch(letter) or letter in seen:
                raise _fail(path, "tag filters are keyed by distinct single letters")
            seen.add(letter)
            if not isinstance(values, tuple) or not all(isinstance(item, str) for item in values):
                raise _fail(path, "must be a tuple of strings")

    @classmethod
    def build(
        cls,
        *,
        ids: Iterable[str] | None = None,
        authors: Iterable[str] | None = None,
        kinds: Iterable[int] | None = None,
        since: int | None = None,
        until: int | None = None,
        limit: int | None = None,
        tags: Mapping[str, Iterable[str]] | None = None,
    ) -> Filter:
        """Keyword constructor taking any iterables, e.g. `Filter.build(kinds=[25920], tags={"p": [r]})`."""
        return cls(
            ids=None if ids is None else tuple(ids),
            authors=None if authors is None else tuple(authors),
            kinds=None if kinds is None else tuple(kinds),
            since=since,
            until=until,
            limit=limit,
            tags=tuple((letter, tuple(values)) for letter, values in (tags or {}).items()),
        )

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {}
        if self.ids is not None:
            out["ids"] = list(self.ids)
        if self.authors is not None:
            out["authors"] = list(self.authors)
        if self.kinds is not None:
            out["kinds"] = list(self.kinds)
        for letter, values in self.tags:
            out[f"#{letter}"] = list(values)
        for name, value in (("since", self.since), ("until", self.until), ("limit", self.limit)):
            if value is not None:
                out[name] = value
        return out

    @classmethod
    def from_json(cls, value: object, path: str = "") -> Filter:
        """Strict parse of a filter object; unknown fields (e.g. NIP-50 `search`) are refused."""
        if not isinstance(value, dict):
            raise _fail(path, "a filter is a JSON object")

        def at(key: str) -> str:
            return f"{path}.{key}" if path else key

        def strings(key: str) -> tuple[str, ...] | None:
            if key not in value:
                return None
            item = value[key]
            if not isinstance(item, list) or not all(isinstance(entry, str) for entry in item):
                raise _fail(at(key), "must be a list of strings")
            return tuple(item)

        def number(key: str) -> int | None:
            return None if key not in value else _check_int(value[key], at(key), _INT_MAX)

        for key in value:
            if key not in _FILTER_FIELDS and not (isinstance(key, str) and key.startswith("#") and len(key) == 2):
                raise _fail(at(str(key)), "unknown filter field")
        kinds: tuple[int, ...] | None = None
        if "kinds" in value:
            raw_kinds = value["kinds"]
            if not isinstance(raw_kinds, list):
                raise _fail(at("kinds"), "must be a list of integers")
            kinds = tuple(_check_int(kind, at(f"kinds[{index}]"), KIND_MAX) for index, kind in enumerate(raw_kinds))
        tags = []
        for key in value:
            if key.startswith("#"):
                found = strings(key)
                assert found is not None
                tags.append((key[1:], found))
        ids, authors = strings("ids"), strings("authors")
        since, until, limit = number("since"), number("until"), number("limit")
        try:
            return cls(ids=ids, authors=authors, kinds=kinds, since=since, until=until, limit=limit, tags=tuple(tags))
        except FrameError as error:
            raise _fail(at(error.path), error.message) from None

    def matches(self, event: Event) -> bool:
        """NIP-01 match: every given constraint holds (`limit` does not affect matching)."""
        if self.ids is not None and event.id not in self.ids:
            return False
        if self.authors is not None and event.pubkey not in self.authors:
            return False
        if self.kinds is not None and event.kind not in self.kinds:
            return False
        if self.since is not None and event.created_at < self.since:
            return False
        if self.until is not None and event.created_at > self.until:
            return False
        for letter, values in self.tags:
            if not any(len(tag) > 1 and tag[0] == letter and tag[1] in values for tag in event.tags):
                return False
        return True


# client → relay


@dataclass(frozen=True, slots=True)
class ClientEvent:
    """`["EVENT", <event>]`: publish."""

    event: Event

    def to_json(self) -> list[object]:
        return ["EVENT", self.event.to_json()]


@dataclass(frozen=True, slots=True)
class Req:
    """`["REQ", <sub id>, <filter>, …]`: subscribe (at least one filter)."""

    sub_id: str
    filters: tuple[Filter, ...]

    def __post_init__(self) -> None:
        _check_sub_id(self.sub_id, "sub_id")
        if not isinstance(self.filters, tuple) or not self.filters:
            raise _fail("filters", "REQ needs at least one filter")

    def to_json(self) -> list[object]:
        return ["REQ", self.sub_id, *(item.to_json() for item in self.filters)]


@dataclass(frozen=True, slots=True)
class Close:
    """`["CLOSE", <sub id>]`."""

    sub_id: str

    def __post_init__(self) -> None:
        _check_sub_id(self.sub_id, "sub_id")

    def to_json(self) -> list[object]:
        return ["CLOSE", self.sub_id]


@dataclass(frozen=True, slots=True)
class AuthResponse:
    """`["AUTH", <signed kind 22242 event>]`."""

    event: Event

    def to_json(self) -> list[object]:
        return ["AUTH", self.event.to_json()]


# relay → client


@dataclass(frozen=True, slots=True)
class RelayEvent:
    """`["EVENT", <sub id>, <event>]`: an event for a subscription (not yet verified)."""

    sub_id: str
    event: Event

    def __post_init__(self) -> None:
        _check_sub_id(self.sub_id, "sub_id")

    def to_json(self) -> list[object]:
        return ["EVENT", self.sub_id, self.event.to_json()]


@dataclass(frozen=True, slots=True)
class Eose:
    """`["EOSE", <sub id>]`: stored events done, live events follow."""

    sub_id: str

    def __post_init__(self) -> None:
        _check_sub_id(self.sub_id, "sub_id")

    def to_json(self) -> list[object]:
        return ["EOSE", self.sub_id]


@dataclass(frozen=True, slots=True)
class Ok:
    """`["OK", <event id>, <accepted>, <message>]`: the answer to a publish."""

    event_id: str
    accepted: bool
    message: str

    def __post_init__(self) -> None:
        if not is_lower_hex(self.event_id, 64):
            raise _fail("event_id", "must be 64 lowercase hex characters")
        if not isinstance(self.accepted, bool):
            raise _fail("accepted", "must be a boolean")
        _check_text(self.message, "message")

    def to_json(self) -> list[object]:
        return ["OK", self.event_id, self.accepted, self.message]


@dataclass(frozen=True, slots=True)
class Closed:
    """`["CLOSED", <sub id>, <message>]`: the relay ended (or refused) a subscription."""

    sub_id: str
    message: str

    def __post_init__(self) -> None:
        _check_sub_id(self.sub_id, "sub_id")
        _check_text(self.message, "message")

    def to_json(self) -> list[object]:
        return ["CLOSED", self.sub_id, self.message]


@dataclass(frozen=True, slots=True)
class AuthChallenge:
    """`["AUTH", <challenge>]`: answer with `nip42.auth_event`."""

    challenge: str

    def __post_init__(self) -> None:
        _check_text(self.challenge, "challenge")

    def to_json(self) -> list[object]:
        return ["AUTH", self.challenge]


@dataclass(frozen=True, slots=True)
class Notice:
    """`["NOTICE", <message>]`: human-readable, never machine-meaningful."""

    message: str

    def __post_init__(self) -> None:
        _check_text(self.message, "message")

    def to_json(self) -> list[object]:
        return ["NOTICE", self.message]


ClientFrame = ClientEvent | Req | Close | AuthResponse
RelayFrame = RelayEvent | Eose | Ok | Closed | AuthChallenge | Notice


def encode(frame: ClientFrame | RelayFrame) -> str:
    """Compact JSON text of a frame, ready for a websocket text message."""
    return _ENCODER.encode(frame.to_json())


def _reject_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _fail("", "duplicate object key")
    return out


def _reject_constant(name: str) -> object:
    raise _fail("", f"non-finite number {name}")


def _load_array(text: str, max_chars: int) -> list[object]:
    if not isinstance(text, str):
        raise _fail("", "a frame is JSON text")
    if len(text) > max_chars:
        raise FrameError("too_large", "", f"frame exceeds {max_chars} characters")
    try:
        value = json.loads(text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant)
    except FrameError:
        raise
    except (ValueError, RecursionError):
        raise _fail("", "not JSON") from None
    if not isinstance(value, list) or not value or not isinstance(value[0], str):
        raise _fail("", "a frame is a JSON array starting with its type")
    return value


def _arity(frame: list[object], size: int) -> None:
    if len(frame) != size:
        raise _fail("", f"{frame[0]} frame must have {size} elements")


def parse_relay_frame(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> RelayFrame:
    """Parse a relay → client message into its record; raises only `FrameError`."""
    frame = _load_array(text, max_chars)
    kind = frame[0]
    result: RelayFrame
    if kind == "EVENT":
        _arity(frame, 3)
        result = RelayEvent(_check_sub_id(frame[1], "[1]"), _check_event(frame[2], "[2]"))
    elif kind == "EOSE":
        _arity(frame, 2)
        result = Eose(_check_sub_id(frame[1], "[1]"))
    elif kind == "OK":
        _arity(frame, 4)
        if not is_lower_hex(frame[1], 64):
            raise _fail("[1]", "event id must be 64 lowercase hex characters")
        if not isinstance(frame[2], bool):
            raise _fail("[2]", "must be a boolean")
        result = Ok(frame[1], frame[2], _check_text(frame[3], "[3]"))
    elif kind == "CLOSED":
        _arity(frame, 3)
        result = Closed(_check_sub_id(frame[1], "[1]"), _check_text(frame[2], "[2]"))
    elif kind == "AUTH":
        _arity(frame, 2)
        result = AuthChallenge(_check_text(frame[1], "[1]"))
    elif kind == "NOTICE":
        _arity(frame, 2)
        result = Notice(_check_text(frame[1], "[1]"))
    else:
        raise FrameError("unknown_type", "[0]", "not a relay frame type this client understands")
    return result


def parse_client_frame(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> ClientFrame:
    """Parse a client → relay message into its record; raises only `FrameError`."""
    frame = _load_array(text, max_chars)
    kind = frame[0]
    result: ClientFrame
    if kind == "EVENT":
        _arity(frame, 2)
        result = ClientEvent(_check_event(frame[1], "[1]"))
    elif kind == "REQ":
        if len(frame) < 3:
            raise _fail("", "REQ frame needs a subscription id and at least one filter")
        sub_id = _check_sub_id(frame[1], "[1]")
        filters = tuple(Filter.from_json(item, f"[{index}]") for index, item in enumerate(frame[2:], 2))
        result = Req(sub_id, filters)
    elif kind == "CLOSE":
        _arity(frame, 2)
        result = Close(_check_sub_id(frame[1], "[1]"))
    elif kind == "AUTH":
        _arity(frame, 2)
        result = AuthResponse(_check_event(frame[1], "[1]"))
    else:
        raise FrameError("unknown_type", "[0]", "not a client frame type")
    return result
