"""Reading Coder's defaults (runner.md §12) over nostr-sdk's LocalRelay: none published, an adoption whose
documents are in the operator's directory, one whose documents come from NIP-94 locators (HTTPS only; size
and digest checked; through an injected fetch, as a local HTTPS server is out of reach), an adopted tool the
catalog does not hold, a relay that cannot be read, and the `defaults …` line said once per release.

The fetcher's own bounds are tested directly: a plain-HTTP locator is refused before anything is asked (a
real HTTP server sees no request), a fetch that outlasts its bound is dropped, and a body over 1 MiB, a
failed status or other bytes are not kept.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp import web

from eval_runner.contracts.coder_defaults import MAX_DOCUMENT_BYTES, package_of
from eval_runner.contracts.refs import EventRef
from eval_runner.contracts.strict_json import JsonValue, digest_bytes
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import Event, SecretKey
from eval_runner.service.relay.connection import RelayClient
from eval_runner.service.releases.defaults import NONE_LINE, OTHERS, DefaultsReader, Reading, https_get, locate
from tests.support.captured_logs import captured_logs
from tests.support.coder_defaults import Adoption, adoption, locator_event
from tests.support.paths import EXAMPLE
from tests.support.stand_in_relay import local_relay

CATALOG = Catalog.load([EXAMPLE])
TOOL = CATALOG.tools[0]
TOOL_RELEASE = EventRef(id=hashlib.sha256(b"the example's release").hexdigest(), pubkey="ab" * 32, kind=3184)


def adopted_subject(release: EventRef = TOOL_RELEASE) -> dict[str, JsonValue]:
    value = TOOL.definition.to_json()
    value["event"] = release.to_json()
    return value


class Fetches:
    """A stand-in for the HTTPS world: answers by URL, and remembers what was asked."""

    def __init__(self, answers: dict[str, tuple[int, bytes]]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def __call__(self, url: str, limit: int) -> tuple[int, bytes]:
        self.asked.append(url)
        status, body = self.answers.get(url, (404, b""))
        return status, body[: limit + 1]


async def publish(url: str, *events: Event) -> None:
    client = RelayClient(url, SecretKey.generate(), challenge_wait=0.05)
    for event in events:
        await client.publish(event)


def reader(url: str, root: str, documents: Path, fetches: Fetches | None = None, **kwargs: object) -> DefaultsReader:
    return DefaultsReader(
        relay=RelayClient(url, SecretKey.generate(), challenge_wait=0.05),
        root=root,
        documents=documents,
        catalog=CATALOG,
        releases=lambda: {TOOL.definition.id: TOOL_RELEASE},
        get=fetches or Fetches({}),
        **kwargs,  # type: ignore[arg-type]
    )


def keep(directory: Path, made: Adoption) -> None:
    directory.mkdir(exist_ok=True)
    for data in made.documents:
        (directory / f"{hashlib.sha256(data).hexdigest()}.json").write_bytes(data)


@pytest_asyncio.fixture
async def relay() -> AsyncIterator[str]:
    async with local_relay() as url:
        yield url


async def test_none_published_reads_as_no_defaults_and_is_said_once(relay: str, tmp_path: Path) -> None:
    with captured_logs() as logs:
        found = reader(relay, SecretKey.generate().public_key().to_hex(), tmp_path / "missing")
        assert await found.read() == Reading()
        assert await found.for_run() is None
    assert logs.matching("defaults") == [NONE_LINE]


async def test_an_adoption_in_the_documents_directory_admits_the_held_tool(relay: str, tmp_path: Path) -> None:
    operator = SecretKey.generate()
    root = operator.public_key().to_hex()
    now = int(time.time())
    made = adoption(operator, adopted_subject(), now=now - 5)
    keep(tmp_path / "docs", made)
    with captured_logs() as logs:
        found = reader(relay, root, tmp_path / "docs")
        assert (await found.read()).defaults is None
        await publish(relay, made.release)
        reading = await found.read()
        again = await found.for_run()
    assert reading.defaults is not None
    assert reading.defaults.release.id == made.release.id
    assert reading.defaults.subjects() == (TOOL_RELEASE.id,)
    assert reading.missing == ()
    assert reading.arms is not None
    assert reading.arms == again
    assert reading.arms.subjects == (TOOL.subject,)
    assert reading.arms.lock == reading.defaults.lock_document()
    assert logs.matching("defaults") == [
        NONE_LINE,
        f"defaults release {made.release.id[:12]} (version 1) admits {TOOL.name}",
    ]


async def test_an_adopted_tool_not_in_the_catalog_is_named_and_admits_nothing(relay: str, tmp_path: Path) -> None:
    operator = SecretKey.generate()
    elsewhere = EventRef(id="cd" * 32, pubkey="ef" * 32, kind=3184)
    made = adoption(operator, adopted_subject(elsewhere), now=int(time.time()) - 5)
    keep(tmp_path / "docs", made)
    await publish(relay, made.release)
    with captured_logs() as logs:
        reading = await reader(relay, operator.public_key().to_hex(), tmp_path / "docs").read()
    assert reading.missing == (elsewhere.id,)
    assert reading.arms is not None
    assert reading.arms.subjects == ()
    assert logs.matching("defaults") == [
        f"defaults release {made.release.id[:12]} (version 1) admits {elsewhere.id[:12]}; "
        f"not held here: {elsewhere.id[:12]}"
    ]


async def test_documents_come_from_https_locators_checked_by_size_and_digest(relay: str, tmp_path: Path) -> None:
    operator = SecretKey.generate()
    adopter = SecretKey.generate()
    now = int(time.time())
    made = adoption(operator, adopted_subject(), now=now - 5)
    manifest_url = "https://documents.example/manifest.json"
    admission_url = "https://documents.example/admission.json"
    spoiled_url = "https://documents.example/spoiled.json"
    plain_url = "http://documents.example/admission.json"
    fetches = Fetches(
        {
            manifest_url: (200, made.manifest),
            admission_url: (200, made.admission),
            spoiled_url: (200, made.admission + b" "),
            plain_url: (200, made.admission),
        }
    )
    await publish(
        relay,
        made.release,
        locator_event(adopter, made.manifest, manifest_url, now - 4),
        # The admission first from a plain-HTTP locator and a spoiled one: neither is kept.
        locator_event(adopter, made.admission, plain_url, now - 3),
        locator_event(adopter, made.admission, spoiled_url, now - 2),
    )
    reading = await reader(relay, operator.public_key().to_hex(), tmp_path / "none", fetches).read()
    assert reading.defaults is not None
    assert reading.defaults.admitted == ()  # the manifest was fetched; no admission could be
    assert reading.defaults.lapsed == (TOOL_RELEASE.id,)
    assert plain_url not in fetches.asked
    assert manifest_url in fetches.asked
    assert spoiled_url in fetches.asked

    await publish(relay, locator_event(adopter, made.admission, admission_url, now - 1))
    fetches.asked.clear()
    reading = await reader(relay, operator.public_key().to_hex(), tmp_path / "none", fetches).read()
    assert reading.defaults is not None
    assert reading.defaults.subjects() == (TOOL_RELEASE.id,)
    assert fetches.asked.count(manifest_url) == 1  # both documents in two passes, each asked once
    assert admission_url in fetches.asked


async def test_a_relay_that_cannot_be_read_reads_as_no_defaults(tmp_path: Path) -> None:
    async with local_relay() as url:
        pass  # the relay is gone: nothing listens at `url` now
    with captured_logs() as logs:
        found = DefaultsReader(
            relay=RelayClient(url, SecretKey.generate(), bound=2.0, challenge_wait=0.05),
            root="ab" * 32,
            documents=tmp_path,
            catalog=CATALOG,
            releases=dict,
        )
        assert await found.read() == Reading()
    assert [line.split(":")[0] for line in logs.matching("defaults")] == ["defaults not read"]


# --- what a reading may cost --------------------------------------------------------------------------


class Hanging(Fetches):
    """Fetches where `slow` URLs never answer (a host that holds the connection open)."""

    def __init__(self, answers: dict[str, tuple[int, bytes]], slow: set[str]) -> None:
        super().__init__(answers)
        self.slow = slow
        self.never = asyncio.Event()

    async def __call__(self, url: str, limit: int) -> tuple[int, bytes]:
        if url in self.slow:
            self.asked.append(url)
            await self.never.wait()
        return await super().__call__(url, limit)


async def test_documents_fetched_once_are_kept_for_every_later_reading(relay: str, tmp_path: Path) -> None:
    operator = SecretKey.generate()
    now = int(time.time())
    made = adoption(operator, adopted_subject(), now=now - 5)
    urls = {"https://docs.example/m": made.manifest, "https://docs.example/a": made.admission}
    await publish(relay, made.release, *(locator_event(operator, data, url, now - 4) for url, data in urls.items()))
    fetches = Fetches({url: (200, data) for url, data in urls.items()})
    found = reader(relay, operator.public_key().to_hex(), tmp_path / "none", fetches)
    for _ in range(3):
        reading = await found.read()
        assert reading.defaults is not None
        assert reading.defaults.subjects() == (TOOL_RELEASE.id,)
    assert sorted(fetches.asked) == sorted(urls), "each document fetched once, by the first reading"


async def test_the_roots_own_locators_come_first_and_few_others_are_tried(relay: str, tmp_path: Path) -> None:
    operator, stranger = SecretKey.generate(), SecretKey.generate()
    now = int(time.time())
    made = adoption(operator, adopted_subject(), now=now - 50)
    good = {"https://docs.example/m": made.manifest, "https://docs.example/a": made.admission}
    # A stranger's locators, newer than the root's, at a host that answers nothing useful.
    noise = [
        locator_event(stranger, data, f"https://slow.example/{name}/{number}", now - 10 + number)
        for number in range(8)
        for name, data in (("m", made.manifest), ("a", made.admission))
    ]
    await publish(
        relay,
        made.release,
        *(locator_event(operator, data, url, now - 40) for url, data in good.items()),
        *noise,
    )
    fetches = Fetches({url: (200, data) for url, data in good.items()})
    reading = await reader(relay, operator.public_key().to_hex(), tmp_path / "none", fetches).read()
    assert reading.defaults is not None
    assert reading.defaults.subjects() == (TOOL_RELEASE.id,)
    assert sorted(fetches.asked) == sorted(good), "the root's own locators sufficed: no stranger's was asked"

    # Another root that published no locator: of the stranger's sixteen, at most OTHERS are tried per reading.
    other = SecretKey.generate()
    made_too = adoption(other, adopted_subject(), now=now - 50)
    await publish(
        relay,
        made_too.release,
        *(locator_event(stranger, made_too.manifest, f"https://slow.example/x/{n}", now - 9 + n) for n in range(16)),
    )
    fetches = Fetches({})
    found = reader(relay, other.public_key().to_hex(), tmp_path / "none", fetches)
    assert (await found.read()).defaults is None
    assert len(fetches.asked) == OTHERS
    assert (await found.read()).defaults is None
    assert len(fetches.asked) == 2 * OTHERS
    assert len(set(fetches.asked)) == 2 * OTHERS, "a URL tried is not tried again at the next reading"


async def test_gathering_stops_at_its_bound_and_says_so_once(relay: str, tmp_path: Path) -> None:
    operator = SecretKey.generate()
    now = int(time.time())
    made = adoption(operator, adopted_subject(), now=now - 5)
    slow = {"https://slow.example/one", "https://slow.example/two"}
    await publish(relay, made.release, *(locator_event(operator, made.manifest, url, now - 4) for url in sorted(slow)))
    fetches = Hanging({}, slow)
    with captured_logs() as logs:
        found = reader(relay, operator.public_key().to_hex(), tmp_path / "none", fetches, gather_seconds=0.3)
        assert (await found.read()).defaults is None  # no manifest: no release read, the run goes ahead
        assert await found.for_run() is None  # the other slow host, cut off again
    assert sorted(fetches.asked) == sorted(slow)
    assert logs.matching("not gathered within") == [
        "defaults documents: 1 not gathered within 0.3 s; read with what is held "
        "(a release without its manifest is skipped, a dependency without its admission lapsed)"
    ]


# --- the fetcher's bounds --------------------------------------------------------------------------------


async def test_a_plain_http_locator_is_refused_before_anything_is_asked() -> None:
    asked: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        asked.append(request.path)
        return web.Response(body=b"{}")

    app = web.Application()
    app.router.add_get("/doc.json", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        plain = f"http://127.0.0.1:{port}/doc.json"
        assert await locate(plain, digest_bytes(b"{}")) is None
        # The same server reached as HTTPS does not speak TLS: the fetch fails within its bound.
        assert await locate(f"https://127.0.0.1:{port}/doc.json", digest_bytes(b"{}"), seconds=5.0) is None
        status, body = await https_get(plain, 10)  # the fetcher itself does reach it, and says it is not HTTPS
    finally:
        await runner.cleanup()
    assert asked == ["/doc.json"]
    assert (status, body) == (0, b"")


@pytest.mark.parametrize("url", ["ftp://host/doc", "https:///doc", "file:///etc/passwd", "//host/doc", "https//x"])
async def test_only_https_urls_with_a_host_are_fetched(url: str) -> None:
    fetches = Fetches({url: (200, b"{}")})
    assert await locate(url, digest_bytes(b"{}"), get=fetches) is None
    assert fetches.asked == []


async def test_status_size_and_digest_decide_what_is_kept() -> None:
    good = b'{"a":1}'
    big = b" " * (MAX_DOCUMENT_BYTES + 1)
    at_bound = b" " * MAX_DOCUMENT_BYTES
    fetches = Fetches(
        {
            "https://h/good": (200, good),
            "https://h/gone": (404, good),
            "https://h/moved": (301, good),
            "https://h/big": (200, big),
            "https://h/bound": (200, at_bound),
        }
    )
    assert await locate("https://h/good", digest_bytes(good), get=fetches) == good
    assert await locate("https://h/good", digest_bytes(b"other"), get=fetches) is None
    assert await locate("https://h/gone", digest_bytes(good), get=fetches) is None
    assert await locate("https://h/moved", digest_bytes(good), get=fetches) is None
    assert await locate("https://h/big", digest_bytes(big), get=fetches) is None
    assert await locate("https://h/bound", digest_bytes(at_bound), get=fetches) == at_bound


async def test_a_fetch_that_outlasts_its_bound_is_dropped() -> None:
    never = asyncio.Event()

    async def stalls(url: str, limit: int) -> tuple[int, bytes]:
        await never.wait()
        return 200, b""

    async def refuses(url: str, limit: int) -> tuple[int, bytes]:
        raise OSError("connection refused")

    assert await locate("https://h/slow", digest_bytes(b""), get=stalls, seconds=0.05) is None
    assert await locate("https://h/down", digest_bytes(b""), get=refuses) is None


def test_the_package_is_named_by_the_root() -> None:
    assert package_of("ab" * 32) == f"{'ab' * 32}:coder-defaults"
