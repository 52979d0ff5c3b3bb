"""`eval-runner eval run`: an extension's `evals/` in both arms on this computer, through the same engine.

A local run differs from a hosted one only in who it is by (the local key), which agent and door it uses
(the stand-ins unless told otherwise, and then the report says so) and where it writes; those choices live
here so the command line stays parsing and printing. Door keys are read from the environment only (the
decision door as `serve` reads it) and never printed or kept. See docs/decisions.md, "`eval run`".
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import secrets
import signal
import stat
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from eval_runner import stand_ins
from eval_runner.engine.agents import (
    BUILTIN_AGENT,
    AgentChoice,
    AgentChoiceError,
    AgentKind,
    adapter_for,
    parse_choice,
)
from eval_runner.engine.agents.install import installed
from eval_runner.engine.grade.doors import DoorApi, judge_door
from eval_runner.engine.grade.spec import DecisionGrader
from eval_runner.engine.grade.votes import Doors
from eval_runner.engine.report.build import ReportError
from eval_runner.engine.report.inputs import StandIn
from eval_runner.engine.report.results_dir import ResultsError
from eval_runner.engine.run.collect import remove_tree
from eval_runner.engine.run.confinement import probe
from eval_runner.engine.run.leftovers import mark_owner, sweep
from eval_runner.engine.run.sandbox import SANDBOX_UID, Unconfined
from eval_runner.engine.suite_run import (
    DoorSettings,
    ProgressCallback,
    SuiteAuthor,
    SuiteOutcome,
    SuitePlan,
    plan_attempts,
    run_suite,
)
from eval_runner.engine.testset.cases import Suite
from eval_runner.engine.testset.catalog import LOCAL_KEY, PACKAGE_FILE, CatalogError, Tool, resolve_extension
from eval_runner.engine.testset.foreign import FormatError
from eval_runner.engine.testset.formats import load_test_set
from eval_runner.engine.testset.frontmatter import TestSetError
from eval_runner.engine.testset.skills import (
    PROGRAM_AGENT,
    SKILL_FILE,
    ProgramsLeftOut,
    is_skill_dir,
    programs_left_out,
)
from eval_runner.errors import EvalRunnerError
from eval_runner.service.config import read_decision
from eval_runner.service.requests.suites import decision_door
from eval_runner.service.settings import ChatDoor, DecisionPin, Secret, os_error_text
from eval_runner.stand_ins.door import StandInDoor

#: Where the test set lives in an extension directory.
EVALS_DIR = "evals"
DEFAULT_KEY_ENV = "CODER_DOOR_KEY"
DEFAULT_MODEL = "stand-in"
DEFAULT_OUT = Path("eval-results")
DEFAULT_CONCURRENCY = 4
RUNS_RANGE = (1, 10)
CONCURRENCY_RANGE = (1, 8)
#: The suite component a local run names (`<author>:<slug>-tests/suite`).
COMPONENT = "suite"
#: The longest temp root whose door sockets fit: `<root>/oa-eval-XXXXXXXX/door/decision` ≤ 107 bytes.
MAX_TEMP_ROOT_BYTES = 107 - len("/oa-eval-XXXXXXXX/door/decision")
STAND_IN_AGENT = stand_ins.AGENT
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_T = TypeVar("_T")


class LocalEvalError(EvalRunnerError):
    """Bad input or a host that cannot run the suite; `str()` is one plain line for a person."""

    def __init__(self, message: str) -> None:
        self.message = " ".join(message.split())
        super().__init__(self.message)


@dataclass(frozen=True, slots=True)
class EvalRunOptions:
    """What `eval run` was asked, before anything is checked. `runs` None: each case's own runs."""

    extension: Path
    runs: int | None = None
    agent: Path | None = None
    door_url: str | None = None
    door_key_env: str | None = None
    model: str | None = None
    concurrency: int = DEFAULT_CONCURRENCY
    out: Path = DEFAULT_OUT
    #: `--agent-kind KIND[:PATH]` (`engine/agents`): None is the coder contract.
    agent_kind: str | None = None
    #: `--door-api`: the API the door speaks (`DoorApi`); None: Anthropic's for Claude Code, else Responses.
    door_api: str | None = None


@dataclass(frozen=True, slots=True)
class LocalEval:
    """A checked local run, ready to start: the tool, its suite, the agent, the door and the options.

    `door` is None for the in-process stand-in door; `decision` the decision door's pin from the
    environment (None: decision graders fail, as in a runner without one); `stand_ins` the parts that are
    stand-ins, which the report says; `notices` are what the person should know before it starts, one line
    each, for stderr.
    """

    tool: Tool
    suite: Suite
    agent: Path
    door: DoorSettings | None
    model: str
    runs: int | None
    concurrency: int
    results_base: Path
    temp_base: Path
    notices: tuple[str, ...] = field(default=())
    stand_ins: frozenset[StandIn] = frozenset()
    decision: DecisionPin | None = None
    #: Which agent `agent` is (`--agent-kind`); None or `coder`: the child contract.
    agent_choice: AgentChoice | None = None
    #: The API the judge graders speak to the door.
    door_api: DoorApi = DoorApi.RESPONSES

    @property
    def planned(self) -> int:
        """Attempts this run will make (both arms, every repeat): the progress total."""
        return len(plan_attempts(self.suite, self.tool.subject, self.runs))

    @property
    def author(self) -> SuiteAuthor:
        """The local identity (module docstring)."""
        return SuiteAuthor(
            author=self.tool.definition.author,
            package=f"{self.tool.subject.slug}-tests",
            component=COMPONENT,
            evaluator=LOCAL_KEY,
        )

    def plan(self, door: DoorSettings, temp_root: Path) -> SuitePlan:
        """The engine's plan for this run through `door`, with run directories under `temp_root`."""
        return SuitePlan(
            suite=self.suite,
            subject=self.tool.subject,
            agent=self.agent,
            door=door,
            author=self.author,
            temp_root=temp_root,
            results_base=self.results_base,
            runs=self.runs,
            concurrency=self.concurrency,
            subject_definition=self.tool.record,
            hosted=False,
            stand_ins=self.stand_ins,
            extra_secrets=self.decision_keys,
            adapter=None if self.agent_choice is None else adapter_for(self.agent_choice, self.agent),
            programs_run=self.agent_kind == PROGRAM_AGENT,
            extra_limitations=() if self.programs_left_out is None else (self.programs_left_out.limitation,),
        )

    @property
    def agent_kind(self) -> str:
        """The chosen agent's kind: `coder` when none was chosen (the child contract)."""
        return PROGRAM_AGENT if self.agent_choice is None else self.agent_choice.kind.value

    @property
    def programs_left_out(self) -> ProgramsLeftOut | None:
        """What to say when the chosen agent is not `coder` and the extension has programs: they do not go in."""
        return programs_left_out([program.slug for program in self.tool.subject.programs], self.agent_kind)

    @property
    def decision_keys(self) -> tuple[str, ...]:
        """The decision door's keys, scrubbed from what the runs keep as the chat door's is."""
        if self.decision is None:
            return ()
        return tuple(dict.fromkeys(pin.key.expose() for pin in self.decision.doors))


def prepare(options: EvalRunOptions, environ: Mapping[str, str]) -> LocalEval:
    """Check everything that can be checked before a sandbox starts; `environ` is the process environment.

    Raises:
        LocalEvalError: a directory that is not an extension, a test set that does not load, an agent
            that is not an executable file, a door URL or key that is missing or malformed, or an option
            out of range.
    """
    _in_range("--runs", options.runs, RUNS_RANGE)
    _in_range("--concurrency", options.concurrency, CONCURRENCY_RANGE)
    tool = _tool(options.extension)
    notices: list[str] = []
    suite = _suite(Path(os.path.abspath(tool.root)), tool, notices)
    choice = _agent_choice(options.agent_kind)
    model = options.model or environ.get("CODER_MODEL") or DEFAULT_MODEL
    door_notices: list[str] = []  # said after the agent's
    door = _door_settings(options, environ, model, door_notices)
    if choice is None and options.agent is None and not environ.get("EVAL_RUNNER_CODER") and door is not None:
        # A real door and no agent named: the built-in agent, a real one, rather than the stand-in.
        notices.append(f"agent: the built-in agent ({BUILTIN_AGENT}); --agent-kind chooses another")
        choice = AgentChoice(AgentKind.BUILTIN)
    if choice is None or choice.kind is AgentKind.CODER:
        agent = _agent(options.agent or (None if choice is None else choice.path), environ, notices)
    elif choice.kind is AgentKind.BUILTIN:
        agent = _executable(options.agent or choice.program() or BUILTIN_AGENT, "the built-in agent")
    else:
        agent = _real_agent(choice, options.agent)
        if options.door_url is None:
            raise LocalEvalError(
                f"--agent-kind {choice.kind} talks to a real model: give --door-url and --door-key-env"
            )
    notices.extend(door_notices)
    door_api = _door_api(options.door_api, choice, door)
    programs = [program.slug for program in tool.subject.programs]
    if choice is not None and (left_out := programs_left_out(programs, choice.kind.value)) is not None:
        notices.append(left_out.notice)
    decision = _decision(suite, door, model, environ, notices)
    out = Path(os.path.abspath(options.out))
    if out.exists() and not out.is_dir():
        raise LocalEvalError(f"--out {out} is not a directory")
    temp_base = Path(environ.get("EVAL_RUNNER_TMP") or "/tmp")  # noqa: S108 - a short base; see the docstring
    if not temp_base.is_dir():
        raise LocalEvalError(f"EVAL_RUNNER_TMP={temp_base} is not a directory")
    if swept := sweep((temp_base,), prefixes=("er-",)):
        notices.append(swept.line())
    stand_ins = {StandIn.DOOR} if door is None else set()
    if _is_stand_in_agent(agent):
        stand_ins.add(StandIn.AGENT)
    return LocalEval(
        tool=tool,
        suite=suite,
        agent=agent,
        door=door,
        model=model,
        runs=options.runs,
        concurrency=options.concurrency,
        results_base=out,
        temp_base=temp_base,
        notices=tuple(notices),
        stand_ins=frozenset(stand_ins),
        decision=decision,
        agent_choice=choice,
        door_api=door_api,
    )


def _door_api(given: str | None, choice: AgentChoice | None, door: DoorSettings | None) -> DoorApi:
    """`--door-api`, else Anthropic Messages for Claude Code (its door speaks only that), else Responses."""
    if given is None:
        return DoorApi.ANTHROPIC if choice is not None and choice.anthropic_door else DoorApi.RESPONSES
    try:
        api = DoorApi(given)
    except ValueError:
        known = ", ".join(item.value for item in DoorApi)
        raise LocalEvalError(f"--door-api {given!r} is not one of {known}") from None
    if door is None and api is not DoorApi.RESPONSES:
        raise LocalEvalError(f"--door-api {api}: the offline stand-in door speaks only responses; give --door-url")
    return api


def _agent_choice(text: str | None) -> AgentChoice | None:
    if text is None:
        return None
    try:
        return parse_choice(text)
    except AgentChoiceError as error:
        raise LocalEvalError(f"--agent-kind: {error.message}") from None


def _real_agent(choice: AgentChoice, given: Path | None) -> Path:
    """Claude Code's or Codex's binary: `--agent`, the kind's own path, or the one `scripts/agents` installed."""
    if given is not None or choice.path is not None:
        return _executable(given or choice.path or Path(), f"the {choice.kind} agent")
    found = choice.program() or Path()
    if not installed(found):
        raise LocalEvalError(f"{choice.kind} is not installed at {found}: run scripts/agents, or give its path")
    return found


async def run_local(
    local: LocalEval,
    *,
    on_progress: ProgressCallback | None = None,
    cancel: asyncio.Event | None = None,
    bwrap: str | None = None,
) -> SuiteOutcome:
    """Probe confinement, open the door (the stand-in when none was given) and run the suite.

    `bwrap` overrides where bubblewrap is looked for. Raises `LocalEvalError` when the host cannot
    confine runs (nothing is run) or the results cannot be written.
    """
    began = time.monotonic()
    async with _temp_root(local.temp_base) as temp_root:
        confinement = await probe(temp_root, bwrap=bwrap)
        if isinstance(confinement, Unconfined):
            raise LocalEvalError(f"this host cannot confine the agent's runs, so nothing ran: {confinement.reason}")
        try:
            await asyncio.to_thread(local.results_base.mkdir, parents=True, exist_ok=True)
        except OSError as error:
            raise LocalEvalError(f"--out {local.results_base}: {os_error_text(error)}") from None
        async with _open_door(local) as door:
            doors = Doors(
                decision=decision_door(local.decision),
                judge=judge_door(local.door_api, door.url, door.key, door.model),
            )
            setup_seconds = time.monotonic() - began
            try:
                outcome = await run_suite(
                    local.plan(door, temp_root),
                    confinement=confinement,
                    doors=doors,
                    on_progress=on_progress,
                    cancel=cancel,
                )
                return dataclasses.replace(outcome, setup_seconds=setup_seconds)
            except (ReportError, ResultsError) as error:
                raise LocalEvalError(f"the run finished but its results could not be written: {error}") from None
            except OSError as error:
                raise LocalEvalError(f"the run could not go on: {os_error_text(error)}") from None


def run_blocking(
    work: Callable[[asyncio.Event], Coroutine[Any, Any, _T]],
    *,
    on_interrupt: Callable[[], None] | None = None,
) -> _T:
    """Run `work(cancel)` on a fresh event loop. The first Ctrl-C sets `cancel` (the suite stops
    starting runs and writes a partial report) and calls `on_interrupt`; a second one interrupts at
    once (`KeyboardInterrupt`)."""

    async def main() -> _T:
        cancel = asyncio.Event()
        loop = asyncio.get_running_loop()

        def stop() -> None:
            cancel.set()
            loop.remove_signal_handler(signal.SIGINT)
            if on_interrupt is not None:
                on_interrupt()

        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, stop)
        try:
            return await work(cancel)
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signal.SIGINT)

    return asyncio.run(main())


# --- checking the input --------------------------------------------------------------------------


def _in_range(flag: str, value: int | None, bounds: tuple[int, int]) -> None:
    if value is not None and not bounds[0] <= value <= bounds[1]:
        raise LocalEvalError(f"{flag} must be from {bounds[0]} to {bounds[1]}")


def _tool(directory: Path) -> Tool:
    root = Path(os.path.abspath(directory))
    if not root.is_dir():
        raise LocalEvalError(f"{root} is not a directory")
    if not (root / PACKAGE_FILE).is_file() and not is_skill_dir(root):
        raise LocalEvalError(f"{root} is not an extension directory: it has no {PACKAGE_FILE} or {SKILL_FILE}")
    try:
        return resolve_extension(root)
    except CatalogError as error:
        raise LocalEvalError(f"{root} does not resolve as an extension: {error.message}") from None


def _suite(root: Path, tool: Tool, notices: list[str]) -> Suite:
    """The test set in whichever format the extension has (`engine/testset/formats.py`)."""
    evals = root / EVALS_DIR
    skill_name = tool.name if is_skill_dir(root) else None
    try:
        loaded = load_test_set(root, skill_name=skill_name)
    except TestSetError as error:
        file = Path(error.file)
        where = str(file if file.is_absolute() else (root if isinstance(error, FormatError) else evals) / file)
        if error.line is not None:
            where += f":{error.line}"
        if isinstance(error, FormatError) and error.key is not None:
            where += f": {error.key}"
        raise LocalEvalError(f"the test set does not load: {where}: {error.message}") from None
    notices.extend(loaded.notices)
    return loaded.suite


def _agent(given: Path | None, environ: Mapping[str, str], notices: list[str]) -> Path:
    if given is not None:
        return _executable(given, "--agent")
    from_env = environ.get("EVAL_RUNNER_CODER")
    if from_env:
        return _executable(Path(from_env), "EVAL_RUNNER_CODER")
    notices.append(
        f"agent: the stand-in agent ({STAND_IN_AGENT}), which does no reasoning; "
        "pass --agent PATH or set EVAL_RUNNER_CODER to run a real agent"
    )
    return _executable(STAND_IN_AGENT, "the stand-in agent")


def _is_stand_in_agent(agent: Path) -> bool:
    """Whether `agent` is the stand-in agent's file, however it was named (the default, --agent or the env)."""
    try:
        return os.path.samefile(agent, STAND_IN_AGENT)
    except OSError:
        return False


def _executable(path: Path, what: str) -> Path:
    absolute = Path(os.path.abspath(path))
    if not absolute.is_file() or not os.access(absolute, os.X_OK):
        raise LocalEvalError(f"{what} {absolute} is not an executable file")
    return absolute


def _door_settings(
    options: EvalRunOptions, environ: Mapping[str, str], model: str, notices: list[str]
) -> DoorSettings | None:
    key_env = options.door_key_env
    if key_env is not None and not _ENV_NAME.fullmatch(key_env):
        raise LocalEvalError(f"--door-key-env {key_env!r} is not an environment variable name")
    if options.door_url is None:
        if key_env is not None:
            raise LocalEvalError("--door-key-env names the key of a real door; give its --door-url too")
        notices.append(
            "door: an offline stand-in with canned answers, not a model; to use a real door pass "
            f"--door-url URL --door-key-env NAME (the key is read from $NAME, default {DEFAULT_KEY_ENV})"
        )
        return None
    url = options.door_url.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise LocalEvalError(f"--door-url {url!r} is not an http or https URL with a host")
    name = key_env or DEFAULT_KEY_ENV
    key = environ.get(name, "")
    if not key.strip():
        raise LocalEvalError(f"the door key is missing: set ${name} (--door-key-env names the variable)")
    return DoorSettings(url=url.rstrip("/"), key=key, model=model)


def _decision(
    suite: Suite, door: DoorSettings | None, model: str, environ: Mapping[str, str], notices: list[str]
) -> DecisionPin | None:
    """The decision door `serve` would have in this environment (TYPESAFE_API_KEY and its fallbacks)."""
    chat = (
        ChatDoor(url="", model=model, key=Secret("")) if door is None else ChatDoor(door.url, model, Secret(door.key))
    )
    pin = read_decision(environ, chat)
    asks = any(isinstance(grader, DecisionGrader) for case in suite.cases for grader in case.graders)
    if pin is not None:
        notices.append(f"decision door: {pin.describe()}")
    elif asks:
        notices.append(
            "decision door: none, so this test set's decision graders fail; set TYPESAFE_API_KEY "
            "(and TYPESAFE_BASE_URL, AI_GATEWAY_API_KEY, OPENROUTER_API_KEY as for serve) to give them one"
        )
    return pin


# --- the run's surroundings ----------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _temp_root(base: Path) -> AsyncIterator[Path]:
    try:
        made = Path(tempfile.mkdtemp(prefix="er-", dir=base)).resolve()
    except OSError as error:
        raise LocalEvalError(f"cannot make a temp directory in {base}: {os_error_text(error)}") from None
    try:
        if len(os.fsencode(made)) > MAX_TEMP_ROOT_BYTES:
            raise LocalEvalError(
                f"the temp directory {made} is too long for the run's door sockets "
                f"(at most {MAX_TEMP_ROOT_BYTES} bytes); point EVAL_RUNNER_TMP at a shorter path"
            )
        os.chmod(made, 0o755)  # noqa: S103 - the sandbox's uid must reach its run directories
        mark_owner(made)
        if os.geteuid() == 0:
            closed = next((path for path in made.parents if not os.stat(path).st_mode & stat.S_IXOTH), None)
            if closed is not None:
                raise LocalEvalError(
                    f"the sandbox's user (uid {SANDBOX_UID}) cannot reach {made}: {closed} is not searchable "
                    "by others; point EVAL_RUNNER_TMP at a directory it can reach, such as one under /tmp"
                )
        yield made
    finally:
        await asyncio.to_thread(remove_tree, made)


@contextlib.asynccontextmanager
async def _open_door(local: LocalEval) -> AsyncIterator[DoorSettings]:
    if local.door is not None:
        yield local.door
        return
    key = secrets.token_urlsafe(32)
    async with StandInDoor(key) as door:
        yield DoorSettings(url=door.url, key=key, model=local.model)
