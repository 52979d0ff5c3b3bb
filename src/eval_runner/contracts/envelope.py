"""The sealed artifact envelope `openagents.artifact-envelope.v1` and its 3188 routing tags (wire.md §15).

The runner seals each finished report to the trainer as a 3188 whose NIP-44 plaintext is this body's JCS
bytes. Opening it is only worth something if the inline report is provably the artifact the body names,
so `inline` must canonicalise to exactly `artifact.digest` and `artifact.size`. Encryption is the Nostr
layer's job: this module is pure. Codes are the reference's (decisions.md, "Report-side contracts").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from eval_runner.contracts import shape
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.refs import ArtifactRef
from eval_runner.contracts.strict_json import JsonValue, canonical, read

ENVELOPE_SCHEMA = "openagents.artifact-envelope.v1"
ENVELOPE_KIND = 3188
ARTIFACT_MARKER = "oa:artifact:v1"
#: NIP-44 v2's standard plaintext ceiling; the envelope's JCS bytes must fit it.
MAX_PLAINTEXT_BYTES = 65_535
#: base64 length of a NIP-44 v2 payload carrying the largest standard plaintext.
MAX_CONTENT_CHARS = 87_472

_KEYS = ("v", "requires", "artifact", "inline", "issued_at", "retain_until")


@dataclass(frozen=True, slots=True)
class Envelope:
    """A decrypted envelope body. `inline` is the JSON object itself, or None for out-of-band bytes."""

    artifact: ArtifactRef
    inline: dict[str, JsonValue] | None = field(hash=False)
    issued_at: int
    retain_until: int
    #: Inert annotations, kept only so a parsed body re-serialises to its own bytes.
    meta: dict[str, JsonValue] | None = field(default=None, hash=False)

    @classmethod
    def parse(cls, value: JsonValue, path: str = "") -> Envelope:
        found = shape.closed(value, path, _KEYS, ("meta",), unknown=Code.UNSUPPORTED_FEATURE)
        shape.version(found["v"], shape.at(path, "v"), ENVELOPE_SCHEMA)
        shape.empty_requires(found["requires"], shape.at(path, "requires"))
        meta = None
        if "meta" in found:
            meta = shape.obj(found["meta"], shape.at(path, "meta"))
        artifact = ArtifactRef.parse(found["artifact"], shape.at(path, "artifact"))
        if artifact.schema is None:
            raise shape.fail(shape.at(path, "artifact.schema"), "is required in an envelope")
        inline_path = shape.at(path, "inline")
        inline = found["inline"]
        if inline is not None:
            inline = shape.obj(inline, inline_path)
            if not artifact.matches(canonical(inline)):
                raise shape.fail(inline_path, "its JCS bytes are not the artifact", Code.IDENTITY_MISMATCH)
        issued_at = shape.integer(found["issued_at"], shape.at(path, "issued_at"), low=0)
        retain_until = shape.integer(found["retain_until"], shape.at(path, "retain_until"), low=0)
        if retain_until <= issued_at:
            raise shape.fail(shape.at(path, "retain_until"), "must be later than issued_at")
        return cls(artifact=artifact, inline=inline, issued_at=issued_at, retain_until=retain_until, meta=meta)

    @classmethod
    def parse_bytes(cls, data: bytes) -> Envelope:
        """A decrypted plaintext: strict JSON, then the body rules."""
        return cls.parse(read(data))

    @classmethod
    def of_inline(cls, document: dict[str, JsonValue], schema: str, issued_at: int, retain_until: int) -> Envelope:
        """An envelope carrying `document` inline, its ArtifactRef computed over the document's JCS bytes."""
        artifact = ArtifactRef.of_bytes(canonical(document), "application/json", schema)
        return cls(artifact=artifact, inline=document, issued_at=issued_at, retain_until=retain_until)

    def inline_bytes(self) -> bytes | None:
        """The artifact's exact bytes when carried inline (JCS of the inline object)."""
        return None if self.inline is None else canonical(self.inline)

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {
            "v": ENVELOPE_SCHEMA,
            "requires": [],
            "artifact": self.artifact.to_json(),
            "inline": self.inline,
            "issued_at": self.issued_at,
            "retain_until": self.retain_until,
        }
        if self.meta is not None:
            out["meta"] = self.meta
        return out

    def to_bytes(self) -> bytes:
        """The plaintext to encrypt: JCS bytes, checked by the parser and against NIP-44's standard bound."""
        data = canonical(self.to_json())
        Envelope.parse(read(data))
        if len(data) > MAX_PLAINTEXT_BYTES:
            raise ContractError(
                Code.LIMIT_EXCEEDED, "", f"envelope is {len(data)} bytes; NIP-44 carries at most {MAX_PLAINTEXT_BYTES}"
            )
        return data


def build(artifact: ArtifactRef, inline: dict[str, JsonValue] | None, issued_at: int, retain_until: int) -> bytes:
    """JCS bytes of an envelope body, refused unless a reader would accept them."""
    return Envelope(artifact=artifact, inline=inline, issued_at=issued_at, retain_until=retain_until).to_bytes()


@dataclass(frozen=True, slots=True)
class Route:
    """Who a 3188 is for and the claim mailbox it is filed under."""

    recipient: str
    mailbox: str


def tags(recipient: str, mailbox: str) -> list[list[str]]:
    """The three tags of a 3188, in the order the reference writes them."""
    found = route([["p", recipient], ["h", mailbox], ["t", ARTIFACT_MARKER]])
    return [["p", found.recipient], ["h", found.mailbox], ["t", ARTIFACT_MARKER]]


def route(event_tags: Sequence[Sequence[str]]) -> Route:
    """Exactly `["p", T]`, `["h", <64-hex>]`, `["t", "oa:artifact:v1"]`, each with two elements.

    Checked in the reference's order: each tag's name first (a second `p`/`h`, or any other name, is
    `unsupported_feature`), then the marker, then that there are exactly three two-element tags.
    """
    if isinstance(event_tags, str | bytes) or not isinstance(event_tags, Sequence):
        raise shape.fail("tags", "must be a list of tags")
    recipient: str | None = None
    mailbox: str | None = None
    marker = False
    for index, tag in enumerate(event_tags):
        path = f"tags[{index}]"
        if isinstance(tag, str | bytes) or not isinstance(tag, Sequence) or not tag:
            raise shape.fail(path, "must be a non-empty list of strings")
        if not all(isinstance(item, str) for item in tag):
            raise shape.fail(path, "must be a non-empty list of strings")
        name = tag[0]
        value = tag[1] if len(tag) > 1 else ""
        if name == "p" and recipient is None:
            recipient = shape.hex64(value, f"{path}[1]", "a 64-hex recipient pubkey")
        elif name == "h" and mailbox is None:
            mailbox = shape.hex64(value, f"{path}[1]", "a 64-hex mailbox")
        elif name == "t" and value == ARTIFACT_MARKER:
            if marker:
                raise shape.fail(path, "repeats the artifact marker")
            marker = True
        elif name != "t":
            raise shape.fail(path, f"a 3188 carries no {name!r} tag here", Code.UNSUPPORTED_FEATURE)
    if not marker:
        raise shape.fail("tags", f"lacks the {ARTIFACT_MARKER!r} marker")
    if recipient is None or mailbox is None:
        raise shape.fail("tags", "needs one 'p' recipient and one 'h' mailbox")
    if len(event_tags) != 3 or any(len(tag) != 2 for tag in event_tags):
        raise shape.fail("tags", "must be exactly three tags of two elements each")
    return Route(recipient=recipient, mailbox=mailbox)


def check_content(content: str) -> None:
    """A 3188's content is one standard NIP-44 payload: at most 87,472 base64 characters."""
    if not isinstance(content, str):
        raise shape.fail("content", "must be a string")
    if len(content) > MAX_CONTENT_CHARS:
        raise shape.fail("content", f"is {len(content)} characters; at most {MAX_CONTENT_CHARS}", Code.LIMIT_EXCEEDED)
