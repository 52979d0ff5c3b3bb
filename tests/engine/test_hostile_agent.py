"""A hostile agent, run through the engine in the real sandbox: what it tries, and that the sandbox held.

Each test plays one behaviour an outside test found (issue 7: an adversarial agent through `eval run`, a
root runner, bubblewrap 0.8) and asserts the fix holds, not how.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval_runner.engine.leftovers import OWNER_FILE, bridges, mark_owner, sweep
from eval_runner.engine.sandbox import Confinement, owner_mark
from tests.engine.sandboxed_runs import (
    BOUND_SECONDS,
    ends_within,
    fresh_temp_root,
    host_confinement,
    report,
    run_act,
    spec_for,
)
from tests.engine.stand_in_door_proxy import StandInDoors

ROOT = Path(__file__).resolve().parents[2]


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


def test_a_sandbox_ends_when_its_runner_is_killed(confinement: Confinement, temp_root: Path) -> None:
    runner = subprocess.Popen(
        [sys.executable, "-m", "tests.support.doomed_runner", str(temp_root)],
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


async def test_a_start_sweeps_what_a_runner_that_is_gone_left_behind(
    confinement: Confinement, temp_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead_owner = f"{os.getpid()}:0"  # this pid, but a start time it never had: another, ended process
    monkeypatch.setattr("eval_runner.engine.sandbox.owner_mark", lambda: dead_owner)
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
