"""What a run leaves behind, read safely, and secrets kept out of everything we keep.

The run's directories were written by untrusted code, so nothing here follows a link: a file is opened
with `O_NOFOLLOW | O_NONBLOCK` and read only if it then is a regular file (a link to `/etc/shadow` is
recorded by its target, a FIFO never blocks us), and directories are walked without following links.
The sandbox is gone before any of this runs, so nothing changes underneath.

Created files (runner.md §13.4 step 12) are the files in `cwd/` after the run whose path or content is
not one the run started with: a regular file by its sha256 digest (copied when ≤ 1 MiB), a symlink by
its target, anything else (a FIFO) by its path. At most `MAX_CREATED` entries are recorded and at most
`MAX_READ` bytes read for them, in walk order (names sorted at each level); the record says whether it
holds them all. The bound keeps a run that filled its workspace from holding the runner for minutes.

Secrets (the door key, the proxy tokens, the decision key, fallback keys) are replaced by `REDACTED`
in every kept byte and path, and in the workspace files a file grader may read (spec open question 11:
the reference's replacement text was not read). After the results directory is written, `secret_in`
scans it once more; a directory still holding a secret is removed and the run fails with
`the door key was found in <path>; the results were removed` (§13.11), `<path>` relative to the
results directory so the message names no host path.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

#: A created regular file at most this large is copied into the record (runner.md §22).
MAX_COPIED = 1 << 20
#: Created entries recorded at most; the rest are left in the workspace.
MAX_CREATED = 4096
#: Bytes of created files read (hashed) at most, all entries together.
MAX_READ = 512 << 20
REDACTED = b"[redacted]"
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class CreatedFile:
    """One created entry of the workspace. `digest` is `sha256:<hex>` of the kept bytes (of the target
    text for a symlink; None for anything that is neither file nor link); `data` holds a regular file of
    at most `MAX_COPIED` bytes; `target` a symlink's target, never followed."""

    path: str
    kind: Literal["file", "symlink", "other"]
    digest: str | None
    size: int
    data: bytes | None = None
    target: str | None = None


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def scrub(data: bytes, secrets: Sequence[bytes]) -> bytes:
    for secret in secrets:
        if secret:
            data = data.replace(secret, REDACTED)
    return data


def scrub_text(text: str, secrets: Sequence[bytes]) -> str:
    return os.fsdecode(scrub(os.fsencode(text), secrets))


def read_file(path: Path, limit: int) -> bytes | None:
    """A regular file's bytes, at most `limit` of them; None if it is absent, a link or not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return file.read(limit)


def last_cost(stdout: bytes) -> float | None:
    """`cost_usd` of the last stdout JSON line that has an `outcome` key (None if absent or not a number)."""
    for line in reversed(stdout.splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and "outcome" in value:
            cost = value.get("cost_usd")
            if isinstance(cost, int | float) and not isinstance(cost, bool) and math.isfinite(cost):
                return float(cost)
            return None
    return None


def created_files(
    cwd: Path, before: Mapping[str, str], secrets: Sequence[bytes]
) -> tuple[tuple[CreatedFile, ...], bool]:
    """The entries of `cwd` not in `before` (path → `file:<digest>` as `signature` gives), scrubbed, in
    walk order, and whether that is all of them. A scrubbed workspace file is rewritten in place."""
    created: list[CreatedFile] = []
    budget = MAX_READ
    for relative, path, status in _walk(cwd):
        if stat.S_ISREG(status.st_mode):
            budget -= status.st_size
        if len(created) >= MAX_CREATED or budget < 0:
            return tuple(created), False
        entry = _entry(relative, path, status.st_mode, before, secrets)
        if entry is not None:
            created.append(entry)
    return tuple(created), True


def signature(data: bytes) -> str:
    """How `created_files` knows a regular file the run started with."""
    return "file:" + sha256_digest(data)


def _walk(top: Path) -> Iterable[tuple[str, Path, os.stat_result]]:
    """Every non-directory under `top` as (relative `/` path, path, lstat); names sorted at each level, a
    directory's entries where its name sorts."""
    for relative, path, status in _walk_all(top):
        if not stat.S_ISDIR(status.st_mode):
            yield relative, path, status


def _entry(
    relative: str, path: Path, mode: int, before: Mapping[str, str], secrets: Sequence[bytes]
) -> CreatedFile | None:
    shown = scrub_text(relative, secrets)
    if stat.S_ISLNK(mode):
        try:
            target = os.readlink(path)
        except OSError:
            return None
        if before.get(relative) == "link:" + target:
            return None
        kept = scrub_text(target, secrets)
        encoded = os.fsencode(kept)
        return CreatedFile(shown, "symlink", sha256_digest(encoded), len(encoded), target=kept)
    if not stat.S_ISREG(mode):
        return None if relative in before else CreatedFile(shown, "other", None, 0)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        size = os.fstat(fd).st_size
        if size > MAX_COPIED:
            digest = hashlib.sha256()
            while chunk := file.read(_CHUNK):
                digest.update(chunk)
            raw_digest = "sha256:" + digest.hexdigest()
            if before.get(relative) == "file:" + raw_digest:
                return None
            return CreatedFile(shown, "file", raw_digest, size)
        data = file.read(MAX_COPIED + 1)
    if before.get(relative) == signature(data):
        return None
    clean = scrub(data, secrets)
    if clean != data:
        _rewrite(path, clean)
    return CreatedFile(shown, "file", sha256_digest(clean), len(clean), data=clean)


def _rewrite(path: Path, data: bytes) -> None:
    """Put the scrubbed bytes in the workspace file, or remove it when it cannot be written (a runner
    that is not root and a file the agent made read-only): a file grader never reads a secret."""
    try:
        if not os.access(path, os.W_OK):
            os.chmod(path, 0o600)  # a regular file (lstat said so), and nothing runs in the sandbox now
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "wb") as file:
            file.write(data)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)


# --------------------------------------------------------------------------------------------------
# The results directory


def secret_in(directory: Path, secrets: Sequence[bytes]) -> str | None:
    """The first path (relative, `/`-separated) under `directory` whose name or content holds a secret."""
    wanted = [secret for secret in secrets if secret]
    if not wanted:
        return None
    overlap = max(len(secret) for secret in wanted) - 1
    for relative, path, status in _walk_all(directory):
        mode = status.st_mode
        if any(secret in os.fsencode(relative) for secret in wanted):
            return relative
        if stat.S_ISLNK(mode):
            try:
                target = os.fsencode(os.readlink(path))
            except OSError:
                continue
            if any(secret in target for secret in wanted):
                return relative
        elif stat.S_ISREG(mode) and _holds(path, wanted, overlap):
            return relative
    return None


def remove_results_holding_secret(directory: Path, secrets: Sequence[bytes]) -> str | None:
    """Scan a written results directory; if it holds a secret, remove it and return the run's failure
    message, else None."""
    found = secret_in(directory, secrets)
    if found is None:
        return None
    remove_tree(directory)
    return f"the door key was found in {found}; the results were removed"


def _walk_all(top: Path) -> Iterable[tuple[str, Path, os.stat_result]]:
    """Every entry under `top`, directories included (before their entries), links not followed; no
    recursion, so no depth of directories the agent made can exhaust the stack."""
    stack: list[tuple[str, Iterator[os.DirEntry[str]]]] = [("", _sorted_entries(top))]
    while stack:
        prefix, entries = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        relative = prefix + entry.name
        try:
            status = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        yield relative, Path(entry.path), status
        if stat.S_ISDIR(status.st_mode):
            stack.append((relative + "/", _sorted_entries(Path(entry.path))))


def _sorted_entries(directory: Path) -> Iterator[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as entries:
            return iter(sorted(entries, key=lambda entry: entry.name))
    except OSError:
        return iter(())


def _holds(path: Path, secrets: Sequence[bytes], overlap: int) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as file:
        tail = b""
        while chunk := file.read(_CHUNK):
            window = tail + chunk
            if any(secret in window for secret in secrets):
                return True
            tail = window[-overlap:] if overlap else b""
    return False


def remove_tree(path: Path) -> None:
    """Remove a tree the sandbox wrote, even where it took its own permissions away (a runner that is
    not root cannot list a directory the agent made mode 000)."""
    if not os.path.lexists(path):
        return
    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)
        return
    with contextlib.suppress(OSError):
        os.chmod(path, 0o700)
    for directory, names, _ in os.walk(path):
        for name in names:
            child = os.path.join(directory, name)
            if not os.path.islink(child):
                with contextlib.suppress(OSError):
                    os.chmod(child, 0o700)
    shutil.rmtree(path, ignore_errors=True)
