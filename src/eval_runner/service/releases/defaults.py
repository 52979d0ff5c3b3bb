"""Coder's defaults as the hosted runner admits them (runner.md §12): the newest `coder-defaults` release of
the defaults root on the relay, read under the ledger's checks (`contracts.coder_defaults`), and the adopted
tools this runner holds in its catalog.

A run admits the defaults in both arms, so its report is marginal: the subject on top of the defaults
against the defaults alone. The documents a release pins (its manifest, the admissions it cites) are read
from the operator's documents directory first, then from the NIP-94 locators (`1063`) the adopter
published, at most two passes: each over HTTPS only, within 15 s, at most 1 MiB, and kept only when its
digest is the one asked for. An adopted tool is held when a catalog tool's release (the one this runner
made, `ToolReleases`) is the adopted release; others are named as not held and admit nothing.

Reading never refuses a run: a relay that cannot be read is said in the log (`defaults not read: …`) and
the run goes ahead with no defaults. The `defaults …` line is said at the first reading and again only
when the release changes (to or from none too).

Admission reads the defaults for every run, so what a reading costs is bounded whatever anyone publishes:
documents are content-addressed, so the reader keeps each one it fetched (by digest, in memory) and never
asks for it again; the root's own locators are tried first and at most `OTHERS` of anyone else's per
reading (a locator URL tried is not tried again for `RETRY_SECONDS`); and gathering stops at
`GATHER_SECONDS`, the run going ahead with the documents held (a release whose manifest is missing is not
read, an admission missing leaves its dependency lapsed, as §12 reads them), which is said once.
"""

from __future__ import annotations

import asyncio
import logging
import stat
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol
from urllib.parse import urlsplit

import aiohttp

from eval_runner.contracts.coder_defaults import (
    LOCATOR_KIND,
    MAX_DOCUMENT_BYTES,
    Defaults,
    current,
    package_of,
    wanted_digests,
)
from eval_runner.contracts.package import RELEASE_KIND
from eval_runner.contracts.refs import EventRef
from eval_runner.contracts.strict_json import digest_bytes
from eval_runner.engine.testset.adopted import AdoptedDefaults
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import Event, Filter
from eval_runner.nostr.event import first_tag_value
from eval_runner.service.relay.connection import RelayError

#: Releases, and locators, read in one query.
LIMIT: Final = 100
#: Passes over the locators: the first finds manifests, the second the admissions they cite.
PASSES: Final = 2
#: The bound on one locator fetch, connection to last byte.
FETCH_SECONDS: Final = 15.0
#: The bound on gathering one reading's documents (every locator query and fetch together).
GATHER_SECONDS: Final = 20.0
#: Locators by others than the defaults root fetched in one reading (the root's own are tried first, all).
OTHERS: Final = 3
#: A locator URL once tried is not tried again for this long (one that worked left its document kept).
RETRY_SECONDS: Final = 600.0
#: Documents, and tried URLs, a reader keeps between readings at most.
KEPT_DOCUMENTS: Final = 64
KEPT_URLS: Final = 1024
NONE_LINE: Final = "defaults none published; the baseline arm admits nothing"

logger = logging.getLogger(__name__)

#: `get(url, limit)` → (HTTP status, at most `limit + 1` bytes of the body). Raises on a network failure.
HttpGet = Callable[[str, int], Awaitable[tuple[int, bytes]]]


class DefaultsRelay(Protocol):
    """What reading the defaults needs of the relay (`RelayClient` is one)."""

    async def query(self, filter_: Filter) -> list[Event]: ...


def short(ident: str) -> str:
    return ident[:12]


@dataclass(frozen=True, slots=True)
class Reading:
    """One reading of the defaults: as the ledger reads them (None: no release whose manifest is held),
    what both arms admit (None without defaults), and the adopted releases the catalog does not hold."""

    defaults: Defaults | None = None
    arms: AdoptedDefaults | None = None
    missing: tuple[str, ...] = ()

    def line(self, names: Mapping[str, str]) -> str:
        """The log line (runner.md §12); `names` gives a held tool's name by its release id."""
        defaults = self.defaults
        if defaults is None:
            return NONE_LINE
        admitted = [names.get(item.subject.id, short(item.subject.id)) for item in defaults.admitted]
        line = (
            f"defaults release {short(defaults.release.id)} (version {defaults.version}) "
            f"admits {', '.join(admitted) if admitted else 'nothing'}"
        )
        if self.missing:
            line += f"; not held here: {', '.join(short(ident) for ident in self.missing)}"
        if defaults.lapsed:
            line += f"; lapsed: {', '.join(short(ident) for ident in defaults.lapsed)}"
        return line


# --- documents ------------------------------------------------------------------------------------------


def read_directory(directory: Path | None) -> dict[str, bytes]:
    """Every regular file in `directory` of at most the document bound, by digest (blocking). A missing or
    unreadable directory holds none; a file that cannot be read is skipped."""
    if directory is None:
        return {}
    try:
        paths = sorted(directory.iterdir())
    except OSError:
        return {}
    found: dict[str, bytes] = {}
    for path in paths:
        try:
            info = path.stat()
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_DOCUMENT_BYTES:
                continue
            data = path.read_bytes()
        except OSError:
            continue
        if len(data) <= MAX_DOCUMENT_BYTES:
            found[digest_bytes(data)] = data
    return found


def https_only(url: str) -> bool:
    """Is `url` an `https://` URL with a host (a locator is fetched over nothing else)?"""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme == "https" and bool(parts.hostname)


async def https_get(url: str, limit: int) -> tuple[int, bytes]:
    """GET `url`, reading at most `limit + 1` bytes of the body; a redirect may not leave HTTPS."""
    timeout = aiohttp.ClientTimeout(total=FETCH_SECONDS)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(url, allow_redirects=True, max_redirects=5) as response,
    ):
        if response.url.scheme != "https":
            return 0, b""
        body = bytearray()
        async for chunk in response.content.iter_chunked(64 * 1024):
            body += chunk
            if len(body) > limit:
                break
        return response.status, bytes(body[: limit + 1])


async def locate(url: str, digest: str, *, get: HttpGet = https_get, seconds: float = FETCH_SECONDS) -> bytes | None:
    """The document a locator names, or None: not HTTPS, no answer within `seconds`, not a success, over
    the document bound, or not the bytes `digest` names."""
    if not https_only(url):
        return None
    try:
        async with asyncio.timeout(seconds):
            status, body = await get(url, MAX_DOCUMENT_BYTES)
    except (TimeoutError, aiohttp.ClientError, OSError, ValueError):
        return None
    if not 200 <= status < 300 or len(body) > MAX_DOCUMENT_BYTES or digest_bytes(body) != digest:
        return None
    return body


@dataclass(slots=True)
class Kept:
    """What a reader keeps between readings: documents fetched, by digest (content-addressed, so never stale),
    and when each locator URL was last tried."""

    documents: dict[str, bytes] = field(default_factory=dict)
    tried: dict[str, float] = field(default_factory=dict)

    def keep(self, held: Mapping[str, bytes], wanted: Sequence[str], now: float) -> None:
        """Keep the documents still wanted (at most `KEPT_DOCUMENTS`) and the URLs tried within the retry window."""
        self.documents = {digest: held[digest] for digest in wanted[:KEPT_DOCUMENTS] if digest in held}
        recent = sorted(((at, url) for url, at in self.tried.items() if now - at < RETRY_SECONDS), reverse=True)
        self.tried = {url: at for at, url in recent[:KEPT_URLS]}


@dataclass(frozen=True, slots=True)
class Gathered:
    """The documents a reading holds, and whether gathering was cut off at its bound."""

    documents: dict[str, bytes]
    late: bool = False


async def gather_documents(
    relay: DefaultsRelay,
    releases: Sequence[Event],
    directory: Path | None,
    *,
    root: str,
    kept: Kept | None = None,
    now: float | None = None,
    get: HttpGet = https_get,
    seconds: float = FETCH_SECONDS,
    within: float = GATHER_SECONDS,
) -> Gathered:
    """The documents `releases` pin: the directory's and those `kept`, then up to two passes over the locators
    for the digests still missing (the root's first, at most `OTHERS` others), all within `within` seconds:
    past it, what is held so far. A locator query that fails only ends the search."""
    held = await asyncio.to_thread(read_directory, directory)
    memory = kept if kept is not None else Kept()
    for digest, data in memory.documents.items():
        held.setdefault(digest, data)
    try:
        async with asyncio.timeout(within):
            await _locate_missing(relay, releases, held, root=root, kept=memory, now=now, get=get, seconds=seconds)
    except TimeoutError:
        return Gathered(held, late=True)
    return Gathered(held)


async def _locate_missing(
    relay: DefaultsRelay,
    releases: Sequence[Event],
    held: dict[str, bytes],
    *,
    root: str,
    kept: Kept,
    now: float | None,
    get: HttpGet,
    seconds: float,
) -> None:
    others = OTHERS
    for _ in range(PASSES):
        missing = {digest for event in releases for digest in wanted_digests(event, held) if digest not in held}
        if not missing:
            break
        hexes = sorted(digest.removeprefix("sha256:") for digest in missing)
        try:
            locators = await _locators(relay, hexes, root)
        except RelayError:
            break
        for locator in locators:
            url, hex_digest = first_tag_value(locator, "url"), first_tag_value(locator, "x")
            if url is None or hex_digest is None:
                continue
            digest = f"sha256:{hex_digest}"
            if digest in held or digest not in missing or not https_only(url):
                continue
            at = time.time() if now is None else now
            if at - kept.tried.get(url, -RETRY_SECONDS) < RETRY_SECONDS:
                continue
            if locator.pubkey != root:
                if others == 0:
                    continue
                others -= 1
            kept.tried[url] = at  # before the fetch: one cut off by the bound is not asked again at once
            found = await locate(url, digest, get=get, seconds=seconds)
            if found is not None:
                held[digest] = found


async def _locators(relay: DefaultsRelay, hexes: list[str], root: str) -> list[Event]:
    """Locators of `hexes`: the root's own first (their own query, so others' cannot crowd them out), then
    everyone else's as the relay gives them."""
    own = await relay.query(Filter.build(kinds=[LOCATOR_KIND], authors=[root], tags={"x": hexes}, limit=LIMIT))
    every = await relay.query(Filter.build(kinds=[LOCATOR_KIND], tags={"x": hexes}, limit=LIMIT))
    return [event for event in own if event.pubkey == root] + [event for event in every if event.pubkey != root]


# --- the reader -----------------------------------------------------------------------------------------


class DefaultsReader:
    """Reads the defaults for `serve`: at start (to log) and at every admitted run (frozen into its plan).

    `releases()` maps a catalog tool's definition id to the release this runner made of it, as far as it
    has made them; an adopted release no tool's release is says "not held here".
    """

    def __init__(
        self,
        *,
        relay: DefaultsRelay,
        root: str,
        documents: Path | None,
        catalog: Catalog,
        releases: Callable[[], Mapping[str, EventRef]],
        get: HttpGet = https_get,
        clock: Callable[[], float] = time.time,
        gather_seconds: float = GATHER_SECONDS,
    ) -> None:
        self.relay = relay
        self.root = root
        self.documents = documents
        self.catalog = catalog
        self._releases = releases
        self._get = get
        self._clock = clock
        self._said = False
        self._release: str | None = None
        self._gather_seconds = gather_seconds
        self._kept = Kept()
        self._late_said = False

    async def read(self) -> Reading:
        """The defaults now; a relay that cannot be read is logged and reads as none."""
        releases = dict(self._releases())
        try:
            reading = await self._read(releases)
        except (RelayError, OSError) as error:
            logger.warning("defaults not read: %s", error)
            return Reading()
        release = None if reading.defaults is None else reading.defaults.release.id
        if not self._said or release != self._release:
            self._said, self._release = True, release
            names = {ref.id: tool.name for tool in self.catalog.tools if (ref := releases.get(tool.definition.id))}
            logger.info(reading.line(names))
        return reading

    async def for_run(self) -> AdoptedDefaults | None:
        """What an admitted run's arms admit (admission's hook)."""
        return (await self.read()).arms

    async def _read(self, releases: Mapping[str, EventRef]) -> Reading:
        events = await self.relay.query(Filter.build(kinds=[RELEASE_KIND], authors=[self.root], limit=LIMIT))
        now = self._clock()
        gathered = await gather_documents(
            self.relay,
            events,
            self.documents,
            root=self.root,
            kept=self._kept,
            now=now,
            get=self._get,
            within=self._gather_seconds,
        )
        held = gathered.documents
        wanted = [digest for event in events for digest in wanted_digests(event, held)]
        self._kept.keep(held, wanted, now)
        if gathered.late and not self._late_said:
            self._late_said = True
            logger.warning(
                "defaults documents: %d not gathered within %g s; read with what is held "
                "(a release without its manifest is skipped, a dependency without its admission lapsed)",
                len({digest for digest in wanted if digest not in held}),
                self._gather_seconds,
            )
        defaults = current(events, package_of(self.root), held, int(now))
        if defaults is None:
            return Reading()
        subjects = []
        missing = []
        for item in defaults.admitted:
            tool = next(
                (
                    tool
                    for tool in self.catalog.tools
                    if (ref := releases.get(tool.definition.id)) is not None and ref.id == item.subject.id
                ),
                None,
            )
            if tool is None:
                missing.append(item.subject.id)
            else:
                subjects.append(tool.subject)
        arms = AdoptedDefaults(release=defaults.release, lock=defaults.lock_document(), subjects=tuple(subjects))
        return Reading(defaults=defaults, arms=arms, missing=tuple(missing))
