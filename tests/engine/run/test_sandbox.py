"""The sandbox itself: the probe, the bridge's relay and report, the process lifetime, and what a host
process can see of a run."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval_runner.engine.run.collect import remove_tree
from eval_runner.engine.run.confined import run_confined
from eval_runner.engine.run.confinement import probe
from eval_runner.engine.run.memory_watch import resident
from eval_runner.engine.run.sandbox import (
    NETWORK_POLICY,
    Confinement,
    Ended,
    Launch,
    Limits,
    Stop,
    Unconfined,
)
from tests.support.paths import REPO
from tests.support.sandboxed_runs import (
    fresh_temp_root,
    host_confinement,
    processes_holding,
    run_act,
    spec_for,
)
from tests.support.stand_in_door_proxy import StandInDoors

SRC = REPO / "src"


@pytest.fixture(scope="session")
def confinement() -> Confinement:
    return host_confinement()


@pytest.fixture
def temp_root() -> Iterator[Path]:
    yield from fresh_temp_root()


def test_the_probe_finds_this_host_confined_in_the_allowlist_shape(confinement: Confinement) -> None:
    assert confinement.backend == confinement.bwrap == "/usr/bin/bwrap"
    assert confinement.network_policy == NETWORK_POLICY == "door-only"
    assert "/" not in confinement.read_only
    assert "/usr" in confinement.read_only
    assert not {"/root", "/home", "/work", "/etc", "/tmp", "/var"} & set(confinement.read_only)
    assert all(os.path.lexists(path) for path in confinement.read_only)
    if os.geteuid() == 0:
        assert confinement.owner() == (65534, 65534)


async def test_a_host_without_bubblewrap_is_unconfined(temp_root: Path) -> None:
    assert await probe(temp_root, bwrap="/nonexistent/bwrap") == Unconfined("/nonexistent/bwrap is not installed")
    assert os.listdir(temp_root) == []


async def test_a_temp_root_the_sandbox_cannot_reach_is_unconfined(temp_root: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs a root runner, which drops to uid 65534")
    private = temp_root / "private"
    private.mkdir(mode=0o700)
    found = await probe(private)
    assert isinstance(found, Unconfined)
    assert found.reason.startswith("bubblewrap is inoperable: bwrap: ")


def _launch(root: Path, command: tuple[str, ...], **changes: object) -> Launch:
    out = root / "out"
    out.mkdir(exist_ok=True)
    if os.geteuid() == 0:
        os.chown(out, 65534, 65534)
    fields: dict[str, object] = {
        "root": root,
        "command": command,
        "cwd": root,
        "stdout": out / "stdout",
        "stderr": out / "stderr",
        "home": root,
        "writable": (out,),
        "deadline_seconds": 30.0,
    }
    fields.update(changes)
    return Launch(**fields)  # type: ignore[arg-type]


async def _run(confinement: Confinement, launch: Launch) -> Ended:
    return await run_confined(confinement, launch, cancel=asyncio.Event())


@pytest.mark.parametrize(
    ("script", "exit_code", "signum"),
    [("exit 0", 0, None), ("exit 7", 7, None), ("kill -SEGV $$", None, signal.SIGSEGV), ("kill -9 $$", None, 9)],
)
async def test_the_bridge_reports_how_the_agents_process_ended(
    confinement: Confinement, temp_root: Path, script: str, exit_code: int | None, signum: int | None
) -> None:
    ended = await _run(confinement, _launch(temp_root, ("/bin/sh", "-c", script)))
    assert (ended.stop, ended.exit_code, ended.signal) == (Stop.EXITED, exit_code, signum)
    assert ended.agent_started


_RELAY = r"""
import hashlib, socket, sys, threading
size = int(sys.argv[1])
def one(index, answers):
    with socket.create_connection(("127.0.0.1", 8500)) as connection:  # no retry: the door is already open
        connection.sendall(bytes([index]) * size)
        connection.shutdown(socket.SHUT_WR)
        received = b"".join(iter(lambda: connection.recv(65536), b""))
    answers[index] = hashlib.sha256(received).hexdigest()
answers = {}
threads = [threading.Thread(target=one, args=(index, answers)) for index in range(6)]
for thread in threads: thread.start()
for thread in threads: thread.join()
print(" ".join(answers[index] for index in range(6)))
"""


async def test_the_bridge_relays_many_connections_both_ways_with_half_close(
    confinement: Confinement, temp_root: Path
) -> None:
    """Each connection sends 3 MiB and half-closes; the door answers everything reversed, after the end."""

    async def reverse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write((await reader.read())[::-1] + b"!")
        await writer.drain()
        writer.close()

    (temp_root / "door").mkdir()
    socket_path = temp_root / "door" / "echo"
    server = await asyncio.start_unix_server(reverse, path=str(socket_path))
    os.chmod(socket_path, 0o666)
    size = 3 << 20
    try:
        launch = _launch(temp_root, (confinement.python, "-I", "-c", _RELAY, str(size)), doors=((8500, socket_path),))
        ended = await _run(confinement, launch)
    finally:
        server.close()
    assert ended.exit_code == 0, ended.stderr
    expected = [hashlib.sha256(bytes([index]) * size + b"!").hexdigest() for index in range(6)]
    assert ended.stdout.decode().split() == expected


async def test_the_door_token_is_on_no_host_command_line_and_in_no_environment_of_ours(
    confinement: Confinement, temp_root: Path
) -> None:
    doors = StandInDoors()
    cancel = asyncio.Event()
    running = asyncio.ensure_future(run_act(spec_for(temp_root, "polite"), confinement, doors=doors, cancel=cancel))
    ready = asyncio.ensure_future(doors.ready.wait())
    await asyncio.wait({ready, running}, return_when=asyncio.FIRST_COMPLETED)
    assert ready.done()
    token = doors.one("coder").token.encode()
    inside = processes_holding(str(temp_root))
    try:
        seen = {pid: _cmdline(pid) for pid in map(int, filter(str.isdigit, os.listdir("/proc")))}
        assert not [pid for pid, cmdline in seen.items() if token in cmdline]
        # bubblewrap itself was started with an empty environment.
        bwrap = [pid for pid in inside if _cmdline(pid).startswith(confinement.bwrap.encode())]
        assert bwrap
        assert all(_environ(pid) == b"" for pid in bwrap)
    finally:
        cancel.set()
        await running


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return file.read()
    except OSError:
        return b""


def _environ(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as file:
            return file.read()
    except OSError:
        return None


_RUNNER = r"""
import asyncio, os, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from eval_runner.engine.run.confined import run_confined
from eval_runner.engine.run.confinement import probe
from eval_runner.engine.run.sandbox import Launch

async def main():
    root = Path(sys.argv[2])
    confinement = await probe(root)
    out = root / "out"
    out.mkdir()
    if confinement.owner():
        os.chown(out, *confinement.owner())
    door = root / "door"
    door.mkdir()
    said = asyncio.Event()
    async def ready(reader, writer):
        said.set()
        writer.close()
    await asyncio.start_unix_server(ready, path=str(door / "ready"))
    os.chmod(door / "ready", 0o666)
    agent = ("/bin/sh", "-c", "python3 -c 'import socket,time;"
             "socket.create_connection((\"127.0.0.1\", 8600));time.sleep(3600)' & sleep 3600")
    launch = Launch(root=root, command=agent, cwd=root, stdout=out / "o", stderr=out / "e", home=root,
                    writable=(out,), doors=((8600, door / "ready"),), deadline_seconds=3600)
    running = asyncio.ensure_future(run_confined(confinement, launch, cancel=asyncio.Event()))
    await asyncio.wait({asyncio.ensure_future(said.wait()), running}, return_when=asyncio.FIRST_COMPLETED)
    print("ready" if said.is_set() else running.result(), flush=True)
    await running

asyncio.run(main())
"""


async def test_a_runner_that_dies_takes_its_sandbox_with_it(temp_root: Path) -> None:
    runner = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _RUNNER, str(SRC), str(temp_root), stdout=asyncio.subprocess.PIPE
    )
    assert runner.stdout is not None
    try:
        assert await runner.stdout.readline() == b"ready\n"
        inside = _descendants(runner.pid)
        assert len(inside) >= 5  # bubblewrap, the bridge, the shell, python, sleep
        waits = [_exit_of(pid) for pid in inside]
    finally:
        runner.kill()
        await runner.wait()
    gone = await asyncio.wait_for(asyncio.gather(*waits), 10)
    assert all(gone)


def _descendants(ancestor: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as file:
                parents[int(entry)] = int(file.read().rpartition(")")[2].split()[1])
        except OSError:
            continue
    found: list[int] = []
    frontier = [ancestor]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, of in parents.items() if of == parent]
        found += children
        frontier += children
    return found


async def _exit_of(pid: int) -> bool:
    """True once `pid` has exited (awaited on a pidfd, no polling); True at once if already gone."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    loop = asyncio.get_running_loop()
    done: asyncio.Future[bool] = loop.create_future()

    def exited() -> None:
        if not done.done():
            done.set_result(True)

    loop.add_reader(pidfd, exited)
    try:
        return await done
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)


_HOLDERS = r"""
import os, sys
held = b"a" * (32 << 20)
for more in (16, 8):
    if os.fork():
        break
    held += b"a" * (more << 20)
os.write(1, b"ready\n")
sys.stdin.read()
"""


async def test_resident_is_what_a_process_and_every_descendant_hold_and_nothing_once_gone() -> None:
    """A process holding 32 MiB, its child 48 and its grandchild 56: the measure is their VmRSS summed."""
    holders = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-S", "-c", _HOLDERS, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert holders.stdin is not None
    assert holders.stdout is not None
    try:
        assert [await holders.stdout.readline() for _ in range(3)] == [b"ready\n"] * 3
        tree = [holders.pid, *_descendants(holders.pid)]
        assert len(tree) == 3
        expected = sum(_vm_rss(pid) for pid in tree)
        measured = resident(holders.pid)
    finally:
        holders.stdin.close()
        await holders.wait()
    assert expected >= (32 + 48 + 56) << 20
    assert abs(measured - expected) <= 1 << 20
    assert resident(holders.pid) == 0


def _vm_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as file:
        line = next(line for line in file if line.startswith("VmRSS:"))
    return int(line.split()[1]) << 10


async def test_a_sandbox_over_its_memory_budget_is_stopped_and_says_what_it_held(
    confinement: Confinement, temp_root: Path
) -> None:
    """SIGTERM (whose default action ends this agent) comes first, as at the deadline."""
    hog = "import signal\nheld = b'a' * (52 << 20)\nsignal.pause()"
    limits = Limits(memory=48 << 20)
    ended = await _run(confinement, _launch(temp_root, (confinement.python, "-I", "-S", "-c", hog), limits=limits))
    assert (ended.stop, ended.signal) == (Stop.MEMORY, signal.SIGTERM)
    assert ended.memory is not None
    assert 48 << 20 < ended.memory < 72 << 20  # under the ceiling, or SIGKILL could have come first


def test_the_memory_budget_is_the_runners_and_the_address_space_backstop_is_above_it() -> None:
    limits = Limits()
    assert limits.memory < limits.address_space
    assert [option for option in limits.bridge_options(60) if option.startswith("limit:as=")] == [
        f"limit:as={limits.address_space}:{limits.address_space}"
    ]
    assert not [option for option in limits.bridge_options(60) if str(limits.memory) in option]


def test_the_cpu_limit_is_the_deadline_plus_the_margin() -> None:
    options = Limits(address_space=1 << 30, processes=10, open_files=20, file_size=30, cpu_margin_seconds=7)
    assert options.bridge_options(12.5) == [
        "limit:as=1073741824:1073741824",
        "limit:nproc=10:10",
        "limit:nofile=20:20",
        "limit:fsize=30:30",
        "limit:cpu=20:25",
        "limit:core=0:0",
    ]


async def test_the_open_files_limit_bites_inside(confinement: Confinement, temp_root: Path) -> None:
    count = "import os\nn = 0\ntry:\n    while True: os.open('/dev/null', 0); n += 1\nexcept OSError: print(n)"
    launch = _launch(temp_root, (confinement.python, "-I", "-S", "-c", count), limits=Limits(open_files=64))
    ended = await _run(confinement, launch)
    assert int(ended.stdout) == 64 - 3  # stdin, stdout, stderr; nothing else was inherited


def test_the_probe_leaves_nothing_behind() -> None:
    root = Path(tempfile.mkdtemp(prefix="er-", dir="/tmp"))
    os.chmod(root, 0o755)
    try:
        assert isinstance(asyncio.run(probe(root)), Confinement)
        assert os.listdir(root) == []
    finally:
        remove_tree(root)
