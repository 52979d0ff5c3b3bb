"""A released tool's files for `verify --rerun`, over a real relay and the real embedded blob server: the example
tool's release gives back exactly the files it lists; a release listing anything but a tool's files, or whose
bytes in the store are not the listed ones, is refused before anything is written; and the path rule lets
through no name that could leave its folder (hypothesis).
"""

from __future__ import annotations

import json
import time
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eval_runner.contracts.package import PACKAGE_SCHEMA, RELEASE_KIND, RELEASE_MARKER
from eval_runner.contracts.refs import EventRef
from eval_runner.contracts.strict_json import canonical, pretty
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import sign
from eval_runner.reader.tools import TOOL_PATH, tool_files
from eval_runner.reader.verify import Reader, ReaderError
from eval_runner.service.releases.tools import extension_release
from tests.support.paths import EXAMPLE
from tests.support.published_results import RUNNER, Published
from tests.support.published_suites import blob_path, digest_of

TOOL = extension_release(Catalog.load([EXAMPLE]).tools[0], publisher=RUNNER.public_key().to_hex())


async def test_a_tool_release_gives_back_exactly_its_files(world: Published) -> None:
    found = await tool_files(Reader(world.relay, world.store), world.tool_pointer)
    assert found == {file.path: file.data for file in TOOL.files}
    assert "package.json" in found


async def test_a_release_listing_another_kind_of_file_is_refused(world: Published) -> None:
    manifest = json.loads(TOOL.manifest)
    manifest["files"].append(
        {"path": "bin/run.sh", "digest": digest_of(b"#!/bin/sh\n"), "size": 10, "media_type": "text/plain"}
    )
    data = pretty(manifest)
    body = json.loads(TOOL.content)
    body["manifest"] = {"digest": digest_of(data), "size": len(data), "media_type": "application/json"}
    body["manifest"]["schema"] = PACKAGE_SCHEMA
    await world.store.upload(data)
    event = sign(RUNNER, RELEASE_KIND, [["t", RELEASE_MARKER]], canonical(body).decode(), int(time.time()))
    await world.relay.publish(event)
    pointer = EventRef(id=event.id, pubkey=event.pubkey, kind=RELEASE_KIND)
    with pytest.raises(ReaderError) as caught:
        await tool_files(Reader(world.relay, world.store), pointer)
    assert (caught.value.code, caught.value.message) == (
        "tool",
        "a tool release lists 'bin/run.sh', which is no tool file",
    )


async def test_bytes_in_the_store_that_are_not_the_listed_ones_are_refused(world: Published, tmp_path: Path) -> None:
    record = next(file for file in TOOL.files if file.path == "package.json")
    blob_path(tmp_path / "blobs", record.data).unlink()
    with pytest.raises(ReaderError) as caught:
        await tool_files(Reader(world.relay, world.store), world.tool_pointer)
    assert caught.value.message.startswith("package.json: ")
    missing = EventRef(id="ab" * 32, pubkey=world.tool_pointer.pubkey, kind=RELEASE_KIND)
    with pytest.raises(ReaderError, match="isn't on the relay"):
        await tool_files(Reader(world.relay, world.store), missing)


PIECES = ("package.json", "programs/", "skills/", "../", "./", ".", "/", "a", "x-1", ".json", ".md", "\x00", "\\")


@given(st.lists(st.sampled_from(PIECES), max_size=6).map("".join))
def test_no_accepted_tool_path_leaves_its_folder(path: str) -> None:
    if TOOL_PATH.fullmatch(path) is None:
        return
    parts = PurePosixPath(path).parts
    assert parts[0] in ("package.json", "programs", "skills")
    assert len(parts) <= 2
    assert all(part not in ("", ".", "..") and not part.startswith(".") for part in parts)


def test_the_tool_paths_a_release_lists_are_accepted() -> None:
    assert all(TOOL_PATH.fullmatch(file.path) for file in TOOL.files)
    assert not any(TOOL_PATH.fullmatch(path) for path in ("programs/../x.json", "skills/.md", "programs/a/b.json"))
