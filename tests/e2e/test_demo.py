"""`eval-runner demo`, the README's first command, as a person runs it: a real subprocess, real relay,
real sandboxes, the stand-in agent and door. It must keep working."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from eval_runner.contracts.report import Report


def test_the_demo_runs_one_hosted_run_and_shows_the_verdict(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = {key: value for key, value in os.environ.items() if not key.startswith(("EVAL_RUNNER_", "CODER_"))}
    env["EVAL_RUNNER_STATE"] = str(state)
    done = subprocess.run(
        [sys.executable, "-m", "eval_runner.cli", "demo"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert "Verdict  Better" in done.stdout
    lines = done.stdout.splitlines()
    verdict_at = next(i for i, line in enumerate(lines) if line.startswith("Verdict"))
    assert lines[verdict_at + 1].startswith(  # a stand-in "Better" never passes for a real one
        "Stand-in run: the agent and the model door were stand-ins, so this “Better” says nothing"
    )
    assert "overview" in done.stdout
    assert "stand-in" in done.stderr  # it says plainly that the door and agent are stand-ins
    assert "EVAL_RUNNER_CODER" in done.stderr  # and how to point the runner at real ones
    assert "subscribed; requests arrive live from here" in done.stderr
    # The runner key released the example's starter test set, and the run was of that release.
    released = [line.split()[-1] for line in done.stderr.splitlines() if "codebase-brief-tests " in line]
    assert len(released) == 1, done.stderr

    html = [line.split(None, 1)[1] for line in done.stdout.splitlines() if line.startswith("html ")]
    reports = [line.split(None, 1)[1] for line in done.stdout.splitlines() if line.startswith("report  /")]
    assert len(html) == 1
    assert Path(html[0]).is_file()
    report = Report.parse_bytes(Path(reports[0]).read_bytes())
    assert report.verdict.value == "pass"
    assert report.suite.event is not None
    assert report.suite.event.id == released[0]
    assert Path(html[0]).is_relative_to(state)
    # The report the runner sealed says it too, in meta (what a trainer sees) and on the page.
    assert report.meta_extra["eval_runner_stand_ins"] == ["agent", "door"]
    assert "Stand-in run" in Path(html[0]).read_text()
    assert ":" not in Path(html[0]).parent.name
