"""`eval-runner demo`: the whole hosted path on this computer, with no configuration and no network.

One process starts what production has (the runner with its embedded relay and blob store, the example
extension as the catalog) with the two parts a deployment replaces, the agent and the model door, as
stand-ins. With `--agent claude-code` or `--agent codex` the agent is that real client (installed by
`scripts/agents`), the catalog is the SKILL.md example `examples/brief`, and the door is the scripted
stand-in door that speaks the agent's API (`stand_ins/scripted_doors.py`). The runner key releases the
example's starter test set (a `3184` whose files are in the blob store, reused when the state already
holds it), and a trainer key then sends one hosted run of that published test set over the relay as a
phone would and shows the verdict, marked as a stand-in result, and where the report is. State is kept
afterwards so a person can open the report.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import secrets
import socket
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from rich.console import Console

from eval_runner import stand_ins
from eval_runner.cli.release import release_all
from eval_runner.cli.trainer import RunView, report_view, show_run
from eval_runner.engine.agents import AgentChoiceError, AgentKind, parse_choice
from eval_runner.engine.agents.install import installed
from eval_runner.engine.report.inputs import StandIn
from eval_runner.engine.run.collect import remove_tree
from eval_runner.errors import EvalRunnerError
from eval_runner.logs import lines_to
from eval_runner.nostr import SecretKey
from eval_runner.service.config import Config, ConfigError
from eval_runner.service.keyfile import load_key
from eval_runner.service.relay.liveness import SUBSCRIBED
from eval_runner.service.serve import ServeError, serve
from eval_runner.stand_ins.door import StandInDoor
from eval_runner.stand_ins.scripted_doors import Move, Play, Say, ScriptedDoor, Shell, Tool
from eval_runner.trainer.client import Trainer, TrainerError
from eval_runner.trainer.requests import extension_tool, published_run_input

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "codebase-brief"
#: The SKILL.md example a real agent (Claude Code, Codex) is demonstrated with.
SKILL_EXAMPLE = EXAMPLE.parent / "brief"
AGENT = stand_ins.AGENT
RUNS = 3
START_SECONDS = 60.0
RUN_SECONDS = 600.0
#: What the demo's result rests on that is not real, said beside its verdict.
STAND_INS = frozenset({StandIn.AGENT, StandIn.DOOR})

OFFLINE_WORDS = (
    "This demo runs offline: the model door is a stand-in that answers from a fixed table, and the agent is a "
    "stand-in for OpenAgents' coder. Nothing leaves this computer."
)
REAL_WORDS = (
    "To test for real, run `eval-runner serve` with EVAL_RUNNER_CODER=<your agent>, CODER_DOOR_URL=<your model "
    "door>, CODER_DOOR_KEY=<its key>, CODER_MODEL=<model> and EVAL_RUNNER_CATALOG=<extension dirs>; send runs "
    "with `eval-runner trainer run --extension DIR --runner <eval-runner pubkey>`."
)


class DemoError(EvalRunnerError):
    """The demo could not run; the message says why in one line."""


def demo_main(*, environ: Mapping[str, str] | None = None, agent: str | None = None) -> int:
    out, err = Console(highlight=False), Console(stderr=True, highlight=False)
    try:
        return asyncio.run(run_demo(out, err, dict(os.environ if environ is None else environ), agent=agent))
    except DemoError as error:
        err.print(f"eval-runner demo: {error}", markup=False)
        return 1


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _temp_root(environ: Mapping[str, str]) -> Path:
    root = Path(tempfile.mkdtemp(prefix="er-demo-", dir=environ.get("EVAL_RUNNER_TMP") or tempfile.gettempdir()))
    root.chmod(0o755)  # the sandbox user (uid 65534) must reach the run directories inside
    return root


@dataclasses.dataclass(frozen=True, slots=True)
class DemoAgent:
    """What the demo runs: the agent (`EVAL_RUNNER_AGENT`, None for the stand-in coder), the example, and
    what is a stand-in."""

    kind: AgentKind | None = None
    example: Path = EXAMPLE
    stand_ins: frozenset[StandIn] = STAND_INS
    #: `EVAL_RUNNER_AGENT` for the runner: `kind[:path]`.
    setting: str = ""


def demo_agent(agent: str | None) -> DemoAgent:
    """The demo's agent for `--agent KIND`; refuses a kind that is not installed."""
    if agent is None:
        return DemoAgent()
    try:
        choice = parse_choice(agent)
    except AgentChoiceError as error:
        raise DemoError(f"--agent: {error.message}") from None
    if choice.kind is AgentKind.CODER:
        return DemoAgent()
    program = choice.program() or Path()
    if not installed(program):
        hint = "" if choice.kind is AgentKind.BUILTIN else "; run scripts/agents first"
        raise DemoError(f"{choice.kind} is not an executable file at {program}{hint}")
    return DemoAgent(choice.kind, SKILL_EXAMPLE, frozenset({StandIn.DOOR}), str(choice))


def demo_plays(kind: AgentKind) -> list[Play]:
    """The scripted door's plays for the brief example: with the skill listed the model uses it and names
    the crate; without, it looks at the files and says it would have to look closer; a greeting is a
    greeting in both arms."""
    listed = "Describe a code repository in at most three sentences"
    uses: Move = (
        Tool("Skill", {"skill": "brief"})
        if kind is AgentKind.CLAUDE_CODE
        else Shell('cat "$CODEX_HOME/skills/brief/SKILL.md"')
    )
    looks: Move = Tool("Glob", {"pattern": "**/*"}) if kind is AgentKind.CLAUDE_CODE else Shell("find . -type f")
    skilled = "It is a Rust crate of six files; the largest is src/tables.rs."
    return [
        Play("overview of the repository", (uses, Say(skilled)), when_listed=listed),
        Play(
            "overview of the repository",
            (looks, Say("I would have to look at the files more closely.")),
            unless_listed=listed,
        ),
        Play("say hello", (Say("Welcome aboard, glad you are here!"),)),
    ]


async def run_demo(out: Console, err: Console, environ: dict[str, str], *, agent: str | None = None) -> int:
    chosen = demo_agent(agent)
    if chosen.kind is not None:
        return await _run_real_agent(out, err, environ, chosen)
    if not EXAMPLE.is_dir():
        raise DemoError(f"the example extension is missing at {EXAMPLE}; run the demo from a clone of the repo")
    state = Path(environ.get("EVAL_RUNNER_STATE") or tempfile.mkdtemp(prefix="eval-runner-demo-"))
    temp_root = _temp_root(environ)
    err.print(OFFLINE_WORDS, markup=False)
    door_key = secrets.token_hex(24)
    try:
        async with StandInDoor(door_key) as door:
            config = _config(environ, state, temp_root, door.url, door_key)
            return await _run(out, err, config, door_key)
    finally:
        remove_tree(temp_root)


async def _run_real_agent(out: Console, err: Console, environ: dict[str, str], chosen: DemoAgent) -> int:
    assert chosen.kind is not None
    if not chosen.example.is_dir():
        raise DemoError(f"the example skill is missing at {chosen.example}; run the demo from a clone of the repo")
    state = Path(environ.get("EVAL_RUNNER_STATE") or tempfile.mkdtemp(prefix="eval-runner-demo-"))
    temp_root = _temp_root(environ)
    err.print(
        f"This demo runs offline: the agent is the real {chosen.kind}, in the sandbox, and the model door is a "
        "stand-in that scripts its answers. Nothing leaves this computer.",
        markup=False,
    )
    door_key = secrets.token_hex(24)
    # The built-in agent speaks the coder contract's Responses door: the stand-in door's table answers it.
    builtin = chosen.kind is AgentKind.BUILTIN
    opened = StandInDoor(door_key) if builtin else ScriptedDoor(door_key, demo_plays(chosen.kind))
    try:
        async with opened as door:
            config = _config(environ, state, temp_root, door.url, door_key, chosen)
            return await _run(out, err, config, door_key, chosen)
    finally:
        remove_tree(temp_root)


def _config(
    environ: Mapping[str, str],
    state: Path,
    temp_root: Path,
    door_url: str,
    door_key: str,
    chosen: DemoAgent | None = None,
) -> Config:
    chosen = chosen or DemoAgent()
    settings = {
        "HOME": environ.get("HOME", str(state)),
        "EVAL_RUNNER_STATE": str(state),
        "EVAL_RUNNER_TMP": str(temp_root),
        "EVAL_RUNNER_CATALOG": str(chosen.example),
        "EVAL_RUNNER_CODER": str(AGENT),
        "EVAL_RUNNER_LISTEN": f"127.0.0.1:{_free_port()}",
        "EVAL_RUNNER_BLOSSOM_LISTEN": f"127.0.0.1:{_free_port()}",
        "CODER_DOOR_URL": door_url,
        "CODER_DOOR_KEY": door_key,
        "CODER_MODEL": "stand-in",
    }
    if chosen.kind is not None:
        settings["EVAL_RUNNER_AGENT"] = chosen.setting
    try:
        return dataclasses.replace(Config.from_env(settings), stand_in_door=True)
    except ConfigError as error:
        raise DemoError(str(error)) from None


async def _run(out: Console, err: Console, config: Config, door_key: str, chosen: DemoAgent | None = None) -> int:
    chosen = chosen or DemoAgent()
    subscribed = asyncio.Event()

    def log(line: str) -> None:
        if line == SUBSCRIBED:
            subscribed.set()
        err.print(f"runner: {line}", style="dim", markup=False, soft_wrap=True)

    stop, hurry = asyncio.Event(), asyncio.Event()
    showing = lines_to(log)
    showing.__enter__()
    server = asyncio.create_task(serve(config, stop=stop, hurry=hurry))
    try:
        await _started(server, subscribed)
        runner = load_key(config.key_file).public_key().to_hex()
        release = await _release_starter(config, log, chosen.example)
        code = await _send_one_run(out, err, config.relay_url, runner, release, chosen)
        _show_paths(out, config.state)
        err.print(REAL_WORDS, markup=False)
        return code
    finally:
        stop.set()
        hurry.set()
        with contextlib.suppress(ServeError, asyncio.CancelledError):
            await asyncio.wait_for(server, START_SECONDS)
        showing.__exit__(None, None, None)


async def _started(server: asyncio.Task[None], subscribed: asyncio.Event) -> None:
    waiting = asyncio.ensure_future(subscribed.wait())
    try:
        done, _ = await asyncio.wait({server, waiting}, timeout=START_SECONDS, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()
    if server in done:
        error = server.exception()
        raise DemoError(f"the runner stopped before it listened: {error}" if error else "the runner stopped early")
    if not subscribed.is_set():
        raise DemoError(f"the runner did not subscribe within {START_SECONDS:g} s")


async def _release_starter(config: Config, log: Callable[[str], None], example: Path = EXAMPLE) -> str:
    """The example's starter test set released by the runner key (as `eval-runner release` does): its id."""
    try:
        released = await release_all(config, [example], lambda line: log(f"release {line}"))
    except EvalRunnerError as error:
        raise DemoError(f"the starter test set was not released: {error}") from None
    return released[-1].event.id


async def _send_one_run(
    out: Console, err: Console, relay_url: str, runner: str, release: str, chosen: DemoAgent | None = None
) -> int:
    chosen = chosen or DemoAgent()
    try:
        tool = extension_tool(chosen.example)
        err.print(
            f"trainer: sending one hosted run of {tool.name} with its published test set {release[:12]}… "
            f"({RUNS} runs per arm) to {runner[:12]}…"
        )
        async with Trainer(relay_url, SecretKey.generate(), runner) as trainer:
            value = published_run_input(await trainer.suite_release(release), tool.definition, runs=RUNS)
            request = trainer.request(value)
            with RunView(err, live=True) as view:
                answer = trainer.follow(request, view.show)
                view.sending(request)
                await trainer.send(request)
                await trainer.wait(answer, RUN_SECONDS)
            shown, report_error = await report_view(trainer, answer)
    except TrainerError as error:
        raise DemoError(str(error)) from None
    show_run(out, answer, shown, report_error, RUN_SECONDS, stand_ins=chosen.stand_ins)
    return 0 if answer.output is not None and report_error is None else 1


def _show_paths(out: Console, state: Path) -> None:
    """Where the runner kept the report: its results directory under the state's jobs."""
    for html in sorted(state.glob("jobs/*/results/*/report.html")):
        out.print(f"report  {html.with_name('report.json')}", markup=False, soft_wrap=True)
        out.print(f"html    {html}", markup=False, soft_wrap=True)
    out.print(f"state   {state}", markup=False, soft_wrap=True)
