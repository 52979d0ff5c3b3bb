"""The sandbox's first process: it opens the run's doors inside, starts the agent, and reports how it ended.

The sandbox has no network but its own loopback, so the agent cannot reach the host's door proxies. The
runner bind-mounts each proxy's Unix socket into the sandbox; this bridge listens on `127.0.0.1:<port>`
inside and relays every TCP connection to its socket, so `CODER_DOOR_URL=http://127.0.0.1:<port>` works
for an agent that only speaks HTTP over TCP. It binds every door before the agent exists, so there is no
window in which the agent could find a door closed and nothing waits on a timer.

It is also the sandbox's pid 1 (bubblewrap `--as-pid-1`):
* it forks the agent, sets the run's resource limits in that child only (the bridge's own relays are
  never starved by the agent's open-files or process budget), restores what Python changed at start
  (SIGPIPE and SIGXFSZ ignored, `LC_CTYPE` added by locale coercion), drops the `PWD` bubblewrap adds,
  and closes every inherited descriptor before exec, so the agent gets exactly the runner's environment;
* on SIGTERM from the runner it sends SIGTERM to every other process in the sandbox (`kill(-1)`), which
  is how the runner's "SIGTERM the process group, then SIGKILL" reaches the agent through the PID
  namespace;
* it reaps orphans, and when the agent's own process ends it writes `exit <code>`, `signal <n>` or
  `nostart <why>` to the status descriptor the runner gave it and exits; the kernel then kills whatever
  the agent left behind, because pid 1 is gone.

The sandbox must never outlive its run, whatever happens to the runner, so the bridge ends it on its own:
* when the runner is gone: it holds the read end of a pipe whose only write end the runner holds
  (`lifeline:FD`); end of file there means the runner died, and the bridge SIGKILLs everything inside
  and exits. It also asks the kernel for SIGKILL when bubblewrap (its parent) dies (`PR_SET_PDEATHSIG`,
  set here because bubblewrap's own is cleared by the credential change it makes before exec). A pipe
  has no race: a runner that died before the bridge looked is an end of file at once;
* at the run's deadline plus the grace and a margin (`overdue:SECONDS`, an alarm): the runner stops a
  run at its deadline, so this fires only if the runner could not, and reports `overdue <seconds>`;
* with `go:FD` it starts the agent only after a byte arrives there: the runner moves it into the run's
  memory cgroup first, so everything the agent starts is counted there;
* it is not dumpable (`PR_SET_DUMPABLE 0`): the agent runs as the same uid, so otherwise it could read
  `/proc/1/mem` or ptrace the bridge, which holds none of the agent's limits. (The runner's seccomp
  filter also refuses ptrace and `process_vm_*` to everything in the sandbox.)
It runs as `python3 -I -S -c <this file> STATUS_FD [limit:NAME=SOFT:HARD]... [door:PORT=SOCKET]...
[lifeline:FD] [overdue:SECONDS] [go:FD] [owner:PID:START] -- COMMAND...` (`owner` names the runner
process, for the sweep of leftovers at the next start), so it must stay a single stdlib-only file that
imports nothing that loads `enum` (`socket`, `signal`, `threading`, `ctypes` cost ~2-6 ms each at start;
`_socket`, `_signal`, `_thread`, `_ctypes` cost nothing): the bridge's start-up is on every run's
critical path.
"""

import _ctypes
import _signal  # type: ignore[import-not-found]  # the C module behind `signal`, without `enum`
import _socket
import _thread
import errno
import os
import resource
import sys

_LIMITS = {
    "as": resource.RLIMIT_AS,
    "nproc": resource.RLIMIT_NPROC,
    "nofile": resource.RLIMIT_NOFILE,
    "cpu": resource.RLIMIT_CPU,
    "fsize": resource.RLIMIT_FSIZE,
    "core": resource.RLIMIT_CORE,
}
_CHUNK = 65536
_BACKLOG = 128
_FD_CEILING = 1 << 20
# Exit code when the bridge itself cannot start (a door cannot listen): the status line says why.
_BROKEN = 125
_NOT_STARTED = 127
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
#: Signals only the main thread takes (`_start`).
_QUIET = {_signal.SIGTERM, _signal.SIGALRM}


def main(argv: list[str]) -> None:
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1 :]
    status_fd = int(options[0])
    os.set_inheritable(status_fd, False)
    limits: list[tuple[int, int, int]] = []
    doors: list[tuple[int, str]] = []
    lifeline = overdue = go = None
    for option in options[1:]:
        kind, _, value = option.partition(":")
        name, _, setting = value.partition("=")
        if kind == "limit":
            soft, _, hard = setting.partition(":")
            limits.append((_LIMITS[name], int(soft), int(hard)))
        elif kind == "door":
            doors.append((int(name), setting))
        elif kind == "lifeline":
            lifeline = int(value)
        elif kind == "overdue":
            overdue = int(value)
        elif kind == "go":
            go = int(value)
        elif kind != "owner":
            raise SystemExit(f"eval-runner bridge: unknown option {option!r}")
    environment = _given_environment()  # before `_guard`: a process that is not dumpable cannot read it
    _guard(status_fd, lifeline, overdue)
    try:
        listeners = [(_listen(port), path) for port, path in doors]
    except OSError as exc:
        _report(status_fd, f"broken cannot open a door inside the sandbox: {exc.strerror}")
        os._exit(_BROKEN)
    if go is not None and not _quietly_read(go):
        os._exit(_BROKEN)  # the runner went before it let the agent start
    agent = os.fork()
    if agent == 0:
        _exec_agent(command, limits, status_fd, environment)
    _signal.signal(_signal.SIGTERM, _forward_term)
    _thread.stack_size(256 * 1024)
    for listener, path in listeners:
        _start(_accept, (listener, path))
    status = _reap(agent)
    code = os.waitstatus_to_exitcode(status)
    _report(status_fd, f"exit {code}" if code >= 0 else f"signal {-code}")
    os._exit(code if code >= 0 else 128 - code)


def _listen(port: int) -> _socket.socket:
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", port))
    listener.listen(_BACKLOG)
    return listener


def _guard(status_fd: int, lifeline: int | None, overdue: int | None) -> None:
    """Make sure the sandbox ends without the runner: not dumpable, SIGKILL when bubblewrap dies, everything
    SIGKILLed when the runner's end of the lifeline closes or the run is overdue."""
    prctl = _prctl()
    prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    prctl(_PR_SET_PDEATHSIG, _signal.SIGKILL, 0, 0, 0)
    if overdue is not None:
        _signal.signal(_signal.SIGALRM, lambda _signum, _frame: _end_all(status_fd, f"overdue {overdue}"))
        _signal.alarm(overdue)
    if lifeline is not None:
        _start(_watch_lifeline, (lifeline, status_fd))


def _start(function: object, args: tuple[object, ...]) -> None:
    """Start a thread that never takes SIGTERM or SIGALRM: the kernel may hand a signal for the process
    to any thread that does not block it, and a Python handler only runs in the main thread, which then
    sleeps in `waitpid` until the agent ends; so a SIGTERM a relay thread took was never forwarded and
    the agent sat out the grace until SIGKILL (about one stop in ten). Threads inherit the creating
    thread's mask, so the main thread blocks the two while it starts one."""
    previous = _signal.pthread_sigmask(_signal.SIG_BLOCK, _QUIET)
    try:
        _thread.start_new_thread(function, args)  # type: ignore[call-overload]
    finally:
        _signal.pthread_sigmask(_signal.SIG_SETMASK, previous)


def _prctl() -> _ctypes.CFuncPtr:
    """libc's `prctl`, through `_ctypes` (the `ctypes` package would cost the start-up ~2 ms)."""

    class _Int(_ctypes._SimpleCData):  # type: ignore[type-arg]
        _type_ = "i"

    class _ULong(_ctypes._SimpleCData):  # type: ignore[type-arg]
        _type_ = "L"

    class _Function(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = _Int
        _argtypes_ = (_Int, _ULong, _ULong, _ULong, _ULong)

    return _Function(_ctypes.dlsym(_ctypes.dlopen(None, 0), "prctl"))  # type: ignore[arg-type]  # the program


def _watch_lifeline(lifeline: int, status_fd: int) -> None:
    _quietly_read(lifeline)  # blocks until the runner's end closes: it never writes
    _end_all(status_fd, "orphaned the runner is gone")


def _quietly_read(fd: int) -> bytes:
    try:
        return os.read(fd, 1)
    except OSError:
        return b""


def _end_all(status_fd: int, why: str) -> None:
    """SIGKILL every other process of the sandbox and exit; pid 1's end ends the namespace."""
    _report(status_fd, why)
    _quietly(os.kill, -1, _signal.SIGKILL)
    os._exit(_BROKEN)


def _exec_agent(
    command: list[str], limits: list[tuple[int, int, int]], status_fd: int, environment: dict[bytes, bytes]
) -> None:
    """In the forked child: limits, default signals, no inherited descriptors, then the agent."""
    try:
        os.closerange(3, status_fd)
        os.closerange(status_fd + 1, _FD_CEILING)
        for which, soft, hard in limits:
            resource.setrlimit(which, (soft, hard))
        _signal.signal(_signal.SIGPIPE, _signal.SIG_DFL)
        _signal.signal(_signal.SIGXFSZ, _signal.SIG_DFL)
        os.execve(command[0], command, environment)  # noqa: S606 - the agent's own command line
    except OSError as exc:
        _report(status_fd, f"nostart {command[0]}: {exc.strerror or exc}")
    except BaseException as exc:  # a child must never return into the parent's code
        _report(status_fd, f"nostart {command[0]}: {exc}")
    os._exit(_NOT_STARTED)


def _given_environment() -> dict[bytes, bytes]:
    """The environment the runner set, exactly: Python may have added `LC_CTYPE` to its own at start
    (locale coercion), so read the block the kernel was given instead of `os.environ`; and bubblewrap
    always adds `PWD`, which the runner never sets."""
    fd = os.open("/proc/self/environ", os.O_RDONLY | os.O_CLOEXEC)
    try:
        block = b""
        while chunk := os.read(fd, _CHUNK):
            block += chunk
    finally:
        os.close(fd)
    pairs = (entry.partition(b"=") for entry in block.split(b"\0") if entry)
    return {key: value for key, _, value in pairs if key != b"PWD"}


def _forward_term(_signum: int, _frame: object) -> None:
    _quietly(os.kill, -1, _signal.SIGTERM)


def _reap(agent: int) -> int:
    """Reap every child (orphans land on pid 1) until the agent's own status arrives."""
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == agent:
            return status


def _report(status_fd: int, line: str) -> None:
    _quietly(os.write, status_fd, (line.replace("\n", " ") + "\n").encode("utf-8", "replace"))


def _quietly(call: object, *args: object) -> None:
    """`call(*args)`, ignoring OSError (`contextlib` would cost the start-up its imports)."""
    try:  # noqa: SIM105
        call(*args)  # type: ignore[operator]
    except OSError:
        pass


def _accept(listener: _socket.socket, path: str) -> None:
    while True:
        try:
            fd, _ = listener._accept()  # type: ignore[attr-defined]  # `socket.accept` without `socket`
        except OSError as exc:
            if exc.errno in (errno.EBADF, errno.EINVAL, errno.ENOTSOCK):
                return
            continue
        connection = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM, 0, fd)
        try:
            _thread.start_new_thread(_serve, (connection, path))
        except RuntimeError:
            connection.close()


def _serve(connection: _socket.socket, path: str) -> None:
    """Relay one connection both ways; each side's end of stream is passed on as a half-close."""
    upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        connection.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        upstream.connect(path)
    except OSError:
        connection.close()
        upstream.close()
        return
    pair = _Pair(connection, upstream)
    try:
        _thread.start_new_thread(_pump, (upstream, connection, pair))
    except RuntimeError:
        pair.abort()
        return
    _pump(connection, upstream, pair)


class _Pair:
    """Both sockets of one relayed connection, closed once both directions have ended."""

    def __init__(self, a: _socket.socket, b: _socket.socket) -> None:
        self.sockets = (a, b)
        self.open_directions = 2
        self.lock = _thread.allocate_lock()

    def direction_ended(self) -> None:
        with self.lock:
            self.open_directions -= 1
            last = self.open_directions == 0
        if last:
            for sock in self.sockets:
                sock.close()

    def abort(self) -> None:
        for sock in self.sockets:
            _quietly(sock.shutdown, _socket.SHUT_RDWR)
            sock.close()


def _pump(source: _socket.socket, sink: _socket.socket, pair: _Pair) -> None:
    try:
        while data := source.recv(_CHUNK):
            sink.sendall(data)
        sink.shutdown(_socket.SHUT_WR)
    except OSError:
        # One side broke: end both directions so the other pump stops waiting too.
        for sock in pair.sockets:
            _quietly(sock.shutdown, _socket.SHUT_RDWR)
    pair.direction_ended()


if __name__ == "__main__":
    main(sys.argv[1:])
