"""The embedded Blossom server's content-addressed directory: `<root>/<ab>/<abcdef…>` plus a `.type` sidecar.

A blob becomes visible whole or not at all: its bytes go to a temp file in the blob's own directory, are
fsynced, and are hard-linked to the final name, so a partial write never has a blob's name and concurrent
writers of one blob leave exactly one file (the first link wins; the rest see it exists and drop their
temp). The media type it was uploaded with is the target of a symlink beside it, `<hex>.type -> text/plain`,
made before the blob is linked: creating it is one metadata operation that the directory fsync after the
link makes durable with the blob (no second data fsync, which halves a small upload's time), the first
creator wins without a temp file, and reading it is one `readlink`. So a visible blob always has its type.
Only the digest the caller computed names a file: the caller hashes the bytes first, and this module never
derives a path from anything else.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from eval_runner.nostr.keys import is_lower_hex

TYPE_SUFFIX: Final = ".type"
TEMP_SUFFIX: Final = ".tmp"
DEFAULT_TYPE: Final = "application/octet-stream"
_MAX_TYPE_BYTES: Final = 256


@dataclass(frozen=True, slots=True)
class StoredBlob:
    """A blob on disk: where it is, its size, its media type, and when it was stored (unix seconds)."""

    sha256: str
    path: Path
    size: int
    type: str
    uploaded: int


class BlobFiles:
    """The directory of blobs; every method is synchronous (the server calls the writing ones in a thread)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, sha256: str) -> Path:
        if not is_lower_hex(sha256, 64):
            raise ValueError("a blob is named by 64 lowercase hex characters")
        return self.root / sha256[:2] / sha256

    def prepare(self) -> int:
        """Create the root (owner only) and drop temp files a crash left behind; returns how many."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        dropped = 0
        for temp in self.root.glob(f"??/.*{TEMP_SUFFIX}"):
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()
                dropped += 1
        return dropped

    def find(self, sha256: str) -> StoredBlob | None:
        """The stored blob, or None when there is none."""
        path = self.path(sha256)
        try:
            found = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return StoredBlob(sha256, path, found.st_size, self._type(path), int(found.st_mtime))

    def store(self, sha256: str, body: bytes, media_type: str) -> tuple[StoredBlob, bool]:
        """Keep `body` (whose SHA-256 the caller checked is `sha256`); True when this call created it."""
        path = self.path(sha256)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        if not path.exists():
            with contextlib.suppress(FileExistsError):  # an earlier upload's type stands
                os.symlink(media_type, path.with_name(path.name + TYPE_SUFFIX))
            if self._publish(path, body):
                _fsync_directory(path.parent)
                stored = self.find(sha256)
                assert stored is not None
                return stored, True
        stored = self.find(sha256)
        if stored is None:  # pragma: no cover - only if someone deletes it between the two calls
            raise FileNotFoundError(path)
        return stored, False

    def _publish(self, path: Path, data: bytes) -> bool:
        """Write `data` to a temp file beside `path`, fsync, link it to `path`; False if `path` already exists."""
        temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}{TEMP_SUFFIX}")
        descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(descriptor, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            try:
                os.link(temp, path)
            except FileExistsError:
                return False
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()

    @staticmethod
    def _type(path: Path) -> str:
        try:
            text = os.readlink(path.with_name(path.name + TYPE_SUFFIX))
        except OSError:
            return DEFAULT_TYPE
        return text if 0 < len(text) <= _MAX_TYPE_BYTES and text.isascii() and text.isprintable() else DEFAULT_TYPE


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
