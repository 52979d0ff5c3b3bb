"""Starting one sandbox and waiting for its end: the only place a sandbox starts.

`run_confined` starts bubblewrap with the bridge as pid 1 (`engine/run/sandbox.py` builds the command line),
places pid 1 in its memory cgroup where there is one, then waits for the agent's exit, the deadline, a
cancel, or a budget passed (memory, disk); a stop is SIGTERM through the bridge, the grace, then SIGKILL.
It returns only once every process of the sandbox is gone, and a caller that gives up on it gets the
sandbox SIGKILLed first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import select
import signal
import time
from pathlib import Path

from eval_runner.engine.run import disk_watch, memory_watch
from eval_runner.engine.run.cgroup import RunCgroup
from eval_runner.engine.run.leftovers import owner_mark
from eval_runner.engine.run.sandbox import (
    CEILING,
    GRACE_SECONDS,
    OVERDUE_MARGIN_SECONDS,
    Confinement,
    Ended,
    Launch,
    Limits,
    Stop,
    bridge_source,
    drop_prefix,
    options_file,
    spawn_identity,
)

#: How long a stopped sandbox may take to be gone before it is SIGKILLed again.
_GONE_SECONDS = 5.0


async def run_confined(
    confinement: Confinement, launch: Launch, *, cancel: asyncio.Event, grace: float = GRACE_SECONDS
) -> Ended:
    """Start `launch` in a sandbox and wait for its end: the agent's exit, the deadline, or `cancel`.
    A stop sends SIGTERM to everything inside (through the bridge), waits `grace` seconds, then
    SIGKILLs the sandbox. Returns once no process of it is left; a caller cancelling this coroutine
    gets the sandbox SIGKILLed before the cancellation goes on."""
    with contextlib.ExitStack() as held:

        def hold(fd: int) -> int:
            held.callback(os.close, fd)
            return fd

        status_r, status_w = os.pipe2(os.O_CLOEXEC)
        hold(status_r)
        # The sandbox's lifeline: only this process ever holds the write end, so its end (however this
        # process ends) is an end of file the bridge sees, and the bridge then ends the sandbox.
        lifeline_r, lifeline_w = os.pipe2(os.O_CLOEXEC)
        hold(lifeline_w)
        info_r, info_w = os.pipe2(os.O_CLOEXEC)
        cgroup = _cgroup(confinement, launch.limits)
        go_r = go_w = None
        if cgroup is not None:
            held.callback(cgroup.remove)  # after the sandbox is gone: this block ends only then
            # The bridge waits for a byte here before it starts the agent: the runner first moves it into
            # the cgroup (a v1 move waits for an RCU grace period, ~3 ms, while the bridge starts up).
            go_r, go_w = os.pipe2(os.O_CLOEXEC)
        pid1 = Pid1(info_r, cgroup, go_w)
        held.callback(pid1.close)
        stdout = hold(_open_output(launch.stdout))
        stderr = hold(_open_output(launch.stderr))
        # Descriptors only the sandbox keeps: closed here as soon as it has them.
        with contextlib.ExitStack() as passed_on:
            passed = [status_w, info_w, lifeline_r]
            if go_r is not None:
                passed.append(go_r)

            def close_passed() -> None:
                for fd in passed:
                    os.close(fd)

            passed_on.callback(close_passed)
            args_fd = options_file(confinement, launch, info_w, passed)
            argv = [
                *drop_prefix(confinement),
                confinement.bwrap,
                "--args",
                str(args_fd),
                "--",
                confinement.python,
                "-I",
                "-S",
                "-c",
                bridge_source(),
                str(status_w),
                *launch.limits.bridge_options(launch.deadline_seconds),
                *(f"door:{port}={path}" for port, path in launch.doors),
                f"lifeline:{lifeline_r}",
                f"overdue:{math.ceil(launch.deadline_seconds + grace) + OVERDUE_MARGIN_SECONDS}",
                f"owner:{owner_mark()}",
                *([] if go_r is None else [f"go:{go_r}"]),
                "--",
                *launch.command,
            ]
            started = time.monotonic()
            try:
                process = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=stderr,
                    pass_fds=passed,
                    start_new_session=True,
                    env={},
                    **spawn_identity(confinement),
                )
            except OSError as exc:
                os.write(stderr, f"eval-runner: cannot start {confinement.bwrap}: {exc.strerror}\n".encode())
                return Ended(Stop.EXITED, 0.0, None, b"", _read_back(stderr, launch.limits))
        pid1.watch()
        stop, memory, disk = await _wait_or_stop(process, pid1, launch, cancel, grace)
        seconds = time.monotonic() - started
        await pid1.gone()
        return Ended(
            stop,
            seconds,
            _read_status(status_r),
            _read_back(stdout, launch.limits),
            _read_back(stderr, launch.limits),
            memory,
            disk,
        )


async def _wait_or_stop(
    process: asyncio.subprocess.Process, pid1: Pid1, launch: Launch, cancel: asyncio.Event, grace: float
) -> tuple[Stop, int | None, str | None]:
    """Wait for the sandbox's exit, the deadline, a cancel, its memory or its files over budget; stop it
    for all but the first. Returns why, what it held when the memory was why, and what the disk found."""
    exited = asyncio.ensure_future(process.wait())
    cancelled = asyncio.ensure_future(cancel.wait())
    limits = launch.limits
    budget = limits.memory
    over = asyncio.ensure_future(memory_watch.exceeded(pid1.live_pid, budget, pid1.held))
    disk = asyncio.ensure_future(
        disk_watch.exceeded(pid1.live_pid, launch.writable, budget=limits.disk, files=limits.files)
    )
    ceiling: asyncio.Future[int] | None = None
    try:
        done, _ = await asyncio.wait(
            {exited, cancelled, over, disk}, timeout=launch.deadline_seconds, return_when=asyncio.FIRST_COMPLETED
        )
        if over in done:
            stop = Stop.MEMORY
        elif disk in done:
            stop = Stop.DISK
        else:
            stop = Stop.EXITED if exited in done else Stop.CANCELLED if cancelled in done else Stop.TIMEOUT
        if stop is not Stop.EXITED:
            if not pid1.send(signal.SIGTERM):
                _kill_group(process, signal.SIGTERM)
            # The grace is for ending well, not for growing: far over the budget ends it at once.
            ceiling = asyncio.ensure_future(memory_watch.exceeded(pid1.live_pid, int(budget * CEILING), pid1.held))
            done, _ = await asyncio.wait({exited, ceiling}, timeout=grace, return_when=asyncio.FIRST_COMPLETED)
            if exited not in done:
                _kill(process, pid1)
                await exited
        if stop is Stop.EXITED and pid1.cgroup is not None and pid1.cgroup.oom_kills():
            # The kernel stopped a process at the cgroup's ceiling between two of our measurements.
            return Stop.MEMORY, int(budget * CEILING), None
        found = disk.result().detail(limits.disk, limits.files) if stop is Stop.DISK else None
        return stop, over.result() if stop is Stop.MEMORY else None, found
    except BaseException:
        # Our caller gave up on the run (or something broke): the sandbox must not outlive this call.
        _kill(process, pid1)
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(exited), _GONE_SECONDS)
            await pid1.gone()
        raise
    finally:
        for waiting in (cancelled, over, disk, ceiling):
            if waiting is not None:
                waiting.cancel()


def _kill(process: asyncio.subprocess.Process, pid1: Pid1) -> None:
    """SIGKILL the sandbox: bubblewrap's group outside and pid 1 inside (whose end ends the namespace)."""
    _kill_group(process, signal.SIGKILL)
    pid1.send(signal.SIGKILL)


def _kill_group(process: asyncio.subprocess.Process, signum: int) -> bool:
    if process.returncode is not None:
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)
    return True


class Pid1:
    """The sandbox's pid 1 (the bridge), learnt from bubblewrap's `--info-fd` and held as a pidfd, so
    signals reach the right process and the runner can wait until the PID namespace is gone. With a
    cgroup, pid 1 is moved into it (in a thread) as soon as it is known, then told to go on; a cgroup that
    cannot take it is dropped, and the budget falls back to counting resident memory."""

    def __init__(self, info_fd: int, cgroup: RunCgroup | None = None, release_fd: int | None = None) -> None:
        self._info = info_fd
        self._text = b""
        self._watching = False
        self.pidfd: int | None = None
        self.pid: int | None = None
        self._exit = select.poll()
        self.cgroup = cgroup
        self._release = release_fd

    def watch(self) -> None:
        os.set_blocking(self._info, False)
        asyncio.get_running_loop().add_reader(self._info, self._read)
        self._watching = True

    def _read(self) -> None:
        try:
            chunk = os.read(self._info, 4096)
        except BlockingIOError:
            return
        self._text += chunk
        try:
            pid = json.loads(self._text)["child-pid"]
        except (ValueError, KeyError, TypeError):
            if chunk:
                return
            pid = None
        self._unwatch()
        if isinstance(pid, int) and self.pidfd is None:
            with contextlib.suppress(ProcessLookupError):
                self.pidfd = os.pidfd_open(pid)
                self.pid = pid
                self._exit.register(self.pidfd, select.POLLIN)
        release, self._release = self._release, None
        if release is not None:  # the thread owns it now: it writes the word and closes it
            asyncio.get_running_loop().run_in_executor(None, self._place, pid, release)

    def _place(self, pid: object, release: int) -> None:
        try:
            if self.cgroup is not None and isinstance(pid, int):
                try:
                    self.cgroup.place(pid)
                except OSError:
                    self.cgroup = None
            with contextlib.suppress(OSError):
                os.write(release, b"\n")
        finally:
            os.close(release)

    def held(self, pid: int) -> int:
        """What the sandbox holds toward its memory budget: its cgroup's count where it has one, else the
        resident memory and memfds of pid 1 and its descendants."""
        if self.cgroup is not None and (counted := self.cgroup.held()) is not None:
            return counted
        return memory_watch.resident(pid)

    def live_pid(self) -> int | None:
        """Pid 1's host pid while it has not exited (so the number names no other process), else None."""
        if self.pidfd is None or self._exit.poll(0):
            return None
        return self.pid

    def _unwatch(self) -> None:
        if self._watching:
            asyncio.get_running_loop().remove_reader(self._info)
            self._watching = False

    def send(self, signum: int) -> bool:
        if self._watching:
            self._read()
        if self.pidfd is None:
            return False
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.pidfd, signum)
        return True

    async def gone(self) -> None:
        """Wait until pid 1 has exited (the kernel has then killed everything else inside)."""
        if self._watching:
            self._read()
        if self.pidfd is None:
            return
        loop = asyncio.get_running_loop()
        for attempt in range(2):
            done: asyncio.Future[None] = loop.create_future()

            def readable(done: asyncio.Future[None] = done) -> None:
                if not done.done():
                    done.set_result(None)

            loop.add_reader(self.pidfd, readable)
            try:
                await asyncio.wait_for(done, _GONE_SECONDS)
                return
            except TimeoutError:
                if attempt == 0:
                    self.send(signal.SIGKILL)
            finally:
                loop.remove_reader(self.pidfd)

    def close(self) -> None:
        self._unwatch()
        os.close(self._info)
        if self._release is not None:  # never handed over: the bridge then reads an end of file
            os.close(self._release)
            self._release = None
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


def _cgroup(confinement: Confinement, limits: Limits) -> RunCgroup | None:
    """The sandbox's own memory cgroup, its hard ceiling at `CEILING` × the budget, where the host has
    them; None otherwise (or when one cannot be made now: the budget then counts resident memory)."""
    if confinement.cgroups is None:
        return None
    try:
        return RunCgroup.create(confinement.cgroups, int(limits.memory * CEILING))
    except OSError:
        return None


def _open_output(path: Path) -> int:
    """The runner's own descriptor for an output file: what the agent does to the path later (replace
    it with a link, say) never changes what is read back."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def _read_back(fd: int, limits: Limits) -> bytes:
    size = min(os.fstat(fd).st_size, limits.file_size + (1 << 16))
    parts: list[bytes] = []
    offset = 0
    while offset < size:
        chunk = os.pread(fd, min(size - offset, 1 << 20), offset)
        if not chunk:
            break
        parts.append(chunk)
        offset += len(chunk)
    return b"".join(parts)


def _read_status(fd: int) -> str | None:
    os.set_blocking(fd, False)
    text = b""
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 4096):
            text += chunk
    lines = text.decode("utf-8", "replace").splitlines()
    nostart = next((line for line in lines if line.startswith("nostart ")), None)
    return nostart or (lines[-1] if lines else None)
