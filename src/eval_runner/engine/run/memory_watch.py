"""The sandbox's memory budget: how much a run's processes hold, watched while it runs.

The address-space rlimit the bridge sets is only a backstop: an agent that handles a refused allocation
exits by itself, and the limit counts each process alone. So every `POLL_SECONDS` the runner sums the
resident memory of the sandbox's pid 1 and every descendant, and the memfds they hold (in no resident
set until mapped), and stops the sandbox as at the deadline when the sum passes the budget. It reads only
the kernel's own bookkeeping, which takes no lock a hog could hold. Where the host gives each sandbox a
memory cgroup (`engine/run/cgroup.py`), the cgroup's count replaces this sum. How it counts, what it
costs and what it cannot see are in decisions.md ("The sandbox's memory budget", "Sandbox threat model").
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable

#: The sandbox's memory is measured this often at most (less often when scans are dear: `_COST_SHARE`).
POLL_SECONDS = 0.05
#: The next poll waits at least this many times as long as the last scan took.
_COST_SHARE = 20
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def processes(pid: int) -> list[int]:
    """`pid` and every process descended from it, found through each task's `children` (a process that
    ends meanwhile is simply not there)."""
    found: list[int] = []
    seen: set[int] = set()
    frontier = [pid]
    while frontier:
        process = frontier.pop()
        if process in seen:
            continue
        seen.add(process)
        try:
            tasks = os.listdir(f"/proc/{process}/task")
        except OSError:
            continue
        found.append(process)
        for task in tasks:
            children = _read(f"/proc/{process}/task/{task}/children")
            with contextlib.suppress(ValueError):
                frontier += map(int, children.split())
    return found


def resident(pid: int) -> int:
    """Bytes resident in `pid` and every process descended from it, plus the memfds they hold (0 for a
    process that is gone)."""
    total = 0
    files: set[tuple[int, int]] = set()
    for process in processes(pid):
        statm = _read(f"/proc/{process}/statm")
        try:
            total += int(statm.split(None, 2)[1]) * PAGE_SIZE
        except (ValueError, IndexError):
            continue
        total += _memfds(process, files)
    return total


async def exceeded(pid1: Callable[[], int | None], limit: int, measure: Callable[[int], int] | None = None) -> int:
    """Measure the sandbox until it holds more than `limit` bytes, and return what it held then.
    `pid1()` is the sandbox's pid 1 while it lives, else None (not started yet, or gone); `measure(pid)`
    what it holds (default `resident`). Runs until cancelled otherwise."""
    while True:
        cost = 0.0
        pid = pid1()
        if pid is not None:
            started = time.perf_counter()
            held = (measure or resident)(pid)
            cost = time.perf_counter() - started
            # Still alive after the scan, so its pid named no other process meanwhile.
            if held > limit and pid1() == pid:
                return held
        await asyncio.sleep(max(POLL_SECONDS, cost * _COST_SHARE))


def _memfds(process: int, seen: set[tuple[int, int]]) -> int:
    """Bytes allocated to the memfds a process holds open that `seen` has not counted yet. A memfd's pages
    are in no resident set until mapped (a mapped one is counted twice: the sum errs high)."""
    directory = f"/proc/{process}/fd"
    try:
        descriptors = os.listdir(directory)
    except OSError:
        return 0
    total = 0
    for fd in descriptors:
        try:
            if not os.readlink(f"{directory}/{fd}").startswith("/memfd:"):
                continue
            status = os.stat(f"{directory}/{fd}")
        except OSError:
            continue
        key = (status.st_dev, status.st_ino)
        if key not in seen:
            seen.add(key)
            total += status.st_blocks * 512
    return total


def _read(path: str) -> bytes:
    """A /proc file's content, or b"" when it (or its process) is gone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        # As long as the process count allows (a children list is ~8 bytes a process), never more.
        parts: list[bytes] = []
        while chunk := os.read(fd, 65536):
            parts.append(chunk)
        return b"".join(parts)
    except OSError:
        return b""
    finally:
        os.close(fd)
