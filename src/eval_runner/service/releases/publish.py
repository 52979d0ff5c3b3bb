"""Upload-and-release (runner.md §16.3), shared by suite and tool releases: every blob first, then the `3184`.

A release names its files by digest only, so they must be in the blob store before anyone can read the
release: each distinct blob is uploaded (the store skips what it holds), and only then is the relay asked
for this signer's releases. An event with the same content is reused, so releasing again is idempotent and
a restart names the same event; otherwise a new one is signed now and published. Every failure is a
`ReleaseError` whose message names the file or the relay step, never a key.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from eval_runner.contracts.package import RELEASE_KIND, RELEASE_MARKER
from eval_runner.contracts.publication import Unsigned
from eval_runner.contracts.refs import EventRef
from eval_runner.errors import CodedError
from eval_runner.nostr import Event, Filter, SecretKey, sign
from eval_runner.service.blobs.bucket import BlobStorage
from eval_runner.service.blobs.errors import BlobError
from eval_runner.service.relay.connection import RelayError

ReleaseCode = Literal[
    "blobs",  # a file could not be uploaded to the blob store
    "relay",  # the relay could not be asked for releases, or refused the new one
    "signer",  # the key is not the package root the release names
    "testset",  # the test set does not make a release (its documents or manifest do not check)
    "tool",  # the catalog tool does not make a release (its manifest does not check)
    "publisher",  # the tool's package names another publisher, so it is not this runner's to release
]
JSON_MEDIA: Final = "application/json"


class ReleaseError(CodedError):
    """A release that could not be made or published; `code` is a `ReleaseCode`, `str()` says why."""


class ReleaseRelay(Protocol):
    """What a release needs of the relay (`service.relay.connection.RelayClient` is one)."""

    async def publish(self, event: Event) -> None: ...

    async def query(self, filter_: Filter) -> list[Event]: ...


@dataclass(frozen=True, slots=True)
class ReleaseFile:
    """One blob a release needs in the store: a listed file (or the manifest), its bytes and media type."""

    path: str
    data: bytes
    media_type: str

    @property
    def hex_digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass(frozen=True, slots=True)
class Released:
    """The release event, and whether it was already on the relay (so a caller can say it reused it)."""

    event: EventRef
    reused: bool


def distinct(uploads: Sequence[ReleaseFile]) -> list[ReleaseFile]:
    """Each blob once, in order: two listed files with the same bytes are one blob."""
    seen: set[str] = set()
    out = []
    for upload in uploads:
        if upload.hex_digest not in seen:
            seen.add(upload.hex_digest)
            out.append(upload)
    return out


def releases_filter(author: str) -> Filter:
    """`{"kinds":[3184],"authors":[R],"#t":["oa:ext:release:v1"]}` (wire.md §14.4)."""
    return Filter.build(kinds=[RELEASE_KIND], authors=[author], tags={"t": [RELEASE_MARKER]})


def same_release(events: Sequence[Event], author: str, unsigned: Unsigned) -> Event | None:
    """The earliest (then lowest id) event by `author` with exactly `unsigned`'s kind and content."""
    found = [
        event
        for event in events
        if event.pubkey == author and event.kind == unsigned.kind and event.content == unsigned.content
        if event.is_valid()
    ]
    return min(found, key=lambda event: (event.created_at, event.id), default=None)


async def upload_and_release(
    unsigned: Unsigned,
    uploads: Sequence[ReleaseFile],
    *,
    secret: SecretKey,
    blobs: BlobStorage,
    relay: ReleaseRelay,
    now: int | None = None,
) -> Released:
    """Upload every distinct blob in `uploads`, then reuse the relay's identical release or publish one
    signed by `secret` at `now` (default: the clock)."""
    for upload in distinct(uploads):
        try:
            await blobs.upload(upload.data, upload.media_type)
        except (BlobError, OSError) as error:  # OSError: a bucket's temp file could not be written
            raise ReleaseError("blobs", f"uploading {upload.path}: {error}") from None
    author = secret.public_key().to_hex()
    try:
        existing = same_release(await relay.query(releases_filter(author)), author, unsigned)
    except RelayError as error:
        raise ReleaseError("relay", f"asking the relay for releases: {error}") from None
    if existing is not None:
        return Released(EventRef(id=existing.id, pubkey=existing.pubkey, kind=existing.kind), reused=True)
    event = sign(secret, unsigned.kind, unsigned.tags, unsigned.content, int(time.time()) if now is None else now)
    try:
        await relay.publish(event)
    except RelayError as error:
        raise ReleaseError("relay", f"publishing the release: {error}") from None
    return Released(EventRef(id=event.id, pubkey=event.pubkey, kind=event.kind), reused=False)
