"""What a run leaves behind, read safely, and secrets kept out of everything we keep (runner.md §13.4 step 12).

The run's directories were written by untrusted code, so nothing here follows a link: a file is opened
`O_NOFOLLOW | O_NONBLOCK` and read only if it then is a regular file (a FIFO never blocks us), and trees
are walked and removed through one directory descriptor at a time, so no shape of tree the agent made
stops us. The sandbox is gone before any of this runs, so nothing changes underneath. The bounds on what
is recorded, names that are not UTF-8, which links `file_exists` counts and how secrets are scrubbed are
in decisions.md ("The sandbox, the bridge and one run").
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import math
import os
import stat
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

#: A created regular file at most this large is copied into the record (runner.md §22).
MAX_COPIED = 1 << 20
#: Created entries recorded at most; the rest are left in the workspace.
MAX_CREATED = 4096
#: Bytes of created files read (hashed) at most, all entries together.
MAX_READ = 512 << 20
#: Links followed at most resolving one created link's target (the kernel's MAXSYMLINKS).
MAX_HOPS = 40
REDACTED = b"[redacted]"
_CHUNK = 1 << 20
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_OURS = 0o700
_Identity = tuple[int, int]  # a directory's (st_dev, st_ino)


@dataclass(frozen=True, slots=True)
class CreatedFile:
    """One created entry of the workspace. `path` (and `target`) as the operating system gives them, so
    not always UTF-8 (`shown_path` is their JSON form); `digest` is `sha256:<hex>` of the kept bytes (of
    the target text for a symlink; None for anything that is neither file nor link); `data` holds a
    regular file of at most `MAX_COPIED` bytes; `target` a symlink's target, never followed; `inside`
    whether that target names a file or directory inside the workspace (module docstring)."""

    path: str
    kind: Literal["file", "symlink", "other"]
    digest: str | None
    size: int
    data: bytes | None = None
    target: str | None = None
    inside: bool = False

    @property
    def present(self) -> bool:
        """A regular file, or a link to one (or to a directory) inside the workspace: what `file_exists`
        counts. A link that leaves the workspace, dangles, or names a FIFO is not."""
        return self.kind == "file" or (self.kind == "symlink" and self.inside)


def shown_path(path: str) -> str:
    """A kept path or link target as JSON can hold it: the path itself when its bytes are UTF-8, else those
    bytes with each one that is not UTF-8 written `\\xNN`. Two names can show alike (`a\\xff` is also a
    valid name of its own), so where the record is kept `exact_path` is beside it."""
    if path.isascii():
        return path
    raw = _path_bytes(path)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "backslashreplace")


def exact_path(path: str) -> str | None:
    """The base64 of a kept path's bytes when `shown_path` does not give them back (they are not UTF-8);
    None when it does."""
    if path.isascii():
        return None
    raw = _path_bytes(path)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii")
    return None


def path_bytes(shown: str, exact: str | None) -> bytes:
    """The bytes of a path recorded as (`shown_path`, `exact_path`)."""
    return shown.encode("utf-8") if exact is None else base64.b64decode(exact, validate=True)


def _path_bytes(path: str) -> bytes:
    try:
        return os.fsencode(path)  # the bytes a surrogate-escaped name was read from
    except UnicodeEncodeError:  # a lone surrogate no file name holds: kept, not lost
        return path.encode("utf-8", "surrogatepass")


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
        fd = os.open(path, _READ)
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
    seen = _Seen()
    links: list[tuple[int, _Identity, str]] = []
    budget = MAX_READ
    walk = _Walk(cwd)
    with contextlib.closing(walk.entries()) as entries:
        for relative, name, status in entries:
            mode = status.st_mode
            if stat.S_ISDIR(mode):
                seen.add(walk.directory, name, status)
                continue
            if stat.S_ISREG(mode):
                budget -= status.st_size
            if len(created) >= MAX_CREATED or budget < 0:
                walk.complete = False
                break
            entry: CreatedFile | None
            if stat.S_ISLNK(mode):
                try:
                    target = os.readlink(name, dir_fd=walk.fd)
                except OSError:
                    walk.complete = False
                    continue
                seen.add(walk.directory, name, status, target)
                entry = _link_entry(relative, target, before, secrets)
                if entry is not None:
                    links.append((len(created), walk.directory, name))
            elif stat.S_ISREG(mode):
                seen.add(walk.directory, name, status)
                entry = _file_entry(relative, name, walk.fd, mode, before, secrets)
            else:
                seen.add(walk.directory, name, status)
                entry = None if relative in before else CreatedFile(scrub_text(relative, secrets), "other", None, 0)
            if entry is not None:
                created.append(entry)
    for index, directory, name in links:
        created[index] = replace(created[index], inside=seen.lands_inside(directory, name))
    return tuple(created), walk.complete


def signature(data: bytes) -> str:
    """How `created_files` knows a regular file the run started with."""
    return "file:" + sha256_digest(data)


def _link_entry(relative: str, target: str, before: Mapping[str, str], secrets: Sequence[bytes]) -> CreatedFile | None:
    if before.get(relative) == "link:" + target:
        return None
    kept = scrub_text(target, secrets)
    encoded = os.fsencode(kept)
    return CreatedFile(scrub_text(relative, secrets), "symlink", sha256_digest(encoded), len(encoded), target=kept)


def _file_entry(
    relative: str, name: str, at: int, mode: int, before: Mapping[str, str], secrets: Sequence[bytes]
) -> CreatedFile | None:
    shown = scrub_text(relative, secrets)
    try:
        fd = _open_file(name, at, _READ, stat.S_IMODE(mode) | 0o400)
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
        _rewrite(name, at, clean)
    return CreatedFile(shown, "file", sha256_digest(clean), len(clean), data=clean)


def _open_file(name: str, at: int, flags: int, mode: int) -> int:
    """Open a regular file under the directory `at`, never through a link; one the agent made unreadable
    or read-only is given `mode` first (it is the runner's to read, and nothing runs in the sandbox now)."""
    try:
        return os.open(name, flags, dir_fd=at)
    except PermissionError:
        with contextlib.suppress(OSError, ValueError, NotImplementedError):
            os.chmod(name, mode, dir_fd=at, follow_symlinks=False)
        return os.open(name, flags, dir_fd=at)


def _rewrite(name: str, at: int, data: bytes) -> None:
    """Put the scrubbed bytes in the workspace file, or remove it when it cannot be written: a file
    grader never reads a secret."""
    try:
        fd = _open_file(name, at, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(data)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=at)


class _Seen:
    """Every entry the walk saw, by (the directory holding it, its name): what a created link's target is
    resolved against, so that none is followed on disk, and each step costs the same however deep."""

    def __init__(self) -> None:
        self._kinds: dict[tuple[_Identity, str], str] = {}  # dir, file, link or other
        self._directories: dict[tuple[_Identity, str], _Identity] = {}
        self._parents: dict[_Identity, _Identity] = {}
        self._targets: dict[tuple[_Identity, str], str] = {}

    def add(self, directory: _Identity, name: str, status: os.stat_result, target: str | None = None) -> None:
        key, mode = (directory, name), status.st_mode
        if stat.S_ISDIR(mode):
            self._kinds[key] = "dir"
            self._directories[key] = (status.st_dev, status.st_ino)
            self._parents[status.st_dev, status.st_ino] = directory
        elif target is not None:
            self._kinds[key], self._targets[key] = "link", target
        else:
            self._kinds[key] = "file" if stat.S_ISREG(mode) else "other"

    def lands_inside(self, directory: _Identity, name: str) -> bool:
        """Whether the link `name` in `directory` names a file or directory the walk saw inside the
        workspace: its target resolved name by name from the link's directory, links on the way followed
        (at most `MAX_HOPS`) only as the walk recorded them. An absolute target, a `..` above the
        workspace, a name the walk did not see (one through `via -> /etc`) or the workspace itself never
        does."""
        pending = _components(self._targets[directory, name])
        if pending is None:
            return False
        here, kind, hops = directory, "dir", 0
        while pending:
            step = pending.pop()
            if kind != "dir":
                return False  # a name after a file, which is not a directory
            if step in ("", "."):
                continue
            if step == "..":
                if here not in self._parents:
                    return False  # above the workspace
                here = self._parents[here]
                continue
            key = (here, step)
            kind = self._kinds.get(key, "")
            if kind == "link":
                hops += 1
                further = _components(self._targets[key])
                if hops > MAX_HOPS or further is None:
                    return False
                kind = "dir"
                pending.extend(further)
            elif kind == "dir":
                here = self._directories[key]
            elif not kind:
                return False
        return kind == "file" or (kind == "dir" and here in self._parents)


def _components(target: str) -> list[str] | None:
    """A relative target's names, last first; None for an absolute one (it leaves the workspace)."""
    return None if target.startswith("/") else target.split("/")[::-1]


# --------------------------------------------------------------------------------------------------
# The results directory


def secret_in(directory: Path, secrets: Sequence[bytes]) -> str | None:
    """The first path (relative, `/`-separated, as `shown_path` writes it) under `directory` whose name or
    content holds a secret."""
    wanted = [secret for secret in secrets if secret]
    if not wanted:
        return None
    overlap = max(len(secret) for secret in wanted) - 1
    walk = _Walk(directory)
    with contextlib.closing(walk.entries()) as entries:
        for relative, name, status in entries:
            mode = status.st_mode
            if any(secret in os.fsencode(relative) for secret in wanted):
                return shown_path(relative)
            if stat.S_ISLNK(mode):
                try:
                    target = os.fsencode(os.readlink(name, dir_fd=walk.fd))
                except OSError:
                    continue
                if any(secret in target for secret in wanted):
                    return shown_path(relative)
            elif stat.S_ISREG(mode) and _holds(name, walk.fd, wanted, overlap):
                return shown_path(relative)
    return None


def remove_results_holding_secret(directory: Path, secrets: Sequence[bytes]) -> str | None:
    """Scan a written results directory; if it holds a secret, remove it and return the run's failure
    message, else None."""
    found = secret_in(directory, secrets)
    if found is None:
        return None
    remove_tree(directory)
    return f"the door key was found in {found}; the results were removed"


def _holds(name: str, at: int, secrets: Sequence[bytes], overlap: int) -> bool:
    try:
        fd = os.open(name, _READ, dir_fd=at)
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


# --------------------------------------------------------------------------------------------------
# Walking and removing a tree the agent wrote


class _Cursor:
    """One open directory of a tree and the way back up. One descriptor at a time (`..` to go up, checked
    against the directory we came from), so neither depth, PATH_MAX nor the descriptor limit bounds a
    walk; a directory is opened with `O_NOFOLLOW`, so a link is never entered; one the agent made
    unreadable, unsearchable or read-only (the runner may not be root) is given `u+rwx` through the
    directory holding it, before opening, or through its own descriptor, after."""

    def __init__(self, fd: int, identity: _Identity) -> None:
        self.fd = fd
        self._here = identity
        self._above: list[_Identity] = []

    @classmethod
    def at(cls, top: Path) -> _Cursor | None:
        try:
            parent = os.open(top.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            opened = _open_directory(top.name, parent)
        finally:
            os.close(parent)
        return None if opened is None else cls(*opened)

    def enter(self, name: str) -> bool:
        opened = _open_directory(name, self.fd)
        if opened is None:
            return False
        os.close(self.fd)
        self._above.append(self._here)
        self.fd, self._here = opened
        return True

    def leave(self) -> bool:
        """Back up one level; False when `..` is not the directory we came from (the tree moved)."""
        expected = self._above.pop()
        try:
            fd = os.open("..", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self.fd)
        except OSError:
            return False
        try:
            found = os.fstat(fd)
        except OSError:
            found = None
        if found is None or (found.st_dev, found.st_ino) != expected:
            os.close(fd)
            return False
        os.close(self.fd)
        self.fd, self._here = fd, expected
        return True

    @property
    def identity(self) -> _Identity:
        return self._here

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _open_directory(name: str, at: int) -> tuple[int, _Identity] | None:
    """`name` under `at` as a directory we may list, search and empty, with its identity; None if it is not
    a directory (a link is not) or cannot be made one we may use."""
    try:
        fd = os.open(name, _DIRECTORY, dir_fd=at)
    except PermissionError:
        try:
            os.chmod(name, _OURS, dir_fd=at, follow_symlinks=False)  # refuses a link
            fd = os.open(name, _DIRECTORY, dir_fd=at)
        except (OSError, ValueError, NotImplementedError):
            return None
    except OSError:
        return None
    try:
        status = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if status.st_mode & _OURS != _OURS:
        with contextlib.suppress(OSError):  # not ours to change: what the other bits allow will do
            os.chmod(fd, stat.S_IMODE(status.st_mode) | _OURS)
    return fd, (status.st_dev, status.st_ino)


def _names(fd: int) -> list[str] | None:
    try:
        return os.listdir(fd)
    except OSError:
        return None


class _Walk:
    """Every entry under `top`, directories before their entries, names sorted at each level, links never
    followed, as (relative `/` path, name, lstat); while an entry is yielded `fd` is the directory holding
    it and `directory` that directory's identity. `complete` is False once a directory could not be read
    (or a caller stopped short)."""

    def __init__(self, top: Path) -> None:
        self.top = top
        self.fd = -1
        self.directory: _Identity = (0, 0)
        self.complete = True

    def entries(self) -> Generator[tuple[str, str, os.stat_result], None, None]:
        cursor = _Cursor.at(self.top)
        if cursor is None:
            self.complete = False
            return
        try:
            levels = [("", iter(self._sorted(cursor.fd)))]
            while levels:
                prefix, names = levels[-1]
                name = next(names, None)
                if name is None:
                    levels.pop()
                    if levels and not cursor.leave():
                        self.complete = False
                        return
                    continue
                try:
                    status = os.stat(name, dir_fd=cursor.fd, follow_symlinks=False)
                except OSError:
                    self.complete = False
                    continue
                self.fd, self.directory = cursor.fd, cursor.identity
                yield prefix + name, name, status
                if stat.S_ISDIR(status.st_mode):
                    if cursor.enter(name):
                        levels.append((f"{prefix}{name}/", iter(self._sorted(cursor.fd))))
                    else:
                        self.complete = False
        finally:
            cursor.close()

    def _sorted(self, fd: int) -> list[str]:
        names = _names(fd)
        if names is None:
            self.complete = False
            return []
        return sorted(names)


def remove_tree(path: Path) -> bool:
    """Remove a tree the sandbox wrote and say whether it is gone. Never raises, recurses or follows a
    link (`_Cursor`); an entry that truly cannot be removed is left and the answer is False."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    if stat.S_ISDIR(status.st_mode):
        cursor = _Cursor.at(path)
        if cursor is None:
            return False
        try:
            _empty(cursor)
        finally:
            cursor.close()
    try:
        (os.rmdir if stat.S_ISDIR(status.st_mode) else os.unlink)(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _empty(cursor: _Cursor) -> None:
    """Remove everything under the cursor's directory, depth first, leaving the cursor where it began. A
    file is unlinked without a stat first (a directory refuses, and is then entered), so an ordinary tree
    costs one call a file."""
    levels = [_names(cursor.fd) or []]
    entered: list[str] = []
    while levels:
        names = levels[-1]
        if names:
            name = names.pop()
            if _unlink(name, cursor.fd) and cursor.enter(name):
                entered.append(name)
                levels.append(_names(cursor.fd) or [])
            continue
        levels.pop()
        if not entered:
            return
        name = entered.pop()
        if not cursor.leave():
            return
        with contextlib.suppress(OSError):
            os.rmdir(name, dir_fd=cursor.fd)


def _unlink(name: str, at: int) -> bool:
    """Unlink `name` unless it is a directory; True when it is one (to be entered and emptied)."""
    try:
        os.unlink(name, dir_fd=at)
    except IsADirectoryError:
        return True
    except PermissionError:  # EPERM: how other systems refuse a directory
        with contextlib.suppress(OSError):
            return stat.S_ISDIR(os.stat(name, dir_fd=at, follow_symlinks=False).st_mode)
    except OSError:
        pass
    return False
