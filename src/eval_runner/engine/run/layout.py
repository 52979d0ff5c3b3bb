"""A run's directory on the host and what the agent sees of the host (runner.md §13.4 step 3, §13.5).

`lay_out` makes the run directory (`<temp root>/oa-eval-XXXXXX`: `home/`, `home/cwd/` with the case's
fixtures, `home/.openagents/`, `out/`, `tmp/`, `door/`, `prompt.md`, `guidance.md`), owned by the
sandbox's uid where it may write; `visible_paths` is everything else the sandbox binds read-only: the agent,
a script's interpreter and its install's libraries, and the caller's extras, never a path that holds or
lies in the temp root, the state or the results (decisions.md, "Sandbox threat model").
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from eval_runner.engine.run.collect import remove_tree, signature
from eval_runner.engine.run.leftovers import mark_owner
from eval_runner.engine.run.sandbox import Confinement
from eval_runner.engine.testset.cases import Operation
from eval_runner.errors import EvalRunnerError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
#: The library directories of an interpreter's install that a script's interpreter may need.
_LIBRARY_DIRS = ("lib", "lib64", "lib32")


class LayoutSpec(Protocol):
    """What laying a run out reads of its spec (`engine/run/turn.RunSpec` is one)."""

    @property
    def agent(self) -> Path: ...
    @property
    def prompt(self) -> str: ...
    @property
    def temp_root(self) -> Path: ...
    @property
    def fixtures(self) -> tuple[tuple[str, bytes], ...]: ...
    @property
    def grants(self) -> frozenset[Operation]: ...
    @property
    def guidance(self) -> str | None: ...
    @property
    def programs(self) -> tuple[tuple[str, bytes], ...]: ...
    @property
    def questions(self) -> tuple[tuple[str, bytes], ...]: ...
    @property
    def read_only_paths(self) -> tuple[Path, ...]: ...
    @property
    def hidden(self) -> tuple[Path, ...]: ...


class RefusedError(EvalRunnerError):
    """The run directory or a door cannot be set up: the run is `errored(refused)`."""


@dataclass(slots=True)
class Layout:
    root: Path
    agent: Path
    before: dict[str, str] = field(default_factory=dict)

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def cwd(self) -> Path:
        return self.root / "home" / "cwd"

    @property
    def openagents(self) -> Path:
        return self.root / "home" / ".openagents"

    @property
    def out(self) -> Path:
        return self.root / "out"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def door(self) -> Path:
        return self.root / "door"


def lay_out(spec: LayoutSpec, confinement: Confinement) -> Layout:
    owner = confinement.owner()
    write = Operation.WRITE in spec.grants
    try:
        root = Path(tempfile.mkdtemp(prefix="oa-eval-", dir=spec.temp_root)).resolve()
    except OSError as exc:
        raise RefusedError(f"cannot make the run directory in {spec.temp_root}: {exc.strerror}") from None
    layout = Layout(root, Path(os.path.abspath(spec.agent)))
    try:
        os.chmod(root, 0o755)  # noqa: S103 - the sandbox user reads it; nothing secret is in it
        mark_owner(root)
        if owner is not None and not reachable(layout.agent, *owner):
            layout.agent = _staged_agent(layout.agent, root)
        _make_dir(layout.home, 0o755, None)
        _make_dir(layout.cwd, 0o755, owner if write else None)
        for directory in (layout.openagents, layout.openagents / "questions", layout.openagents / "programs"):
            _make_dir(directory, 0o755, owner)
        _make_dir(layout.out, 0o755, owner)
        _make_dir(layout.out / "trace", 0o755, owner)
        _make_dir(layout.tmp, 0o700, owner)
        _make_dir(layout.door, 0o755, None)
        _write(root / "prompt.md", spec.prompt.encode(), None)
        if spec.guidance is not None:
            _write(root / "guidance.md", spec.guidance.encode(), None)
        for slug, data in named(spec.programs, "program slug"):
            _write(layout.openagents / "programs" / f"{slug}.json", data, owner)
        for name, data in named(spec.questions, "question set name"):
            _write(layout.openagents / "questions" / name, data, owner)
        for path, data in spec.fixtures:
            parts = _fixture_parts(path)
            directory = layout.cwd
            for part in parts[:-1]:
                directory = directory / part
                if not directory.is_dir():
                    _make_dir(directory, 0o755, owner if write else None)
            _write(directory / parts[-1], data, owner if write else None)
            layout.before["/".join(parts)] = signature(data)
    except (OSError, RefusedError) as exc:
        remove_tree(root)
        if isinstance(exc, RefusedError):
            raise
        raise RefusedError(f"cannot lay out the run directory: {exc.strerror or exc}") from None
    return layout


def named(items: Sequence[tuple[str, bytes]], what: str) -> list[tuple[str, bytes]]:
    seen: dict[str, bytes] = {}
    for name, data in items:
        if not _NAME.fullmatch(name):
            raise RefusedError(f"{what} {name!r} is not a plain file name")
        seen.setdefault(name, data)
    return list(seen.items())


def _fixture_parts(path: str) -> list[str]:
    parts = path.split("/")
    if not path or "\0" in path or any(part in ("", ".", "..") for part in parts):
        raise RefusedError(f"fixture path {path!r} escapes cwd/")
    return parts


def _make_dir(path: Path, mode: int, owner: tuple[int, int] | None) -> None:
    path.mkdir(mode=mode)
    os.chmod(path, mode)
    if owner is not None:
        os.chown(path, *owner)


def _write(path: Path, data: bytes, owner: tuple[int, int] | None) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
        os.fchmod(fd, 0o644)
        if owner is not None:
            os.fchown(fd, *owner)


def writable_paths(layout: Layout, grants: frozenset[Operation]) -> tuple[Path, ...]:
    """runner.md §13.5: `home/.openagents/`, `out/`, `tmp/`, and `home/cwd/` when write is granted."""
    writable = (layout.openagents, layout.out, layout.tmp)
    return (*writable, layout.cwd) if Operation.WRITE in grants else writable


def visible_paths(spec: LayoutSpec, layout: Layout, confinement: Confinement) -> tuple[Path, ...]:
    """What the agent sees besides the allowlist and its run directory: the agent at its own path, a
    script's interpreter and the libraries of its install when the allowlist does not already show it,
    and the caller's extras. Never a path that holds, or lies in, the temp root (every run's
    directories) or one of `spec.hidden` (state, results): a refused path is left out, so an agent
    that needs it fails to start rather than seeing what it must not."""
    wanted = [layout.agent]
    interpreter = _interpreter(layout.agent)
    if interpreter is not None and not _visible(interpreter, confinement):
        wanted += interpreter_paths(Path(interpreter))
    wanted += [Path(os.path.abspath(path)) for path in spec.read_only_paths]
    hidden = [Path(os.path.realpath(path)) for path in (spec.temp_root, *spec.hidden)]
    visible: list[Path] = []
    for path in dict.fromkeys(wanted):
        real = Path(os.path.realpath(path))
        if real == layout.root or layout.root in real.parents:
            continue  # in this run's own directory, which is visible already
        if any(real == root or root in real.parents or real in root.parents for root in hidden):
            continue
        visible.append(path)
    return tuple(visible)


def interpreter_paths(interpreter: Path) -> list[Path]:
    """A script's interpreter and what it needs: the file at the path the script names and at its real
    path, and, for an interpreter inside an install (`<prefix>/bin/<file>`), that install's library
    directories, and a Python virtual environment's `pyvenv.cfg`. Never the prefix itself: `<prefix>`
    may be a home or shared directory that holds anything."""
    real = Path(os.path.realpath(interpreter))
    paths = [interpreter, real]
    prefixes = [file.parent.parent for file in (real, interpreter) if file.parent.name == "bin"]
    for prefix in dict.fromkeys(prefixes):
        if (prefix / "pyvenv.cfg").is_file():
            paths.append(prefix / "pyvenv.cfg")
        paths += [prefix / name for name in _LIBRARY_DIRS if (prefix / name).is_dir()]
    return list(dict.fromkeys(paths))


def reachable(path: Path, uid: int, gid: int) -> bool:
    """Can `uid`/`gid` (without capabilities) search every directory above `path` and read it? (Whether it
    may be run is the file's own business: a non-runnable agent fails to start wherever it lies.)"""
    try:
        checks = [(parent, stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH) for parent in reversed(path.parents)]
        checks.append((path, stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH))
        for where, user, group, other in checks:
            found = os.stat(where)
            need = user if found.st_uid == uid else group if found.st_gid == gid else other
            if found.st_mode & need != need:
                return False
    except OSError:
        return False
    return True


def _staged_agent(agent: Path, root: Path) -> Path:
    """A copy of the agent inside the run directory, for an agent the sandbox user cannot reach where it
    is (a clone under /root, mode 0700, run as root): the same bytes the locks pin, readable and runnable
    by that user. A script's interpreter is found as before, from its `#!` line."""
    staged = root / "agent" / agent.name
    _make_dir(staged.parent, 0o755, None)
    shutil.copyfile(agent, staged)
    # Readable by the sandbox user; runnable only if the original was runnable by someone.
    runnable = os.stat(agent).st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.chmod(staged, 0o755 if runnable else 0o644)
    return staged


def _interpreter(agent: Path) -> str | None:
    try:
        with open(agent, "rb") as file:
            head = file.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].split()
    return os.fsdecode(words[0]) if words and words[0].startswith(b"/") else None


def _visible(path: str, confinement: Confinement) -> bool:
    roots = [*confinement.read_only, *(link for _, link in confinement.links)]
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)
