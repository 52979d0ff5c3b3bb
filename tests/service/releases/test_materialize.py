"""Materializing a published test set over the real embedded Blossom server and the client the runner uses:
a good release comes out byte for byte, and each way a release can be wrong (tampered bytes, a missing blob, a
`..` path, another signer, two suite components, a size that lies, a file no case names, a suite republished
under another key, a package past the bounds) is refused with its code, writing nothing anywhere (every test
walks the directories it gave out). The cache serves a second run without a fetch, gives each run its own
copy, and fetches again what was damaged.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from eval_runner.contracts.refs import EventRef
from eval_runner.nostr import SecretKey
from eval_runner.service.blobs import BlobServer, BlobStore
from eval_runner.service.releases import SuiteRelease
from eval_runner.service.releases.materialize import Bounds, MaterializeError, SuiteCache, materialize
from tests.support.paths import EXAMPLE
from tests.support.published_suites import (
    PACKAGE,
    Spelled,
    blob_path,
    example_release,
    manifest_json,
    respelled,
    spelled,
    upload,
)

AUTHOR = SecretKey(hashlib.sha256(b"materialize: the suite's author").digest())
OTHER = SecretKey(hashlib.sha256(b"materialize: another key").digest())
PROMPT = "evals/greeting/prompt.md"


@dataclass
class Shelf:
    """The embedded server (its blob directory under `root/blobs`), a client on it, and the directories a
    materialization may write: `staging` and `cache`."""

    root: Path
    server: BlobServer
    store: BlobStore
    release: SuiteRelease

    @property
    def blobs(self) -> Path:
        return self.root / "blobs"

    @property
    def staging(self) -> Path:
        return self.root / "staging"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    async def put(self, release: Spelled) -> None:
        await upload(release, self.store)

    def written(self) -> set[Path]:
        """Every file under the test's directory except the blob server's own."""
        return {path for path in self.root.rglob("*") if not path.is_dir() and self.blobs not in path.parents}


@pytest_asyncio.fixture
async def shelf(tmp_path: Path) -> AsyncIterator[Shelf]:
    (tmp_path / "staging").mkdir()
    async with (
        BlobServer(tmp_path / "blobs", [AUTHOR.public_key().to_hex()]) as server,
        BlobStore([server.url], server.url, AUTHOR, attempt_seconds=10, fetch_seconds=20) as store,
    ):
        yield Shelf(tmp_path, server, store, example_release(AUTHOR.public_key().to_hex()))


def example_files() -> dict[str, bytes]:
    root = EXAMPLE / "evals"
    return {str(path.relative_to(root)): path.read_bytes() for path in root.rglob("*") if path.is_file()}


def tree(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in root.rglob("*") if path.is_file()}


async def refused(
    shelf: Shelf,
    release: Spelled,
    signer: SecretKey = AUTHOR,
    *,
    cache: SuiteCache | None = None,
    bounds: Bounds | None = None,
) -> MaterializeError:
    """Materialize `release`; it must fail, leaving no file anywhere (staging and cache included)."""
    event = release.signed(signer)
    with pytest.raises(MaterializeError) as caught:
        await materialize(event, shelf.store, shelf.staging, cache=cache, bounds=bounds or Bounds())
    assert shelf.written() == set(), "a refused release writes nothing"
    return caught.value


# -- a good release ------------------------------------------------------------------------------------


async def test_a_release_materializes_byte_for_byte(shelf: Shelf) -> None:
    good = spelled(shelf.release)
    await shelf.put(good)
    event = good.signed(AUTHOR)
    found = await materialize(event, shelf.store, shelf.staging)
    author = AUTHOR.public_key().to_hex()
    assert found.evals == shelf.staging / "evals"
    assert tree(found.evals) == example_files()
    assert (found.author, found.package, found.component) == (author, PACKAGE, "suite")
    assert found.suite_id == f"{author}:{PACKAGE}/suite"
    assert found.release == EventRef(id=event.id, pubkey=author, kind=3184)
    assert found.suite_digest == shelf.release.suite.digest
    assert {path.parent for path in shelf.written()} >= {found.evals / "greeting"}
    assert all(shelf.staging in path.parents for path in shelf.written())


async def test_evals_already_in_staging_is_unavailable(shelf: Shelf) -> None:
    good = spelled(shelf.release)
    await shelf.put(good)
    (shelf.staging / "evals").mkdir()
    with pytest.raises(MaterializeError) as caught:
        await materialize(good.signed(AUTHOR), shelf.store, shelf.staging)
    assert caught.value.code == "unavailable"


# -- refused, each with its code -----------------------------------------------------------------------


async def test_a_tampered_blob_is_identity_mismatch(shelf: Shelf) -> None:
    good = spelled(shelf.release)
    await shelf.put(good)
    blob_path(shelf.blobs, good.files[PROMPT]).write_bytes(b"other words\n")
    error = await refused(shelf, good)
    assert error.code == "identity_mismatch"
    assert error.message.startswith(f"{PROMPT}: ")


async def test_a_missing_blob_is_content_unavailable(shelf: Shelf) -> None:
    good = spelled(shelf.release)
    await shelf.put(good)
    blob_path(shelf.blobs, good.files[PROMPT]).unlink()
    error = await refused(shelf, good)
    assert error.code == "content_unavailable"
    assert PROMPT in error.message


async def test_a_missing_manifest_is_content_unavailable(shelf: Shelf) -> None:
    good = spelled(shelf.release)
    error = await refused(shelf, good)
    assert error.code == "content_unavailable"
    assert error.message.startswith("the manifest: ")


async def test_a_path_with_dot_dot_is_not_admitted(shelf: Shelf) -> None:
    manifest = manifest_json(shelf.release)
    manifest["files"][2]["path"] = "evals/../../escape.md"
    spoiled = respelled(shelf.release, manifest)
    await shelf.put(spoiled)
    error = await refused(shelf, spoiled)
    assert error.code == "not_admitted"
    assert "must name a file inside the package" in error.message


async def test_a_release_signed_by_another_key_is_not_admitted(shelf: Shelf) -> None:
    good = spelled(shelf.release)
    await shelf.put(good)
    error = await refused(shelf, good, OTHER)
    assert (error.code, error.message) == (
        "not_admitted",
        "the release: identity_mismatch: pubkey: a release is signed by its package root",
    )


async def test_two_suite_components_are_not_admitted(shelf: Shelf) -> None:
    manifest = manifest_json(shelf.release)
    manifest["components"].append({**manifest["components"][0], "slug": "again"})
    spoiled = respelled(shelf.release, manifest)
    await shelf.put(spoiled)
    error = await refused(shelf, spoiled)
    assert error.code == "not_admitted"
    assert "eval-suite component, this one 2" in error.message


async def test_a_manifest_size_that_lies_is_identity_mismatch(shelf: Shelf) -> None:
    good = spelled(shelf.release)
    lying = respelled(shelf.release, manifest_json(shelf.release), manifest_size=len(good.manifest) + 1)
    await shelf.put(lying)
    error = await refused(shelf, lying)
    assert error.code == "identity_mismatch"
    assert error.message == f"the manifest is {len(good.manifest)} bytes, not the {len(good.manifest) + 1} listed"


async def test_a_file_size_that_lies_is_identity_mismatch(shelf: Shelf) -> None:
    manifest = manifest_json(shelf.release)
    size = manifest["components"][0]["definition"]["size"]
    manifest["components"][0]["definition"]["size"] = size + 7
    assert manifest["files"][0]["path"] == "suite.json"
    manifest["files"][0]["size"] = size + 7
    spoiled = respelled(shelf.release, manifest)
    await shelf.put(spoiled)
    error = await refused(shelf, spoiled)
    assert (error.code, error.message) == (
        "identity_mismatch",
        f"suite.json is {size} bytes, not the {size + 7} listed",
    )


async def test_an_unlisted_case_file_is_not_admitted(shelf: Shelf) -> None:
    manifest = manifest_json(shelf.release)
    manifest["files"] = [file for file in manifest["files"] if file["path"] != PROMPT]
    spoiled = respelled(shelf.release, manifest)
    await shelf.put(spoiled)
    error = await refused(shelf, spoiled)
    assert error.code == "not_admitted"
    assert "a case file is not listed" in error.message


async def test_a_listed_file_no_case_names_is_not_admitted(shelf: Shelf) -> None:
    extra = b"#!/bin/sh\necho surprise\n"
    manifest = manifest_json(shelf.release)
    manifest["files"].append(
        {"path": "evals/greeting/run.sh", "digest": "sha256:" + hashlib.sha256(extra).hexdigest(), "size": len(extra)}
        | {"media_type": "application/octet-stream"}
    )
    spoiled = respelled(shelf.release, manifest, files={**spelled(shelf.release).files, "extra": extra})
    await shelf.put(spoiled)
    error = await refused(shelf, spoiled)
    assert (error.code, error.message) == (
        "not_admitted",
        "the package lists evals/greeting/run.sh, which is no case's file",
    )


async def test_a_suite_republished_under_another_key_is_not_admitted(shelf: Shelf) -> None:
    """OTHER releases AUTHOR's suite (its suite.json names AUTHOR) as its own package: the reports would name
    AUTHOR's suite id under OTHER's release."""
    manifest = manifest_json(shelf.release)
    manifest["package"] = f"{OTHER.public_key().to_hex()}:{PACKAGE}"
    spoiled = respelled(shelf.release, manifest)
    spoiled = Spelled(
        spoiled.manifest,
        spoiled.content.replace(AUTHOR.public_key().to_hex(), OTHER.public_key().to_hex()),
        spoiled.files,
    )
    await shelf.put(spoiled)
    error = await refused(shelf, spoiled, OTHER)
    assert error.code == "not_admitted"
    assert "is not this package's component" in error.message


async def test_a_manifest_for_another_version_is_not_admitted(shelf: Shelf) -> None:
    manifest = manifest_json(shelf.release)
    manifest["version"] = "suite-000000000000"
    spoiled = respelled(shelf.release, manifest)
    await shelf.put(spoiled)
    error = await refused(shelf, spoiled)
    assert error.code == "not_admitted"
    assert "not the release's" in error.message


async def test_a_package_past_the_bounds_is_too_large_before_any_file_is_fetched(shelf: Shelf) -> None:
    good = spelled(shelf.release)
    await shelf.put(good)
    blob_path(shelf.blobs, good.files["suite.json"]).unlink()  # were it fetched, it would be content_unavailable
    assert (await refused(shelf, good, bounds=Bounds(files=3))).code == "too_large"
    assert (await refused(shelf, good, bounds=Bounds(total_bytes=1_000))).code == "too_large"


# -- the cache -----------------------------------------------------------------------------------------


async def test_a_second_run_fetches_nothing_and_gets_its_own_copy(shelf: Shelf) -> None:
    good = spelled(shelf.release)
    await shelf.put(good)
    cache = SuiteCache(shelf.cache)
    event = good.signed(AUTHOR)
    first = await materialize(event, shelf.store, shelf.staging, cache=cache)
    entry = cache.entry(shelf.release.manifest_ref.digest)
    assert tree(entry / "evals") == example_files()
    assert [path.name for path in shelf.cache.iterdir()] == [entry.name], "no partial entry is left"
    for data in good.blobs():
        blob_path(shelf.blobs, data).unlink()  # the store has nothing now
    second_staging = shelf.root / "staging-2"
    second_staging.mkdir()
    second = await materialize(event, shelf.store, second_staging, cache=cache)
    assert tree(second.evals) == example_files()
    assert second.release == first.release
    (second.evals / "greeting" / "prompt.md").write_bytes(b"a run wrote here\n")
    assert (entry / "evals" / "greeting" / "prompt.md").read_bytes() == good.files[PROMPT]


async def test_a_damaged_cache_entry_is_fetched_again(shelf: Shelf) -> None:
    good = spelled(shelf.release)
    await shelf.put(good)
    cache = SuiteCache(shelf.cache)
    event = good.signed(AUTHOR)
    await materialize(event, shelf.store, shelf.staging, cache=cache)
    entry = cache.entry(shelf.release.manifest_ref.digest)
    (entry / "evals" / "greeting" / "prompt.md").write_bytes(b"damaged\n")
    again = shelf.root / "staging-2"
    again.mkdir()
    found = await materialize(event, shelf.store, again, cache=cache)
    assert tree(found.evals) == example_files()
    assert (entry / "evals" / "greeting" / "prompt.md").read_bytes() == good.files[PROMPT], "the entry is whole again"


async def test_a_refused_release_leaves_nothing_in_the_cache(shelf: Shelf) -> None:
    good = spelled(shelf.release)
    await shelf.put(good)
    blob_path(shelf.blobs, good.files[PROMPT]).write_bytes(b"tampered\n")
    error = await refused(shelf, good, cache=SuiteCache(shelf.cache))
    assert error.code == "identity_mismatch"
    assert not shelf.cache.exists() or list(shelf.cache.iterdir()) == []
