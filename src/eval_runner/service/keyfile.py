"""The runner's key file: loading it (owner-only, runner.md §2.3), generating it for the embedded relay, and
the `pubkey` command (§3.3).

The key is the runner's identity on the wire, so a file any group or other bit opens is refused before it
is read, and a generated key is linked into place whole, never over an existing one. Messages name the
file, never its contents.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final, TextIO

from eval_runner.errors import EvalRunnerError
from eval_runner.nostr.bech32 import bech32_decode
from eval_runner.nostr.errors import KeyFormatError
from eval_runner.nostr.keys import SecretKey
from eval_runner.service.config import WHITE_SPACE, key_file_location
from eval_runner.service.settings import os_error_text

WHAT: Final = "the runner key"
_LOWER_HEX64: Final = re.compile(r"[0-9a-f]{64}")


class KeyFileError(EvalRunnerError):
    """Why the runner key did not load. `str()` is the operator's message; it never holds key text."""

    message: str

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def parse_key_text(text: str, what: str = WHAT) -> SecretKey:
    """A secret key written as 64 lowercase hex or an `nsec1…` string (surrounding white space allowed)."""
    text = text.strip(WHITE_SPACE)
    if text.startswith("nsec1"):
        try:
            hrp, data = bech32_decode(text)
        except KeyFormatError as error:
            raise KeyFileError(f"{what} does not decode: {error.message}") from None
        if hrp != "nsec" or len(data) != 32:
            raise KeyFileError(f"{what} does not decode: an nsec holds 32 bytes")
        secret = data
    elif _LOWER_HEX64.fullmatch(text):
        secret = bytes.fromhex(text)
    else:
        raise KeyFileError(f"{what} must be 64 lowercase hex or an nsec")
    try:
        return SecretKey(secret)
    except KeyFormatError:
        raise KeyFileError(f"{what} is not a valid secret key") from None


def load_key(path: Path) -> SecretKey:
    """The runner key in `path`. Refuses a file any group or other bit opens (`chmod 600 it`)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        raise KeyFileError(f"{WHAT} {path}: {os_error_text(error)}") from None
    if stat.S_IMODE(mode) & 0o077:
        raise KeyFileError(f"{WHAT} {path} is readable by others; chmod 600 it")
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise KeyFileError(f"{WHAT} {path}: {os_error_text(error)}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise KeyFileError(f"{WHAT} {path}: the file is not UTF-8 text") from None
    return parse_key_text(text)


def ensure_key(path: Path) -> tuple[SecretKey, bool]:
    """The key in `path`, generating one (mode 0600, parent made 0700) when no file is there.

    Returns `(key, generated)`. A file already at `path` is loaded with every check of `load_key`, never
    replaced; if another process creates it first, that key is the one returned.
    """
    if os.path.lexists(path):
        return load_key(path), False
    key = SecretKey.generate()
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        raise KeyFileError(f"{WHAT} {path}: {path.parent}: {os_error_text(error)}") from None
    try:
        created = _create_private(path, (key.to_hex() + "\n").encode("ascii"))
    except OSError as error:
        raise KeyFileError(f"{WHAT} {path}: {os_error_text(error)}") from None
    if not created:
        return load_key(path), False
    return key, True


def _create_private(path: Path, body: bytes) -> bool:
    """Write `body` to a new file at `path`, complete or not at all. False when `path` already exists."""
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        try:
            os.fchmod(descriptor, 0o600)
            _write_all(descriptor, body)
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        except OSError as error:
            if error.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                raise
            return _create_exclusive(path, body)  # a file system without hard links
        _sync_directory(path.parent)
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def _create_exclusive(path: Path, body: bytes) -> bool:
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return False
    try:
        _write_all(descriptor, body)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    _sync_directory(path.parent)
    return True


def _write_all(descriptor: int, body: bytes) -> None:
    view = memoryview(body)
    while view:
        view = view[os.write(descriptor, view) :]


def _sync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def pubkey_main(*, stdout: TextIO, stderr: TextIO, environ: Mapping[str, str]) -> int:
    """`eval-runner pubkey` (it takes no arguments): print the runner's x-only public key (hex). Needs only
    the key file, found as `Config` finds it (`config.key_file_location`); never generates one. Returns the
    exit code."""
    path, _ = key_file_location(environ)
    try:
        key = load_key(path)
    except KeyFileError as error:
        stderr.write(f"eval-runner: {error}\n")
        return 1
    stdout.write(key.public_key().to_hex() + "\n")
    return 0
