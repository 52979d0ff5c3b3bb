"""The real agents end to end: Claude Code and Codex, installed by `scripts/agents` at pinned versions, run
a SKILL.md extension's test set in both arms in the real sandbox, against the scripted stand-in doors
(`stand_ins/scripted_doors.py`) through the real per-run door proxy.

Scripted: in the with arm the model uses the skill (Claude Code calls its Skill tool; Codex reads the
skill's file with its shell) and names the crate; without the skill it lists the files and says it would
have to look closer. Both arms make as many model calls, so cost and time stay within the gate's bound.
So the with arm passes the should-fire case and the without arm does not, both pass the greeting, and
the verdict is `pass` with the headline 2 of 2 against 1 of 2. The door saw every model call
(with the real key, which only the proxy holds: the door refuses anything else), the sandbox has no
network to reach anything else, and the real key is in nothing the run kept.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval_runner.contracts.report import Report
from eval_runner.contracts.report_figures import FigureRow, Figures
from eval_runner.engine.agents import BUILTIN_AGENT, AgentChoice, AgentKind, adapter_for
from eval_runner.engine.agents.install import claude_binary, codex_binary, installed
from eval_runner.engine.run.sandbox import Confinement
from eval_runner.engine.run.trajectory import parse_trajectory
from eval_runner.engine.suite_run import DoorSettings, SuiteAuthor, SuitePlan, run_suite
from eval_runner.engine.testset.cases import load_suite
from eval_runner.engine.testset.catalog import Skill, resolve_extension
from eval_runner.local_eval import EvalRunOptions, LocalEvalError, prepare, run_local
from eval_runner.stand_ins.scripted_doors import APIS, Play, Say, ScriptedDoor, Shell, Tool
from tests.support.outside_parts import unavailable
from tests.support.paths import EXAMPLE
from tests.support.sandboxed_runs import fresh_temp_root, host_confinement

KEY = "sk-real-door-key-never-inside-5b1e7d"
SKILLED = "It is a Rust crate of three files; the largest is src/tables.rs."
UNSKILLED = "I would have to look at the files more closely."
GREETING = "Welcome aboard, glad you are here!"
#: The gate decides nothing on fewer runs a case and arm.
RUNS = 3
SKILL_MD = b"""---
name: brief
description: Survey a repository's files before describing it, then name its language and largest file.
---

When someone asks about a repository, survey its files before answering. Then name its main language,
say how many files it has, and point out its largest file by path, all in at most three sentences.
"""
LISTED = "Survey a repository's files before describing it"
CASES = {
    "overview/prompt.md": b"""+++
v = "openagents.eval-case.v1"
description = "Describe a small Rust repository."
kind = "should-fire"

[run]
allowed_operations = ["read", "write"]
+++

Give me a short overview of the repository in this directory.
""",
    "overview/fixtures/Cargo.toml": b'[package]\nname = "tables"\nversion = "0.1.0"\n',
    "overview/fixtures/src/lib.rs": b"pub mod tables;\n",
    "overview/fixtures/src/tables.rs": b"pub const TABLE: [u8; 4] = [1, 2, 3, 4];\n" * 20,
    "overview/graders/language.md": b'+++\ntype = "regex"\nflags = "i"\ntarget = "last_message"\n+++\n\n\\brust\\b\n',
    "overview/graders/largest.md": b'+++\ntype = "regex"\ntarget = "last_message"\n+++\n\nsrc/tables\\.rs\n',
    "greeting/prompt.md": b"""+++
v = "openagents.eval-case.v1"
description = "A greeting, where the skill has no place."
kind = "should-not-fire"

[run]
allowed_operations = ["read", "write"]
+++

Say hello to a new contributor who just joined the team, in one line.
""",
    "greeting/graders/reply.md": b'+++\ntype = "regex"\nflags = "i"\ntarget = "last_message"\n+++\n\n\\bwelcome\\b\n',
}


@dataclasses.dataclass(frozen=True)
class Agent:
    kind: AgentKind
    program: Path
    api: str
    #: The with arm's moves on the should-fire case, and the without arm's.
    moves: tuple[Tool | Shell | Say, ...]
    without: tuple[Tool | Shell | Say, ...]
    #: The operation the with arm's skill use is seen as.
    operation: str
    #: The version `deploy/agents/package-lock.json` pins (the built-in agent's own, for it).
    version: str
    #: The agent the trajectory names: the built-in agent writes the coder's log, rendered as the coder's.
    trajectory_name: str | None = None
    #: The APIs the scripted door speaks (`ScriptedDoor.speaks`).
    speaks: tuple[str, ...] = APIS


AGENTS = {
    "claude-code": Agent(
        AgentKind.CLAUDE_CODE,
        claude_binary(),
        "anthropic",
        (Tool("Skill", {"skill": "brief"}), Say(SKILLED)),
        (Tool("Glob", {"pattern": "**/*"}), Say(UNSKILLED)),
        "skill:brief",
        "2.1.332",
    ),
    "codex": Agent(
        AgentKind.CODEX,
        codex_binary(),
        "responses",
        (Shell('cat "$CODEX_HOME/skills/brief/SKILL.md"'), Say(SKILLED)),
        (Shell("find . -type f"), Say(UNSKILLED)),
        "skill:brief",
        "0.171.0",
    ),
}
#: The built-in agent against the stand-in Responses door: the skill reaches it as instructions (the coder
#: contract's guidance), so its skilled move is to read the largest file, the unskilled one to list files.
BUILTIN = Agent(
    AgentKind.BUILTIN,
    BUILTIN_AGENT,
    "responses",
    (Tool("read_file", {"path": "src/tables.rs"}), Say(SKILLED)),
    (Tool("list_files", {}), Say(UNSKILLED)),
    "read_file",
    "0.1.0",
    "openagents-coder",
)
#: The built-in agent against a door that has only Chat Completions: its first call to Responses answers
#: 404 and it speaks Chat Completions for the rest of the turn.
BUILTIN_CHAT = dataclasses.replace(BUILTIN, api="chat", speaks=("chat",))
OURS = {"builtin": BUILTIN, "builtin-chat": BUILTIN_CHAT}


@pytest.fixture
def confinement() -> Confinement:
    return host_confinement()


@pytest.fixture
def temp_root() -> Iterator[Path]:
    yield from fresh_temp_root()


def _suite_dir(root: Path) -> Path:
    for relative, data in CASES.items():
        path = root / "evals" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root / "evals"


@pytest.mark.parametrize("name", [*sorted(AGENTS), *OURS])
async def test_the_real_agent_uses_the_skill_in_the_with_arm_only(
    name: str, confinement: Confinement, temp_root: Path, tmp_path: Path
) -> None:
    agent = AGENTS.get(name) or OURS[name]
    if not installed(agent.program):
        unavailable(f"{name} is not installed: run scripts/agents")
    example = resolve_extension(EXAMPLE)
    subject = dataclasses.replace(example.subject, programs=(), skills=(Skill("brief", SKILL_MD),))
    plays = [
        Play("overview of the repository", agent.moves, when_listed=LISTED),
        Play("overview of the repository", agent.without, unless_listed=LISTED),
        Play("say hello", (Say(GREETING),)),
    ]
    async with ScriptedDoor(KEY, plays, speaks=agent.speaks) as door:
        plan = SuitePlan(
            suite=load_suite(_suite_dir(tmp_path)),
            subject=subject,
            agent=agent.program,
            door=DoorSettings(door.url, KEY, "stand-in-model"),
            author=SuiteAuthor(example.definition.author, "brief-tests", "suite", "0" * 64),
            temp_root=temp_root,
            results_base=tmp_path / "results",
            runs=RUNS,
            concurrency=2,
            subject_definition=example.record,
            hosted=False,
            adapter=adapter_for(AgentChoice(agent.kind), agent.program),
        )
        outcome = await run_suite(plan, confinement=confinement)

    built = outcome.built
    by_case = {case.id: case for case in built.scores.cases}
    overview, greeting = by_case["overview"], by_case["greeting"]
    assert overview.subject.passed is True, _stdout(built)
    assert overview.baseline is not None
    assert overview.baseline.passed is False
    assert greeting.subject.passed is True
    assert greeting.baseline is not None
    assert greeting.baseline.passed is True
    report = Report.parse_bytes((outcome.results_dir / "report.json").read_bytes())
    assert report.verdict.value == "pass"
    headline = report.ext_eval.headline
    assert (headline.subject_passed, headline.baseline_passed, headline.total) == (2, 1, 2)

    # The with arm's trajectory shows the skill used, as graders see it; the without arm's does not.
    trajectories = {
        (attempt.case, attempt.arm.value): parse_trajectory(attempt.trajectory)
        for attempt in built.attempts
        if attempt.trajectory is not None
    }
    assert len(trajectories) == 4  # one kept per case and arm: the last attempt's
    with_arm = trajectories[("overview", "subject")]
    assert with_arm.whole
    assert with_arm.calls_to(agent.operation)
    assert with_arm.final_message == SKILLED
    assert with_arm.agent.name == (agent.trajectory_name or agent.kind.value)
    assert with_arm.agent.version == agent.version
    assert not trajectories[("overview", "baseline")].calls_to(agent.operation)
    assert trajectories[("overview", "baseline")].final_message == UNSKILLED

    # Every model call reached the scripted door, in the agent's own API, with the real key (the proxy's
    # swap: the door refuses the token): 2 calls an arm on the overview, 1 per greeting, each run.
    calls = [call for call in door.calls if call.api == agent.api]
    assert len(calls) == 6 * RUNS
    assert door.refused == 0
    assert [call.answer for call in calls].count("say") == 4 * RUNS

    # The figures per arm: the door's count of model calls and its tokens, the trajectory's tool calls.
    figures = Figures.from_meta(built.report.meta_extra)
    assert figures is not None
    for arm in ("subject", "baseline"):
        assert figures.row(arm, "turns") == FigureRow(arm, "turns", 3 * RUNS, 2 * RUNS, 0)
        assert figures.row(arm, "tool_calls") == FigureRow(arm, "tool_calls", RUNS, 2 * RUNS, 0)
        tokens = figures.row(arm, "input_tokens")
        assert tokens is not None
        assert (tokens.denominator, tokens.unknown_count) == (2 * RUNS, 0)
        assert (tokens.value or 0) > 0

    # The real key is in nothing the run kept.
    for path in outcome.results_dir.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def _stdout(built: object) -> str:
    attempts = getattr(built, "attempts", ())
    return "\n".join(
        f"{attempt.case}/{attempt.arm}: {attempt.stdout[-2000:]!r} {attempt.stderr[-2000:]!r}" for attempt in attempts
    )


EXAMPLE_SKILL = EXAMPLE.parent / "brief"
EXAMPLE_LISTED = "Describe a code repository in at most three sentences"


@pytest.mark.parametrize("name", sorted(AGENTS))
async def test_eval_run_tests_the_example_skill_with_the_real_agent(name: str, tmp_path: Path) -> None:
    """`eval run examples/brief --agent-kind KIND --door-url URL --door-key-env NAME`, as a person runs it."""
    agent = AGENTS[name]
    if not installed(agent.program):
        unavailable(f"{name} is not installed: run scripts/agents")
    plays = [
        Play("overview of the repository", agent.moves, when_listed=EXAMPLE_LISTED),
        Play("overview of the repository", agent.without, unless_listed=EXAMPLE_LISTED),
        Play("say hello", (Say(GREETING),)),
    ]
    async with ScriptedDoor(KEY, plays) as door:
        options = EvalRunOptions(
            extension=EXAMPLE_SKILL,
            runs=RUNS,
            agent_kind=name,
            door_url=door.url,
            door_key_env="THE_DOOR_KEY",
            model="stand-in-model",
            concurrency=2,
            out=tmp_path / "results",
        )
        local = prepare(options, {"THE_DOOR_KEY": KEY, "EVAL_RUNNER_TMP": "/tmp"})
        assert local.agent == agent.program
        outcome = await run_local(local)
    view = outcome.built.view
    assert (view.verdict.value, view.subject_passed, view.baseline_passed) == ("pass", 2, 1)
    assert door.refused == 0
    assert len([call for call in door.calls if call.api == agent.api]) == 6 * RUNS
    for path in outcome.results_dir.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_eval_run_refuses_a_real_agent_without_a_real_door(tmp_path: Path) -> None:
    with pytest.raises(LocalEvalError, match="--door-url"):
        prepare(EvalRunOptions(extension=EXAMPLE_SKILL, agent_kind="claude-code:/bin/true"), {})
    with pytest.raises(LocalEvalError, match="not an agent kind"):
        prepare(EvalRunOptions(extension=EXAMPLE_SKILL, agent_kind="gemini"), {})


@pytest.mark.parametrize("name", [*sorted(AGENTS), "builtin"])
def test_the_demo_runs_the_hosted_path_with_the_real_agent(name: str, tmp_path: Path) -> None:
    """`eval-runner demo --agent KIND`: a real subprocess, real relay and sandboxes, the real agent, the
    scripted door (the stand-in door for the built-in agent); the report says only the door was a stand-in."""
    program = AGENTS[name].program if name in AGENTS else BUILTIN_AGENT
    if not installed(program):
        unavailable(f"{name} is not an executable file at {program}")
    state = tmp_path / "state"
    env = {key: value for key, value in os.environ.items() if not key.startswith(("EVAL_RUNNER_", "CODER_"))}
    env["EVAL_RUNNER_STATE"] = str(state)
    done = subprocess.run(
        [sys.executable, "-m", "eval_runner.cli", "demo", "--agent", name],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert "Verdict  Better" in done.stdout
    assert f"the agent is the real {name}" in done.stderr
    reports = [line.split(None, 1)[1] for line in done.stdout.splitlines() if line.startswith("report  /")]
    report = Report.parse_bytes(Path(reports[0]).read_bytes())
    assert report.verdict.value == "pass"
    assert report.meta_extra["eval_runner_stand_ins"] == ["door"]
