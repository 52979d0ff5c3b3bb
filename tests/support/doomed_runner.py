"""A runner that will be SIGKILLed mid-run, for the tests that a sandbox never outlives its runner.

python -m tests.support.doomed_runner TEMP_ROOT running
    starts one sandboxed run of the stand-in agent's `polite` act and, once the agent has said through
    its door that it is running, prints `bridge <host pid>` for the sandbox's pid 1 and waits to be
    killed;
python -m tests.support.doomed_runner TEMP_ROOT starting
    dies by its own SIGKILL at the moment it places the sandbox's pid 1 in its memory cgroup: pid 1
    exists but has not run a line (bubblewrap holds it), so the parent-death signal the bridge will
    ask for comes too late. It prints `bridge <host pid>` first.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from eval_runner.engine.run.confinement import probe
from eval_runner.engine.run.leftovers import bridges, owner_mark
from eval_runner.engine.run.sandbox import Unconfined
from tests.support.sandboxed_runs import run_act, spec_for
from tests.support.stand_in_door_proxy import StandInDoors


async def main(temp_root: Path) -> int:
    confinement = await probe(temp_root)
    if isinstance(confinement, Unconfined):
        print(f"unconfined {confinement.reason}", flush=True)
        return 1
    doors = StandInDoors()
    running = asyncio.ensure_future(run_act(spec_for(temp_root, "polite"), confinement, doors=doors))
    await doors.ready.wait()
    for pid, mark in bridges():
        if mark == owner_mark():
            print(f"bridge {pid}", flush=True)
    await running
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(Path(sys.argv[1]))))
