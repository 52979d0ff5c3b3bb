"""An operator's Google Cloud Storage bucket as a blob store (runner.md §7.2): read like Blossom through its
public base URL, written with `gcloud storage cp` under the operator's gcloud configuration.

The bucket is written by the operator's credentials, never over HTTP auth, so the write is the `gcloud`
command itself (no kept Python library speaks GCS with a gcloud configuration directory as the reference
does). The bytes go through a 0600 temp file, stdin is closed, and the command is bounded in time; a
non-zero exit is `refused` with the last line of its stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Final, Protocol

from eval_runner.service.blobs.client import BlobStore, Upload
from eval_runner.service.blobs.errors import BlobError, quoted

logger = logging.getLogger(__name__)

GCLOUD: Final = "gcloud"
#: How long one `gcloud storage cp` may take (a 16 MiB blob on a slow link, with gcloud's own start-up).
COPY_SECONDS: Final = 180.0


class BlobStorage(Protocol):
    """What releases and published suites need of a blob store: fetch and check by digest, store bytes."""

    async def fetch(self, digest: str) -> bytes: ...

    async def has(self, digest: str) -> bool: ...

    async def upload(self, data: bytes, media_type: str = "application/octet-stream") -> Upload: ...


class BucketStore:
    """Reads through `reads` (a `BlobStore` on the bucket's public base); writes with `gcloud storage cp`."""

    def __init__(
        self,
        reads: BlobStore,
        bucket: str,
        gcloud_config: Path,
        *,
        gcloud: str = GCLOUD,
        temp_root: Path | None = None,
        copy_seconds: float = COPY_SECONDS,
    ) -> None:
        self.reads = reads
        self.bucket = bucket.rstrip("/")
        self.gcloud_config = gcloud_config
        self.gcloud = gcloud
        self.temp_root = temp_root
        self.copy_seconds = copy_seconds

    def __repr__(self) -> str:
        return f"BucketStore({self.bucket!r}, read={list(self.reads.read_bases)!r})"

    async def fetch(self, digest: str) -> bytes:
        return await self.reads.fetch(digest)

    async def has(self, digest: str) -> bool:
        return await self.reads.has(digest)

    async def upload(self, data: bytes, media_type: str = "application/octet-stream") -> Upload:
        """Copy `data` into the bucket as `<hex>` unless its read side already has it."""
        hex_digest = hashlib.sha256(data).hexdigest()
        media_type = media_type.strip().lower()
        if not media_type or "/" not in media_type or not media_type.isascii() or any(c.isspace() for c in media_type):
            raise BlobError("invalid_argument", f"{media_type[:80]!r} is not a media type")
        if len(data) > self.reads.max_bytes:
            raise BlobError("too_large", f"sha256:{hex_digest} is {len(data)} bytes, over {self.reads.max_bytes}")
        base = self.reads.read_bases[0] if self.reads.read_bases else self.bucket
        if await self.reads.has(hex_digest):
            return Upload(f"{base}/{hex_digest}", hex_digest, len(data), media_type, "present")
        fd, name = tempfile.mkstemp(prefix="eval-runner-blob-", dir=self.temp_root)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            await self._copy(Path(name), hex_digest, media_type)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(name)
        logger.debug("blobs: copied sha256:%s to %s", hex_digest, self.bucket)
        return Upload(f"{base}/{hex_digest}", hex_digest, len(data), media_type, "created")

    async def _copy(self, source: Path, hex_digest: str, media_type: str) -> None:
        command = [
            self.gcloud,
            "storage",
            "cp",
            "--quiet",
            str(source),
            f"{self.bucket}/{hex_digest}",
            f"--content-type={media_type}",
        ]
        environment = {**os.environ, "CLOUDSDK_CONFIG": str(self.gcloud_config)}
        try:
            process = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                env=environment,
            )
        except OSError as error:
            raise BlobError("unavailable", f"the bucket {self.bucket} cannot be written: {error.strerror}") from None
        try:
            async with asyncio.timeout(self.copy_seconds):
                _, stderr = await process.communicate()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise BlobError("unavailable", f"the bucket {self.bucket} did not take {hex_digest} in time") from None
        if process.returncode != 0:
            lines = [line for line in stderr.decode("utf-8", "replace").splitlines() if line.strip()]
            last = quoted(lines[-1]) if lines else f"gcloud exited {process.returncode}"
            raise BlobError("refused", f"the bucket refused {hex_digest}: {last}")
