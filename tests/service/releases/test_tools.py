"""Catalog tools as releases (runner.md §16.2): the manifest byte for byte, and `ToolReleases` over LocalRelay
and the embedded Blossom server: one 3184 per tool the runner publishes, none for a tool whose package
names another publisher (said once in the log), the same event after a restart, and a remembered release.

The pinned values were computed once with this code (`extension_release(resolve_extension(
examples/codebase-brief), publisher=RUNNER)`, then its manifest's digest and size and its content).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from eval_runner.contracts.hosted import RUNNER
from eval_runner.contracts.package import Manifest, read_release
from eval_runner.engine.testset.catalog import Tool, resolve_extension
from eval_runner.nostr import SecretKey
from eval_runner.service.blobs import BlobServer, BlobStore
from eval_runner.service.relay.connection import RelayClient
from eval_runner.service.releases import ReleaseError
from eval_runner.service.releases.publish import releases_filter
from eval_runner.service.releases.tools import ToolReleases, extension_release
from tests.support.captured_logs import LogLines
from tests.support.paths import EXAMPLE
from tests.support.runner_tools import OURS, THEIRS, THEIRS_PUBLISHER, runner_published_copy
from tests.support.serve_process import free_port
from tests.support.stand_in_relay import local_relay

TOOL_MANIFEST = ("sha256:5419c8f3078fcaa4549ee8f4d86a0e45b2ced4b04b4edf9cb2e98df636793196", 1686)
TOOL_CONTENT = (
    '{"manifest":{"digest":"sha256:5419c8f3078fcaa4549ee8f4d86a0e45b2ced4b04b4edf9cb2e98df636793196",'
    '"media_type":"application/json","schema":"openagents.package.v1","size":1686},'
    '"package":"a7cff3ee1ff0209f971b9f24673db310ab858899c9d9a99b640e6cb29b1753f0:codebase-brief",'
    '"requires":[],"type":"release","v":1,"version":"0.1.0-f532e8397b44"}'
)
NOT_OURS_LINE = f"{THEIRS}: its package names the publisher {THEIRS_PUBLISHER}, not this runner"


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_the_example_tool_release_is_the_pinned_one() -> None:
    tool = resolve_extension(EXAMPLE)
    release = extension_release(tool, publisher=RUNNER)
    assert (digest(release.manifest), len(release.manifest)) == TOOL_MANIFEST
    assert release.content == TOOL_CONTENT
    assert release.version == f"0.1.0-{hashlib.sha256(tool.record).hexdigest()[:12]}"


def test_the_tool_manifest_lists_the_record_the_program_and_the_skills_as_the_reference_does() -> None:
    tool = resolve_extension(EXAMPLE)
    release = extension_release(tool, publisher=RUNNER)
    manifest = Manifest.parse_bytes(release.manifest)
    assert manifest.package == f"{RUNNER}:codebase-brief"
    assert (manifest.license, manifest.provenance.source, manifest.dependencies) == ("NOASSERTION", "local", ())
    assert [(file.path, file.media_type) for file in manifest.files] == [
        ("package.json", "application/json"),
        ("programs/codebase-brief.json", "application/json"),
        ("skills/brief.md", "text/markdown"),
    ]
    listed = {file.path: file for file in release.files}
    assert listed["package.json"].data == (EXAMPLE / "package.json").read_bytes()
    assert listed["programs/codebase-brief.json"].data == (EXAMPLE / "programs/codebase-brief.json").read_bytes()
    assert listed["skills/brief.md"].data == (EXAMPLE / "skills/brief.md").read_bytes()
    program, skill = manifest.components
    assert (program.slug, program.kind, skill.slug, skill.kind) == ("codebase-brief", "program", "brief", "guidance")
    assert program.definition.digest == digest(listed["programs/codebase-brief.json"].data)
    assert program.definition.schema is None
    assert program.descriptor is not None
    assert (program.descriptor.digest, program.descriptor.schema) == (
        tool.definition.artifact.digest,
        "openagents.coder-package.v1",
    )
    assert skill.descriptor is None
    assert skill.definition.media_type == "text/markdown"


def test_a_version_with_white_space_does_not_make_a_release(tmp_path: Path) -> None:
    root = runner_published_copy(tmp_path / "tool", RUNNER)
    record = root / "package.json"
    record.write_text(record.read_text().replace('"0.1.0"', '"0.1 beta"'))
    with pytest.raises(ReleaseError) as raised:
        extension_release(resolve_extension(root), publisher=RUNNER)
    assert raised.value.code == "tool"


@dataclass
class Tools:
    ours: Tool
    theirs: Tool
    url: str
    blobs: BlobStore
    secret: SecretKey

    def releases(self) -> ToolReleases:
        return ToolReleases(secret=self.secret, blobs=self.blobs, relay=RelayClient(self.url, self.secret))

    async def on_relay(self) -> list[str]:
        relay = RelayClient(self.url, SecretKey.generate())
        return [event.id for event in await relay.query(releases_filter(self.secret.public_key().to_hex()))]


@pytest_asyncio.fixture
async def tools(tmp_path: Path) -> AsyncIterator[Tools]:
    secret = SecretKey.generate()
    runner = secret.public_key().to_hex()
    ours = resolve_extension(runner_published_copy(tmp_path / "ours", runner))
    async with (
        local_relay() as url,
        BlobServer(tmp_path / "blobs", [runner]) as server,
        BlobStore([server.url], server.url, secret) as blobs,
    ):
        yield Tools(ours, resolve_extension(EXAMPLE), url, blobs, secret)


async def test_only_the_runners_own_tools_are_released_one_3184_each_and_the_others_said_once(
    tools: Tools, logs: LogLines
) -> None:
    releases = tools.releases()
    released = await releases.release_catalog([tools.theirs, tools.ours])
    assert [(tool.name, found.reused) for tool, found in released] == [(OURS, False)]
    event = released[0][1].event
    assert await tools.on_relay() == [event.id]
    stored = await RelayClient(tools.url, tools.secret).query(releases_filter(event.pubkey))
    read = read_release(stored[0])
    assert read.package == f"{event.pubkey}:codebase-brief"
    manifest = Manifest.parse_bytes(await tools.blobs.fetch(read.manifest.digest))
    for file in manifest.files:
        assert digest(await tools.blobs.fetch(file.digest)) == file.digest, file.path

    with pytest.raises(ReleaseError) as raised:
        await releases.release(tools.theirs)
    assert raised.value.code == "publisher"
    assert str(raised.value) == f"its package names the publisher {THEIRS_PUBLISHER}, not this runner"
    await releases.release_catalog([tools.theirs, tools.ours])
    assert logs.matching(NOT_OURS_LINE) == [NOT_OURS_LINE]
    assert await tools.on_relay() == [event.id]


async def test_a_restarted_runner_finds_its_tool_release_on_the_relay(tools: Tools) -> None:
    first = await tools.releases().release(tools.ours)
    again = await tools.releases().released(tools.ours)
    assert again.reused
    assert again.event == first
    assert await tools.on_relay() == [first.id]


async def test_a_release_once_made_is_remembered_without_asking_the_relay(tmp_path: Path) -> None:
    secret = SecretKey.generate()
    ours = resolve_extension(runner_published_copy(tmp_path / "ours", secret.public_key().to_hex()))
    async with (
        BlobServer(tmp_path / "blobs", [secret.public_key().to_hex()]) as server,
        BlobStore([server.url], server.url, secret) as blobs,
    ):
        async with local_relay() as url:
            releases = ToolReleases(secret=secret, blobs=blobs, relay=RelayClient(url, secret))
            first = await releases.release(ours)
        # The relay is gone: only the remembered release can answer.
        assert await releases.release(ours) == first
        with pytest.raises(ReleaseError) as raised:
            await ToolReleases(secret=secret, blobs=blobs, relay=RelayClient(url, secret)).release(ours)
        assert raised.value.code == "relay"


async def test_a_failed_release_is_tried_again_on_the_next_use(tmp_path: Path) -> None:
    secret = SecretKey.generate()
    runner = secret.public_key().to_hex()
    ours = resolve_extension(runner_published_copy(tmp_path / "ours", runner))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    async with local_relay() as url, BlobStore([base], base, secret) as blobs:
        releases = ToolReleases(secret=secret, blobs=blobs, relay=RelayClient(url, secret))
        with pytest.raises(ReleaseError) as raised:
            await releases.release_catalog([ours])
        assert raised.value.code == "blobs"
        async with BlobServer(tmp_path / "blobs", [runner], port=port):
            found = await releases.released(ours)
        assert not found.reused
        assert [event.id for event in await RelayClient(url, secret).query(releases_filter(runner))] == [found.event.id]
