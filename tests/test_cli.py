"""The console script answers --version and --help through a real subprocess."""

from __future__ import annotations

import subprocess
import sys

from eval_runner import __version__


def test_version_and_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "eval_runner.cli", "--version"], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == f"eval-runner {__version__}"
    shown = subprocess.run([sys.executable, "-m", "eval_runner.cli", "--help"], capture_output=True, text=True)
    assert shown.returncode == 0
    assert "hosted eval runner" in shown.stdout
