"""Test sets: discovering case directories under `evals/` and loading each case with every rule and
limit of the case format (runner.md "Case/test-set file format").

Every error is a `TestSetError` naming the file (relative to the eval directory) and the key, so a
person can fix a case without reading this code. A case is refused at load for anything that would only
fail later (a name or a fixture the case manifest would refuse, a link anywhere in it); those choices
are in decisions.md ("The test set"). Writing a chat draft out as case files is
`engine/testset/drafts.py`.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Collection
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from eval_runner.contracts.case_id import is_case_id
from eval_runner.contracts.ext_eval import CaseKind as CaseKind  # re-exported: a case's kind
from eval_runner.engine.grade.spec import (
    DecisionGrader,
    FileExistsGrader,
    FocusKind,
    GraderSpec,
    JudgeGrader,
    OperationUsedGrader,
    RegexGrader,
    parse_grader,
)
from eval_runner.engine.testset.frontmatter import (
    CASE_SCHEMA,
    CASE_SCHEMA_PREFIX,
    MAX_NAME_BYTES,
    Table,
    TestSetError,
    check_keys,
    check_name,
    is_blank,
    is_integer,
    lines,
    parse_table,
    split,
    trim,
    trim_start,
    utf8,
)

MAX_FILE_BYTES = 1 << 20
MAX_GRADERS = 64
MAX_FIXTURES = 256
MAX_FIXTURE_PATH_BYTES = 512
RUNS_RANGE = (1, 10)
DEFAULT_RUNS = 3
MAX_DEADLINE_SECONDS = 1800
DEFAULT_DEADLINE_SECONDS = 300
ENV_KEY = re.compile(r"^OA_EVAL_[A-Z0-9_]*$")
PROMPT_FILE, CASE_FILE, GRADERS_DIR, FIXTURES_DIR = "prompt.md", "case.toml", "graders", "fixtures"
PROMPT_KEYS = ("v", "name", "description", "tags", "kind", "extensions", "runs", "run")
CASE_TOML_KEYS = (*PROMPT_KEYS, "graders")
RUN_KEYS = ("prompt", "deadline_seconds", "door", "allowed_operations", "append_instructions", "env")
#: Directory names discovery never enters.
SKIPPED = frozenset({".git", ".openagents", "node_modules", "results"})
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class Operation(StrEnum):
    """An operation class a case asks the run to be granted, in the reference's order."""

    READ = "read"
    WRITE = "write"
    EXEC = "exec"
    NETWORK = "network"


OPERATIONS = tuple(Operation)


@dataclass(frozen=True, slots=True)
class RunSettings:
    """The `[run]` table, resolved: `allowed_operations` always holds `read` and keeps canonical order;
    `env` is as written, sorted by key."""

    prompt: str
    deadline_seconds: int = DEFAULT_DEADLINE_SECONDS
    door: str | None = None
    allowed_operations: tuple[Operation, ...] = (Operation.READ,)
    append_instructions: str | None = None
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class CaseFile:
    """One case file's exact bytes: a grader file (`name` is its file name) or a fixture (`name` is its
    path under `fixtures/`)."""

    name: str
    data: bytes


@dataclass(frozen=True, slots=True)
class CaseFiles:
    """The exact bytes the case was read from, for manifests and results."""

    prompt: bytes
    case_toml: bytes | None
    graders: tuple[CaseFile, ...]
    fixtures: tuple[CaseFile, ...]


@dataclass(frozen=True, slots=True)
class Case:
    """One case, parsed and validated. `name` is its id (unique in the suite); `path` its directory
    relative to the eval directory, `/`-separated; `dir` that directory on disk."""

    name: str
    path: str
    dir: Path
    kind: CaseKind
    description: str | None
    tags: tuple[str, ...]
    extensions: tuple[str, ...]
    runs: int
    run: RunSettings
    graders: tuple[GraderSpec, ...]
    files: CaseFiles

    @property
    def id(self) -> str:
        return self.name

    @property
    def prompt(self) -> str:
        return self.run.prompt

    @property
    def fixtures(self) -> tuple[CaseFile, ...]:
        return self.files.fixtures

    def env_rejection(self) -> str | None:
        """The first `run.env` key outside `OA_EVAL_[A-Z0-9_]*`: such a run errors `env_var_rejected`."""
        return next((key for key, _ in self.run.env if ENV_KEY.fullmatch(key) is None), None)

    def subject_only(self, extension_operations: Collection[str]) -> bool:
        """Every grader is subject-only, so the baseline arm does not run the case (runner.md §13.2)."""
        return all(grader.subject_only(extension_operations) for grader in self.graders)

    def todo_lines(self) -> list[tuple[str, int]]:
        """(file relative to the case, one-based line) of every line starting with `TODO` once leading
        white space is dropped, in `prompt.md`, `case.toml` and the grader files."""
        found: list[tuple[str, int]] = []
        named = [(PROMPT_FILE, self.files.prompt)]
        if self.files.case_toml is not None:
            named.append((CASE_FILE, self.files.case_toml))
        named.extend((f"{GRADERS_DIR}/{grader.name}", grader.data) for grader in self.files.graders)
        for file, data in named:
            text = data.decode("utf-8", "replace")
            found.extend(
                (file, index + 1) for index, line in enumerate(lines(text)) if trim_start(line).startswith("TODO")
            )
        return found

    def warnings(self) -> list[str]:
        """Reasons the case cannot pass with the operations it asked for; they do not stop a run."""
        found = []
        granted = self.run.allowed_operations
        for grader in self.graders:
            focus = None
            if isinstance(grader, RegexGrader):
                focus = grader.target
            elif isinstance(grader, DecisionGrader | JudgeGrader):
                focus = grader.focus
            reads_files = (isinstance(grader, FileExistsGrader) and grader.exists) or (
                focus is not None and focus.kind in (FocusKind.FILE, FocusKind.FILES)
            )
            if reads_files and Operation.WRITE not in granted:
                found.append(
                    f"{self.name}: grader `{grader.name}` reads files the run creates, "
                    "and the case does not ask for `write`"
                )
            if (
                isinstance(grader, OperationUsedGrader)
                and grader.operation == "shell"
                and grader.min > 0
                and Operation.EXEC not in granted
            ):
                found.append(
                    f"{self.name}: grader `{grader.name}` needs a shell command, and the case does not ask for `exec`"
                )
        return found


@dataclass(frozen=True, slots=True)
class Suite:
    """Every case under an eval directory, in relative-path order."""

    dir: Path
    cases: tuple[Case, ...]

    def case(self, name: str) -> Case | None:
        return next((case for case in self.cases if case.name == name), None)


# --- reading ------------------------------------------------------------------------------------


def _read_limited(path: Path, file: str) -> bytes | None:
    """A case file of at most 1 MiB, never through a link; `None` when it does not exist."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise TestSetError(file, None, "is not a regular file (a symbolic link or a directory)") from None
        raise TestSetError(file, None, error.strerror or str(error)) from None
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise TestSetError(file, None, "is not a regular file (a symbolic link or a directory)")
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        size = max(info.st_size, len(data))
        raise TestSetError(file, None, f"is {size} bytes; a case file is at most {MAX_FILE_BYTES} bytes (1 MiB)")
    return data


def _list_dir(path: Path, label: str) -> list[str]:
    """Entry names, sorted; empty when the directory does not exist; a linked directory is refused."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return []
    except OSError as error:
        raise TestSetError(label, None, error.strerror or str(error)) from None
    if stat.S_ISLNK(info.st_mode):
        raise TestSetError(label, None, "is a link; case directories hold regular files and directories only")
    if not stat.S_ISDIR(info.st_mode):
        raise TestSetError(label, None, "is not a directory")
    try:
        names = os.listdir(path)
    except OSError as error:
        raise TestSetError(label, None, error.strerror or str(error)) from None
    for name in names:
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise TestSetError(label, None, "holds a file name that is not UTF-8") from None
    return sorted(names)


def _read_graders(case_dir: Path, path: str) -> tuple[CaseFile, ...]:
    label = f"{path}/{GRADERS_DIR}"
    names = [name for name in _list_dir(case_dir / GRADERS_DIR, label) if name.endswith(".md")]
    if len(names) > MAX_GRADERS:
        raise TestSetError(label, None, f"holds {len(names)} grader files; a case has at most {MAX_GRADERS}")
    out = []
    for name in names:
        if not is_case_id(name.removesuffix(".md"), MAX_NAME_BYTES):
            raise TestSetError(
                f"{label}/{name}", None, "a grader file is named like a case: letters, digits, `.`, `_`, `-`, then .md"
            )
        data = _read_limited(case_dir / GRADERS_DIR / name, f"{label}/{name}")
        if data is None:
            raise TestSetError(f"{label}/{name}", None, "disappeared while the case was read")
        out.append(CaseFile(name, data))
    return tuple(out)


def _read_fixtures(case_dir: Path, path: str) -> tuple[CaseFile, ...]:
    out: list[CaseFile] = []
    stack = [(case_dir / FIXTURES_DIR, "")]
    while stack:
        at, prefix = stack.pop()
        for name in _list_dir(at, f"{path}/{FIXTURES_DIR}/{prefix}".rstrip("/")):
            relative = f"{prefix}{name}"
            label = f"{path}/{FIXTURES_DIR}/{relative}"
            if _CONTROL.search(name) or "\\" in name:
                raise TestSetError(label, None, "a fixture name holds a control character or a backslash")
            if len(relative.encode("utf-8")) > MAX_FIXTURE_PATH_BYTES:
                raise TestSetError(label, None, f"a fixture path is at most {MAX_FIXTURE_PATH_BYTES} bytes")
            try:
                info = (at / name).lstat()
            except OSError as error:
                raise TestSetError(label, None, error.strerror or str(error)) from None
            if stat.S_ISDIR(info.st_mode):
                stack.append((at / name, f"{relative}/"))
            elif stat.S_ISREG(info.st_mode):
                if len(out) == MAX_FIXTURES:
                    raise TestSetError(
                        f"{path}/{FIXTURES_DIR}",
                        None,
                        f"holds more than {MAX_FIXTURES} fixtures; a case has at most {MAX_FIXTURES}",
                    )
                data = _read_limited(at / name, label)
                if data is None:
                    raise TestSetError(label, None, "disappeared while the case was read")
                out.append(CaseFile(relative, data))
            else:
                raise TestSetError(label, None, "a fixture must be a regular file or a directory, not a link")
    return tuple(sorted(out, key=lambda fixture: fixture.name))


def load_case(case_dir: Path, path: str, *, allow_todo: bool = False) -> Case:
    """Read and validate the case in `case_dir`; `path` is its directory relative to the eval
    directory, which prefixes every file an error names. A `TODO` line refuses the case unless
    `allow_todo` (an author editing a draft; a run never sets it)."""
    prompt = _read_limited(case_dir / PROMPT_FILE, f"{path}/{PROMPT_FILE}")
    if prompt is None:
        raise TestSetError(f"{path}/{PROMPT_FILE}", None, "a case directory needs a prompt.md")
    files = CaseFiles(
        prompt=prompt,
        case_toml=_read_limited(case_dir / CASE_FILE, f"{path}/{CASE_FILE}"),
        graders=_read_graders(case_dir, path),
        fixtures=_read_fixtures(case_dir, path),
    )
    case = parse_case(path.rsplit("/", 1)[-1], path, case_dir, files)
    if not allow_todo:
        todo = case.todo_lines()
        if todo:
            file, line = todo[0]
            raise TestSetError(
                f"{path}/{file}", None, "the case still has a TODO line; finish it before running it", line=line
            )
    return case


class _Sources:
    """Which file a merged key came from, for errors: the front matter's when it set the key."""

    def __init__(self, front: Table, prompt_file: str, toml_file: str) -> None:
        self.front, self.prompt_file, self.toml_file = front, prompt_file, toml_file

    def of(self, key: str) -> str:
        return self.prompt_file if key in self.front else self.toml_file

    def of_run(self, key: str) -> str:
        run = self.front.get("run")
        return self.prompt_file if isinstance(run, dict) and key in run else self.toml_file


def _optional_string(table: Table, key: str, file: str, label: str) -> str | None:
    value = table.get(key)
    if value is not None and not isinstance(value, str):
        raise TestSetError(file, label, f"`{label}` must be a string")
    return value


def _strings(table: Table, key: str, file: str, label: str) -> tuple[str, ...]:
    value = table.get(key)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise TestSetError(file, label, f"`{label}` must be an array of strings")
    if not all(isinstance(item, str) and not is_blank(item) for item in value):
        raise TestSetError(file, label, f"`{label}` holds non-empty strings")
    return tuple(value)


def _merge(base: Table, front: Table) -> Table:
    """`front` over `base`, with the `run` tables merged key by key; `graders` is not a merged key."""
    merged = {key: value for key, value in base.items() if key != "graders"}
    for key, value in front.items():
        if key == "run" and isinstance(merged.get("run"), dict) and isinstance(value, dict):
            merged["run"] = {**merged["run"], **value}
        else:
            merged[key] = value
    return merged


def parse_case(dir_name: str, path: str, case_dir: Path, files: CaseFiles) -> Case:
    """Parse a case from its files' bytes (reads nothing from disk). `TODO` lines are not checked."""
    prompt_file, toml_file = f"{path}/{PROMPT_FILE}", f"{path}/{CASE_FILE}"
    for file, data in ((prompt_file, files.prompt), (toml_file, files.case_toml)):
        if data is not None and len(data) > MAX_FILE_BYTES:
            raise TestSetError(
                file, None, f"is {len(data)} bytes; a case file is at most {MAX_FILE_BYTES} bytes (1 MiB)"
            )
    if len(files.graders) > MAX_GRADERS:
        raise TestSetError(
            f"{path}/{GRADERS_DIR}", None, f"holds {len(files.graders)} grader files; a case has at most {MAX_GRADERS}"
        )
    front_text, body = split(utf8(files.prompt, prompt_file), prompt_file)
    front = parse_table(front_text, prompt_file) if front_text is not None else {}
    check_keys(front, PROMPT_KEYS, prompt_file)
    base = parse_table(utf8(files.case_toml, toml_file), toml_file) if files.case_toml is not None else {}
    check_keys(base, CASE_TOML_KEYS, toml_file)
    for table, file in ((front, prompt_file), (base, toml_file)):
        if "run" in table:
            if not isinstance(table["run"], dict):
                raise TestSetError(file, "run", "`run` must be a table")
            check_keys(table["run"], RUN_KEYS, file, "run.")
    sources = _Sources(front, prompt_file, toml_file)
    merged = _merge(base, front)

    version = merged.get("v")
    if version is None:
        raise TestSetError(prompt_file, "v", f'the case declares no `v`; write v = "{CASE_SCHEMA}"')
    if not isinstance(version, str):
        raise TestSetError(sources.of("v"), "v", "`v` must be a string")
    if version != CASE_SCHEMA:
        major = re.fullmatch(r"\+?([0-9]{1,10})", version.removeprefix(CASE_SCHEMA_PREFIX))
        if version.startswith(CASE_SCHEMA_PREFIX) and major and 1 < int(major.group(1)) < 2**32:
            message = f"the case is `{version}`, and this build reads {CASE_SCHEMA}; update OpenAgents"
        else:
            message = f'`v` is `{version}`; it must be "{CASE_SCHEMA}"'
        raise TestSetError(sources.of("v"), "v", message)

    name = merged.get("name", dir_name)
    if not isinstance(name, str):
        raise TestSetError(sources.of("name"), "name", "`name` must be a string")
    check_name(name, sources.of("name"), "name", "case name")
    description = _optional_string(merged, "description", sources.of("description"), "description")
    tags = _strings(merged, "tags", sources.of("tags"), "tags")
    extensions = _strings(merged, "extensions", sources.of("extensions"), "extensions")
    kind_word = merged.get("kind", CaseKind.SHOULD_FIRE.value)
    if kind_word not in (CaseKind.SHOULD_FIRE, CaseKind.SHOULD_NOT_FIRE):
        raise TestSetError(sources.of("kind"), "kind", '`kind` must be "should-fire" or "should-not-fire"')
    runs = merged.get("runs", DEFAULT_RUNS)
    if not is_integer(runs) or not RUNS_RANGE[0] <= runs <= RUNS_RANGE[1]:
        raise TestSetError(
            sources.of("runs"), "runs", f"`runs` must be a whole number from {RUNS_RANGE[0]} to {RUNS_RANGE[1]}"
        )
    run = merged.get("run")
    settings = _run_settings(run if isinstance(run, dict) else {}, body, sources)
    graders = _graders(base, files, path, toml_file, prompt_file)
    return Case(
        name=name,
        path=path,
        dir=case_dir,
        kind=CaseKind(kind_word),
        description=description,
        tags=tags,
        extensions=extensions,
        runs=int(runs),
        run=settings,
        graders=graders,
        files=files,
    )


def _run_settings(run: Table, body: str, sources: _Sources) -> RunSettings:
    prompt = trim(body)
    if not prompt:
        given = run.get("prompt")
        if given is not None and not isinstance(given, str):
            raise TestSetError(sources.of_run("prompt"), "run.prompt", "`run.prompt` must be a string")
        if given is None or is_blank(given):
            raise TestSetError(
                sources.prompt_file, "run.prompt", "the case has no prompt; write the task as prompt.md's body"
            )
        prompt = trim(given)
    deadline = run.get("deadline_seconds", DEFAULT_DEADLINE_SECONDS)
    if not is_integer(deadline) or not 1 <= deadline <= MAX_DEADLINE_SECONDS:
        raise TestSetError(
            sources.of_run("deadline_seconds"),
            "run.deadline_seconds",
            f"`run.deadline_seconds` must be a whole number from 1 to {MAX_DEADLINE_SECONDS}",
        )
    door = _optional_string(run, "door", sources.of_run("door"), "run.door")
    append = _optional_string(
        run, "append_instructions", sources.of_run("append_instructions"), "run.append_instructions"
    )
    operations = {Operation.READ}
    file = sources.of_run("allowed_operations")
    for word in _strings(run, "allowed_operations", file, "run.allowed_operations"):
        if word not in OPERATIONS:
            raise TestSetError(
                file,
                "run.allowed_operations",
                f"`run.allowed_operations` names `{word}`; the operations are read, write, exec, and network",
            )
        operations.add(Operation(word))
    env_value = run.get("env", {})
    env_file = sources.of_run("env")
    if not isinstance(env_value, dict):
        raise TestSetError(env_file, "run.env", "`run.env` must be a table")
    env: list[tuple[str, str]] = []
    for key in sorted(env_value):
        if not isinstance(env_value[key], str):
            raise TestSetError(env_file, f"run.env.{key}", f"`run.env.{key}` must be a string")
        env.append((key, env_value[key]))
    return RunSettings(
        prompt=prompt,
        deadline_seconds=int(deadline),
        door=door,
        allowed_operations=tuple(operation for operation in OPERATIONS if operation in operations),
        append_instructions=append,
        env=tuple(env),
    )


def _graders(base: Table, files: CaseFiles, path: str, toml_file: str, prompt_file: str) -> tuple[GraderSpec, ...]:
    graders: list[GraderSpec] = []
    entries: Any = base.get("graders", [])
    if not isinstance(entries, list):
        raise TestSetError(toml_file, "graders", "`graders` must be an array of tables")
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise TestSetError(toml_file, f"graders[{index}]", "a grader entry must be a table")
        origin = f"{toml_file}#graders[{index}]"
        graders.append(parse_grader(entry, None, None, file=toml_file, prefix=f"graders[{index}].", origin=origin))
    for grader_file in files.graders:
        origin = f"{path}/{GRADERS_DIR}/{grader_file.name}"
        if len(grader_file.data) > MAX_FILE_BYTES:
            raise TestSetError(
                origin, None, f"is {len(grader_file.data)} bytes; a case file is at most {MAX_FILE_BYTES} bytes (1 MiB)"
            )
        front, body = split(utf8(grader_file.data, origin), origin)
        if front is None:
            raise TestSetError(origin, None, "a grader file starts with TOML frontmatter between +++ lines")
        stem = grader_file.name.removesuffix(".md")
        graders.append(parse_grader(parse_table(front, origin), body, stem, file=origin))
    if not graders:
        raise TestSetError(
            prompt_file, "graders", "the case has no graders; add graders/<name>.md or a `graders` list in case.toml"
        )
    if len(graders) > MAX_GRADERS:
        raise TestSetError(path, "graders", f"has {len(graders)} graders; a case has at most {MAX_GRADERS}")
    seen: set[str] = set()
    for grader in graders:
        if grader.name in seen:
            file, _, place = grader.origin.partition("#")
            raise TestSetError(
                file,
                f"{place}.name" if place else "name",
                f"a second grader is named `{grader.name}`; grader names are unique",
            )
        seen.add(grader.name)
    return tuple(graders)


# --- discovery ----------------------------------------------------------------------------------


def case_dirs(evals_dir: Path) -> list[str]:
    """Case directories beneath `evals_dir`, relative and `/`-separated, sorted. A directory holding
    `prompt.md` (other than the root) is a case and is not descended into; linked directories and the
    skipped names are never entered."""
    found: list[str] = []
    stack = [(evals_dir, "")]
    while stack:
        at, prefix = stack.pop()
        if prefix and os.path.lexists(at / PROMPT_FILE):
            found.append(prefix.rstrip("/"))
            continue
        for name in _list_dir(at, f"{evals_dir}/{prefix}".rstrip("/")):
            if name in SKIPPED:
                continue
            if stat.S_ISDIR((at / name).lstat().st_mode):
                stack.append((at / name, f"{prefix}{name}/"))
    return sorted(found)


def load_suite(evals_dir: Path, *, allow_todo: bool = False) -> Suite:
    """Discover and load every case beneath `evals_dir`. The first case error is raised; two cases
    with one name, a missing directory and a directory with no case are errors too."""
    if not evals_dir.is_dir():
        raise TestSetError(str(evals_dir), None, "there are no tests yet; a test set is a directory of cases")
    cases: list[Case] = []
    names: dict[str, str] = {}
    for path in case_dirs(evals_dir):
        case = load_case(evals_dir / path, path, allow_todo=allow_todo)
        if case.name in names:
            raise TestSetError(
                f"{path}/{PROMPT_FILE}",
                "name",
                f"two cases are named `{case.name}`: {names[case.name]} and {path}; case names are unique",
            )
        names[case.name] = path
        cases.append(case)
    if not cases:
        raise TestSetError(str(evals_dir), None, "holds no case; a case is a directory with a prompt.md")
    return Suite(dir=evals_dir, cases=tuple(cases))
