"""The sandbox's disk budget: what a run's files take, watched while it runs.

A per-file limit alone let one run write 1 GiB, and a few such runs can fill the disk the ledger lives
on. A size-bounded tmpfs would hold the files in memory and in the sandbox's mount namespace, gone before
the runner could collect them, and project quotas need root; so the runner measures, as it does memory:
every `POLL_SECONDS` it adds up the blocks of every entry under the run's writable directories and of the
unlinked files the sandbox holds open, one descriptor per level, never following a link, and stops at the
first bound passed (the run ends `errored(disk_limit)`). The budget keeps runs from filling the disk; it
does not meter them byte for byte (decisions.md, "Sandbox threat model").
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from eval_runner.engine.run.memory_watch import processes

#: The run's files are measured this often at most (less often when scans are dear: `_COST_SHARE`).
POLL_SECONDS = 0.25
#: The next poll waits at least this many times as long as the last scan took.
_COST_SHARE = 20
#: Directories deeper than this are over the budget: no agent needs them, and a walk holds one
#: descriptor per level.
MAX_DEPTH = 256
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class DiskUse:
    """What a scan found: bytes allocated, entries, and whether a tree was deeper than `MAX_DEPTH`. A scan
    stops at the first bound it passes, so the figures are at least the bound, not the whole."""

    bytes: int
    entries: int
    too_deep: bool = False

    def over(self, budget: int, files: int) -> bool:
        return self.too_deep or self.bytes > budget or self.entries > files

    def detail(self, budget: int, files: int) -> str:
        if self.too_deep:
            return f"the run's directories went more than {MAX_DEPTH} deep"
        if self.entries > files:
            return f"the run made more than {files} files"
        return f"the run's files took {self.bytes >> 20} MiB, over its disk budget of {budget >> 20} MiB"


def used(roots: Sequence[Path], pid: int | None, *, budget: int, files: int) -> DiskUse:
    """Bytes and entries under `roots`, plus the unlinked files `pid`'s process tree holds open; stops
    counting once past `budget` bytes or `files` entries."""
    total = entries = 0
    for root in roots:
        for size in _sizes(root):
            if size < 0:
                return DiskUse(total, entries, too_deep=True)
            total += size
            entries += 1
            if total > budget or entries > files:
                return DiskUse(total, entries)
    if pid is not None:
        total += _unlinked(pid)
    return DiskUse(total, entries)


def _sizes(root: Path) -> Iterator[int]:
    """The allocated bytes of every entry under `root` (directories included, links not followed); -1 for
    a directory deeper than `MAX_DEPTH`."""
    try:
        top = os.open(root, _DIRECTORY)
    except OSError:
        return
    stack: list[tuple[int, Iterator[os.DirEntry[str]]]] = []
    try:
        stack.append((top, _entries(top)))
        while stack:
            fd, listing = stack[-1]
            entry = next(listing, None)
            if entry is None:
                stack.pop()
                os.close(fd)
                continue
            try:
                status = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            yield status.st_blocks * 512
            if not stat.S_ISDIR(status.st_mode):
                continue
            if len(stack) >= MAX_DEPTH:
                yield -1
                return
            try:
                below = os.open(entry.name, _DIRECTORY, dir_fd=fd)
            except OSError:
                continue
            stack.append((below, _entries(below)))
    finally:
        for fd, _ in stack:
            os.close(fd)


def _entries(fd: int) -> Iterator[os.DirEntry[str]]:
    try:
        with os.scandir(fd) as listing:
            yield from listing
    except OSError:
        return


def _unlinked(pid: int) -> int:
    """Bytes allocated to regular files the process tree holds open after every name of them is gone
    (memfds are memory, counted by the memory budget)."""
    total = 0
    seen: set[tuple[int, int]] = set()
    for process in processes(pid):
        directory = f"/proc/{process}/fd"
        try:
            descriptors = os.listdir(directory)
        except OSError:
            continue
        for fd in descriptors:
            try:
                target = os.readlink(f"{directory}/{fd}")
                if not target.endswith(" (deleted)") or target.startswith("/memfd:"):
                    continue
                status = os.stat(f"{directory}/{fd}")
            except OSError:
                continue
            key = (status.st_dev, status.st_ino)
            if stat.S_ISREG(status.st_mode) and status.st_nlink == 0 and key not in seen:
                seen.add(key)
                total += status.st_blocks * 512
    return total


async def exceeded(pid1: Callable[[], int | None], roots: Sequence[Path], *, budget: int, files: int) -> DiskUse:
    """Measure the run's files until they pass a bound, and return what was found then. Runs until cancelled
    otherwise. Each scan runs in a thread: a large tree must never stall the other runs' doors."""
    while True:
        cost = 0.0
        pid = pid1()
        if pid is not None:
            started = time.perf_counter()
            found = await asyncio.to_thread(used, roots, pid, budget=budget, files=files)
            cost = time.perf_counter() - started
            if found.over(budget, files) and pid1() == pid:
                return found
        await asyncio.sleep(max(POLL_SECONDS, cost * _COST_SHARE))
