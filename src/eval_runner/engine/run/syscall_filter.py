"""The seccomp filter every sandbox runs under: the system calls an agent has no business making, refused.

bubblewrap installs a compiled BPF program (`--seccomp FD`) on the sandbox before it starts the bridge,
so the filter holds for the bridge, the agent and everything the agent starts. It allows every call but
a short list that is refused with EPERM (a program that probes for them keeps running):

* `ptrace`, `process_vm_readv`, `process_vm_writev`, `pidfd_getfd`, `kcmp`: reading or steering another
  process of the sandbox, the bridge (pid 1) included, which holds none of the agent's limits;
* `shmget`: System V shared memory outlives every process that touched it and is in no process's resident
  set, so a memory budget measured per process would not see it (POSIX shm and memfds are counted);
* `bpf`, `perf_event_open`, `userfaultfd`, `io_uring_setup`/`_enter`/`_register`, `keyctl`, `add_key`,
  `request_key`: kernel attack surface no agent needs.

Calls of another architecture (32-bit `int 0x80` on x86_64) kill the process, libseccomp's default for a
foreign ABI. libseccomp compiles the program (through `pyseccomp`, a ctypes binding of the C library);
on a host without libseccomp there is no filter, and `Confinement.seccomp` is None so `check` can say so.
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
