"""Each agent adapter's per-turn cost on this machine: `uv run python bench/agents.py [--turns 10]`.

One-turn runs (the scripted stand-in door answers the first call with a text and the turn ends) of the
stand-in coder, the built-in agent, Claude Code and Codex (those two when `scripts/agents` installed them), each through
`run_once` in the real sandbox with the real door proxy. Printed per agent, p50 and p90 over the turns:
* `agent`: the sandbox's life, from bubblewrap's start to the agent's exit — the agent's own start-up
  and its one model call (the door answers at once), which is the agent's cost, not ours;
* `ours`: the rest of `run_once` — the run directory, the adapter's files (HOME, skills, config), the door
  proxy, collecting and scrubbing, and reading the agent's output into a trajectory;
* `door`: model calls the door saw per turn.
Asserts nothing; figures are never timings in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval_runner import stand_ins
from eval_runner.engine.agents import BUILTIN_AGENT, AgentChoice, AgentKind, adapter_for
from eval_runner.engine.agents.install import claude_binary, codex_binary, installed
from eval_runner.engine.run.collect import remove_tree
from eval_runner.engine.run.confinement import probe
from eval_runner.engine.run.door_proxy import DoorProxy
from eval_runner.engine.run.sandbox import Unconfined
from eval_runner.engine.run.trajectory import parse_trajectory
from eval_runner.engine.run.turn import AgentAdapter, DoorSetup, RunSpec, run_once
from eval_runner.engine.testset.cases import Operation
from eval_runner.engine.testset.catalog import Skill
from eval_runner.stand_ins.scripted_doors import Play, Say, ScriptedDoor

KEY = "bench-door-key-0123456789"
PROMPT = "Say hello in one line."
SKILL = Skill("brief", b"When asked about a repository, survey its files first.\n")


def agents() -> list[tuple[str, Path, AgentAdapter | None, str]]:
    found: list[tuple[str, Path, AgentAdapter | None, str]] = [
        ("coder (stand-in)", stand_ins.AGENT, None, "stand-in"),
        ("builtin", BUILTIN_AGENT, None, "stand-in"),  # the coder contract: no adapter
    ]
    for kind, program, model in (
        (AgentKind.CLAUDE_CODE, claude_binary(), "claude-sonnet-4-5"),
        (AgentKind.CODEX, codex_binary(), "gpt-5"),
    ):
        if installed(program):
            found.append((kind.value, program, adapter_for(AgentChoice(kind), program), model))
        else:
            print(f"{kind.value}: not installed (run scripts/agents)")
    return found


def figures(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered):7.1f} ms  p90 {p90:7.1f} ms"


async def main(turns: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="ba-", dir="/tmp"))
    root.chmod(0o755)
    try:
        confinement = await probe(root)
        if isinstance(confinement, Unconfined):
            raise SystemExit(f"this host cannot confine runs: {confinement.reason}")
        for name, program, adapter, model in agents():
            agent_ms: list[float] = []
            ours_ms: list[float] = []
            async with ScriptedDoor(KEY, [Play("hello", (Say("Hello!"),))], fallback="Hello!") as door:
                setup = DoorSetup(coder=functools.partial(DoorProxy, door.url, KEY))
                for _ in range(turns):
                    spec = RunSpec(
                        agent=program,
                        prompt=PROMPT,
                        model=model,
                        temp_root=root,
                        grants=frozenset({Operation.READ, Operation.WRITE}),
                        secrets=(KEY,),
                        deadline_seconds=120,
                        adapter=adapter,
                        skills=(SKILL,) if adapter is not None else (),
                    )
                    started = time.perf_counter()
                    record = await run_once(spec, confinement=confinement, door=setup, cancel=asyncio.Event())
                    if record.trajectory is not None:
                        parse_trajectory(record.trajectory)
                    wall = time.perf_counter() - started
                    if record.workspace is not None:
                        record.workspace.close()
                    if record.outcome.word != "completed":
                        raise SystemExit(f"{name}: a turn ended {record.outcome} ({record.detail})")
                    agent_ms.append(record.seconds * 1000)
                    ours_ms.append((wall - record.seconds) * 1000)
                calls = len(door.calls) / turns
            print(f"{name:18} agent {figures(agent_ms)} | ours {figures(ours_ms)} | door {calls:.1f} calls a turn")
    finally:
        remove_tree(root)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=10, help="one-turn runs per agent (default 10)")
    asyncio.run(main(parser.parse_args().turns))
