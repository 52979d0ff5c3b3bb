"""The console script through a real subprocess: --version and --help, `eval run` on the example extension
with real bubblewrap (stand-in door and agent, or a stand-in door in its own process reached like a real
one), its `--json` object and `--fail-on` exit codes, bad input as one plain line, and the door key kept
out of everything printed and kept. Also the terminal rendering when stderr is not a terminal, and the
one parser (in process): every command's help names its options and variables with their defaults, and
every wrong command line exits 64."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import eval_runner.local_eval
import eval_runner.service.config
from eval_runner import __version__
from eval_runner.cli.eval_run import FAIL_ON, exit_code
from eval_runner.cli.main import build_parser, main
from eval_runner.cli.render import ProgressView, finished_words
from eval_runner.contracts.report import Report
from eval_runner.engine.run.collect import remove_tree
from eval_runner.engine.suite_run import Finished, Started
from eval_runner.engine.verdict.gate import Verdict
from eval_runner.engine.verdict.scores import Arm
from tests.support.paths import EXAMPLE

DOOR_KEY = "door-key-7d41e9b2-never-print-me"
#: Variables that would change which agent, model, door or temp root a run uses.
_CHOOSERS = ("EVAL_RUNNER_CODER", "CODER_MODEL", "CODER_DOOR_KEY", "CODER_DOOR_URL", "EVAL_RUNNER_TMP")


@pytest.fixture
def environ() -> Iterator[dict[str, str]]:
    """This process's environment without the variables that choose an agent or door, with a short temp
    base the sandbox user can search as `EVAL_RUNNER_TMP` (checked empty afterwards: runs clean up)."""
    base = Path(tempfile.mkdtemp(prefix="er-c-", dir="/tmp"))
    os.chmod(base, 0o755)
    values = {name: value for name, value in os.environ.items() if name not in _CHOOSERS}
    values["EVAL_RUNNER_TMP"] = str(base)
    yield values
    leftover = list(base.iterdir())
    remove_tree(base)
    assert leftover == []


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eval_runner.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_version_and_help() -> None:
    done = cli("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"eval-runner {__version__}"
    shown = cli("--help")
    assert shown.returncode == 0
    assert "hosted eval runner" in shown.stdout
    assert re.search(r"^\s+eval\s", shown.stdout, re.MULTILINE)
    run_help = cli("eval", "run", "--help")
    assert run_help.returncode == 0
    for flag in ("EXT_DIR", "--runs N", "--agent PATH", "--door-url URL", "--door-key-env NAME", "--concurrency N"):
        assert flag in run_help.stdout
    assert "--out DIR" in run_help.stdout


def paths_of(stdout: str) -> tuple[Path, Path]:
    report = re.search(r"^report  (\S.*)$", stdout, re.MULTILINE)
    html = re.search(r"^html    (\S.*)$", stdout, re.MULTILINE)
    assert report is not None
    assert html is not None
    return Path(report.group(1)), Path(html.group(1))


def test_eval_run_on_the_example_prints_the_verdict_and_writes_the_report(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    out = tmp_path / "results"
    done = cli("eval", "run", str(EXAMPLE), "--runs", "2", "--out", str(out), env=environ)
    assert done.returncode == 0, done.stderr
    report_path, html_path = paths_of(done.stdout)
    assert report_path.parent.parent == out
    assert html_path.parent == report_path.parent
    report = Report.parse_bytes(report_path.read_bytes())
    word = Verdict(report.verdict.value).word
    assert re.search(rf"^Verdict\s+{word}$", done.stdout, re.MULTILINE)
    assert word == "Better"  # the example separates the arms with the stand-ins
    assert word in html_path.read_text(encoding="utf-8")
    lines = done.stdout.splitlines()
    verdict_at = next(i for i, line in enumerate(lines) if line.startswith("Verdict"))
    assert lines[verdict_at + 1] == (
        "Stand-in run: the agent and the model door were stand-ins, so this “Better” says nothing about "
        "a real agent or a real model."
    )
    for line in (
        "Passes 2 of 2 tests with the extension, 1 of 2 without. Change in mean score: +0.50.",
        "Statistics: p = 0.167 that it helps, p = 1.000 that it harms · Δ pass rate +50 pp",
        "Time per round (the 2 compared cases once each): ",
    ):
        assert line in done.stdout
    assert re.search(r"│ overview\s+│ should-fire\s+│\s+2/2 │\s+0/2 │\s+1\.00 │\s+0\.00 │\s+\+1\.00 │", done.stdout)
    assert "offline stand-in" in done.stderr
    assert "stand-in agent" in done.stderr
    assert "run 8/8" in done.stderr  # stderr is not a terminal: plain progress lines
    assert "Traceback" not in done.stderr
    assert ":" not in report_path.parent.name
    stand_in_limits = report_path.parent / "artifacts" / "limitations.json"
    assert "The agent was a stand-in" in stand_in_limits.read_text(encoding="utf-8")
    assert '<p class="banner">Stand-in run:' in html_path.read_text(encoding="utf-8")
    the_figures_agree(done.stdout, done.stderr, report)


def the_figures_agree(stdout: str, stderr: str, report: Report) -> None:
    """Each time figure says what it measures, and they agree with each other (issue 8, item 11): the per-run
    time of an arm is the mean of its runs' own times as the progress lines print them, its total their sum,
    and the wall time covers at least the longest run."""
    runs: dict[str, list[float]] = {"with": [], "without": []}
    for found in re.finditer(r"^run \d+/\d+  \S+ (with|without) #\d+ completed (\d+\.\d) s$", stderr, re.MULTILINE):
        runs[found.group(1)].append(float(found.group(2)))
    assert len(runs["with"]) == len(runs["without"]) == 4
    for label, arm in (("With the extension", "with"), ("Without it", "without")):
        line = re.search(
            rf"^{label}: (\d+\.\d) s and \$\S+ per run \((\d+\.\d) s and \$\S+ over 4 runs\)$", stdout, re.M
        )
        assert line is not None, label
        per_run, total = float(line.group(1)), float(line.group(2))
        shown = runs[arm]  # each rounded to 0.1 s, so each sum or mean is within 0.05 s a run of the exact one
        assert abs(total - sum(shown)) <= 0.05 * len(shown) + 0.05
        assert abs(per_run - sum(shown) / len(shown)) <= 0.1
    wall = re.search(r"^Wall time (\d+\.\d) s: the suite's runs, grading and report \((\d+\.\d) s before", stdout, re.M)
    assert wall is not None
    assert float(wall.group(1)) + 0.05 >= max(runs["with"] + runs["without"])
    assert float(wall.group(1)) + 1 >= report.ended_at - report.started_at


@pytest.mark.parametrize("where", ["missing", "plain"])
def test_a_directory_that_is_not_an_extension_is_one_plain_line(
    tmp_path: Path, environ: dict[str, str], where: str
) -> None:
    target = tmp_path / "nothing" if where == "missing" else tmp_path
    done = cli("eval", "run", str(target), "--out", str(tmp_path / "out"), env=environ)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"eval-runner: {target} is not")
    assert not (tmp_path / "out").exists()


def test_a_bad_test_set_names_the_file_and_the_key(tmp_path: Path, environ: dict[str, str]) -> None:
    ext = tmp_path / "ext"
    shutil.copytree(EXAMPLE, ext)
    prompt = ext / "evals" / "greeting" / "prompt.md"
    text = prompt.read_text(encoding="utf-8")
    prompt.write_text(text.replace('kind = "should-not-fire"', 'kind = "should-not-fire"\ncolour = "red"'))
    done = cli("eval", "run", str(ext), env=environ)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert f"{prompt}: unknown key `colour`" in done.stderr
    assert "Traceback" not in done.stderr


def test_concurrency_out_of_range_is_refused(environ: dict[str, str]) -> None:
    done = cli("eval", "run", str(EXAMPLE), "--concurrency", "9", env=environ)
    assert done.returncode != 0
    assert "--concurrency: must be from 1 to 8" in done.stderr


def test_a_door_url_without_its_key_is_one_plain_line(environ: dict[str, str]) -> None:
    done = cli("eval", "run", str(EXAMPLE), "--door-url", "http://127.0.0.1:9", "--door-key-env", "NO_KEY", env=environ)
    assert done.returncode == 1
    assert done.stderr == "eval-runner: the door key is missing: set $NO_KEY (--door-key-env names the variable)\n"


@pytest.fixture
def door(environ: dict[str, str]) -> Iterator[str]:
    """The stand-in door in its own process, reached by URL like a real one; its key is only in its env."""
    child = subprocess.Popen(
        [sys.executable, "-m", "eval_runner.stand_ins.door", "--port", "0", "--key-env", "TEST_DOOR_KEY"],
        env={**environ, "TEST_DOOR_KEY": DOOR_KEY},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        assert line.startswith("READY http://127.0.0.1:"), line
        yield line.split(" ", 1)[1]
    finally:
        child.terminate()
        child.wait(timeout=30)


def test_the_door_key_never_reaches_the_terminal_or_the_results(
    tmp_path: Path, environ: dict[str, str], door: str
) -> None:
    out = tmp_path / "results"
    done = cli(
        *("eval", "run", str(EXAMPLE), "--runs", "2", "--out", str(out)),
        *("--door-url", door, "--door-key-env", "MY_DOOR_KEY", "--agent-kind", "coder"),
        env={**environ, "MY_DOOR_KEY": DOOR_KEY},
    )
    assert done.returncode == 0, done.stderr
    assert "offline stand-in" not in done.stderr  # a real door was named
    # `coder` with no path is the stand-in coder (a real door alone would pick the built-in agent).
    assert "Stand-in run: the agent was a stand-in, so this “Better” says nothing about a real agent." in done.stdout
    report_path, _ = paths_of(done.stdout)
    assert Report.parse_bytes(report_path.read_bytes()).verdict.value == "pass"  # the door answered
    for text in (done.stdout, done.stderr):
        assert DOOR_KEY not in text
    files = [path for path in out.rglob("*") if path.is_file()]
    assert len(files) > 20
    for path in files:
        assert DOOR_KEY.encode() not in path.read_bytes(), path


# --- terminal rendering ------------------------------------------------------------------------------


def test_progress_off_a_terminal_is_one_plain_line_per_finished_run() -> None:
    sink = io.StringIO()
    console = Console(file=sink, force_terminal=False)
    with ProgressView(2, console) as view:
        view(Started("over[bold]view", Arm.SUBJECT, 1))
        view(Finished("over[bold]view", Arm.SUBJECT, 1, "completed", 0.4))
        view(Finished("greeting", Arm.BASELINE, 2, "errored(timeout)", 300.0))
    assert sink.getvalue().splitlines() == [
        "run 1/2  over[bold]view with #1 completed 0.4 s",
        "run 2/2  greeting without #2 errored(timeout) 300.0 s",
    ]
    assert view.done == 2
    assert finished_words(Finished("c", Arm.BASELINE, 3, "cancelled", 1.0)) == "c without #3 cancelled 1.0 s"


def test_no_command_or_an_unknown_one_is_a_usage_error_64() -> None:
    for argv, usage in (
        ([], "usage: eval-runner [-h]"),
        (["run"], "usage: eval-runner [-h]"),
        (["serve-now"], "usage: eval-runner [-h]"),
        (["eval"], "usage: eval-runner eval [-h] ACTION"),
        (["eval", "walk"], "usage: eval-runner eval [-h] ACTION"),
        (["eval", "run"], "usage: eval-runner eval run [-h]"),
        (["trainer"], "usage: eval-runner trainer [-h] ACTION"),
    ):
        done = subprocess.run([sys.executable, "-m", "eval_runner.cli", *argv], capture_output=True, text=True)
        assert done.returncode == 64, (argv, done.stderr)
        assert done.stderr.startswith(usage), (argv, done.stderr)
        assert done.stdout == ""
    shown = subprocess.run([sys.executable, "-m", "eval_runner.cli", "help"], capture_output=True, text=True)
    assert shown.returncode == 0
    assert "usage: eval-runner" in shown.stdout


# --- the one parser ----------------------------------------------------------------------------------

#: Each command as it is called, with the positional arguments it needs.
COMMAND_LINES = {
    "demo": ["demo"],
    "eval run": ["eval", "run", str(EXAMPLE)],
    "serve": ["serve"],
    "check": ["check"],
    "pubkey": ["pubkey"],
    "release": ["release", str(EXAMPLE)],
    "usage": ["usage"],
    "ledger export": ["ledger", "export"],
    "ledger import": ["ledger", "import"],
    "trainer run": ["trainer", "run"],
    "trainer status": ["trainer", "status", "ID"],
    "trainer cancel": ["trainer", "cancel", "ID"],
    "trainer publish": ["trainer", "publish", "ID"],
    "trainer results": ["trainer", "results", "--subject", "DEFREF"],
    "verify": ["verify", "ID"],
}
DECISION_VARIABLES = ("TYPESAFE_API_KEY", "TYPESAFE_BASE_URL", "AI_GATEWAY_API_KEY", "OPENROUTER_API_KEY")


def read_names(module: Any) -> set[str]:
    """The environment variables a module's source reads by name (`env.var("X")`, `environ.get("X")`)."""
    return set(re.findall(r'(?:var|get)\("([A-Z][A-Z0-9_]*)"\)', Path(module.__file__).read_text(encoding="utf-8")))


TRAINER_VARIABLES = frozenset(
    {
        "EVAL_RUNNER_RELAY",
        "EVAL_RUNNER_PUBKEY",
        "EVAL_RUNNER_TRAINER_DIR",
        "XDG_STATE_HOME",
        "EVAL_RUNNER_STATE",
        "EVAL_RUNNER_KEY_FILE",
        "HOME",
    }
)
#: The variables each command reads, which its help must name with a default.
VARIABLES = {
    "demo": {"EVAL_RUNNER_STATE", "EVAL_RUNNER_TMP", "HOME"},
    "eval run": read_names(eval_runner.local_eval) | {"CODER_DOOR_KEY", *DECISION_VARIABLES},
    "serve": read_names(eval_runner.service.config),
    "check": read_names(eval_runner.service.config),
    "pubkey": {"EVAL_RUNNER_KEY_FILE", "EVAL_RUNNER_RELAY", "EVAL_RUNNER_STATE", "HOME"},
    "release": read_names(eval_runner.service.config),
    "usage": {"EVAL_RUNNER_STATE", "HOME"},
    "ledger export": {"EVAL_RUNNER_STATE", "HOME"},
    "ledger import": {"EVAL_RUNNER_DATABASE", "EVAL_RUNNER_STATE"},
    **dict.fromkeys(("trainer run", "trainer status", "trainer cancel", "trainer publish"), TRAINER_VARIABLES),
    "trainer results": {"EVAL_RUNNER_RELAY"},
    "verify": {"EVAL_RUNNER_RELAY"} | read_names(eval_runner.local_eval) | {"CODER_DOOR_KEY", *DECISION_VARIABLES},
}


def in_process(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def leaf_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every command's own parser, by its name after `eval-runner`."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        groups = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
        if not groups:
            found[name] = parser
        for group in groups:
            for word, child in group.choices.items():
                walk(child, f"{name} {word}".strip())

    walk(build_parser(), "")
    return found


def test_the_commands_checked_here_are_every_command() -> None:
    assert set(leaf_parsers()) == set(COMMAND_LINES) == set(VARIABLES)
    assert {"EVAL_RUNNER_CODER", "CODER_MODEL", "EVAL_RUNNER_TMP"} <= VARIABLES["eval run"]
    assert {"EVAL_RUNNER_LISTEN", "GYM_GATES_DIR", "HOSTNAME", "TMPDIR", "HOME"} <= VARIABLES["serve"]


@pytest.mark.parametrize("command", sorted(COMMAND_LINES))
def test_every_commands_help_names_its_options_and_variables_with_defaults(command: str) -> None:
    code, shown, err = in_process([*COMMAND_LINES[command], "--help"])
    assert (code, err) == (0, "")
    assert shown.startswith(f"usage: eval-runner {command} [-h]")
    flat = " ".join(shown.split())
    for action in leaf_parsers()[command]._actions:
        if not action.option_strings or action.nargs == 0:
            continue  # a positional argument, or a flag (--json, --help): no value, no default
        assert action.option_strings[0] in shown, (command, action.option_strings)
        assert action.help is not None
        assert "[default: " in action.help or "[env: " in action.help, (command, action.option_strings)
        assert " ".join(action.help.split()) in flat
    for name in VARIABLES[command]:
        assert re.search(rf"(^  |\[env: ){name}=", shown, re.MULTILINE), (command, name)


def test_an_option_from_the_environment_shows_the_variable_and_the_default() -> None:
    _, shown, _ = in_process(["trainer", "run", "--help"])
    flat = " ".join(shown.split())
    assert "--relay URL the relay [env: EVAL_RUNNER_RELAY=ws://127.0.0.1:7447]" in flat
    assert "--timeout SECONDS how long to wait [default: 3600]" in flat
    _, shown, _ = in_process(["serve", "--help"])
    assert re.search(r"^  EVAL_RUNNER_LISTEN=127\.0\.0\.1:7447 +where the embedded relay listens", shown, re.M)
    assert re.search(r"^  EVAL_RUNNER_CONCURRENCY=4 +runs at once in one suite, 1\.\.8$", shown, re.M)


@pytest.mark.parametrize("command", sorted(COMMAND_LINES))
def test_an_unknown_flag_is_an_error_of_that_command(command: str) -> None:
    code, out, err = in_process([*COMMAND_LINES[command], "--whatever"])
    assert (code, out) == (64, "")
    assert err.startswith(f"usage: eval-runner {command} ")
    assert err.endswith(f"\neval-runner {command}: error: unrecognized arguments: --whatever\n")


@pytest.mark.parametrize("argv", [["--whatever"], ["eval", "--whatever"], ["trainer", "--whatever"], ["usage", "--js"]])
def test_an_unknown_flag_anywhere_else_exits_64(argv: list[str]) -> None:
    code, out, err = in_process(argv)
    assert (code, out) == (64, "")
    assert f"error: unrecognized arguments: {argv[-1]}" in err


def test_pubkey_refuses_what_it_does_not_take() -> None:
    done = cli("pubkey", "--whatever")
    assert (done.returncode, done.stdout) == (64, "")
    assert (
        done.stderr == "usage: eval-runner pubkey [-h]\neval-runner pubkey: error: unrecognized arguments: --whatever\n"
    )


def test_help_exits_0_everywhere() -> None:
    for argv in (["-h"], ["help"], ["eval", "-h"], ["trainer", "--help"], ["usage", "-h"]):
        code, shown, err = in_process(argv)
        assert (code, err) == (0, ""), argv
        assert shown.startswith("usage: eval-runner"), argv


# --- eval run for scripts ----------------------------------------------------------------------------

JSON_KEYS = {
    "verdict",
    "verdict_words",
    "headline",
    "headline_text",
    "notes",
    "stand_ins",
    "figures",
    "partial",
    "report",
    "html",
    "results",
    "cancelled",
    "fail_on",
    "exit_code",
    "error",
}


def test_eval_run_json_is_one_object_on_stdout(tmp_path: Path, environ: dict[str, str]) -> None:
    out = tmp_path / "results"
    done = cli(
        "eval",
        "run",
        str(EXAMPLE),
        "--runs",
        "2",
        "--json",
        "--fail-on",
        "inconclusive",
        "--out",
        str(out),
        env=environ,
    )
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    found = json.loads(line)
    assert set(found) == JSON_KEYS
    assert (found["verdict"], found["verdict_words"]) == ("pass", "Better")
    assert found["headline"] == {"subject_passed": 2, "baseline_passed": 1, "total": 2}
    assert (
        found["headline_text"] == "Passes 2 of 2 tests with the extension, 1 of 2 without. Change in mean score: +0.50."
    )
    assert found["stand_ins"] == ["agent", "door"]
    figures = {(row["arm"], row["metric"]): row for row in found["figures"]}
    for arm in ("subject", "baseline"):
        # The stand-in door reports usage on each of its answers: one model call a run, 4 runs an arm.
        assert {key: figures[(arm, "turns")][key] for key in ("value", "denominator", "unknown_count")} == {
            "value": 4,
            "denominator": 4,
            "unknown_count": 0,
        }
    assert figures[("subject", "tool_calls")]["value"] > figures[("baseline", "tool_calls")]["value"] == 0
    assert (found["cancelled"], found["partial"], found["error"]) == (False, None, None)
    assert (found["fail_on"], found["exit_code"]) == ("inconclusive", 0)
    report, html = Path(found["report"]), Path(found["html"])
    assert report.parent == html.parent == Path(found["results"])
    assert report.parent.parent == out
    assert Report.parse_bytes(report.read_bytes()).verdict.value == "pass"
    assert html.is_file()
    # Before it starts, it says the agent and the door are stand-ins; progress stays on stderr.
    lines = done.stderr.splitlines()
    assert lines[0].startswith("agent: the stand-in agent (")
    assert lines[1].startswith("door: an offline stand-in")
    assert "run 8/8" in done.stderr


@pytest.mark.parametrize(("fail_on", "code"), [(None, 0), ("worse", 0), ("inconclusive", 1)])
def test_fail_on_follows_the_verdict(tmp_path: Path, environ: dict[str, str], fail_on: str | None, code: int) -> None:
    """One run per case and arm: the example's verdict is No clear change, which only `inconclusive` fails."""
    asked = [] if fail_on is None else ["--fail-on", fail_on]
    done = cli("eval", "run", str(EXAMPLE), "--runs", "1", "--json", *asked, "--out", str(tmp_path), env=environ)
    assert done.returncode == code, done.stderr
    found = json.loads(done.stdout)
    assert (found["verdict"], found["verdict_words"]) == ("inconclusive", "No clear change")
    assert (found["fail_on"], found["exit_code"]) == (fail_on, code)


def test_the_verdicts_that_fail_are_ordered_worse_inconclusive_better() -> None:
    table = {
        (verdict, fail_on): exit_code(verdict, cancelled=False, fail_on=fail_on)
        for verdict in Verdict
        for fail_on in (None, *FAIL_ON)
    }
    assert table == {
        (Verdict.PASS, None): 0,
        (Verdict.PASS, "worse"): 0,
        (Verdict.PASS, "inconclusive"): 0,
        (Verdict.INCONCLUSIVE, None): 0,
        (Verdict.INCONCLUSIVE, "worse"): 0,
        (Verdict.INCONCLUSIVE, "inconclusive"): 1,
        (Verdict.FAIL, None): 0,
        (Verdict.FAIL, "worse"): 1,
        (Verdict.FAIL, "inconclusive"): 1,
    }
    assert exit_code(Verdict.FAIL, cancelled=True, fail_on="worse") == 130


def test_eval_run_json_says_why_when_nothing_ran(tmp_path: Path, environ: dict[str, str]) -> None:
    done = cli("eval", "run", str(tmp_path), "--json", "--fail-on", "worse", env=environ)
    assert done.returncode == 1
    found = json.loads(done.stdout)
    assert set(found) == JSON_KEYS
    assert found["error"] == f"{tmp_path} is not an extension directory: it has no package.json or SKILL.md"
    assert (found["verdict"], found["report"], found["exit_code"]) == (None, None, 1)
    assert done.stderr == f"eval-runner: {found['error']}\n"


def test_a_wrong_fail_on_is_a_usage_error() -> None:
    code, out, err = in_process(["eval", "run", str(EXAMPLE), "--fail-on", "better"])
    assert (code, out) == (64, "")
    assert err.endswith(
        "eval-runner eval run: error: argument --fail-on: invalid choice: 'better' "
        "(choose from 'worse', 'inconclusive')\n"
    )
