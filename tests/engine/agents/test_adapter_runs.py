"""The adapter protocol through a real sandbox run, with a shell standing in for the agent: the room's HOME is
the agent's and writable, the environment is the adapter's own, what it printed reaches `end` with the
door token scrubbed, and an adapter that cannot set up refuses the run."""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from eval_runner.engine.agents.atif_document import StepLog
from eval_runner.engine.run.collect import REDACTED
from eval_runner.engine.run.door_proxy import DoorProxy
from eval_runner.engine.run.layout import RefusedError
from eval_runner.engine.run.sandbox import Confinement
from eval_runner.engine.run.trajectory import parse_trajectory
from eval_runner.engine.run.turn import (
    ADAPTER_FAILED,
    AgentEnd,
    AgentRoom,
    AgentStart,
    DoorSetup,
    RunSpec,
    run_once,
)
from eval_runner.engine.testset.cases import Operation
from eval_runner.stand_ins.scripted_doors import ScriptedDoor
from tests.support.sandboxed_runs import fresh_temp_root, host_confinement

KEY = "sk-adapter-door-key-31"
SCRIPT = 'echo "home=$HOME"; echo "token=$SHELL_DOOR_TOKEN"; echo "door=$SHELL_DOOR"; touch "$HOME/made" && echo wrote'


@dataclass
class ShellAdapter:
    """Starts /bin/sh with the door in its own variables; `end` keeps what it was given."""

    fail: bool = False
    #: What `start` (`broken_start`) or `end` (`broken_end`) raises, as an adapter's bug would.
    broken_start: Exception | None = None
    broken_end: Exception | None = None
    seen: list[bytes] = field(default_factory=list)

    def start(self, room: AgentRoom) -> AgentStart:
        if self.fail:
            raise RefusedError("no room for this agent")
        if self.broken_start is not None:
            raise self.broken_start
        room.home.mkdir()
        if room.owner is not None:
            os.chown(room.home, *room.owner)
        env = (*room.base_env, ("SHELL_DOOR", room.door_url or ""), ("SHELL_DOOR_TOKEN", room.door_token or ""))
        return AgentStart(("/bin/sh", "-c", SCRIPT), env)

    def end(self, stdout: bytes, room: AgentRoom) -> AgentEnd:
        self.seen.append(stdout)
        if self.broken_end is not None:
            raise self.broken_end
        log = StepLog("shell", "1", None)
        log.user(room.prompt)
        log.agent(stdout.decode())
        log.state = "ended"
        return AgentEnd(log.document(), 0.5)


@pytest.fixture
def confinement() -> Confinement:
    return host_confinement()


@pytest.fixture
def temp_root() -> Iterator[Path]:
    yield from fresh_temp_root()


def spec(temp_root: Path, adapter: ShellAdapter) -> RunSpec:
    return RunSpec(
        agent=Path("/bin/sh"),
        prompt="hello",
        model="m",
        temp_root=temp_root,
        grants=frozenset({Operation.READ}),
        secrets=(KEY,),
        deadline_seconds=30,
        adapter=adapter,
    )


async def test_an_adapter_runs_its_agent_with_its_own_home_and_environment(
    confinement: Confinement, temp_root: Path
) -> None:
    adapter = ShellAdapter()
    async with ScriptedDoor(KEY) as door:
        setup = DoorSetup(coder=functools.partial(DoorProxy, door.url, KEY))
        record = await run_once(spec(temp_root, adapter), confinement=confinement, door=setup, cancel=asyncio.Event())
    try:
        assert record.outcome.word == "completed", record.stderr
        lines = dict(line.split("=", 1) for line in record.stdout.decode().splitlines() if "=" in line)
        assert lines["home"].endswith("/tmp/home")
        assert lines["door"] == "http://127.0.0.1:8401"
        assert lines["token"] == REDACTED.decode()
        assert b"wrote" in record.stdout
        assert adapter.seen == [record.stdout]
        assert record.cost_usd == 0.5
        assert record.trajectory is not None
        assert parse_trajectory(record.trajectory).agent.name == "shell"
        assert record.door_usage is not None
        assert record.door_usage.answers == 0
    finally:
        if record.workspace is not None:
            record.workspace.close()


async def test_an_adapter_that_cannot_set_up_refuses_the_run(confinement: Confinement, temp_root: Path) -> None:
    record = await run_once(
        spec(temp_root, ShellAdapter(fail=True)), confinement=confinement, door=None, cancel=asyncio.Event()
    )
    assert str(record.outcome) == "errored(refused)"
    assert record.detail is not None
    assert "no room for this agent" in record.detail
    assert list(temp_root.iterdir()) == []


async def test_an_adapter_whose_end_raises_errors_the_run_and_never_says_the_key(
    confinement: Confinement, temp_root: Path
) -> None:
    adapter = ShellAdapter(broken_end=KeyError(f"no 'result' line near {KEY}"))
    async with ScriptedDoor(KEY) as door:
        setup = DoorSetup(coder=functools.partial(DoorProxy, door.url, KEY))
        record = await run_once(spec(temp_root, adapter), confinement=confinement, door=setup, cancel=asyncio.Event())
    try:
        assert str(record.outcome) == f"errored({ADAPTER_FAILED})"
        assert adapter.seen == [record.stdout]  # the agent ran; only reading it failed
        assert (record.trajectory, record.cost_usd) == (None, None)
        assert record.detail is not None
        assert "KeyError" in record.detail
        assert KEY not in record.detail
        assert REDACTED.decode() in record.detail
    finally:
        if record.workspace is not None:
            record.workspace.close()
    assert list(temp_root.iterdir()) == []


async def test_an_adapter_whose_start_has_a_bug_errors_the_run(confinement: Confinement, temp_root: Path) -> None:
    adapter = ShellAdapter(broken_start=KeyError("skills"))
    record = await run_once(spec(temp_root, adapter), confinement=confinement, door=None, cancel=asyncio.Event())
    assert str(record.outcome) == f"errored({ADAPTER_FAILED})"
    assert record.detail is not None
    assert "KeyError" in record.detail
    assert list(temp_root.iterdir()) == []
