"""Confinement, tested from inside the sandbox as the agent would try it: each item its own run of the
stand-in agent (tests/support/stand_in_sandboxed_agent.py) through `run_once`."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval_runner.engine.run.collect import remove_results_holding_secret, remove_tree, secret_in
from eval_runner.engine.run.layout import reachable
from eval_runner.engine.run.sandbox import Confinement, Limits
from eval_runner.engine.run.turn import (
    CODER_DOOR_PORT,
    DECISION_DOOR_PORT,
    DoorSetup,
    RunOutcome,
    errored,
    run_once,
)
from eval_runner.engine.testset.cases import Operation
from tests.support.paths import REPO
from tests.support.sandboxed_runs import (
    AGENT,
    fresh_temp_root,
    host_confinement,
    processes_holding,
    report,
    run_act,
    spec_for,
    still_running,
)
from tests.support.stand_in_door_proxy import StandInDoors

WRITABLE = {"cwd", "out", "tmp", "openagents"}


@pytest.fixture(scope="session")
def confinement() -> Confinement:
    return host_confinement()


@pytest.fixture
def temp_root() -> Iterator[Path]:
    yield from fresh_temp_root()


async def test_a_write_outside_cwd_out_and_tmp_fails(confinement: Confinement, temp_root: Path) -> None:
    record = await run_act(spec_for(temp_root, "writes"), confinement)
    result = report(record)
    assert {name for name, said in result.items() if said == "ok"} == WRITABLE | {"dev_null"}
    refused = {name: said for name, said in result.items() if name not in WRITABLE | {"dev_null"}}
    # Read-only mounts say EROFS; a file the sandbox user does not own says EACCES first.
    assert refused == {
        "root": "EROFS",
        "prompt": "EACCES",
        "home": "EROFS",
        "slash": "EROFS",
        "slash_tmp": "EROFS",  # /tmp exists only as the way to the run directory
        "usr": "EROFS",
        "etc": "EROFS",
        "dev": "EROFS",
        "dev_shm": "EROFS",
        "proc": "ENOENT",
    }


async def test_without_the_write_grant_cwd_is_read_only_too(confinement: Confinement, temp_root: Path) -> None:
    spec = spec_for(temp_root, "writes", grants=frozenset({Operation.READ}))
    result = report(await run_act(spec, confinement))
    assert {name for name, said in result.items() if said == "ok"} == WRITABLE - {"cwd"} | {"dev_null"}
    assert result["cwd"] == "EROFS"


def _host_address() -> str | None:
    """An address of this host other than loopback, if it has one."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # TEST-NET-1: no packet is sent for a UDP connect
        address: str = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address


async def test_a_connect_to_a_host_port_fails(confinement: Confinement, temp_root: Path) -> None:
    reached = asyncio.Event()

    async def note(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reached.set()
        writer.close()

    server = await asyncio.start_server(note, host="0.0.0.0", port=0)
    port = server.sockets[0].getsockname()[1]
    targets = [f"127.0.0.1:{port}", f"localhost:{port}"]
    if (address := _host_address()) is not None:
        targets.append(f"{address}:{port}")
    try:
        spec = spec_for(temp_root, "connects", env={"OA_EVAL_TARGETS": ",".join(targets)})
        result = report(await run_act(spec, confinement, doors=StandInDoors()))
    finally:
        server.close()
    assert result[f"127.0.0.1:{port}"] == "ECONNREFUSED"
    assert result[f"localhost:{port}"] in {"ECONNREFUSED", "EADDRNOTAVAIL"}  # ::1 may be absent
    if address is not None:
        assert result[f"{address}:{port}"] == "ENETUNREACH"
    assert result["links"] == "lo"
    assert not reached.is_set()


async def test_only_the_door_answers(confinement: Confinement, temp_root: Path) -> None:
    ports = [CODER_DOOR_PORT, DECISION_DOOR_PORT, 80, 443, 8080, 8400]
    targets = ",".join(f"127.0.0.1:{port}" for port in ports)
    doors = StandInDoors()
    spec = spec_for(temp_root, "connects", env={"OA_EVAL_TARGETS": targets})
    result = report(await run_act(spec, confinement, doors=doors))
    answered = [target for target, said in result.items() if said == "answered"]
    assert answered == [f"127.0.0.1:{CODER_DOOR_PORT}"]  # no decision door configured for this run
    assert json.loads(result["door"].partition(" ")[2]) == {"door": "coder", "path": "/v1/ping"}
    # The bare connection's request came without the token; the agent's own with it.
    assert sorted((arrived.path_qs, arrived.authorised) for arrived in doors.one("coder").arrived) == [
        ("/", False),
        ("/v1/ping", True),
    ]


async def test_mount_remount_and_new_namespaces_fail(confinement: Confinement, temp_root: Path) -> None:
    result = report(await run_act(spec_for(temp_root, "escapes"), confinement))
    assert all(code != 0 for code in result["exit"].values()), result["exit"]
    assert result["cap_eff"] == result["cap_bnd"] == "0000000000000000"
    assert result["no_new_privs"] == "1"
    assert result["uid"] == 65534


async def test_the_runners_key_file_cannot_be_read(confinement: Confinement, temp_root: Path) -> None:
    state = Path(tempfile.mkdtemp(prefix="er-state-", dir="/tmp"))
    os.chmod(state, 0o755)
    key = state / "runner.key"
    key.write_text("nsec1secretsecretsecret\n")
    os.chmod(key, 0o600)
    # Made visible on purpose: a root-owned 0600 file is still unreadable, because the sandbox is not root.
    visible = state / "visible.key"
    visible.write_text("another secret\n")
    os.chmod(visible, 0o600)
    try:
        paths = [str(key), str(visible), "/etc/shadow", "/root/.bash_history", str(Path.home() / ".ssh/id_ed25519")]
        spec = spec_for(temp_root, "reads", env={"OA_EVAL_PATHS": ",".join(paths)}, read_only_paths=(visible,))
        result = report(await run_act(spec, confinement))
    finally:
        shutil.rmtree(state)
    assert result["read"] == {
        str(key): "ENOENT",
        str(visible): "EACCES" if os.geteuid() == 0 else "read",
        "/etc/shadow": "ENOENT",
        "/root/.bash_history": "ENOENT",
        str(Path.home() / ".ssh/id_ed25519"): "ENOENT",
    }
    listed = result["listed"]
    assert listed["/root"] == listed["/home"] == "ENOENT"
    assert "shadow" not in listed["/etc"]
    assert "passwd" in listed["/etc"]
    assert set(listed["/"]) <= {
        "bin",
        "dev",
        "etc",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "proc",
        "sbin",
        "tmp",
        "usr",
    } | {
        AGENT.parts[1],
        temp_root.parts[1],
    }


@pytest.mark.parametrize("drop", ["setpriv", "child"])
async def test_a_fork_bomb_is_contained_and_the_run_ends_errored(
    confinement: Confinement, temp_root: Path, drop: str
) -> None:
    """Both ways a root runner drops to uid 65534 (without the drop, root is exempt from the limit)."""
    if drop == "child":
        confinement = dataclasses.replace(confinement, setpriv=None)
    spec = spec_for(temp_root, "fork-bomb", limits=Limits(processes=48), deadline_seconds=2)
    record = await run_act(spec, confinement)
    assert record.outcome == errored("timeout")
    # Each bomb process reports its first refused fork once, and none ever exits: at most 48 existed.
    assert set(record.stdout.split()) == {b"limited"}
    assert len(record.stdout.split()) <= 48
    assert processes_holding(str(temp_root)) == {}
    assert subprocess.run(["/bin/true"], check=False).returncode == 0


def test_a_fork_bomb_is_contained_when_the_runner_is_not_root(tmp_path: Path) -> None:
    """Without the uid drop the runner's own uid counts; run the sandbox as uid 1000 to show it holds."""
    if os.geteuid() != 0:
        pytest.skip("needs root to become another user")
    root = Path(tempfile.mkdtemp(prefix="er-user-", dir="/tmp"))
    os.chown(root, 1000, 1000)
    os.chmod(root, 0o755)
    src = REPO / "src"
    if not reachable(src, 1000, 1000):
        pytest.skip("this checkout is not reachable by uid 1000 (a clone under /root, say)")
    driver = f"""
import asyncio, sys
sys.path.insert(0, {str(src)!r})
from pathlib import Path
from eval_runner.engine.run.confined import run_confined
from eval_runner.engine.run.confinement import probe
from eval_runner.engine.run.sandbox import Launch, Limits

async def main():
    root = Path({str(root)!r})
    confinement = await probe(root)
    print("outside", confinement.outside_uid)
    out = root / "out"
    out.mkdir()
    launch = Launch(root=root, command=("{AGENT}",), cwd=root, stdout=out / "stdout", stderr=out / "stderr",
                    home=root, writable=(out,), read_only=(Path("{AGENT}"),), env=(("OA_EVAL_ACT", "fork-bomb"),),
                    deadline_seconds=2,
                    limits=Limits(processes=48))
    ended = await run_confined(confinement, launch, cancel=asyncio.Event())
    print(ended.stop.value, sorted(set(ended.stdout.split())), len(ended.stdout.split()))

asyncio.run(main())
"""
    try:
        done = subprocess.run(
            [
                "/usr/bin/setpriv",
                "--reuid=1000",
                "--regid=1000",
                "--clear-groups",
                "--",
                "/usr/bin/python3",
                "-c",
                driver,
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
            cwd="/",
        )
        outside, ended = done.stdout.splitlines()
        assert outside == "outside None", done.stderr  # not root: no uid drop
        stop, words, count = ended.split(" ", 2)
        assert (stop, words) == ("timeout", "[b'limited']")
        # Each bomb process reports its first refused fork once, and none ever exits.
        assert 1 <= int(count) <= 48
        assert processes_holding(str(root)) == {}
    finally:
        remove_tree(root)


async def test_a_native_memory_hog_is_contained_and_the_run_ends_errored(
    confinement: Confinement, temp_root: Path
) -> None:
    limit_mib = 512
    spec = spec_for(temp_root, "native-hog", limits=Limits(address_space=limit_mib << 20))
    record = await run_act(spec, confinement)
    assert record.outcome == errored("crashed")  # malloc gave NULL under the limit; the hog wrote to it
    assert record.detail == "the agent was killed by signal 11"
    reached = [int(line) for line in record.stdout.split()]
    assert reached
    assert max(reached) < limit_mib


async def test_a_python_memory_hog_that_touches_its_allocation_ends_memory_limit(
    confinement: Confinement, temp_root: Path
) -> None:
    """One allocation under the address-space backstop but over the budget: it would succeed, so the
    runner's measure is what stops the run (the hog holds on, as a working agent would)."""
    limits = Limits(memory=64 << 20, address_space=2 << 30)
    spec = spec_for(temp_root, "python-hog", env={"OA_EVAL_BYTES": str(1 << 30)}, limits=limits)
    record = await run_act(spec, confinement)
    assert record.outcome == errored("memory_limit")
    assert record.detail is not None
    assert _held_mib(record.detail) >= 64


async def test_an_allocation_beyond_the_backstop_holds_nothing_and_the_run_ends_as_the_agent_does(
    confinement: Confinement, temp_root: Path
) -> None:
    """The one refusal the budget never sees: the allocation fails before any of it is resident, the
    hog handles it and exits, and an exit is `completed` (the exit code never decides an outcome)."""
    limits = Limits(memory=64 << 20, address_space=1 << 30)
    spec = spec_for(temp_root, "python-hog", env={"OA_EVAL_BYTES": str(4 << 30)}, limits=limits)
    record = await run_act(spec, confinement)
    assert record.stdout == b"MemoryError\n"
    assert str(record.outcome) == "completed"


async def test_a_memory_hog_over_its_budget_gets_sigterm_then_the_grace_then_sigkill(
    confinement: Confinement, temp_root: Path
) -> None:
    """The hog stops growing between the budget and the ceiling and ignores SIGTERM: the run is stopped
    as the deadline stops one, whatever the hog does about it."""
    env = {"OA_EVAL_STEP": str(4 << 20), "OA_EVAL_BYTES": str(72 << 20)}
    spec = spec_for(temp_root, "step-hog", env=env, limits=Limits(memory=64 << 20))
    record = await run_act(spec, confinement)
    assert record.outcome == errored("memory_limit")
    lines = record.stdout.split()
    assert b"term" in lines  # SIGTERM reached it and it stayed, so SIGKILL after the grace ended it
    assert [int(line) for line in lines if line != b"term"][-1] == 72
    assert record.detail is not None
    assert 64 <= _held_mib(record.detail) < 96
    assert processes_holding(str(temp_root)) == {}


async def test_a_hog_that_keeps_growing_after_sigterm_is_killed_at_once_and_leaves_no_process(
    confinement: Confinement, temp_root: Path
) -> None:
    """Grown to half again its budget while stopping, the sandbox gets SIGKILL without waiting for the
    grace (an hour here: waiting for it would fail this test by its own timeout)."""
    doors = StandInDoors()
    limits = Limits(memory=64 << 20, address_space=1 << 30)
    spec = spec_for(temp_root, "step-hog", env={"OA_EVAL_STEP": str(4 << 20)}, limits=limits)
    setup = DoorSetup(coder=doors.coder)
    running = asyncio.ensure_future(
        run_once(spec, confinement=confinement, door=setup, cancel=asyncio.Event(), grace=3600)
    )
    ready = asyncio.ensure_future(doors.ready.wait())
    await asyncio.wait({ready, running}, return_when=asyncio.FIRST_COMPLETED)
    assert ready.done()
    # bubblewrap, the bridge, the hog and its TERM-proof child in a session of its own.
    inside = processes_holding(str(temp_root))
    assert len(inside) >= 4
    record = await asyncio.wait_for(running, 60)
    assert record.outcome == errored("memory_limit")
    assert record.detail is not None
    assert _held_mib(record.detail) >= 64
    assert still_running(inside) == []
    assert processes_holding(str(temp_root)) == {}


async def test_processes_each_under_the_budget_that_pass_it_together_end_memory_limit(
    confinement: Confinement, temp_root: Path
) -> None:
    """Four orphans (pid 1 inherited them) of ~60 MiB each against a 128 MiB budget: the sandbox is
    measured as a whole, not the agent's own process or any one process."""
    env = {"OA_EVAL_PROCESSES": "4", "OA_EVAL_BYTES": str(48 << 20)}
    spec = spec_for(temp_root, "split-hog", env=env, limits=Limits(memory=128 << 20))
    record = await run_act(spec, confinement)
    assert record.outcome == errored("memory_limit")
    assert record.detail is not None
    assert _held_mib(record.detail) >= 128  # no one process can hold more than ~60 MiB
    assert processes_holding(str(temp_root)) == {}


async def test_a_run_under_its_memory_budget_is_unaffected(confinement: Confinement, temp_root: Path) -> None:
    """32 MiB held for half a second (ten measures) under a 128 MiB budget: the run ends as the agent does."""
    env = {"OA_EVAL_BYTES": str(32 << 20), "OA_EVAL_HOLD": "0.5"}
    record = await run_act(spec_for(temp_root, "modest", env=env, limits=Limits(memory=128 << 20)), confinement)
    assert record.outcome == RunOutcome("completed")
    assert record.stdout.split()[-3:] == [b"32", b"done", b"8"]


def _held_mib(detail: str) -> int:
    """The MiB (whole, rounded down) a `memory_limit` detail says the sandbox held."""
    match = re.fullmatch(r"the sandbox's processes held (\d+) MiB, over the run's memory budget", detail)
    assert match is not None, detail
    return int(match.group(1))


async def test_the_door_key_appears_in_no_kept_file(confinement: Confinement, temp_root: Path) -> None:
    doors = StandInDoors()
    real_key = "sk-real-door-key-0123456789"
    record = await run_act(spec_for(temp_root, "leak", secrets=(real_key,)), confinement, doors=doors)
    token = doors.one("coder").token.encode()
    assert record.workspace is not None
    kept = [record.stdout, record.stderr, record.trajectory or b""]
    kept += [entry.data or b"" for entry in record.created] + [entry.path.encode() for entry in record.created]
    assert all(token not in part for part in kept)
    assert b"[redacted]" in record.stdout
    assert b"[redacted]" in record.stderr
    assert record.trajectory is not None
    assert b"[redacted]" in record.trajectory
    assert (record.workspace.path / "leaked.txt").read_bytes() == b"key=[redacted]\n"  # what a file grader reads
    # Kept as a results directory would keep it: the final scan finds nothing and keeps the directory.
    results = temp_root / "results"
    (results / "files").mkdir(parents=True)
    (results / "stdout.jsonl").write_bytes(record.stdout)
    (results / "stderr.txt").write_bytes(record.stderr)
    (results / "trajectory.atif.jsonl").write_bytes(record.trajectory)
    for entry in record.created:
        (results / "files" / entry.path).write_bytes(entry.data or b"")
    secrets = [token, real_key.encode()]
    assert secret_in(results, secrets) is None
    assert remove_results_holding_secret(results, secrets) is None
    assert results.is_dir()
    record.workspace.close()
