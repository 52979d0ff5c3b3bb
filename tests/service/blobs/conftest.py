"""Fixtures the blob store's tests share: the uploader's key, a running embedded server, an HTTP session."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio

from eval_runner.nostr import SecretKey
from eval_runner.service.blobs import BlobServer


@pytest.fixture(scope="session")
def uploader() -> SecretKey:
    """The key the embedded server lets upload (the runner's own, in `serve`)."""
    return SecretKey.parse("0000000000000000000000000000000000000000000000000000000000000003")


@pytest.fixture(scope="session")
def stranger() -> SecretKey:
    return SecretKey.parse("0000000000000000000000000000000000000000000000000000000000000004")


@pytest.fixture
def blob_root(tmp_path: Path) -> Path:
    return tmp_path / "blobs"


@pytest_asyncio.fixture
async def blob_server(blob_root: Path, uploader: SecretKey) -> AsyncIterator[BlobServer]:
    async with BlobServer(blob_root, [uploader.public_key().to_hex()]) as server:
        yield server


@pytest_asyncio.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session
