"""A hostile agent, run through the engine in the real sandbox: what it tries, and that the sandbox held.

Each test plays one behaviour an outside test found (issue 7: an adversarial agent through `eval run`, a
root runner, bubblewrap 0.8) and asserts the fix holds, not how.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest
from aiohttp import web

from eval_runner.engine.run.collect import remove_tree
from eval_runner.engine.run.door_proxy import DoorProxy
from eval_runner.engine.run.layout import interpreter_paths
from eval_runner.engine.run.leftovers import OWNER_FILE, bridges, mark_owner, owner_mark, sweep
from eval_runner.engine.run.sandbox import Confinement, Limits
from eval_runner.engine.run.turn import DoorSetup, errored, run_once
from tests.support.paths import REPO
from tests.support.sandboxed_runs import (
    BOUND_SECONDS,
    ends_within,
    fresh_temp_root,
    host_confinement,
    make_temp_root,
    report,
    run_act,
    spec_for,
)
from tests.support.stand_in_door_proxy import StandInDoors

ROOT = REPO


@pytest.fixture
def confinement() -> Confinement:
    return host_confinement()


@pytest.fixture
def temp_root() -> Iterator[Path]:
    yield from fresh_temp_root()


# --- 7: the bridge (pid 1) cannot be taken over ------------------------------------------------------


async def test_the_agent_cannot_ptrace_or_read_the_bridge(confinement: Confinement, temp_root: Path) -> None:
    record = await run_act(spec_for(temp_root, "ptrace-bridge"), confinement)
    found = report(record)
    assert found["seize"] != "ok", found
    assert found["mem"] != "ok", found
    assert found["vm"] != "ok", found
    if confinement.seccomp is not None:
        assert (found["seize"], found["vm"], found["shm"]) == ("EPERM", "EPERM", "EPERM")


# --- 10: a sandbox never outlives its runner ----------------------------------------------------------


@pytest.mark.parametrize("when", ["running", "starting"])
def test_a_sandbox_ends_when_its_runner_is_killed(confinement: Confinement, temp_root: Path, when: str) -> None:
    """Killed with the agent running, or while pid 1 exists but has not run (the moment a sandbox once
    outlived a killed `serve`: its parent-death signal was asked for too late)."""
    if when == "starting" and confinement.cgroups is None:
        pytest.skip("holding pid 1 before it runs is the cgroup placement's, which this host does not have")
    runner = subprocess.Popen(
        [sys.executable, "-m", "tests.support.doomed_runner", str(temp_root), when],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert runner.stdout is not None
        line = runner.stdout.readline().split()
        assert line[:1] == ["bridge"], line
        bridge = int(line[1])
        runner.kill()
        runner.wait(BOUND_SECONDS)
        assert ends_within(bridge, BOUND_SECONDS), "the sandbox outlived its runner"
        assert [pid for pid, _ in bridges() if pid == bridge] == []
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()


async def test_a_sandbox_whose_runner_lets_go_of_its_lifeline_ends_itself(
    confinement: Confinement, temp_root: Path
) -> None:
    """The lifeline alone, with bubblewrap and this process alive: it is what ends a sandbox whose runner
    died before the bridge could ask for its parent-death signal (a killed `serve` once left one behind,
    about one kill in forty during a sandbox's start). The runner's end of the pipe is swapped for
    /dev/null, as its death would close it."""
    doors = StandInDoors()
    running = asyncio.ensure_future(run_act(spec_for(temp_root, "polite"), confinement, doors=doors))
    await doors.ready.wait()
    (bridge,) = [pid for pid, mark in bridges() if mark == owner_mark()]
    with open(f"/proc/{bridge}/cmdline", "rb") as file:
        options = file.read().split(b"\0")
    (number,) = [int(word[len(b"lifeline:") :]) for word in options if word.startswith(b"lifeline:")]
    try:
        pipe = os.readlink(f"/proc/{bridge}/fd/{number}")
    except PermissionError:
        running.cancel()
        pytest.skip("this runner may not look at the bridge's descriptors")
    (ours,) = [int(fd) for fd in os.listdir("/proc/self/fd") if _link(f"/proc/self/fd/{fd}") == pipe]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, ours)
    finally:
        os.close(null)
    record = await asyncio.wait_for(running, BOUND_SECONDS)
    assert ends_within(bridge, BOUND_SECONDS)
    assert record.outcome == errored("sandbox_failed")
    assert record.detail == "orphaned the runner is gone"


def _link(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


async def test_a_start_sweeps_what_a_runner_that_is_gone_left_behind(
    confinement: Confinement, temp_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead_owner = f"{os.getpid()}:0"  # this pid, but a start time it never had: another, ended process
    monkeypatch.setattr("eval_runner.engine.run.confined.owner_mark", lambda: dead_owner)
    doors = StandInDoors()
    running = asyncio.ensure_future(run_act(spec_for(temp_root, "polite"), confinement, doors=doors))
    await doors.ready.wait()
    monkeypatch.undo()
    assert [mark for _, mark in bridges() if mark == dead_owner]

    left = temp_root / "oa-eval-left"
    left.mkdir()
    (left / OWNER_FILE).write_text(dead_owner + "\n")
    mine = temp_root / "oa-eval-mine"
    mine.mkdir()
    mark_owner(mine)
    unmarked = temp_root / "oa-eval-unmarked"
    unmarked.mkdir()

    swept = await asyncio.to_thread(sweep, (temp_root,))
    record = await asyncio.wait_for(running, BOUND_SECONDS)
    assert swept.sandboxes == 1
    assert record.outcome.word == "errored"  # its sandbox was ended under it
    assert not left.exists()
    assert mine.exists()
    assert unmarked.exists()
    assert swept.directories == 1
    assert owner_mark() != dead_owner


# --- 2: an interpreter path never widens what the agent sees -----------------------------------------

PEEK = """
import json, os
found = {}
for path in os.environ["OA_EVAL_PEEK"].split(":"):
    try:
        if os.path.isdir(path):
            found[path] = sorted(os.listdir(path))
        else:
            with open(path, "rb") as file:
                found[path] = file.read().decode()
    except OSError as exc:
        found[path] = exc.strerror
print(json.dumps(found))
"""


async def test_an_interpreter_in_a_shared_directory_shows_the_agent_nothing_else_of_it(
    confinement: Confinement,
) -> None:
    """`#!<X>/bin/python3`, with `<X>` holding the temp root, the state and the results (a home or shared
    directory): the agent runs, and sees none of `<X>` but its interpreter."""
    base = Path(tempfile.mkdtemp(prefix="er-x-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        temp_root, state, results, binary = base / "tmp", base / "state", base / "results", base / "bin"
        for directory in (temp_root, state, results, binary, temp_root / "oa-eval-other"):
            directory.mkdir(mode=0o755)
        (state / "door.key").write_text("a copy of the door key\n")
        (results / "earlier.json").write_text("{}\n")
        (temp_root / "oa-eval-other" / "skill.md").write_text("another run's extension\n")
        shutil.copy2(os.path.realpath("/usr/bin/python3"), binary / "python3")
        agent = base / "agent.py"
        agent.write_text(f"#!{binary / 'python3'} -IS\n{PEEK}")
        agent.chmod(0o755)
        peek = [str(state / "door.key"), str(results), str(temp_root / "oa-eval-other")]
        spec = replace(
            spec_for(temp_root, "noop"),
            agent=agent,
            env=(("OA_EVAL_PEEK", ":".join([*peek, str(base)])),),
            hidden=(state, results),
        )
        record = await run_act(spec, confinement)
        assert record.outcome.word == "completed", record.stderr
        found = report(record)
        assert {path: found[path] for path in peek} == dict.fromkeys(peek, "No such file or directory")
        # Of `<X>` itself only the mount points of what the run needs exist: no state, no results.
        assert found[str(base)] == ["agent.py", "bin", "tmp"]
    finally:
        remove_tree(base)


def test_an_interpreter_brings_its_install_libraries_never_its_prefix(tmp_path: Path) -> None:
    prefix = tmp_path / "opt" / "python"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib").mkdir()
    (prefix / "bin" / "python3").write_text("")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "lib").mkdir()
    (venv / "pyvenv.cfg").write_text("home = x\n")
    (venv / "bin" / "python").symlink_to(prefix / "bin" / "python3")
    paths = interpreter_paths(venv / "bin" / "python")
    assert paths == [
        venv / "bin" / "python",
        prefix / "bin" / "python3",
        prefix / "lib",
        venv / "pyvenv.cfg",
        venv / "lib",
    ]
    assert prefix not in paths
    assert venv not in paths


# --- 6: memory the sandbox holds outside any resident set counts ------------------------------------

MEMFD_HOG = """#!/usr/bin/python3 -IS
import os, signal
left, held, chunk = int(os.environ["OA_EVAL_BYTES"]), [], b"m" * (1 << 20)
while left > 0:
    fd = os.memfd_create("hog")
    for _ in range(min(left, 32 << 20) >> 20):
        os.write(fd, chunk)  # written, never mapped: in no process's resident set
    held.append(fd)
    left -= 32 << 20
print("held", flush=True)
signal.pause()
"""


@pytest.mark.parametrize("counted_by", ["cgroup", "descriptors"])
async def test_memory_held_in_unmapped_memfds_counts_against_the_budget(
    confinement: Confinement, temp_root: Path, counted_by: str
) -> None:
    if counted_by == "cgroup" and confinement.cgroups is None:
        pytest.skip("this host gives the runner no memory cgroup")
    if counted_by == "descriptors":
        confinement = replace(confinement, cgroups=None)
    home = make_temp_root()
    try:
        agent = home / "memfd-hog"
        agent.write_text(MEMFD_HOG)
        agent.chmod(0o755)
        spec = replace(
            spec_for(temp_root, "noop"),
            agent=agent,
            env=(("OA_EVAL_BYTES", str(160 << 20)),),
            limits=Limits(memory=64 << 20),
        )
        record = await run_act(spec, confinement)
        assert record.outcome == errored("memory_limit"), (record.outcome, record.stdout, record.stderr)
    finally:
        remove_tree(home)


# --- 5: a run's files have a budget --------------------------------------------------------------------

DISK_HOG = """#!/usr/bin/python3 -IS
import os, signal
how, places = os.environ["OA_EVAL_HOW"], [os.environ["TMPDIR"], os.environ["CODER_TRACE_DIR"]]
block = b"d" * (1 << 20)
if how == "files":  # 32 MiB files, alternating between tmp/ and out/ (each under the 64 MiB file limit)
    for n in range(8):
        with open(os.path.join(places[n % 2], f"big-{n}"), "wb") as file:
            for _ in range(32):
                file.write(block)
elif how == "unlinked":  # written through a name that is gone: no walk of the directories sees it
    path = os.path.join(places[0], "hidden")
    kept = [open(path, "wb") for _ in range(1)]
    os.unlink(path)
    for _ in range(48):
        kept[0].write(block)
    kept[0].flush()
elif how == "many":
    for n in range(3000):
        open(os.path.join(places[0], f"f{n}"), "wb").close()
elif how == "deep":
    os.chdir(places[0])
    for _ in range(300):
        os.mkdir("d")
        os.chdir("d")
print("wrote", flush=True)
signal.pause()  # holds on: only the budget can end this run before its deadline
"""


@pytest.mark.parametrize(
    ("how", "limits", "said"),
    [
        ("files", Limits(disk=64 << 20), "over its disk budget of 64 MiB"),
        ("unlinked", Limits(disk=32 << 20), "over its disk budget of 32 MiB"),
        ("many", Limits(files=1000), "more than 1000 files"),
        ("deep", Limits(), "more than 256 deep"),
    ],
)
async def test_a_run_over_its_disk_budget_ends_disk_limit_and_leaves_nothing(
    confinement: Confinement, temp_root: Path, how: str, limits: Limits, said: str
) -> None:
    home = make_temp_root()
    try:
        agent = home / "disk-hog"
        agent.write_text(DISK_HOG)
        agent.chmod(0o755)
        spec = replace(spec_for(temp_root, "noop"), agent=agent, env=(("OA_EVAL_HOW", how),), limits=limits)
        record = await run_act(spec, confinement)
        assert record.outcome == errored("disk_limit"), (record.outcome, record.stdout, record.stderr)
        assert record.detail is not None
        assert said in record.detail
        assert record.workspace is not None
        record.workspace.close()
        assert list(temp_root.iterdir()) == []
    finally:
        remove_tree(home)


# --- 8: a door that echoes the key hands nothing to the agent -------------------------------------------

ECHO_ASKER = """#!/usr/bin/python3 -IS
import base64, os, urllib.request
request = urllib.request.Request(
    os.environ["CODER_DOOR_URL"] + "/v1/responses", data=b'{"input": "hello"}', method="POST",
    headers={"Authorization": "Bearer " + os.environ["CODER_DOOR_KEY"], "Content-Type": "application/json"},
)
with urllib.request.urlopen(request, timeout=30) as answer:
    seen = f"{answer.status}\\n{answer.headers}\\n".encode() + answer.read()
print(base64.b64encode(seen).decode())  # base64: what the agent saw, past the runner's own scrubbing
"""
ECHO_KEY = "sk-echoed-door-key-4d1f9a7c2e8b6035"


async def test_a_door_that_echoes_the_key_gives_the_agent_none_of_it(confinement: Confinement, temp_root: Path) -> None:
    async def echo(request: web.Request) -> web.Response:
        """STAND-IN door that hands back everything it was sent, the credential included."""
        headers = dict(request.headers)
        body = json.dumps({"echo": "door-was-here", "headers": headers, "body": (await request.read()).decode()})
        return web.Response(
            text=body,
            headers={"X-Echo-Authorization": headers.get("Authorization", ""), "Set-Cookie": f"k={ECHO_KEY}"},
        )

    app = web.Application()
    app.router.add_post("/v1/responses", echo)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    home = make_temp_root()
    try:
        port = runner.addresses[0][1]
        agent = home / "echo-asker"
        agent.write_text(ECHO_ASKER)
        agent.chmod(0o755)
        spec = replace(spec_for(temp_root, "noop"), agent=agent, secrets=(ECHO_KEY,))
        setup = DoorSetup(coder=partial(DoorProxy, f"http://127.0.0.1:{port}", ECHO_KEY))
        record = await run_once(spec, confinement=confinement, door=setup, cancel=asyncio.Event())
        assert record.outcome.word == "completed", record.stderr
        seen = base64.b64decode(record.stdout.strip())
        assert b"door-was-here" in seen  # the echo arrived...
        assert ECHO_KEY.encode() not in seen  # ...without the key, in any header or the body
        assert base64.b64encode(ECHO_KEY.encode())[:-4] not in seen
        if record.workspace is not None:
            record.workspace.close()
    finally:
        await runner.cleanup()
        remove_tree(home)
