"""Published test sets for tests: the example extension's suite released as `service.releases` releases it, its
blobs put in a store, and spoiled variants (the manifest or the release body rewritten as plain JSON, then
signed), so the materializer's, admission's and the end-to-end tests publish what they refuse the same way.

A spoiled variant is written as JSON, not through the contract builders, because the builders refuse to write
what a hostile publisher would: a `..` path, two suite components, a size that lies.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval_runner.contracts.package import PACKAGE_SCHEMA, RELEASE_KIND, RELEASE_MARKER
from eval_runner.contracts.strict_json import canonical, pretty
from eval_runner.engine.suite_run import gate_file
from eval_runner.engine.testset.cases import load_suite
from eval_runner.nostr import Event, SecretKey, sign
from eval_runner.service.blobs import BlobServer
from eval_runner.service.blobs.bucket import BlobStorage
from eval_runner.service.releases import SuiteRelease, suite_release
from tests.support.paths import EXAMPLE

PACKAGE = "codebase-brief-tests"


def example_release(author: str, package: str = PACKAGE) -> SuiteRelease:
    """The example extension's `evals/` as the suite release `<author>:<package>/suite` (the shipped gate)."""
    return suite_release(load_suite(EXAMPLE / "evals"), author=author, package=package, gate_file=gate_file())


def hex_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest_of(data: bytes) -> str:
    return "sha256:" + hex_of(data)


@dataclass(frozen=True, slots=True)
class Spelled:
    """A release as bytes and words: the manifest's bytes, the 3184 content naming them, and every other blob
    the store should hold (by path, for the tests that spoil one)."""

    manifest: bytes
    content: str
    files: dict[str, bytes]

    def blobs(self) -> Iterator[bytes]:
        yield self.manifest
        yield from self.files.values()

    def signed(self, secret: SecretKey, *, at: int | None = None) -> Event:
        return sign(secret, RELEASE_KIND, [["t", RELEASE_MARKER]], self.content, int(time.time()) if at is None else at)

    def digest(self, path: str) -> str:
        return digest_of(self.files[path])


def spelled(release: SuiteRelease) -> Spelled:
    """The release exactly as `suite_release` made it."""
    return Spelled(release.manifest, release.content, {file.path: file.data for file in release.files})


def manifest_json(release: SuiteRelease) -> dict[str, Any]:
    found = json.loads(release.manifest)
    assert isinstance(found, dict)
    return found


def respelled(
    release: SuiteRelease,
    manifest: dict[str, Any],
    *,
    manifest_size: int | None = None,
    files: dict[str, bytes] | None = None,
) -> Spelled:
    """`release` with its manifest replaced by `manifest` (written as the runner writes one, whatever it says)
    and a release body naming it (`manifest_size` lies about its size when given)."""
    data = pretty(manifest)
    body = json.loads(release.content)
    body["manifest"] = {
        "digest": digest_of(data),
        "media_type": "application/json",
        "schema": PACKAGE_SCHEMA,
        "size": len(data) if manifest_size is None else manifest_size,
    }
    return Spelled(data, canonical(body).decode(), dict(spelled(release).files if files is None else files))


async def upload(spelled: Spelled, store: BlobStorage) -> None:
    """Every blob of the release into `store` (the manifest first), as a publisher uploads them."""
    for data in spelled.blobs():
        await store.upload(data, "application/octet-stream")


def shelve(spelled: Spelled, server: BlobServer) -> None:
    """Every blob straight into the embedded server's directory (no HTTP: the fuzz puts thousands)."""
    for data in spelled.blobs():
        server.files.store(hex_of(data), data, "application/octet-stream")


def blob_path(root: Path, data: bytes) -> Path:
    """Where the embedded server keeps `data` under its blob directory `root`."""
    name = hex_of(data)
    return root / name[:2] / name
