"""A whole run with the real per-run door proxy (`engine/run/door_proxy.py`) in front of the stand-in model door and
the stand-in coder (`stand_ins/agent.py`) in the sandbox: agent → bridge → Unix socket → proxy →
door, with the key only ever on the host side."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval_runner import stand_ins
from eval_runner.engine.run.door_proxy import DoorProxy
from eval_runner.engine.run.sandbox import Confinement
from eval_runner.engine.run.turn import DoorSetup, RunOutcome, RunSpec, errored, run_once
from eval_runner.engine.testset.cases import Operation
from eval_runner.stand_ins.door import GREETING_REPLY, StandInDoor
from tests.support.sandboxed_runs import MODEL, fresh_temp_root, host_confinement

CODER = stand_ins.AGENT
KEY = "sk-stand-in-door-key-42"


@pytest.fixture(scope="session")
def confinement() -> Confinement:
    return host_confinement()


@pytest.fixture
def temp_root() -> Iterator[Path]:
    yield from fresh_temp_root()


def _spec(temp_root: Path) -> RunSpec:
    return RunSpec(
        agent=CODER,
        prompt="Hello there.\n",
        model=MODEL,
        temp_root=temp_root,
        grants=frozenset({Operation.READ, Operation.WRITE}),
        guidance="## Case instructions\n\nBe kind.\n",
        secrets=(KEY,),
        deadline_seconds=60,
    )


async def test_the_stand_in_coder_reaches_its_door_through_the_bridge_and_the_proxy(
    confinement: Confinement, temp_root: Path
) -> None:
    async with StandInDoor(KEY) as door:
        setup = DoorSetup(coder=functools.partial(DoorProxy, door.url, KEY))
        record = await run_once(_spec(temp_root), confinement=confinement, door=setup, cancel=asyncio.Event())
    assert record.outcome == RunOutcome("completed"), record.stderr
    summary = json.loads(record.stdout.splitlines()[-1])
    assert summary["reply"] == GREETING_REPLY
    assert record.cost_usd == summary["cost_usd"]
    assert [(call.model, call.prompt, call.instructions) for call in door.calls] == [
        (MODEL, "Hello there.\n", "## Case instructions\n\nBe kind.\n")
    ]
    assert record.trajectory is not None
    records = [json.loads(line)["record"] for line in record.trajectory.splitlines()]
    assert records[0] == "session"
    assert records[-1] == "end"
    assert KEY.encode() not in record.stdout + record.stderr + record.trajectory
    assert record.workspace is not None
    record.workspace.close()


async def test_a_door_that_refuses_the_runners_key_ends_the_run_auth_failed(
    confinement: Confinement, temp_root: Path
) -> None:
    async with StandInDoor(KEY) as door:
        setup = DoorSetup(coder=functools.partial(DoorProxy, door.url, "sk-not-the-key"))
        record = await run_once(_spec(temp_root), confinement=confinement, door=setup, cancel=asyncio.Event())
    assert record.outcome == errored("auth_failed")
    assert door.refused == 1
    assert record.workspace is not None
    record.workspace.close()
