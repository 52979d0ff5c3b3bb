"""The seccomp filter every sandbox runs under: the system calls an agent has no business making, refused.

bubblewrap installs the compiled BPF program (`--seccomp FD`) before it starts the bridge, so the filter
holds for the bridge, the agent and everything the agent starts. Every call is allowed but a short list
(reaching into another process, System V shared memory no budget would see, kernel surface no agent
needs), refused with EPERM so a program that probes for them keeps running; the list is in decisions.md
("Sandbox threat model"). libseccomp compiles the program (through `pyseccomp`, a ctypes binding); on a
host without it there is no filter, and `Confinement.seccomp` is None so `check` can say so.
"""

from __future__ import annotations

import errno
import os
from functools import cache

#: System calls refused inside every sandbox (see the module docstring).
REFUSED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "kcmp",
    "shmget",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "keyctl",
    "add_key",
    "request_key",
)


@cache
def compiled() -> bytes | None:
    """The BPF program, compiled once per process; None where libseccomp is not available."""
    try:
        import pyseccomp
    except (ImportError, OSError):
        return None
    try:
        rules = pyseccomp.SyscallFilter(defaction=pyseccomp.ALLOW)
        for name in REFUSED:
            rules.add_rule(pyseccomp.ERRNO(errno.EPERM), name)
        fd = os.memfd_create("eval-runner-seccomp", os.MFD_CLOEXEC)
        with os.fdopen(fd, "w+b") as file:
            rules.export_bpf(file)
            file.flush()
            file.seek(0)
            return file.read()
    except (OSError, RuntimeError, ValueError):
        return None
