"""A memory cgroup per sandbox, where the host lets the runner make one: the kernel then counts everything.

Summing the resident memory of a sandbox's processes misses what no process maps (memfd pages, System V
shared memory, tmpfs pages, pipe buffers, other kernel memory); a memory cgroup counts all of them, and
its hard limit stops a hog between two polls. Each sandbox's pid 1 is moved into a cgroup of its own
before it runs anything (bubblewrap's `--block-fd` holds it until then), so every process it starts is
born there. Page cache is left out of the count: it is reclaimable, and files written are the disk
budget's business. Which hosts get a cgroup, and of which version, is in decisions.md ("Sandbox threat
model").
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

_PROC_CGROUP = "/proc/self/cgroup"
_MOUNTINFO = "/proc/self/mountinfo"
_PREFIX = "eval-runner-"


@dataclass(frozen=True, slots=True)
class CgroupHost:
    """Where per-sandbox memory cgroups are made: the cgroup version and the parent directory."""

    version: int
    parent: Path

    def describe(self) -> str:
        return f"cgroup v{self.version} memory at {self.parent}"


def find_host() -> CgroupHost | None:
    """The host's way to give each sandbox a memory cgroup, proven by making and removing one; None when
    there is none (not Linux, no memory controller, or not ours to write)."""
    for candidate in (_v1_parent(), _v2_parent()):
        if candidate is None:
            continue
        try:
            probe = RunCgroup.create(candidate, 64 << 20)
        except OSError:
            continue
        probe.remove()
        return candidate
    return None


def _mounts() -> list[tuple[str, str, str, str]]:
    """(mount root, mount point, fstype, super options) of every mount."""
    found: list[tuple[str, str, str, str]] = []
    try:
        with open(_MOUNTINFO) as file:
            lines = file.read().splitlines()
    except OSError:
        return found
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3:
            found.append((fields[3], fields[4], tail[0], tail[2]))
    return found


def _own_cgroups() -> dict[str, str]:
    """controller list → our path in that hierarchy ("" for v2's unified one)."""
    own: dict[str, str] = {}
    try:
        with open(_PROC_CGROUP) as file:
            for line in file.read().splitlines():
                _, controllers, path = line.split(":", 2)
                own[controllers] = path
    except (OSError, ValueError):
        pass
    return own


def _below(mount_root: str, mount_point: str, path: str) -> Path | None:
    if path != mount_root and not path.startswith(mount_root.rstrip("/") + "/"):
        return None
    return Path(mount_point) / path[len(mount_root) :].lstrip("/")


def _v1_parent() -> CgroupHost | None:
    path = next((path for controllers, path in _own_cgroups().items() if "memory" in controllers.split(",")), None)
    if path is None:
        return None
    for root, point, fstype, options in _mounts():
        if fstype == "cgroup" and "memory" in options.split(","):
            parent = _below(root, point, path)
            if parent is not None and parent.is_dir():
                return CgroupHost(1, parent)
    return None


def _v2_parent() -> CgroupHost | None:
    path = _own_cgroups().get("")
    if path is None:
        return None
    for root, point, fstype, _ in _mounts():
        if fstype != "cgroup2":
            continue
        own = _below(root, point, path)
        if own is None or not own.is_dir():
            continue
        try:
            if "memory" not in (own / "cgroup.controllers").read_text().split():
                return None
            if "memory" not in (own / "cgroup.subtree_control").read_text().split():
                # Delegated to us: leave the cgroup to its children (cgroup v2 allows processes only in
                # leaves once a controller is enabled below), then enable memory for them.
                leaf = own / "runner"
                leaf.mkdir(exist_ok=True)
                (leaf / "cgroup.procs").write_text(str(os.getpid()))
                (own / "cgroup.subtree_control").write_text("+memory")
        except OSError:
            return None
        return CgroupHost(2, own)
    return None


class RunCgroup:
    """One sandbox's memory cgroup: made with a hard ceiling, pid 1 placed in it, read while it runs,
    removed after."""

    def __init__(self, host: CgroupHost, path: Path) -> None:
        self.host = host
        self.path = path

    @classmethod
    def create(cls, host: CgroupHost, ceiling: int) -> RunCgroup:
        """A new cgroup whose processes together may never hold more than `ceiling` bytes (the kernel
        reclaims, then kills inside it). Raises OSError."""
        path = host.parent / f"{_PREFIX}{secrets.token_hex(6)}"
        path.mkdir(mode=0o755)
        made = cls(host, path)
        try:
            if host.version == 1:
                (path / "memory.limit_in_bytes").write_text(str(ceiling))
            else:
                (path / "memory.max").write_text(str(ceiling))
                with contextlib.suppress(FileNotFoundError):
                    (path / "memory.swap.max").write_text("0")
        except OSError:
            made.remove()
            raise
        return made

    def place(self, pid: int) -> None:
        """Move a process (the sandbox's pid 1, before it starts anything) into the cgroup."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def held(self) -> int | None:
        """Bytes the cgroup's processes hold that the budget counts: anonymous, shared (memfds, tmpfs, shm)
        and kernel memory; None if it cannot be read."""
        stat = _keyed(self.path / "memory.stat")
        if stat is None:
            return None
        if self.host.version == 1:
            kernel = _number(self.path / "memory.kmem.usage_in_bytes") or 0
            return stat.get("total_rss", 0) + stat.get("total_shmem", 0) + kernel
        parts = ("kernel",) if "kernel" in stat else ("kernel_stack", "pagetables", "sock", "slab_unreclaimable")
        return stat.get("anon", 0) + stat.get("shmem", 0) + sum(stat.get(key, 0) for key in parts)

    def oom_kills(self) -> int:
        """How many processes the kernel killed in this cgroup for holding more than its ceiling."""
        name = "memory.oom_control" if self.host.version == 1 else "memory.events"
        found = _keyed(self.path / name)
        return 0 if found is None else found.get("oom_kill", 0)

    def remove(self) -> None:
        """Remove the cgroup (its processes are gone; charges left go to the parent)."""
        with contextlib.suppress(OSError):
            self.path.rmdir()


def _keyed(path: Path) -> dict[str, int] | None:
    try:
        text = path.read_text()
    except OSError:
        return None
    found: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        with contextlib.suppress(ValueError):
            found[key] = int(value)
    return found


def _number(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None
