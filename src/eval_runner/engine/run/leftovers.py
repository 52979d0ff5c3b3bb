"""Sandboxes and run directories an earlier runner left behind, found and ended when a runner starts.

A sandbox ends itself when its runner goes (the bridge's lifeline and parent-death signal,
`engine/run/bridge.py`), so this sweep is the second line: `serve` and `eval run` call it at start. A
sandbox's pid 1 is our bridge, whose command line names its runner as `owner:<pid>:<start time>`; one
whose runner is no longer that process is SIGKILLed (through a pidfd opened before the check, so a pid
reused meanwhile is never hit), which ends everything in its PID namespace. A run directory or temp root
holds an `.owner` file with the same mark; one whose owner is gone, and that no live sandbox still uses,
is removed. Nothing here touches what a live runner owns, so two runners may share a temp root.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from eval_runner.engine.run.collect import remove_tree

#: The file in a run directory (and a temp root) that names the process that made it.
OWNER_FILE = ".owner"
#: The first line of the bridge's source: how its command line is recognised, whatever its version.
_BRIDGE_HEAD = '"""The sandbox\'s first process'


def owner_mark() -> str:
    """`<pid>:<start time>` of this process: what a bridge names as its runner, so a later sweep can tell a
    sandbox whose runner is gone (a pid alone may have been reused by then)."""
    return _mark(os.getpid())


@cache
def _mark(pid: int) -> str:
    return f"{pid}:{process_start(pid)}"


def process_start(pid: int) -> int | None:
    """A process's start time in clock ticks since boot (`/proc/<pid>/stat` field 22), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold anything; count fields after its end.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class Swept:
    """What a sweep ended: sandboxes (their pid 1) and directories."""

    sandboxes: int = 0
    directories: int = 0

    def __bool__(self) -> bool:
        return bool(self.sandboxes or self.directories)

    def line(self) -> str:
        return (
            f"swept what an earlier runner left behind: {self.sandboxes} sandbox(es), "
            f"{self.directories} run director(ies)"
        )


def mark_owner(directory: Path) -> None:
    """Write this process's mark into a directory it made (a run directory, a temp root)."""
    path = directory / OWNER_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w") as file:
        file.write(owner_mark() + "\n")


def alive(mark: str) -> bool:
    """Is the process a `<pid>:<start time>` mark names still that process?"""
    pid_text, _, start_text = mark.strip().partition(":")
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    return pid > 0 and str(process_start(pid)) == start_text


def bridges() -> list[tuple[int, str]]:
    """Every sandbox bridge running on this host that this process may see: (host pid, owner mark)."""
    found: list[tuple[int, str]] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if entry.isdigit() and (mark := _bridge_owner(int(entry))) is not None:
            found.append((int(entry), mark))
    return found


def _bridge_owner(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            argv = file.read().split(b"\0")
    except OSError:
        return None
    if len(argv) < 6 or argv[3] != b"-c" or not argv[4].startswith(_BRIDGE_HEAD.encode()):
        return None
    for word in argv[5:]:
        if word == b"--":
            break
        if word.startswith(b"owner:"):
            return word[len(b"owner:") :].decode("ascii", "replace")
    return None


def sweep(temp_roots: tuple[Path, ...] = (), *, prefixes: tuple[str, ...] = ("oa-eval-",)) -> Swept:
    """End every sandbox whose runner is gone, then remove the directories under `temp_roots` (named with
    one of `prefixes`) whose owner is gone and that no live sandbox uses."""
    ended = 0
    for pid, mark in bridges():
        if not alive(mark) and _kill(pid):
            ended += 1
    in_use = _paths_in_use()
    removed = 0
    for root in temp_roots:
        try:
            names = os.listdir(root)
        except OSError:
            continue
        for name in names:
            directory = root / name
            if not name.startswith(prefixes) or directory.is_symlink() or not directory.is_dir():
                continue
            if any(path == str(directory) or path.startswith(f"{directory}/") for path in in_use):
                continue
            try:
                mark = (directory / OWNER_FILE).read_text()
            except (OSError, ValueError):
                continue  # not one of ours, or not marked yet: never guess
            if not alive(mark):
                remove_tree(directory)
                removed += 1
    return Swept(ended, removed)


def _kill(pid: int) -> bool:
    """SIGKILL a bridge through a pidfd, re-checking after the pidfd holds it that it still is one."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        mark = _bridge_owner(pid)
        if mark is None or alive(mark):
            return False
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            return True
        return False
    finally:
        os.close(pidfd)


def _paths_in_use() -> list[str]:
    """The arguments of live bridges that name paths (their doors and command lines): a run directory one of
    them still uses is never removed."""
    paths: list[str] = []
    for pid, mark in bridges():
        if not alive(mark):
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                argv = file.read().split(b"\0")
        except OSError:
            continue
        for word in argv[5:]:
            text = os.fsdecode(word)
            _, _, value = text.partition("=")
            paths += [item for item in (text, value) if item.startswith("/")]
    return paths
