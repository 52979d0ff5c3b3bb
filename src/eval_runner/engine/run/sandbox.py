"""Confinement for one agent run: bubblewrap, resource limits and the door bridge (runner.md §13.5).

The agent is untrusted code (the subject arm runs an extension someone else wrote), so each run starts
`bwrap` with its own namespaces, as uid 65534 with every capability dropped (ecosystem.md §5), and our
door bridge (`engine/run/bridge.py`) as pid 1: it opens the run's doors inside, sets the resource limits
on the agent alone, starts it and reports how it ended. The runner holds the sandbox to a memory budget
(`cgroup.py`, `memory_watch.py`) and a disk budget (`disk_watch.py`) and stops it as at the deadline when
one is passed. Where and why we differ from the reference's boundary (the network off, reads an
allowlist, a root runner dropping to 65534 outside too) is in decisions.md ("The sandbox, the bridge and
one run", "Sandbox threat model").
"""

from __future__ import annotations

import importlib.resources
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import Any

from eval_runner.engine.run import syscall_filter
from eval_runner.engine.run.cgroup import CgroupHost, find_host

#: Where the backend may be installed (runner.md §13.5), first found wins.
BWRAP_PATHS = ("/usr/bin/bwrap", "/run/current-system/sw/bin/bwrap")
#: The sandbox's uid and gid inside, and outside when the runner is root.
SANDBOX_UID = SANDBOX_GID = 65534
SANDBOX_USER = "eval"
#: The network policy word recorded in each arm's run configuration.
NETWORK_POLICY = "door-only"
#: SIGTERM → this many seconds → SIGKILL (runner.md §22).
GRACE_SECONDS = 2.0
#: While a sandbox is stopping, holding this many times its memory budget SIGKILLs it at once.
CEILING = 1.5
#: Seconds past the deadline and the grace after which the bridge ends the sandbox on its own.
OVERDUE_MARGIN_SECONDS = 5

_SYSTEM_DIRS = ("/usr", "/nix/store", "/run/current-system/sw")
_TOP_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/protocols",
    "/etc/services",
    "/etc/mime.types",
    "/etc/alternatives",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates",
    "/etc/pki/tls/certs",
    "/etc/pki/ca-trust",
)
_PYTHON_PATHS = ("/usr/bin/python3",)
_SETPRIV_PATHS = ("/usr/bin/setpriv", "/run/current-system/sw/bin/setpriv")


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-run resource limits, applied to the agent and everything it starts. `memory` is the budget of
    resident bytes for the whole sandbox, watched by the runner; `address_space` is the rlimit each
    process gets, a backstop kept well above it."""

    address_space: int = 8 << 30
    memory: int = 2 << 30
    #: Bytes the run's writable directories (and the unlinked files it holds open) may take, and entries.
    disk: int = 1 << 30
    files: int = 100_000
    processes: int = 256
    open_files: int = 1024
    file_size: int = 64 << 20
    #: CPU seconds beyond the run's deadline before SIGXCPU (and SIGKILL 5 s later).
    cpu_margin_seconds: int = 30

    def bridge_options(self, deadline_seconds: float) -> list[str]:
        cpu = math.ceil(deadline_seconds) + self.cpu_margin_seconds
        return [
            f"limit:as={self.address_space}:{self.address_space}",
            f"limit:nproc={self.processes}:{self.processes}",
            f"limit:nofile={self.open_files}:{self.open_files}",
            f"limit:fsize={self.file_size}:{self.file_size}",
            f"limit:cpu={cpu}:{cpu + 5}",
            "limit:core=0:0",
        ]


@dataclass(frozen=True, slots=True)
class Confinement:
    """A host that can confine runs, and the shape every sandbox on it takes."""

    bwrap: str
    #: The bridge's interpreter, visible inside the sandbox.
    python: str
    #: The uid/gid the sandbox runs as on the host: 65534 when the runner is root, else None (its own).
    outside_uid: int | None
    outside_gid: int | None
    #: Host paths bound read-only at the same path, and `(target, link)` symlinks at the top level.
    read_only: tuple[str, ...]
    links: tuple[tuple[str, str], ...]
    #: util-linux `setpriv`, used for the uid drop when present (exec'd in the same process, it spawns
    #: ~1.5 ms faster than Python's own setuid in the child); None → the child drops by itself.
    setpriv: str | None = None
    network_policy: str = NETWORK_POLICY
    #: The compiled seccomp program (`engine/run/syscall_filter.py`); None where libseccomp is missing.
    seccomp: bytes | None = field(default=None, repr=False)
    #: Where each sandbox gets a memory cgroup (`engine/run/cgroup.py`); None where the host gives none.
    cgroups: CgroupHost | None = None

    @property
    def backend(self) -> str:
        """The confinement word recorded in each arm's run configuration: the backend's path."""
        return self.bwrap

    def owner(self) -> tuple[int, int] | None:
        """Who must own what the sandbox writes, when that is not the runner itself."""
        if self.outside_uid is None or self.outside_gid is None:
            return None
        return self.outside_uid, self.outside_gid


@dataclass(frozen=True, slots=True)
class Unconfined:
    """A host that cannot confine runs, and why."""

    reason: str


class Stop(StrEnum):
    """Why the sandbox ended."""

    EXITED = "exited"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    #: The sandbox's processes held more than `Limits.memory`.
    MEMORY = "memory"
    #: The run's files took more than `Limits.disk` (or `Limits.files`, or went too deep).
    DISK = "disk"


@dataclass(frozen=True, slots=True)
class Launch:
    """One sandboxed command: the run directory (read-only inside, same path), its writable parts, extra
    read-only paths, doors as `(port inside, socket path)`, the environment (the only one it gets)."""

    root: Path
    command: tuple[str, ...]
    cwd: Path
    stdout: Path
    stderr: Path
    home: Path
    writable: tuple[Path, ...] = ()
    read_only: tuple[Path, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    doors: tuple[tuple[int, Path], ...] = ()
    deadline_seconds: float = 300.0
    limits: Limits = field(default_factory=Limits)


@dataclass(frozen=True, slots=True)
class Ended:
    """How a sandbox ended. `status` is the bridge's report: `exit <code>`, `signal <n>`, `nostart <why>`
    (the agent could not be executed), `broken <why>` (the bridge could not start), or None when the
    sandbox never got that far or was killed first (bubblewrap's own message is then in `stderr`).
    `memory` is what the sandbox held when `Stop.MEMORY` stopped it; `disk` why `Stop.DISK` did."""

    stop: Stop
    seconds: float
    status: str | None
    stdout: bytes
    stderr: bytes
    memory: int | None = None
    disk: str | None = None

    @property
    def exit_code(self) -> int | None:
        word, _, value = (self.status or "").partition(" ")
        return int(value) if word == "exit" else None

    @property
    def signal(self) -> int | None:
        """The signal that ended the agent's own process, if one did."""
        word, _, value = (self.status or "").partition(" ")
        return int(value) if word == "signal" else None

    @property
    def agent_started(self) -> bool:
        return self.exit_code is not None or self.signal is not None


# --------------------------------------------------------------------------------------------------
# The host's shape


def host_shape(bwrap: str | None = None) -> Confinement | Unconfined:
    """What this host offers a sandbox, without starting one (`engine/confinement.probe` proves it)."""
    if not sys.platform.startswith("linux"):
        return Unconfined(f"no sandbox backend on {sys.platform}")
    candidates = (bwrap,) if bwrap is not None else BWRAP_PATHS
    found = next((path for path in candidates if os.access(path, os.X_OK)), None)
    if found is None:
        return Unconfined(f"{candidates[0]} is not installed")
    read_only = [path for path in _SYSTEM_DIRS if os.path.isdir(path)]
    links: list[tuple[str, str]] = []
    for path in _TOP_LINKS:
        if os.path.islink(path):
            links.append((os.readlink(path), path))
        elif os.path.isdir(path):
            read_only.append(path)
    read_only += [path for path in _ETC_FILES if os.path.lexists(path)]
    python = next((path for path in _PYTHON_PATHS if os.access(path, os.X_OK)), None)
    if python is None:
        python = os.path.realpath(sys.executable)
        prefix = os.path.realpath(sys.base_prefix)
        if not _under(python, read_only):
            read_only.append(prefix)
    root = os.geteuid() == 0
    setpriv = next((path for path in _SETPRIV_PATHS if os.access(path, os.X_OK)), None) if root else None
    return Confinement(
        bwrap=found,
        python=python,
        setpriv=setpriv,
        outside_uid=SANDBOX_UID if root else None,
        outside_gid=SANDBOX_GID if root else None,
        read_only=tuple(read_only),
        links=tuple(links),
        seccomp=syscall_filter.compiled(),
        cgroups=find_host(),
    )


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


# --------------------------------------------------------------------------------------------------
# bubblewrap's command line


@cache
def bridge_source() -> str:
    """The bridge's source, passed to the interpreter with `-c` (nothing to make readable inside)."""
    return importlib.resources.files("eval_runner.engine.run").joinpath("bridge.py").read_text(encoding="utf-8")


def drop_prefix(confinement: Confinement) -> list[str]:
    """The command prefix that drops a root runner to the sandbox's uid (setpriv), if that is the way."""
    owner = confinement.owner()
    if owner is None or confinement.setpriv is None:
        return []
    uid, gid = owner
    return [confinement.setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]


def spawn_identity(confinement: Confinement) -> dict[str, Any]:
    """The same drop done by the spawning child itself, when there is no setpriv."""
    owner = confinement.owner()
    if owner is None or confinement.setpriv is not None:
        return {}
    return {"user": owner[0], "group": owner[1], "extra_groups": []}


def options_file(confinement: Confinement, launch: Launch, info_fd: int, passed: list[int]) -> int:
    """bubblewrap's options in a memfd (`--args FD`): the environment, which holds the run's door token,
    never appears in a command line another host process could read. Every descriptor made here is
    appended to `passed`."""

    def data_fd(content: bytes) -> str:
        fd = _memfd(content)
        passed.append(fd)
        return str(fd)

    def data(content: str) -> str:
        return data_fd(content.encode())

    ns = str(SANDBOX_UID)
    options = ["--unshare-all", "--unshare-user", "--uid", ns, "--gid", str(SANDBOX_GID), "--disable-userns"]
    options += ["--hostname", SANDBOX_USER, "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    options += ["--as-pid-1", "--clearenv"]
    if confinement.seccomp is not None:
        options += ["--seccomp", data_fd(confinement.seccomp)]
    for path in confinement.read_only:
        options += ["--ro-bind-try", path, path]
    for target, link in confinement.links:
        options += ["--symlink", target, link]
    passwd = f"{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_GID}:{SANDBOX_USER}:{launch.home}:/bin/sh\n"
    options += ["--ro-bind-data", data(passwd), "/etc/passwd"]
    options += ["--ro-bind-data", data(f"{SANDBOX_USER}:x:{SANDBOX_GID}:\n"), "/etc/group"]
    options += ["--ro-bind-data", data("127.0.0.1\tlocalhost\n::1\tlocalhost\n"), "/etc/hosts"]
    options += ["--dev", "/dev", "--remount-ro", "/dev", "--proc", "/proc"]
    # Extra read-only paths before the run directory, so a wide one can never cover its writable parts.
    for extra in launch.read_only:
        options += ["--ro-bind", str(extra), str(extra)]
    options += ["--ro-bind", str(launch.root), str(launch.root)]
    for writable in launch.writable:
        options += ["--bind", str(writable), str(writable)]
    options += ["--remount-ro", "/", "--chdir", str(launch.cwd), "--info-fd", str(info_fd)]
    for key, value in launch.env:
        options += ["--setenv", key, value]
    args_fd = _memfd(b"".join(option.encode() + b"\0" for option in options))
    passed.append(args_fd)
    return args_fd


def _memfd(content: bytes) -> int:
    fd = os.memfd_create("eval-runner", os.MFD_CLOEXEC)
    view = memoryview(content)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
