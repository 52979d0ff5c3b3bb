"""The engine's own cost on this machine: `uv run python bench/engine.py [--turns 40]`.

Targets (issue text): per-turn overhead with a no-op agent ≤ 30 ms p50, and 48 turns of a 1 s agent at
concurrency 4 within 90 % of ideal (ideal 12 s, so ≤ 13.3 s). Prints figures next to the targets; asserts
nothing (figures are never timings in tests). Each agent adapter's per-turn overhead (the stand-in coder, the
built-in agent, Claude Code, Codex; the agent's start-up apart from ours) is `bench/agents.py`.

1. Per-turn overhead: turns of `stand_in_noop_agent.sh` (copies the case's fixture trajectory, a
   two-step ATIF document, to its trace path and exits), one at a time, each through the real path one
   attempt of a suite takes: `run_once` (run directory, fixtures, a door proxy to the stand-in door,
   bubblewrap with the uid drop when root, collection and scrubbing), the trajectory parse, `grade_run`
   (one regex grader over the last message, under RE2), the grades document and workspace
   removal. Also as many turns through `run_suite` at concurrency 1, which adds planning, the report and
   the results directory.
2. Throughput: 8 cases × 3 runs × 2 arms = 48 turns of `stand_in_sleep_agent.sh` (sleeps 1 s) through
   `run_suite` at concurrency 4; % of ideal = 12 s / wall.

Both use the in-process stand-in door and the example extension as the subject; both need a host that
confines (bubblewrap), as every run does.

`--compare REV` instead times the no-op turn of this tree and of an earlier commit side by side in one
run: REV is checked out into a temporary git worktree, and each tree runs `--turns` no-op turns in a
subprocess of its own (its `src/` first on the path), alternating trees for `--rounds` rounds, so both
see the same machine at the same time. Printed: each tree's p50 over all its turns, and the change.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from eval_runner.engine.grade.graders import RunView, WorkspaceDirectory, grade_run, grades_bytes
from eval_runner.engine.grade.votes import NO_DOORS
from eval_runner.engine.run.collect import remove_tree
from eval_runner.engine.run.confinement import probe
from eval_runner.engine.run.door_proxy import DoorProxy
from eval_runner.engine.run.sandbox import Confinement, Unconfined
from eval_runner.engine.run.trajectory import parse_trajectory
from eval_runner.engine.run.turn import DoorSetup, RunSpec, run_once
from eval_runner.engine.suite_run import HOSTED_GRANTS, DoorSettings, SuiteAuthor, SuitePlan, run_suite
from eval_runner.engine.testset.cases import Operation, Suite, load_suite
from eval_runner.engine.testset.catalog import LOCAL_KEY, resolve_extension
from eval_runner.engine.verdict.scores import Arm
from eval_runner.stand_ins.door import StandInDoor

HERE = Path(__file__).resolve().parent
NOOP_AGENT = HERE / "stand_in_noop_agent.sh"
SLEEP_AGENT = HERE / "stand_in_sleep_agent.sh"
EXAMPLE = HERE.parent / "examples" / "codebase-brief"
OVERHEAD_TARGET_MS = 30.0
CASES, RUNS, CONCURRENCY, SLEEP_SECONDS = 8, 3, 4, 1.0
IDEAL_SECONDS = CASES * RUNS * 2 * SLEEP_SECONDS / CONCURRENCY
IDEAL_SHARE_TARGET = 0.90

CASE_PROMPT = """\
+++
v = "openagents.eval-case.v1"
kind = "should-fire"

[run]
allowed_operations = ["read", "write"]
+++

Say hello.
"""
CASE_GRADER = """\
+++
type = "regex"
target = "last_message"
+++

hello
"""
#: What the stand-in agents leave as their trajectory (a case fixture they copy to the trace path).
TRAJECTORY = json.dumps(
    {
        "schema_version": "ATIF-v1.6",
        "session_id": "bench",
        "agent": {"name": "stand-in-bench", "version": "0"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "Say hello."},
            {"step_id": 2, "source": "agent", "message": "hello"},
        ],
    }
)


def write_suite(evals: Path, cases: int) -> Suite:
    for number in range(1, cases + 1):
        case = evals / f"case-{number}"
        (case / "graders").mkdir(parents=True)
        (case / "fixtures").mkdir()
        (case / "fixtures" / "trajectory.json").write_text(TRAJECTORY, encoding="utf-8")
        (case / "prompt.md").write_text(CASE_PROMPT, encoding="utf-8")
        (case / "graders" / "said.md").write_text(CASE_GRADER, encoding="utf-8")
    return load_suite(evals)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


@dataclass(frozen=True, slots=True)
class TurnTimes:
    """One timed turn, in milliseconds: the whole turn, `run_once`, the sandboxed process as the engine
    times it (bubblewrap start to exit), and grading (trajectory parse, graders, grades document)."""

    turn: float
    run: float
    process: float
    grading: float


async def one_turn(spec: RunSpec, suite: Suite, confinement: Confinement, doors: DoorSetup) -> TurnTimes:
    """One attempt as `run_suite` makes it."""
    started = time.perf_counter()
    record = await run_once(spec, confinement=confinement, door=doors, cancel=asyncio.Event())
    ran = time.perf_counter()
    try:
        view = RunView(
            outcome=record.outcome.word,
            reason=record.outcome.reason,
            trajectory=None if record.trajectory is None else parse_trajectory(record.trajectory),
            created_files=tuple(created.path for created in record.created),
            present_files=tuple(created.path for created in record.created if created.present),
            workspace=None if record.workspace is None else WorkspaceDirectory(record.workspace.path),
        )
        case = suite.cases[0]
        grades = await grade_run(case, Arm.SUBJECT, view, NO_DOORS, frozenset())
        grades_bytes(case.name, Arm.SUBJECT, 1, view, grades, cost_usd=record.cost_usd, seconds=record.seconds)
        graded = time.perf_counter()
    finally:
        if record.workspace is not None:
            await asyncio.to_thread(record.workspace.close)
    ended = time.perf_counter()
    if record.outcome.word != "completed" or grades.passed is not True:
        raise SystemExit(f"a no-op turn ended {record.outcome} ({record.detail}), passed {grades.passed}")
    return TurnTimes(
        turn=(ended - started) * 1000,
        run=(ran - started) * 1000,
        process=record.seconds * 1000,
        grading=(graded - ran) * 1000,
    )


def plan(suite: Suite, agent: Path, door: DoorSettings, root: Path, *, runs: int, concurrency: int) -> SuitePlan:
    tool = resolve_extension(EXAMPLE)
    return SuitePlan(
        suite=suite,
        subject=tool.subject,
        agent=agent,
        door=door,
        author=SuiteAuthor(tool.definition.author, "bench-tests", "suite", LOCAL_KEY),
        temp_root=root,
        results_base=root / "results",
        runs=runs,
        concurrency=concurrency,
        subject_definition=tool.record,
        hosted=False,
    )


async def main(turns: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="er-b-", dir="/tmp")).resolve()  # short: door socket paths ≤ 107 bytes
    os.chmod(root, 0o755)  # the sandbox's uid reaches its run directories
    try:
        confinement = await probe(root)
        if isinstance(confinement, Unconfined):
            raise SystemExit(f"this host cannot confine runs: {confinement.reason}")
        key = secrets.token_urlsafe(32)
        async with StandInDoor(key) as stand_in:
            door = DoorSettings(stand_in.url, key, "stand-in")
            print(
                f"machine  {os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), {platform.machine()}, "
                f"Linux {platform.release()}, Python {platform.python_version()}, "
                f"{'root (uid drop through setpriv)' if os.geteuid() == 0 else 'not root'}, "
                f"bubblewrap {confinement.bwrap}"
            )
            print(f"load     {' '.join(f'{value:.2f}' for value in os.getloadavg())} (1, 5, 15 min) before the runs")
            await overhead(root, confinement, door, turns)
            await throughput(root, confinement, door)
    finally:
        remove_tree(root)


async def overhead(root: Path, confinement: Confinement, door: DoorSettings, turns: int) -> None:
    suite = write_suite(root / "one" / "evals", 1)
    spec = RunSpec(
        agent=NOOP_AGENT,
        prompt=suite.cases[0].prompt,
        fixtures=tuple((fixture.name, fixture.data) for fixture in suite.cases[0].fixtures),
        model=door.model,
        temp_root=root,
        grants=frozenset({Operation.READ}) | HOSTED_GRANTS,
        deadline_seconds=60.0,
        secrets=(door.key,),
    )
    doors = DoorSetup(coder=partial(DoorProxy, door.url, door.key))
    await one_turn(spec, suite, confinement, doors)  # warm caches; not counted
    timed = [await one_turn(spec, suite, confinement, doors) for _ in range(turns)]
    turn_ms = [times.turn for times in timed]
    p50 = statistics.median(turn_ms)
    print(f"\n1. per-turn overhead, no-op agent, {turns} turns one at a time (run_once + grading)")
    print(
        f"   turn        p50 {p50:6.1f} ms   p95 {percentile(turn_ms, 0.95):6.1f} ms   "
        f"mean {statistics.fmean(turn_ms):6.1f} ms   target p50 ≤ {OVERHEAD_TARGET_MS:.0f} ms "
        f"({'met' if p50 <= OVERHEAD_TARGET_MS else 'missed'})"
    )
    for label, values in (
        ("run_once", [times.run for times in timed]),
        ("  sandboxed process (bwrap start to exit)", [times.process for times in timed]),
        ("grading (parse, regex under RE2 (or the pattern worker))", [times.grading for times in timed]),
    ):
        print(f"   {label:<44} p50 {statistics.median(values):6.1f} ms   p95 {percentile(values, 0.95):6.1f} ms")
    # The same number of turns as a suite: cases of 5 runs in each arm (a case runs at most 10 times).
    several = write_suite(root / "several" / "evals", max(1, round(turns / 10)))
    suite_plan = plan(several, NOOP_AGENT, door, root, runs=5, concurrency=1)
    started = time.perf_counter()
    outcome = await run_suite(suite_plan, confinement=confinement)
    wall = time.perf_counter() - started
    made = len(outcome.built.attempts)
    print(
        f"   run_suite at concurrency 1, {made} turns (plan, runs, grading, report, results dir): "
        f"{wall * 1000 / made:6.1f} ms per turn"
    )


async def throughput(root: Path, confinement: Confinement, door: DoorSettings) -> None:
    suite = write_suite(root / "eight" / "evals", CASES)
    suite_plan = plan(suite, SLEEP_AGENT, door, root, runs=RUNS, concurrency=CONCURRENCY)
    started = time.perf_counter()
    outcome = await run_suite(suite_plan, confinement=confinement)
    wall = time.perf_counter() - started
    turns = len(outcome.built.attempts)
    completed = sum(1 for attempt in outcome.built.attempts if attempt.end.value == "completed")
    passed = sum(1 for attempt in outcome.built.attempts if attempt.passed is True)
    share = IDEAL_SECONDS / wall
    print(
        f"\n2. {turns} turns of a {SLEEP_SECONDS:g} s agent ({CASES} cases × {RUNS} runs × 2 arms, "
        f"{completed} completed, {passed} passed) at concurrency {CONCURRENCY}"
    )
    print(
        f"   wall {wall:5.2f} s   ideal {IDEAL_SECONDS:.1f} s   {share:6.1%} of ideal   "
        f"target ≥ {IDEAL_SHARE_TARGET:.0%} (≤ {IDEAL_SECONDS / IDEAL_SHARE_TARGET:.1f} s) "
        f"({'met' if share >= IDEAL_SHARE_TARGET else 'missed'})"
    )


# --- one tree against another -------------------------------------------------------------------------

#: Run in a subprocess with a tree's `src/` first on the path: that tree's no-op turns, as JSON on stdout.
_TURNS_OF_A_TREE = """
import asyncio, importlib.util, json, os, secrets, sys, tempfile
from functools import partial
from pathlib import Path
tree, turns = Path(sys.argv[1]), int(sys.argv[2])
spec = importlib.util.spec_from_file_location("tree_bench", tree / "bench" / "engine.py")
bench = importlib.util.module_from_spec(spec)
sys.modules["tree_bench"] = bench
spec.loader.exec_module(bench)
from eval_runner.engine.run.confinement import probe
from eval_runner.engine.run.door_proxy import DoorProxy
from eval_runner.engine.run.turn import DoorSetup, RunSpec
from eval_runner.stand_ins.door import StandInDoor
from eval_runner.engine.testset.cases import Operation
from eval_runner.engine.run.collect import remove_tree
async def main():
    root = Path(tempfile.mkdtemp(prefix="er-c-", dir="/tmp")).resolve()
    os.chmod(root, 0o755)
    try:
        confinement = await probe(root)
        key = secrets.token_urlsafe(32)
        async with StandInDoor(key) as door:
            suite = bench.write_suite(root / "one" / "evals", 1)
            run = RunSpec(agent=bench.NOOP_AGENT, prompt=suite.cases[0].prompt, model="stand-in", temp_root=root,
                          fixtures=tuple((f.name, f.data) for f in suite.cases[0].fixtures),
                          grants=frozenset({Operation.READ, Operation.WRITE}), deadline_seconds=60.0, secrets=(key,))
            doors = DoorSetup(coder=partial(DoorProxy, door.url, key))
            await bench.one_turn(run, suite, confinement, doors)
            timed = [await bench.one_turn(run, suite, confinement, doors) for _ in range(turns)]
        print(json.dumps([t.turn for t in timed]))
    finally:
        remove_tree(root)
asyncio.run(main())
"""


def turns_of(tree: Path, turns: int) -> list[float]:
    environment = {**os.environ, "PYTHONPATH": str(tree / "src")}
    done = subprocess.run(
        [sys.executable, "-c", _TURNS_OF_A_TREE, str(tree), str(turns)],
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"timing {tree} failed:\n{done.stderr}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert isinstance(found, list)
    return [float(value) for value in found]


def compare(revision: str, turns: int, rounds: int) -> None:
    here = HERE.parent
    earlier = Path(tempfile.mkdtemp(prefix="er-worktree-"))
    subprocess.run(
        ["git", "-C", str(here), "worktree", "add", "--detach", "--quiet", str(earlier), revision],
        check=True,
    )
    try:
        times: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(rounds):
            times["before"] += turns_of(earlier, turns)
            times["after"] += turns_of(here, turns)
        before, after = statistics.median(times["before"]), statistics.median(times["after"])
        print(f"no-op turn (run_once + grading), {rounds} rounds × {turns} turns per tree, trees alternating")
        for label, values in (("before", times["before"]), ("after", times["after"])):
            tree = revision if label == "before" else "this tree"
            print(
                f"   {label:<6} ({tree:<12}) p50 {statistics.median(values):6.1f} ms   "
                f"p95 {percentile(values, 0.95):6.1f} ms"
            )
        change = after / before - 1
        print(f"   change   {change:+.1%} at p50 (target: at most +10 %: {'met' if change <= 0.10 else 'missed'})")
    finally:
        subprocess.run(
            ["git", "-C", str(here), "worktree", "remove", "--force", str(earlier)],
            check=False,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=40, help="no-op turns to time (default 40)")
    parser.add_argument("--compare", metavar="REV", help="time this tree's no-op turn against REV's instead")
    parser.add_argument("--rounds", type=int, default=3, help="with --compare: rounds per tree (default 3)")
    arguments = parser.parse_args()
    if arguments.turns < 2:
        sys.exit("--turns must be at least 2")
    if arguments.compare:
        compare(arguments.compare, arguments.turns, arguments.rounds)
    else:
        asyncio.run(main(arguments.turns))
