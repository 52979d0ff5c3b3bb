"""Shared pieces of the sandbox, confinement and run tests: the host's confinement (probed once), a temp
root the sandbox user can reach, a run spec for the stand-in agent, and process checks by pid."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import select
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from eval_runner.engine.run.collect import remove_tree
from eval_runner.engine.run.confinement import probe
from eval_runner.engine.run.sandbox import Confinement, Unconfined
from eval_runner.engine.run.turn import DoorSetup, RunRecord, RunSpec, run_once
from eval_runner.engine.testset.cases import Operation
from tests.support.stand_in_door_proxy import StandInDoors

AGENT = Path(__file__).with_name("stand_in_sandboxed_agent.py").resolve()
#: A failure bound for waiting on a process to end, never a synchronisation.
BOUND_SECONDS = 30
PROMPT = "Say hello.\n"
MODEL = "stand-in-model"


def make_temp_root() -> Path:
    """A short path (Unix socket paths are at most 107 bytes) that uid 65534 can search."""
    root = Path(tempfile.mkdtemp(prefix="er-", dir="/tmp"))
    os.chmod(root, 0o755)
    return root


@functools.cache
def host_confinement() -> Confinement:
    """This host's confinement, probed once (call it outside a running event loop: from a fixture)."""
    root = make_temp_root()
    try:
        found = asyncio.run(probe(root))
    finally:
        remove_tree(root)
    if isinstance(found, Unconfined):
        pytest.fail(f"this host cannot confine runs: {found.reason}")
    return found


def fresh_temp_root() -> Iterator[Path]:
    """For a fixture: a temp root for one test, removed after it."""
    root = make_temp_root()
    yield root
    remove_tree(root)


def spec_for(temp_root: Path, act: str, *, env: dict[str, str] | None = None, **changes: Any) -> RunSpec:
    case_env = {"OA_EVAL_ACT": act, **(env or {})}
    spec = RunSpec(
        agent=AGENT,
        prompt=PROMPT,
        model=MODEL,
        temp_root=temp_root,
        grants=frozenset({Operation.READ, Operation.WRITE}),
        env=tuple(sorted(case_env.items())),
        deadline_seconds=60,
    )
    return replace(spec, **changes)


async def run_act(
    spec: RunSpec,
    confinement: Confinement | Unconfined,
    *,
    doors: StandInDoors | None = None,
    decision: bool = False,
    cancel: asyncio.Event | None = None,
) -> RunRecord:
    setup = None
    if doors is not None:
        setup = DoorSetup(coder=doors.coder, decision=doors.decision if decision else None)
    return await run_once(spec, confinement=confinement, door=setup, cancel=cancel or asyncio.Event())


def report(record: RunRecord) -> Any:
    """The stand-in agent's JSON report: its first stdout line."""
    return json.loads(record.stdout.splitlines()[0])


def ends_within(pid: int, seconds: float) -> bool:
    """Wait (on a pidfd, no polling) for a process that is not our child to end."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([pidfd], [], [], seconds)[0])
    finally:
        os.close(pidfd)


def processes_holding(marker: str) -> dict[int, str]:
    """Host processes whose command line contains `marker`, as pid → start time (pids are reused)."""
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                cmdline = file.read()
            with open(f"/proc/{entry}/stat") as file:
                started = file.read().rpartition(")")[2].split()[19]
        except OSError:
            continue
        if marker.encode() in cmdline:
            found[int(entry)] = started
    return found


def still_running(processes: dict[int, str]) -> list[int]:
    """Those of `processes` that exist now (same pid, same start time) and are not zombies."""
    alive: list[int] = []
    for pid, started in processes.items():
        try:
            with open(f"/proc/{pid}/stat") as file:
                fields = file.read().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[19] == started and fields[0] != "Z":
            alive.append(pid)
    return alive
