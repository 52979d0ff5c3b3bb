"""The results directory: a built report and every run's files on disk (runner.md §13.11).

    <base>/<UTC time, 2026-09-30T12-34-56.789Z>[-1 … -999]/
      report.json  report.html  run.json  artifacts/…  suite/<case path>/…
      runs/<case>/<arm>-<n>/  trajectory.json, stdout.jsonl, stderr.txt, created.json, files/<created path>

One of the engine's few I/O modules. Every file is created new (`O_EXCL`, never through a link), nothing
the agent names can leave its run's `files/`, a directory that could not be written whole is removed, and
so is one a secret reached. Decisions (names without `:`, which created files are copied):
docs/decisions.md, "The report and its results directory".
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from eval_runner.contracts.strict_json import JsonValue, pretty
from eval_runner.engine.report.build import BuiltReport
from eval_runner.engine.report.inputs import Attempt, run_path
from eval_runner.engine.run.collect import exact_path, remove_tree, secret_in, shown_path
from eval_runner.engine.testset.cases import CASE_FILE, FIXTURES_DIR, GRADERS_DIR, PROMPT_FILE, Suite
from eval_runner.engine.verdict.scores import Arm
from eval_runner.errors import EvalRunnerError

#: The most suffixes tried when a results directory's timestamp is taken.
MAX_SUFFIX = 999
#: The longest created path (bytes) copied under `files/`, so the copy's whole path stays well below
#: PATH_MAX (4096) wherever the results base is, and at most 512 levels deep for a reader's walk.
MAX_COPIED_PATH = 1024


class ResultsError(EvalRunnerError):
    """The results directory could not be written; nothing partial is left behind."""


class SecretFoundError(ResultsError):
    """A secret reached the results directory, which has been removed. `path` is relative to it."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"the door key was found in {path}; the results were removed")


def stamp(now_ms: int) -> str:
    """A results directory's name: UTC to the millisecond, `2026-09-30T12-34-56.789Z`. No `:`, which
    Windows and macOS tools, scp and URLs read as something else."""
    at = datetime.fromtimestamp(now_ms // 1000, UTC)
    return f"{at:%Y-%m-%dT%H-%M-%S}.{now_ms % 1000:03d}Z"


def results_dir(base: Path, now_ms: int | None = None) -> Path:
    """Make a fresh `<base>/<UTC timestamp>`, or `-1`, `-2`, … up to `-999` when taken."""
    name = stamp(time.time_ns() // 1_000_000 if now_ms is None else now_ms)
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ResultsError(f"the results base cannot be made: {error.strerror or error}") from None
    for suffix in range(MAX_SUFFIX + 1):
        directory = base / (name if suffix == 0 else f"{name}-{suffix}")
        try:
            directory.mkdir(mode=0o755)
        except FileExistsError:
            continue
        except OSError as error:
            raise ResultsError(f"the results directory cannot be made: {error.strerror or error}") from None
        return directory
    raise ResultsError(f"no free results directory name for {name}")


def suite_files(suite: Suite) -> list[tuple[str, bytes]]:
    """Every case file by its path under `suite/`: `<case path>/prompt.md`, `case.toml`, `graders/<file>`,
    `fixtures/<path>`, in suite order, byte for byte."""
    out: list[tuple[str, bytes]] = []
    for case in suite.cases:
        out.append((f"{case.path}/{PROMPT_FILE}", case.files.prompt))
        if case.files.case_toml is not None:
            out.append((f"{case.path}/{CASE_FILE}", case.files.case_toml))
        out.extend((f"{case.path}/{GRADERS_DIR}/{grader.name}", grader.data) for grader in case.files.graders)
        out.extend((f"{case.path}/{FIXTURES_DIR}/{fixture.name}", fixture.data) for fixture in case.files.fixtures)
    return out


def write_results(
    base_dir: Path,
    built: BuiltReport,
    attempts: Sequence[Attempt],
    suite_files: Iterable[tuple[str, bytes]],
    *,
    secrets: Sequence[str | bytes] = (),
    now_ms: int | None = None,
) -> Path:
    """Write the results directory of `built` under `base_dir` and return it, then scan it for `secrets`.

    `attempts` are the records the report was built from (the report's unknown stand-ins for missing
    attempts are written from `built`); their trajectories must be the bytes the report names.

    Raises:
        ResultsError: a file that could not be written, an attempt the report does not hold, or a case
            file path that is not a plain relative path (the directory is removed).
        SecretFoundError: a secret was found in what was written (the directory is removed).
    """
    given = _check_attempts(built, attempts)
    directory = results_dir(base_dir, now_ms)
    try:
        _write(directory / "report.json", built.report_bytes)
        _write(directory / "report.html", built.html)
        for name, data in sorted(built.artifacts.items()):
            _write(_under(directory / "artifacts", name), data)
        for attempt in built.attempts:
            _write_run(directory, given.get(attempt.key, attempt))
        for name, data in suite_files:
            _write(_under(directory / "suite", name), data)
        _write(directory / "run.json", built.run_json)
    except (OSError, ResultsError) as error:
        remove_tree(directory)
        if isinstance(error, ResultsError):
            raise
        raise ResultsError(f"the results could not be written: {error.strerror or error}") from None
    scan_for_secrets(directory, secrets)
    return directory


def scan_for_secrets(directory: Path, secrets: Sequence[str | bytes]) -> None:
    """Remove `directory` and raise `SecretFoundError` if any secret is in a name, link or file under it."""
    wanted = [secret.encode("utf-8") if isinstance(secret, str) else secret for secret in secrets]
    found = secret_in(directory, wanted)
    if found is not None:
        remove_tree(directory)
        raise SecretFoundError(found)


def _check_attempts(built: BuiltReport, attempts: Sequence[Attempt]) -> dict[tuple[str, Arm, int], Attempt]:
    known = {attempt.key: attempt for attempt in built.attempts}
    given: dict[tuple[str, Arm, int], Attempt] = {}
    for attempt in attempts:
        reported = known.get(attempt.key)
        if reported is None:
            raise ResultsError(
                f"the report holds no run of {attempt.case}, {attempt.arm} arm, attempt {attempt.attempt}"
            )
        if attempt.trajectory != reported.trajectory or attempt.grades != reported.grades:
            raise ResultsError(
                f"the run of {attempt.case}, {attempt.arm} arm, attempt {attempt.attempt} "
                "is not the one the report names"
            )
        given[attempt.key] = attempt
    return given


def _write_run(directory: Path, attempt: Attempt) -> None:
    run_dir = directory / run_path(attempt.case, attempt.arm, attempt.attempt)
    run_dir.mkdir(parents=True, exist_ok=True)
    if attempt.trajectory is not None:
        _write(run_dir / "trajectory.json", attempt.trajectory)
    if attempt.stdout is not None:
        _write(run_dir / "stdout.jsonl", attempt.stdout)
    if attempt.stderr is not None:
        _write(run_dir / "stderr.txt", attempt.stderr)
    _write(run_dir / "created.json", pretty([listed_path(path) for path, _ in attempt.created]))
    files = run_dir / "files"
    for path, data in attempt.created:
        if data is not None and _copied(path):
            _copy(files / path, data)


def listed_path(path: str) -> JsonValue:
    """A created path as created.json lists it, exact and JSON whatever its bytes: the path itself, or for
    a name that is not UTF-8 `{"path": <shown, each such byte as \\xNN>, "path_base64": <its exact bytes>}`."""
    exact = exact_path(path)
    return shown_path(path) if exact is None else {"path": shown_path(path), "path_base64": exact}


def _copied(path: str) -> bool:
    """Whether a created file gets a copy: a path that would leave `files/`, is not UTF-8 or is longer
    than `MAX_COPIED_PATH` is listed in created.json and never written."""
    return _plain(path) and exact_path(path) is None and len(path.encode()) <= MAX_COPIED_PATH


def _copy(path: Path, data: bytes) -> None:
    """A created file's copy; none when an earlier copy holds its place (a file, or a directory of that
    name)."""
    try:
        _write(path, data)
    except ResultsError:
        return  # written twice
    except OSError as error:
        if error.errno not in (errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise


def _plain(path: str) -> bool:
    """A relative `/`-separated path of plain components: nothing empty, `.`, `..`, or absolute."""
    parts = path.split("/")
    return bool(path) and "\x00" not in path and all(part not in ("", ".", "..") for part in parts)


def _under(root: Path, relative: str) -> Path:
    if not _plain(relative):
        raise ResultsError(f"{relative!r} is not a plain relative path")
    return root / PurePosixPath(relative)


def _write(path: Path, data: bytes) -> None:
    """Create `path` (and its parents) new and write `data`; never through a link, never over a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        descriptor = os.open(path, flags, 0o644)
    except OSError as error:
        if error.errno == errno.EEXIST:
            raise ResultsError(f"{path.name} would be written twice") from None
        raise
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
