"""Upload-and-release over real parts: nostr-sdk's LocalRelay and the embedded Blossom server (runner.md §16.3).

A suite release puts every listed file and the manifest in the store (each fetched back by digest here),
then exactly one 3184 on the relay; releasing again finds that event and publishes nothing. A blob the
store refuses, or a relay that does not answer, is a `ReleaseError` naming the step, and a refused upload
publishes no release (the files go first).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio

from eval_runner.contracts.package import read_release
from eval_runner.engine.suite_run import gate_file
from eval_runner.engine.testset.cases import load_suite
from eval_runner.nostr import Event, SecretKey
from eval_runner.service.blobs import BlobServer, BlobStore, Upload
from eval_runner.service.relay.connection import RelayClient
from eval_runner.service.releases import ReleaseError, ReleaseFile, SuiteRelease, release_suite, suite_release
from eval_runner.service.releases.publish import distinct, releases_filter, upload_and_release
from tests.support.paths import EXAMPLE
from tests.support.stand_in_relay import local_relay, unused_port_url

RUNNER = SecretKey.parse("00000000000000000000000000000000000000000000000000000000000000a1")


@dataclass
class Counted:
    """The real store, with the digests uploads were asked for (to see each blob go once)."""

    store: BlobStore
    asked: list[str] = field(default_factory=list)

    async def fetch(self, digest: str) -> bytes:
        return await self.store.fetch(digest)

    async def has(self, digest: str) -> bool:
        return await self.store.has(digest)

    async def upload(self, data: bytes, media_type: str = "application/octet-stream") -> Upload:
        found = await self.store.upload(data, media_type)
        self.asked.append(found.sha256)
        return found


@dataclass
class World:
    relay: RelayClient
    store: Counted
    server: BlobServer


@pytest_asyncio.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    runner = RUNNER.public_key().to_hex()
    async with (
        local_relay() as url,
        BlobServer(tmp_path / "blobs", [runner]) as server,
        BlobStore([server.url], server.url, RUNNER) as store,
    ):
        yield World(RelayClient(url, RUNNER), Counted(store), server)


def example_release() -> SuiteRelease:
    suite = load_suite(EXAMPLE / "evals")
    return suite_release(
        suite, author=RUNNER.public_key().to_hex(), package="codebase-brief-tests", gate_file=gate_file()
    )


async def releases_on(relay: RelayClient) -> list[Event]:
    return await relay.query(releases_filter(RUNNER.public_key().to_hex()))


async def test_a_suite_release_uploads_every_file_and_publishes_one_3184_which_a_second_release_reuses(
    world: World,
) -> None:
    release = example_release()
    first = await release_suite(release, secret=RUNNER, blobs=world.store, relay=world.relay)
    assert not first.reused
    assert (first.event.pubkey, first.event.kind) == (RUNNER.public_key().to_hex(), 3184)
    for upload in release.uploads():
        assert await world.store.fetch(upload.hex_digest) == upload.data, upload.path
    assert len(world.store.asked) == len({upload.hex_digest for upload in release.uploads()})
    stored = await releases_on(world.relay)
    assert [event.id for event in stored] == [first.event.id]
    assert stored[0].content == release.content
    read = read_release(stored[0])
    assert (read.package, read.manifest) == (release.package, release.manifest_ref)

    again = await release_suite(release, secret=RUNNER, blobs=world.store, relay=world.relay)
    assert again.reused
    assert again.event == first.event
    assert [event.id for event in await releases_on(world.relay)] == [first.event.id]


async def test_a_release_with_another_content_is_another_event(world: World) -> None:
    first = await release_suite(example_release(), secret=RUNNER, blobs=world.store, relay=world.relay)
    suite = load_suite(EXAMPLE / "evals")
    other = suite_release(suite, author=RUNNER.public_key().to_hex(), package="other-tests", gate_file=gate_file())
    second = await release_suite(other, secret=RUNNER, blobs=world.store, relay=world.relay)
    assert not second.reused
    assert second.event.id != first.event.id
    assert {event.id for event in await releases_on(world.relay)} == {first.event.id, second.event.id}


async def test_each_blob_is_uploaded_once_even_when_two_files_hold_the_same_bytes(world: World) -> None:
    files = [
        ReleaseFile("a.md", b"same\n", "text/markdown"),
        ReleaseFile("b.md", b"same\n", "text/markdown"),
        ReleaseFile("c.md", b"other\n", "text/markdown"),
    ]
    assert [file.path for file in distinct(files)] == ["a.md", "c.md"]
    release = example_release()
    await upload_and_release(release.unsigned, files, secret=RUNNER, blobs=world.store, relay=world.relay)
    assert len(world.store.asked) == 2


async def test_a_key_that_is_not_the_suite_author_releases_nothing(world: World) -> None:
    with pytest.raises(ReleaseError) as raised:
        await release_suite(example_release(), secret=SecretKey.generate(), blobs=world.store, relay=world.relay)
    assert raised.value.code == "signer"
    assert world.store.asked == []
    assert await releases_on(world.relay) == []


async def test_a_refused_upload_publishes_no_release(tmp_path: Path) -> None:
    release = example_release()
    stranger = SecretKey.generate()
    async with (
        local_relay() as url,
        BlobServer(tmp_path / "blobs", [stranger.public_key().to_hex()]) as server,
        BlobStore([server.url], server.url, RUNNER) as store,
    ):
        relay = RelayClient(url, RUNNER)
        with pytest.raises(ReleaseError) as raised:
            await release_suite(release, secret=RUNNER, blobs=store, relay=relay)
        assert raised.value.code == "blobs"
        assert str(raised.value).startswith("uploading manifest.json: ")
        assert await releases_on(relay) == []


async def test_a_relay_that_does_not_answer_is_a_relay_error(tmp_path: Path) -> None:
    async with (
        BlobServer(tmp_path / "blobs", [RUNNER.public_key().to_hex()]) as server,
        BlobStore([server.url], server.url, RUNNER) as store,
    ):
        relay = RelayClient(unused_port_url(), RUNNER)
        with pytest.raises(ReleaseError) as raised:
            await release_suite(example_release(), secret=RUNNER, blobs=store, relay=relay)
    assert raised.value.code == "relay"
    assert str(raised.value).startswith("asking the relay for releases: ")
    assert RUNNER.to_hex() not in str(raised.value)
