"""Materializing from a hostile blob host (a stand-in for someone else's server): a slow drip, a body far past
the bound, other bytes, a 5xx, a redirect to another host. Each is refused with a typed error inside the
client's and the materializer's bounds, no redirect away is followed, and neither the staging directory nor
the cache keeps a partial file. The guard below is a failure bound only: the bounds that end each case are
the client's (1 s an attempt here) and the materializer's own deadline.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from eval_runner.nostr import SecretKey
from eval_runner.service.blobs import BlobStore
from eval_runner.service.releases.materialize import Bounds, MaterializeError, SuiteCache, materialize
from tests.support.published_suites import example_release, spelled
from tests.support.stand_in_blob_host import Misbehaviour, blob_host

AUTHOR = SecretKey(hashlib.sha256(b"materialize-hostile: the suite's author").digest())
FIXTURE = "evals/overview/fixtures/src/tables.rs"
GUARD_SECONDS = 30.0


def files_under(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if not path.is_dir()] if root.exists() else []


async def materialized_from(tmp_path: Path, store: BlobStore, bounds: Bounds) -> MaterializeError:
    release = spelled(example_release(AUTHOR.public_key().to_hex()))
    staging, cache = tmp_path / "staging", tmp_path / "cache"
    staging.mkdir()
    with pytest.raises(MaterializeError) as caught:
        async with asyncio.timeout(GUARD_SECONDS):
            await materialize(release.signed(AUTHOR), store, staging, cache=SuiteCache(cache), bounds=bounds)
    assert files_under(staging) == [], "no partial file in the staging directory"
    assert files_under(cache) == [], "no partial file in the cache"
    return caught.value


@pytest.mark.parametrize(
    ("misbehaviour", "code"),
    [
        ("drip", "unavailable"),
        ("huge", "identity_mismatch"),
        ("wrong", "identity_mismatch"),
        ("error", "unavailable"),
        ("away", "unavailable"),
    ],
)
async def test_a_hostile_host_is_refused_with_a_typed_error(
    tmp_path: Path, misbehaviour: Misbehaviour, code: str
) -> None:
    release = spelled(example_release(AUTHOR.public_key().to_hex()))
    async with blob_host() as host, BlobStore([host.url], attempt_seconds=1.0, fetch_seconds=2.0) as store:
        for data in release.blobs():
            host.put(data)
        host.spoil(release.files[FIXTURE], misbehaviour)
        error = await materialized_from(tmp_path, store, Bounds())
    assert error.code == code
    assert error.message.startswith(f"{FIXTURE}: ")
    assert host.far_hits == 0, "a redirect to another host is never followed"


async def test_a_drip_past_the_materializers_own_deadline_is_unavailable(tmp_path: Path) -> None:
    """The client alone would wait a minute per attempt; the materialization as a whole gives up first."""
    release = spelled(example_release(AUTHOR.public_key().to_hex()))
    async with blob_host() as host, BlobStore([host.url]) as store:
        for data in release.blobs():
            host.put(data)
        host.spoil(release.files["suite.json"], "drip")
        error = await materialized_from(tmp_path, store, Bounds(seconds=1.0))
    assert (error.code, error.message) == ("unavailable", "the test set's files did not all arrive within 1 s")
