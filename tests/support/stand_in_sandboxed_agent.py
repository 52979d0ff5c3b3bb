#!/usr/bin/python3 -IS
"""A stand-in agent for the sandbox and run tests: it obeys the child contract's command line and does
what `OA_EVAL_ACT` says, from inside the sandbox, reporting on stdout (one JSON document, or words).

It runs under the host's /usr/bin/python3 with the standard library only, as an agent would.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable


def _errname(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, str(exc))


def _environment() -> dict[str, str]:
    """Exactly what the process was given (Python's own `os.environ` may gain `LC_CTYPE`)."""
    with open("/proc/self/environ", "rb") as file:
        block = file.read()
    pairs = (entry.decode().partition("=") for entry in block.split(b"\0") if entry)
    return {key: value for key, _, value in pairs}


def _door(path: str, base: str = "CODER_DOOR_URL", key: str = "CODER_DOOR_KEY") -> str:
    request = urllib.request.Request(
        os.environ[base] + path, headers={"Authorization": "Bearer " + os.environ[key]}, method="POST", data=b"{}"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return f"{answer.status} {answer.read().decode()}"
    except urllib.error.HTTPError as exc:
        return f"{exc.code} {exc.read().decode()}"


def _report(value: object) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


def _tree(top: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for directory, _, names in os.walk(top):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as file:
                found[os.path.relpath(path, top)] = file.read().decode()
    return found


def contract() -> None:
    stdin = sys.stdin.buffer.read()
    guidance = os.environ.get("CODER_GUIDANCE")
    _report(
        {
            "openagents": _tree(os.environ["OPENAGENTS_HOME"]),
            "fixtures": _tree(os.getcwd()),
            "guidance": open(guidance).read() if guidance else None,  # noqa: SIM115
            "argv": sys.argv[1:],
            "cwd": os.getcwd(),
            "env": _environment(),
            "stdin": stdin.decode(),
            "uid": os.getuid(),
            "gid": os.getgid(),
            "prompt": open(sys.argv[2]).read(),  # noqa: SIM115
        }
    )
    print(json.dumps({"outcome": "completed", "cost_usd": 0.25}))


def writes() -> None:
    root = os.path.dirname(sys.argv[2])
    home = os.environ["HOME"]
    targets = {
        "cwd": os.path.join(os.getcwd(), "w"),
        "out": os.path.join(root, "out", "w"),
        "tmp": os.path.join(os.environ["TMPDIR"], "w"),
        "openagents": os.path.join(os.environ["OPENAGENTS_HOME"], "w"),
        "root": os.path.join(root, "w"),
        "prompt": sys.argv[2],
        "home": os.path.join(home, "w"),
        "slash": "/w",
        "slash_tmp": "/tmp/w",
        "usr": "/usr/w",
        "etc": "/etc/w",
        "dev": "/dev/w",
        "dev_shm": "/dev/shm/w",
        "proc": "/proc/w",
    }
    result: dict[str, str] = {}
    for name, path in targets.items():
        try:
            with open(path, "a") as file:
                file.write("x")
            result[name] = "ok"
        except OSError as exc:
            result[name] = _errname(exc)
    result["dev_null"] = "ok" if open("/dev/null", "w").write("x") == 1 else "no"  # noqa: SIM115
    _report(result)


def connects() -> None:
    result: dict[str, str] = {}
    for target in os.environ["OA_EVAL_TARGETS"].split(","):
        host, _, port = target.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=5) as connection:
                connection.sendall(b"GET / HTTP/1.0\r\n\r\n")
                result[target] = "answered"
        except OSError as exc:
            result[target] = _errname(exc) if exc.errno else type(exc).__name__
    result["door"] = _door("/v1/ping")
    with open("/proc/net/dev") as file:
        result["links"] = " ".join(line.split(":")[0].strip() for line in file.read().splitlines()[2:])
    _report(result)


def escapes() -> None:
    result: dict[str, int] = {}
    commands = {
        "remount_rw": "mount -o remount,rw / 2>/dev/null",
        "remount_bind_rw": "mount -o remount,bind,rw / 2>/dev/null",
        "mount_tmpfs": "mount -t tmpfs none /tmp 2>/dev/null",
        "unshare_user": "unshare -U true 2>/dev/null",
        "unshare_user_map_root": "unshare -Ur true 2>/dev/null",
        "chroot": "chroot / true 2>/dev/null",
    }
    for name, command in commands.items():
        result[name] = os.waitstatus_to_exitcode(os.system(command))
    with open("/proc/self/status") as file:
        status = dict(line.split(":\t", 1) for line in file.read().splitlines() if ":\t" in line)
    _report(
        {
            "exit": result,
            "cap_eff": status["CapEff"],
            "cap_bnd": status["CapBnd"],
            "no_new_privs": status["NoNewPrivs"],
            "uid": os.getuid(),
        }
    )


def reads() -> None:
    result: dict[str, str] = {}
    for path in os.environ["OA_EVAL_PATHS"].split(","):
        try:
            with open(path, "rb") as file:
                file.read()
            result[path] = "read"
        except OSError as exc:
            result[path] = _errname(exc)
    listed: dict[str, list[str] | str] = {}
    for directory in ("/", "/root", "/home", "/work", "/etc", "/tmp"):
        try:
            listed[directory] = sorted(os.listdir(directory))
        except OSError as exc:
            listed[directory] = _errname(exc)
    _report({"read": result, "listed": listed})


def fork_bomb() -> None:
    """`while (1) fork();` in every process; the first refusal is reported once."""
    limited = False
    while True:
        try:
            os.fork()
        except OSError as exc:
            if not limited and exc.errno == errno.EAGAIN:
                limited = True
                os.write(1, b"limited\n")


def native_hog() -> None:
    """A C-style hog: malloc 64 MiB at a time and touch it, never checking for NULL."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    got = 0
    while True:
        block = libc.malloc(64 << 20)
        ctypes.memset(block or 0, 1, 64 << 20)
        got += 64
        os.write(1, f"{got}\n".encode())


def python_hog() -> None:
    """One allocation of OA_EVAL_BYTES, zero-filled (so touched), then held until the runner ends it; a
    refusal is handled by exiting."""
    try:
        hog = bytearray(int(os.environ["OA_EVAL_BYTES"]))
    except MemoryError:
        print("MemoryError")
        sys.exit(1)
    print("allocated", len(hog), flush=True)
    while True:
        signal.pause()


def _touch_steps(total: int, step: int) -> list[bytes]:
    """Memory touched `step` bytes at a time up to `total` (or until refused), reporting the MiB held
    after each step."""
    held: list[bytes] = []
    got = 0
    try:
        while got < total:
            held.append(b"\xa5" * step)
            got += step
            os.write(1, f"{got >> 20}\n".encode())
    except MemoryError:
        os.write(1, b"MemoryError\n")
    return held


def step_hog() -> None:
    """A hog that will not be told: it touches OA_EVAL_STEP bytes at a time up to OA_EVAL_BYTES (without
    end when unset) and holds what it got, noting SIGTERM and going on. With a door, it first leaves a
    TERM-proof child in a session of its own and says /ready."""

    def noted(_signum: int, _frame: object) -> None:
        os.write(1, b"term\n")

    signal.signal(signal.SIGTERM, noted)
    if "CODER_DOOR_URL" in os.environ:
        child = _marked_child()
        _door(f"/ready?child={child}")
    held = _touch_steps(int(os.environ.get("OA_EVAL_BYTES", 1 << 62)), int(os.environ["OA_EVAL_STEP"]))
    while held:
        signal.pause()


def modest() -> None:
    """Touch OA_EVAL_BYTES in 4 MiB steps, hold it OA_EVAL_HOLD seconds (the runner measures meanwhile),
    then exit."""
    held = _touch_steps(int(os.environ["OA_EVAL_BYTES"]), 4 << 20)
    time.sleep(float(os.environ["OA_EVAL_HOLD"]))
    print("done", len(held))


def split_hog() -> None:
    """OA_EVAL_PROCESSES orphans (their parents exit, so pid 1 inherits them), each touching and holding
    OA_EVAL_BYTES: every process stays under a budget the sum passes."""
    for _ in range(int(os.environ["OA_EVAL_PROCESSES"])):
        if os.fork() == 0:
            if os.fork() == 0:
                held = b"\xa5" * int(os.environ["OA_EVAL_BYTES"])
                os.write(1, f"holding {len(held) >> 20}\n".encode())
                while True:
                    signal.pause()
            os._exit(0)
        os.wait()
    while True:
        signal.pause()


def _marked_child() -> int:
    """A process that ignores SIGTERM and leaves the agent's session, so only the sandbox can end it."""
    pid = os.fork()
    if pid == 0:
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            signal.pause()
    return pid


def stubborn() -> None:
    """Start a TERM-proof child, say so through the door, then note SIGTERM and keep going."""

    def noted(_signum: int, _frame: object) -> None:
        os.write(1, b"term\n")

    signal.signal(signal.SIGTERM, noted)
    child = _marked_child()
    _door(f"/ready?child={child}")
    while True:
        signal.pause()


def polite() -> None:
    """Say so through the door, then wait; end at once on SIGTERM."""

    def leave(_signum: int, _frame: object) -> None:
        os.write(1, b"term\n")
        os._exit(0)

    signal.signal(signal.SIGTERM, leave)
    _door("/ready")
    while True:
        signal.pause()


def files() -> None:
    os.makedirs("sub/deeper")
    with open("sub/deeper/new.txt", "w") as file:
        file.write("new")
    with open("big.bin", "wb") as file:
        file.write(b"b" * ((1 << 20) + 1))
    with open("exactly.bin", "wb") as file:
        file.write(b"e" * (1 << 20))
    with open("changed.txt", "w") as file:
        file.write("changed")
    os.symlink("/etc/shadow", "shadow-link")
    os.symlink("sub", "dir-link")
    os.mkfifo("fifo")
    print("made")


def leak() -> None:
    key = os.environ["CODER_DOOR_KEY"]
    print(json.dumps({"outcome": "completed", "said": key}))
    sys.stderr.write(f"the key is {key}\n")
    with open("leaked.txt", "w") as file:
        file.write(f"key={key}\n")
    with open(f"named-{key}.txt", "w") as file:
        file.write("name")
    with open(sys.argv[4], "w") as file:
        file.write(json.dumps({"type": "session", "key": key}) + "\n")


def swap_outputs() -> None:
    """Replace the output files with links to host files, as a hostile agent would."""
    out = os.path.dirname(sys.argv[4])
    print("before the swap")
    os.unlink(os.path.join(out, "stdout.jsonl"))
    os.symlink("/etc/shadow", os.path.join(out, "stdout.jsonl"))
    os.symlink("/etc/shadow", sys.argv[4])
    os.symlink("/etc/shadow", os.path.join(os.getcwd(), "trajectory-copy"))


def crash() -> None:
    print("crashing", flush=True)
    os.kill(os.getpid(), signal.SIGSEGV)


def exits() -> None:
    print(json.dumps({"outcome": "failed", "cost_usd": 1.5}))
    print(json.dumps({"note": "no outcome here", "cost_usd": 9}))
    sys.exit(3)


def doors() -> None:
    _report(
        {
            "coder": _door("/v1/responses"),
            "decision": _door("/v1/decide", "TYPESAFE_BASE_URL", "TYPESAFE_API_KEY"),
        }
    )


def noop() -> None:
    pass


def ptrace_bridge() -> None:
    """Try to take over pid 1 (the bridge): ptrace it, read its memory, read it through process_vm_readv;
    and try System V shared memory, which no process's resident set would show."""
    libc = ctypes.CDLL(None, use_errno=True)

    def call(result: int) -> str:
        return "ok" if result >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")

    found = {"seize": call(libc.ptrace(0x4206, 1, None, None))}  # PTRACE_SEIZE
    try:
        with open("/proc/1/mem", "rb") as file:
            file.read(1)
        found["mem"] = "ok"
    except OSError as exc:
        found["mem"] = _errname(exc)
    buffer = ctypes.create_string_buffer(8)
    local = (ctypes.c_void_p * 2)(ctypes.cast(buffer, ctypes.c_void_p), 8)
    remote = (ctypes.c_void_p * 2)(0x400000, 8)
    found["vm"] = call(libc.process_vm_readv(1, local, 1, remote, 1, 0))
    found["shm"] = call(libc.shmget(0, 1 << 20, 0o1600))  # IPC_PRIVATE, IPC_CREAT | 0600
    _report(found)


#: A file name and a link target that are not UTF-8 (surrogate-escaped on the way in, bytes on disk).
ODD_NAME = b"odd-\xff\xfe name.txt"
ODD_LINK = b"link-\xe9"
ODD_TARGET = b"target-\xc3(.txt"


def non_utf8_name() -> None:
    """Created names that are not UTF-8, beside an ordinary answer."""
    with open(ODD_NAME, "wb") as file:
        file.write(b"odd")
    os.symlink(ODD_TARGET, ODD_LINK)
    with open("answer.md", "w") as file:
        file.write("answer")
    print("made")


def _chain(top: str, depth: int, leaf: str) -> None:
    """`depth` directories named `dd`, one in another, under `top`, with `leaf` at the bottom: made through
    descriptors, as the whole path is longer than PATH_MAX."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("dd", dir_fd=fd)
        inner = os.open("dd", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    leaf_fd = os.open(leaf, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(leaf_fd, b"deep")
    os.close(leaf_fd)
    os.close(fd)


def deep_chain() -> None:
    """OA_EVAL_DEPTH nested directories in the workspace and in TMPDIR, a file at the bottom of each, and a
    directory it takes every permission from (mode 000) holding a file."""
    depth = int(os.environ.get("OA_EVAL_DEPTH", "3000"))
    _chain(".", depth, "deep.txt")
    _chain(os.environ["TMPDIR"], depth, "deep.txt")
    os.makedirs("locked/inner")
    with open("locked/inner/kept.txt", "w") as file:
        file.write("kept")
    os.chmod("locked/inner", 0)
    os.chmod("locked", 0)
    print("made")


def link_answer() -> None:
    """`answer.md` as a link to OA_EVAL_LINK (a regular file when it is empty), beside `inside.md` and a
    directory link `via -> /etc`."""
    with open("inside.md", "w") as file:
        file.write("inside")
    os.symlink("/etc", "via")
    target = os.environ.get("OA_EVAL_LINK", "")
    if target:
        os.symlink(target, "answer.md")
    else:
        with open("answer.md", "w") as file:
            file.write("answer")
    print("made")


ACTS: dict[str, Callable[[], None]] = {
    "contract": contract,
    "writes": writes,
    "connects": connects,
    "escapes": escapes,
    "reads": reads,
    "fork-bomb": fork_bomb,
    "native-hog": native_hog,
    "python-hog": python_hog,
    "step-hog": step_hog,
    "modest": modest,
    "split-hog": split_hog,
    "stubborn": stubborn,
    "polite": polite,
    "files": files,
    "leak": leak,
    "swap-outputs": swap_outputs,
    "crash": crash,
    "exits": exits,
    "doors": doors,
    "noop": noop,
    "ptrace-bridge": ptrace_bridge,
    "non-utf8-name": non_utf8_name,
    "deep-chain": deep_chain,
    "link-answer": link_answer,
}

if __name__ == "__main__":
    ACTS[os.environ.get("OA_EVAL_ACT", "noop")]()
