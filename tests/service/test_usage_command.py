"""`eval-runner usage` (runner.md §3.5) through the command line, in this process: flags, default directory,
table and JSON output, the unreadable count on stderr, and every error's message and exit code (a wrong
command line is argparse's usage error, exit 64; a log that cannot be read is exit 1)."""

from __future__ import annotations

import io
import json
import os
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from pathlib import Path
from unittest import mock

import pytest

from eval_runner.cli.main import main
from eval_runner.service.usage import Record, UsageLog

DAY_ONE = 1_790_812_800_000  # 2026-10-01T00:00:00Z


def run(argv: list[str], environ: dict[str, str] | None = None) -> tuple[int, str, str]:
    """`eval-runner usage ARGV` with `environ` as the whole environment."""
    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, environ or {}, clear=True), redirect_stdout(out), redirect_stderr(err):
        code = main(["usage", *argv])
    return code, out.getvalue(), err.getvalue()


def record(key: str, day: int, action: str, outcome: str, ms: int, code: str | None = None) -> Record:
    base = Record.arrived(key=key, request="e", bytes_in=10, arrival_ms=DAY_ONE + day * 86_400_000, outcome=outcome)
    return replace(base, action=action, subject="tool", turns=4, total_ms=ms, code=code)


@pytest.fixture
def usage_dir(tmp_path: Path) -> Path:
    log = UsageLog(tmp_path / "state" / "usage")
    log.append(record("alice", 0, "run", "completed", 100))
    log.append(record("alice", 1, "run", "completed", 300))
    log.append(record("bob", 1, "publish", "refused", 2, code="not_admitted"))
    return log.directory


def test_by_day_from_the_state_directory_by_default(usage_dir: Path) -> None:
    code, out, err = run([], {"EVAL_RUNNER_STATE": str(usage_dir.parent), "HOME": "/nowhere"})
    assert (code, err) == (0, "")
    assert out == (
        "day         jobs  completed  failed  refused  keys  turns  total_p50_ms\n"
        "2026-10-01     1          1       0        0     1      4           100\n"
        "2026-10-02     2          1       0        1     2      4           300\n"
        "all            3          2       0        1     2      8           300\n"
    )


def test_without_a_state_directory_the_home_one_is_read(tmp_path: Path) -> None:
    UsageLog(tmp_path / ".openagents" / "eval-runner" / "usage").append(record("a", 0, "run", "completed", 1))
    code, out, _ = run(["--by", "key"], {"HOME": str(tmp_path)})
    assert code == 0
    assert out.splitlines()[1].split() == ["a", "1", "1", "0", "0", "1", "4", "1"]


def test_flags_together(usage_dir: Path) -> None:
    code, out, err = run(["--json", "--by", "outcome", "--since", "2026-10-02", "--dir", str(usage_dir)])
    assert (code, err) == (0, "")
    assert out.endswith("]\n")
    rows = json.loads(out)
    # Equal jobs: by group name, so `completed` comes before `refused not_admitted`.
    assert [row["group"] for row in rows] == ["completed", "refused not_admitted", "all"]
    assert rows[1] == {
        "group": "refused not_admitted",
        "jobs": 1,
        "completed": 0,
        "failed": 0,
        "refused": 1,
        "keys": 1,
        "turns": 0,
        "total_p50_ms": None,
    }
    assert rows[0]["total_p50_ms"] == 300
    assert (rows[2]["jobs"], rows[2]["keys"], rows[2]["turns"]) == (2, 2, 4)


@pytest.mark.parametrize("word", ["key", "action", "subject", "day", "outcome"])
def test_every_by_word_heads_the_table(usage_dir: Path, word: str) -> None:
    code, out, _ = run(["--by", word, "--dir", str(usage_dir)])
    assert code == 0
    assert out.split(" ", 1)[0] == word
    assert out.splitlines()[-1].startswith("all ")


def test_unreadable_lines_are_reported_on_stderr(usage_dir: Path) -> None:
    with (usage_dir / "2026-10-02.jsonl").open("a") as day:
        day.write("{broken\nnot a record\n\n")
    code, out, err = run(["--dir", str(usage_dir)])
    assert code == 0
    assert out.splitlines()[-1].split()[:2] == ["all", "3"]
    assert err == "2 lines did not read as records\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--since", "yesterday"], "argument --since: yesterday is not a YYYY-MM-DD date"),
        (["--since", "2026-1-01"], "argument --since: 2026-1-01 is not a YYYY-MM-DD date"),
        (
            ["--since", "2026-13-01"],
            "argument --since: 2026-13-01 is not a date on the calendar: month must be in 1..12",
        ),
        (
            ["--since", "2026-02-30"],
            "argument --since: 2026-02-30 is not a date on the calendar: day is out of range for month",
        ),
        (["--by", "color"], "argument --by: must be key, action, subject, day or outcome, not 'color'"),
        (["--since"], "argument --since: expected one argument"),
        (["--by"], "argument --by: expected one argument"),
        (["--json", "--dir"], "argument --dir: expected one argument"),
        (["--verbose"], "unrecognized arguments: --verbose"),
        (["--json", "extra"], "unrecognized arguments: extra"),
        (["--js"], "unrecognized arguments: --js"),  # options are never abbreviated
        (["--by", "color", "--since"], "argument --by: must be key, action, subject, day or outcome, not 'color'"),
    ],
)
def test_a_wrong_command_line_is_a_usage_error_64(argv: list[str], message: str) -> None:
    # Arguments and `--since` are checked before the directory is looked at.
    code, out, err = run(argv, {"EVAL_RUNNER_STATE": "/nonexistent"})
    assert (code, out) == (64, "")
    assert err.startswith("usage: eval-runner usage ")
    assert err.endswith(f"\neval-runner usage: error: {message}\n")


def test_an_impossible_since_is_refused_even_with_a_log_to_read(usage_dir: Path) -> None:
    code, _, err = run(["--since", "2026-10-32", "--dir", str(usage_dir)])
    assert code == 64
    assert err.endswith(
        "error: argument --since: 2026-10-32 is not a date on the calendar: day is out of range for month\n"
    )


def test_an_unreadable_directory_exits_one(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert run(["--dir", str(blocker)]) == (1, "", f"eval-runner: {blocker}: Not a directory\n")


@pytest.mark.parametrize("made", [False, True])
def test_with_no_log_yet_it_says_there_is_no_usage_yet(tmp_path: Path, made: bool) -> None:
    """Before the runner has answered anything there is no usage directory (or an empty one): not an error,
    and not a table of zeros."""
    directory = tmp_path / "state" / "usage"
    if made:
        directory.mkdir(parents=True)
        (directory / "notes.txt").write_text("not a day file")
    environ = {"EVAL_RUNNER_STATE": str(tmp_path / "state")}
    said = f"no usage yet: {directory} holds no usage log\n"
    assert run([], environ) == (0, said, "")
    assert run(["--by", "key", "--since", "2026-10-01"], environ) == (0, said, "")
    code, out, err = run(["--json"], environ)
    assert (code, err) == (0, "")
    assert json.loads(out) == [
        {
            "group": "all",
            "jobs": 0,
            "completed": 0,
            "failed": 0,
            "refused": 0,
            "keys": 0,
            "turns": 0,
            "total_p50_ms": None,
        }
    ]


def test_a_log_with_nothing_since_the_date_still_shows_the_table(usage_dir: Path) -> None:
    code, out, _ = run(["--since", "2027-01-01", "--dir", str(usage_dir)])
    assert code == 0
    assert out.splitlines()[-1].split() == ["all", "0", "0", "0", "0", "0", "0", "-"]
