"""References: EventRef, ArtifactRef and DefinitionRef (wire.md §4.3, contracts.md "References").

Codes follow the reference (`crates/nostr` contracts): an unknown key is `unsupported_feature`; any other
shape fault (a pointer of the wrong kind included) `malformed`. Each record keeps which optional keys were
present, so a parsed reference re-serialises to the same JCS bytes (decisions.md, "Parsed documents
remember which optional keys were present").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from eval_runner.contracts import shape
from eval_runner.contracts.errors import Code
from eval_runner.contracts.strict_json import JsonValue, digest_bytes

MEDIA_TYPE = re.compile(r"^[a-z0-9+.-]+/[a-z0-9+.-]+$")
SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
QUALIFIED_ID = re.compile(r"^([0-9a-f]{64}):([a-z0-9][a-z0-9_-]{0,63})/([a-z0-9][a-z0-9_-]{0,63})$")
MAX_SCHEMA_BYTES = 256


@dataclass(frozen=True, slots=True)
class EventRef:
    """An exact event: id, signer, kind. `coordinate` only where the shared contracts allow it."""

    id: str
    pubkey: str
    kind: int
    coordinate: str | None = None

    @classmethod
    def parse(cls, value: JsonValue, path: str, *, kind: int | None = None, allow_coordinate: bool = False) -> EventRef:
        optional = ("coordinate",) if allow_coordinate else ()
        found = shape.closed(value, path, ("id", "pubkey", "kind"), optional, unknown=Code.UNSUPPORTED_FEATURE)
        event_kind = shape.integer(found["kind"], shape.at(path, "kind"), low=0, high=65535)
        if kind is not None and event_kind != kind:
            raise shape.fail(shape.at(path, "kind"), f"must be {kind}")
        coordinate = None
        if "coordinate" in found:
            coordinate = shape.string(found["coordinate"], shape.at(path, "coordinate"), min_bytes=1, max_bytes=1024)
        return cls(
            id=shape.hex64(found["id"], shape.at(path, "id")),
            pubkey=shape.hex64(found["pubkey"], shape.at(path, "pubkey")),
            kind=event_kind,
            coordinate=coordinate,
        )

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {"id": self.id, "pubkey": self.pubkey, "kind": self.kind}
        if self.coordinate is not None:
            out["coordinate"] = self.coordinate
        return out


@dataclass(frozen=True, slots=True)
class Source:
    """A locator hint for an artifact (`{url}` or `{event}`); never trusted, only tried."""

    url: str | None = None
    event: EventRef | None = None

    @classmethod
    def parse(cls, value: JsonValue, path: str) -> Source:
        found = shape.obj(value, path)
        if set(found) == {"url"}:
            return cls(url=shape.string(found["url"], shape.at(path, "url"), min_bytes=1, max_bytes=2048))
        if set(found) == {"event"}:
            return cls(event=EventRef.parse(found["event"], shape.at(path, "event"), allow_coordinate=True))
        raise shape.fail(path, "must be exactly {url} or {event}")

    def to_json(self) -> dict[str, JsonValue]:
        if self.event is not None:
            return {"event": self.event.to_json()}
        return {"url": self.url}


@dataclass(frozen=True, slots=True)
class ArtifactRef:
    """Exact bytes: digest and size, with the media type and (for structured documents) the schema."""

    digest: str
    size: int
    media_type: str
    schema: str | None = None
    event: EventRef | None = None
    sources: tuple[Source, ...] | None = None

    @classmethod
    def parse(cls, value: JsonValue, path: str) -> ArtifactRef:
        found = shape.closed(
            value,
            path,
            ("digest", "size", "media_type"),
            ("schema", "event", "sources"),
            unknown=Code.UNSUPPORTED_FEATURE,
        )
        schema = None
        if "schema" in found:
            schema = shape.string(found["schema"], shape.at(path, "schema"), min_bytes=1)
            if len(schema.encode("utf-8")) > MAX_SCHEMA_BYTES:
                raise shape.fail(shape.at(path, "schema"), f"is longer than {MAX_SCHEMA_BYTES} bytes")
        event = None
        if "event" in found:
            event = EventRef.parse(found["event"], shape.at(path, "event"), allow_coordinate=True)
        sources = None
        if "sources" in found:
            sources = tuple(
                Source.parse(item, item_path)
                for item_path, item in shape.indexed(found["sources"], shape.at(path, "sources"), max_items=16)
            )
        return cls(
            digest=shape.digest(found["digest"], shape.at(path, "digest")),
            size=shape.integer(found["size"], shape.at(path, "size"), low=0),
            media_type=shape.string(
                found["media_type"], shape.at(path, "media_type"), pattern=MEDIA_TYPE, what="a lowercase type/subtype"
            ),
            schema=schema,
            event=event,
            sources=sources,
        )

    @classmethod
    def of_bytes(cls, data: bytes, media_type: str, schema: str | None = None) -> ArtifactRef:
        return cls(digest=digest_bytes(data), size=len(data), media_type=media_type, schema=schema)

    def matches(self, data: bytes) -> bool:
        """Do these bytes have this reference's size and digest?"""
        return len(data) == self.size and digest_bytes(data) == self.digest

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {"digest": self.digest, "size": self.size, "media_type": self.media_type}
        if self.schema is not None:
            out["schema"] = self.schema
        if self.event is not None:
            out["event"] = self.event.to_json()
        if self.sources is not None:
            out["sources"] = [source.to_json() for source in self.sources]
        return out


def qualified_id(value: JsonValue, path: str) -> str:
    """`<64-hex pubkey>:<package-slug>/<component-slug>` (wire.md §4.3)."""
    return shape.string(value, path, pattern=QUALIFIED_ID, what="a qualified id '<64-hex>:<package>/<component>'")


@dataclass(frozen=True, slots=True)
class DefinitionRef:
    """A definition by qualified id and exact bytes, with its publisher's release when known."""

    id: str
    artifact: ArtifactRef
    event: EventRef | None = None

    @classmethod
    def parse(cls, value: JsonValue, path: str) -> DefinitionRef:
        found = shape.closed(value, path, ("id", "artifact"), ("event",), unknown=Code.UNSUPPORTED_FEATURE)
        event = None
        if "event" in found:
            event = EventRef.parse(found["event"], shape.at(path, "event"))
        return cls(
            id=qualified_id(found["id"], shape.at(path, "id")),
            artifact=ArtifactRef.parse(found["artifact"], shape.at(path, "artifact")),
            event=event,
        )

    @property
    def author(self) -> str:
        return self.id.split(":", 1)[0]

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {"id": self.id, "artifact": self.artifact.to_json()}
        if self.event is not None:
            out["event"] = self.event.to_json()
        return out
