"""One run: one agent turn, in its sandbox, under the child contract (runner.md §13.4).

`run_once` lays out the run directory (`engine/run/layout.py`), opens the run's door proxies on Unix
sockets inside it, builds the only environment the agent gets, starts the agent in the sandbox, waits
for its exit, the deadline or a cancel, decides the outcome, and collects what it left with every secret
scrubbed. An agent that is not the coder (Claude Code, Codex) gets the same sandbox and door through an
`AgentAdapter` (`engine/agents`): it says the command and environment, and reads the agent's own output
into the trajectory and cost. The workspace (`home/cwd`) stays for file graders until the caller closes the record's
`Workspace`; the rest of the run directory is removed at once. An exit code alone never errors a run; the
outcomes beyond the reference's reasons (`crashed`, `memory_limit`, `disk_limit`, `spawn_failed`,
`sandbox_failed`) are in decisions.md ("The sandbox, the bridge and one run", "The sandbox's memory
budget").
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from eval_runner.engine.run.collect import (
    CreatedFile,
    created_files,
    last_cost,
    read_file,
    remove_tree,
    scrub,
    scrub_text,
    sha256_digest,
)
from eval_runner.engine.run.confined import run_confined
from eval_runner.engine.run.door_proxy import DoorProxy
from eval_runner.engine.run.door_usage import DoorUsage
from eval_runner.engine.run.layout import (
    Layout,
    RefusedError,
    lay_out,
    named,
    visible_paths,
    writable_paths,
)
from eval_runner.engine.run.sandbox import (
    GRACE_SECONDS,
    SANDBOX_USER,
    Confinement,
    Ended,
    Launch,
    Limits,
    Stop,
    Unconfined,
)
from eval_runner.engine.testset.cases import ENV_KEY, Operation
from eval_runner.engine.testset.catalog import Skill

#: Ports the bridge listens on inside the sandbox (its loopback is its own, so any port is free).
CODER_DOOR_PORT = 8401
DECISION_DOOR_PORT = 8402
DEFAULT_DEADLINE_SECONDS = 300.0
#: The trajectory log is read up to this size (trajectory.py's bound).
MAX_TRAJECTORY_BYTES = 64 * 1024 * 1024
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
#: The library directories of an interpreter's install that a script's interpreter may need.
_LIBRARY_DIRS = ("lib", "lib64", "lib32")
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """`completed`, `cancelled` or `errored(<reason>)`; `str()` gives the outcome words."""

    word: Literal["completed", "errored", "cancelled"]
    reason: str | None = None

    def __str__(self) -> str:
        return f"errored({self.reason})" if self.word == "errored" else self.word


COMPLETED = RunOutcome("completed")
CANCELLED = RunOutcome("cancelled")


#: An adapter that raised (a bug, or output its `end` could not read): this run errors, never the suite.
ADAPTER_FAILED = "adapter_failed"


def errored(reason: str) -> RunOutcome:
    return RunOutcome("errored", reason)


class RunDoorProxy(Protocol):
    """A per-run door proxy (`engine/run/door_proxy.py`'s `DoorProxy`): listens on the socket path it was made
    with once started; `token` is the agent's credential; `auth_failed` whether the door refused it."""

    @property
    def token(self) -> str: ...

    @property
    def auth_failed(self) -> bool: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class AgentRoom:
    """What an agent adapter (`engine/agents`) is given to set one run up: the run's directories (`home` is
    the agent's own writable HOME, inside `tmp`), the door as the agent reaches it inside the sandbox (None
    when the run has none), what the agent is asked, the extension's skills (the subject arm
    only), the grants, who must own what it writes (None: the runner itself), and the environment every
    agent gets whatever it is (PATH, locale, TMPDIR, the case's `run.env`)."""

    root: Path
    home: Path
    cwd: Path
    tmp: Path
    out: Path
    door_url: str | None
    door_token: str | None = field(repr=False)
    model: str
    prompt: str
    guidance: str | None
    skills: tuple[Skill, ...]
    grants: frozenset[Operation]
    owner: tuple[int, int] | None
    base_env: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class AgentStart:
    """How an adapter starts its agent: the command (an absolute program first) and its whole environment."""

    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class AgentEnd:
    """What an adapter read from its agent's own output: an ATIF document (or log) and the cost it reported."""

    trajectory: bytes | None
    cost_usd: float | None


class AgentAdapter(Protocol):
    """An agent that is not the coder child contract (`engine/agents`): `start` lays its files out in the
    room (on a worker thread; it may write under `room.home`) and says how to start it; `end` reads what it
    printed (already scrubbed) into a trajectory and a cost. `RunSpec.adapter` None is the coder contract."""

    def start(self, room: AgentRoom) -> AgentStart: ...

    def end(self, stdout: bytes, room: AgentRoom) -> AgentEnd: ...


#: Builds an unstarted proxy listening on the given socket path, e.g.
#: `functools.partial(DoorProxy, door_url, door_key)`.
DoorFactory = Callable[[Path], RunDoorProxy]


@dataclass(frozen=True, slots=True)
class DoorSetup:
    """The run's doors: the model door (`CODER_DOOR_URL`/`CODER_DOOR_KEY`) and, when a decision door is
    pinned, the decision door (`TYPESAFE_BASE_URL`/`TYPESAFE_API_KEY`)."""

    coder: DoorFactory
    decision: DoorFactory | None = None


@dataclass(frozen=True, slots=True)
class RunSpec:
    """Everything one run needs. `fixtures`, `programs` and `questions` are `(path or name, bytes)`;
    `env` is the case's `run.env` (only `OA_EVAL_*` keys may run); `secrets` are the real keys (door,
    decision, fallbacks) to scrub besides the proxies' tokens; `read_only_paths` are extra host paths
    the agent needs to see (the agent itself and a script's interpreter are added on their own);
    `hidden` are directories that must stay out of sight (the temp root always is)."""

    agent: Path
    prompt: str
    model: str
    temp_root: Path
    fixtures: tuple[tuple[str, bytes], ...] = ()
    grants: frozenset[Operation] = frozenset({Operation.READ})
    guidance: str | None = None
    programs: tuple[tuple[str, bytes], ...] = ()
    questions: tuple[tuple[str, bytes], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    deadline_seconds: float = DEFAULT_DEADLINE_SECONDS
    secrets: tuple[str, ...] = ()
    read_only_paths: tuple[Path, ...] = ()
    limits: Limits = field(default_factory=Limits)
    #: Directories no run may see, whatever the agent's path: besides the temp root (every run's
    #: directories), the caller's state and results directories.
    hidden: tuple[Path, ...] = ()
    #: How to start an agent that does not speak the coder contract; None is the contract (`coder`).
    adapter: AgentAdapter | None = None
    #: The extension's skills, given to an adapter's agent as files (the subject arm only).
    skills: tuple[Skill, ...] = ()


class Workspace:
    """The run's working directory, kept for file graders until `close()` removes the run directory."""

    def __init__(self, root: Path, path: Path) -> None:
        self._root = root
        self.path = path

    def close(self) -> None:
        remove_tree(self._root)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Workspace({str(self.path)!r})"


@dataclass(frozen=True, slots=True)
class RunRecord:
    """What one run produced, secrets scrubbed. `created_complete` is False when the workspace held more
    created entries than are recorded; `detail` says why an errored run errored (no secrets)."""

    outcome: RunOutcome
    seconds: float
    cost_usd: float | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    trajectory: bytes | None = None
    created: tuple[CreatedFile, ...] = ()
    created_complete: bool = True
    workspace: Workspace | None = None
    detail: str | None = None
    #: What the model door's answers reported (tokens, cost), when the run's door was a `DoorProxy`.
    door_usage: DoorUsage | None = None


async def run_once(
    spec: RunSpec,
    *,
    confinement: Confinement | Unconfined,
    door: DoorSetup | None,
    cancel: asyncio.Event,
    grace: float = GRACE_SECONDS,
) -> RunRecord:
    """One agent turn under the child contract. Never raises for anything the run itself did; the
    caller's cancellation of this coroutine kills the sandbox and removes the run directory."""
    if cancel.is_set():
        return RunRecord(CANCELLED, 0.0)
    rejected = next((key for key, value in spec.env if not ENV_KEY.fullmatch(key) or "\0" in value), None)
    if rejected is not None:
        detail = f"run.env key {rejected!r} is not OA_EVAL_[A-Z0-9_]* or its value holds a NUL"
        return RunRecord(errored("env_var_rejected"), 0.0, detail=detail)
    if isinstance(confinement, Unconfined):
        return RunRecord(errored("unconfined_host"), 0.0, detail=confinement.reason)
    if Operation.NETWORK in spec.grants:
        return RunRecord(errored("refused"), 0.0, detail="the sandbox has no network to grant")
    try:
        layout = await _off_loop(lay_out, (spec, confinement), undo=lambda made: remove_tree(made.root))
    except RefusedError as exc:
        return RunRecord(errored("refused"), 0.0, detail=str(exc))
    proxies: list[RunDoorProxy] = []
    try:
        try:
            doors = await _open_doors(door, layout, confinement, proxies)
        except RefusedError as exc:
            await _close_all(proxies)
            remove_tree(layout.root)
            return RunRecord(errored("refused"), 0.0, detail=str(exc))
        command: tuple[str, ...] = (
            str(layout.agent),
            "--prompt-file",
            str(layout.root / "prompt.md"),
            "--trace",
            str(layout.out / "trajectory.atif.jsonl"),
            "--json",
        )
        env = _environment(spec, layout, proxies, door)
        room = None
        if spec.adapter is not None:
            room = _room(spec, layout, confinement, proxies, env)
            try:
                started = await _off_loop(spec.adapter.start, (room,))
            except (OSError, ValueError, RefusedError) as exc:
                await _close_all(proxies)
                remove_tree(layout.root)
                return RunRecord(errored("refused"), 0.0, detail=f"cannot set the agent up: {exc}")
            except Exception as exc:  # an adapter's bug: this run errors, never the suite
                await _close_all(proxies)
                remove_tree(layout.root)
                detail = f"cannot set the agent up: {type(exc).__name__}: {exc}"[:400]
                return RunRecord(errored(ADAPTER_FAILED), 0.0, detail=detail)
            command, env = started.command, started.env
        launch = Launch(
            root=layout.root,
            command=command,
            cwd=layout.cwd,
            stdout=layout.out / "stdout.jsonl",
            stderr=layout.out / "stderr.txt",
            home=layout.home if room is None else room.home,
            writable=writable_paths(layout, spec.grants),
            read_only=visible_paths(spec, layout, confinement),
            env=env,
            doors=tuple(doors),
            deadline_seconds=spec.deadline_seconds,
            limits=spec.limits,
        )
        ended = await run_confined(confinement, launch, cancel=cancel, grace=grace)
        auth_failed = any(proxy.auth_failed for proxy in proxies)
        usage = proxies[0].usage if proxies and isinstance(proxies[0], DoorProxy) else None
    except BaseException:
        await _close_all(proxies)
        remove_tree(layout.root)
        raise
    await _close_all(proxies)
    secrets = _secret_bytes(spec, proxies)
    try:
        record = await _off_loop(_record, (ended, auth_failed, layout, secrets, spec.adapter, room))
    except BaseException:
        remove_tree(layout.root)
        raise
    if usage is None:
        return record
    # An agent that reports no cost (Codex, the built-in agent) is costed by what the door said, if it said.
    cost = record.cost_usd if record.cost_usd is not None else usage.cost_usd
    return dataclasses.replace(record, door_usage=usage, cost_usd=cost)


async def _off_loop(
    function: Callable[..., _T], args: tuple[Any, ...], *, undo: Callable[[_T], object] | None = None
) -> _T:
    """Blocking file work (laying out, hashing, reading back) in a thread, so concurrent runs and their
    door proxies never wait on it. A caller cancelled meanwhile still waits for the work to end (it
    touches the run directory the caller then removes), and `undo` gets what it made."""
    work = asyncio.ensure_future(asyncio.to_thread(function, *args))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            made = await work
            if undo is not None:
                undo(made)
        raise


def _record(
    ended: Ended,
    auth_failed: bool,
    layout: Layout,
    secrets: Sequence[bytes],
    adapter: AgentAdapter | None = None,
    room: AgentRoom | None = None,
) -> RunRecord:
    outcome, detail = _outcome(ended, auth_failed)
    stdout = scrub(ended.stdout, secrets)
    cost = last_cost(stdout)
    if adapter is not None and room is not None:
        try:
            read = adapter.end(stdout, room)
        except Exception as exc:  # an adapter's bug or an output it cannot read: this run errors, not the suite
            trajectory, cost = None, None
            if outcome.word != "cancelled":
                outcome = errored(ADAPTER_FAILED)
                said = scrub_text(f"{type(exc).__name__}: {exc}"[:400], secrets)
                detail = f"the agent's output could not be read: {said}"
        else:
            trajectory, cost = read.trajectory, read.cost_usd
    else:
        trajectory = read_file(layout.out / "trajectory.atif.jsonl", MAX_TRAJECTORY_BYTES)
    created, complete = created_files(layout.cwd, layout.before, secrets)
    for leftover in (layout.out, layout.tmp, layout.openagents, layout.door, layout.root / "agent"):
        remove_tree(leftover)
    return RunRecord(
        outcome=outcome,
        seconds=ended.seconds,
        cost_usd=cost,
        stdout=stdout,
        stderr=scrub(ended.stderr, secrets),
        trajectory=None if trajectory is None else scrub(trajectory, secrets),
        created=created,
        created_complete=complete,
        workspace=Workspace(layout.root, layout.cwd),
        detail=detail,
    )


def _outcome(ended: Ended, auth_failed: bool) -> tuple[RunOutcome, str | None]:
    if ended.stop is Stop.TIMEOUT:
        return errored("timeout"), None
    if (ended.status or "").startswith("overdue "):
        return errored("timeout"), "the sandbox ended itself past the deadline"
    if ended.stop is Stop.CANCELLED:
        return CANCELLED, None
    if ended.stop is Stop.MEMORY:
        held = (ended.memory or 0) >> 20
        return errored("memory_limit"), f"the sandbox's processes held {held} MiB, over the run's memory budget"
    if ended.stop is Stop.DISK:
        return errored("disk_limit"), ended.disk
    if not ended.agent_started:
        if (ended.status or "").startswith("nostart "):
            return errored("spawn_failed"), ended.status
        return errored("sandbox_failed"), ended.status
    if auth_failed:
        return errored("auth_failed"), None
    if ended.signal is not None:
        return errored("crashed"), f"the agent was killed by signal {ended.signal}"
    return COMPLETED, None


# --------------------------------------------------------------------------------------------------
# Doors and environment


async def _open_doors(
    door: DoorSetup | None, layout: Layout, confinement: Confinement, proxies: list[RunDoorProxy]
) -> list[tuple[int, Path]]:
    if door is None:
        return []
    wanted = [(door.coder, CODER_DOOR_PORT, layout.door / "coder")]
    if door.decision is not None:
        wanted.append((door.decision, DECISION_DOOR_PORT, layout.door / "decision"))
    doors: list[tuple[int, Path]] = []
    for factory, port, path in wanted:
        try:
            proxy = factory(path)
            await proxy.start()
        except Exception as exc:  # any failure to open a door refuses the run
            raise RefusedError(f"cannot open the run's door: {exc}") from None
        proxies.append(proxy)
        if (owner := confinement.owner()) is not None:
            os.chown(path, *owner)
        doors.append((port, path))
    return doors


async def _close_all(proxies: Sequence[RunDoorProxy]) -> None:
    for proxy in proxies:
        with contextlib.suppress(Exception):
            await proxy.close()


def _environment(
    spec: RunSpec, layout: Layout, proxies: Sequence[RunDoorProxy], door: DoorSetup | None
) -> tuple[tuple[str, str], ...]:
    """The only variables the agent gets (runner.md §13.4 step 8), in that order, then the case's."""
    path = "/usr/bin:/bin:/usr/sbin:/sbin"
    for extra in ("/opt/homebrew/bin", "/usr/local/bin"):
        if os.path.isdir(extra):
            path += ":" + extra
    env = [
        ("HOME", str(layout.home)),
        ("OPENAGENTS_HOME", str(layout.openagents)),
        ("TMPDIR", str(layout.tmp)),
        ("TMP", str(layout.tmp)),
        ("CODER_TRACE_DIR", str(layout.out / "trace")),
        ("PATH", path),
        ("LANG", "en_US.UTF-8"),
        ("USER", SANDBOX_USER),
        ("LOGNAME", SANDBOX_USER),
        ("TERM", "dumb"),
        ("NO_COLOR", "1"),
        ("GIT_CEILING_DIRECTORIES", str(layout.root)),
        ("GIT_CONFIG_NOSYSTEM", "1"),
    ]
    if proxies:
        env += [("CODER_DOOR_URL", f"http://127.0.0.1:{CODER_DOOR_PORT}"), ("CODER_DOOR_KEY", proxies[0].token)]
    env += [("CODER_MODEL", spec.model), ("CODER_DELEGATE", "off")]
    if Operation.EXEC not in spec.grants:
        env.append(("CODER_SHELL", "off"))
    if door is not None and door.decision is not None and len(proxies) > 1:
        env += [("TYPESAFE_BASE_URL", f"http://127.0.0.1:{DECISION_DOOR_PORT}"), ("TYPESAFE_API_KEY", proxies[1].token)]
    slugs = [slug for slug, _ in named(spec.programs, "program slug")]
    env.append(("CODER_PROGRAMS", ",".join(slugs) or "none"))
    effects = ["reads"]
    if Operation.WRITE in spec.grants:
        effects.append("writes")
    if Operation.EXEC in spec.grants:
        effects.append("subprocesses")
    env.append(("CODER_PROGRAM_EFFECTS", ",".join(effects)))
    if spec.guidance is not None:
        env += [
            ("CODER_GUIDANCE", str(layout.root / "guidance.md")),
            ("CODER_GUIDANCE_DIGEST", sha256_digest(spec.guidance.encode())),
        ]
    env += list(spec.env)
    return tuple(env)


def _room(
    spec: RunSpec,
    layout: Layout,
    confinement: Confinement,
    proxies: Sequence[RunDoorProxy],
    contract_env: tuple[tuple[str, str], ...],
) -> AgentRoom:
    """The room an adapter sets its agent up in: HOME is `tmp/home` (writable, gone with the run), and
    the base environment is the contract's minus its `CODER_*`, `OPENAGENTS_*` and door variables."""
    home = layout.tmp / "home"
    dropped = ("HOME", "OPENAGENTS_HOME", "TYPESAFE_BASE_URL", "TYPESAFE_API_KEY")
    base = tuple((key, value) for key, value in contract_env if not key.startswith("CODER_") and key not in dropped)
    return AgentRoom(
        root=layout.root,
        home=home,
        cwd=layout.cwd,
        tmp=layout.tmp,
        out=layout.out,
        door_url=f"http://127.0.0.1:{CODER_DOOR_PORT}" if proxies else None,
        door_token=proxies[0].token if proxies else None,
        model=spec.model,
        prompt=spec.prompt,
        guidance=spec.guidance,
        skills=spec.skills,
        grants=spec.grants,
        owner=confinement.owner(),
        base_env=(("HOME", str(home)), *base),
    )


def _secret_bytes(spec: RunSpec, proxies: Sequence[RunDoorProxy]) -> list[bytes]:
    secrets = {secret.encode() for secret in spec.secrets if secret}
    secrets |= {proxy.token.encode() for proxy in proxies if proxy.token}
    # Longest first, so a secret that contains another is replaced whole.
    return sorted(secrets, key=len, reverse=True)
