"""A hosted run works from the `RunContext` the pipeline hands it, never from the pipeline itself, and its
`finished` line reads plainly: the baseline's count, or that there was no baseline."""

from __future__ import annotations

import subprocess
import sys

from eval_runner.contracts.outputs import Headline
from eval_runner.service.requests.hosted_run import finished_line
from tests.support.plain_words import assert_plain


def test_the_finished_line_prints_plain_numbers() -> None:
    with_baseline = finished_line("ab" * 16, Headline(2, 1, 2), "pass")
    assert with_baseline == f"finished {'ab' * 16}: 2 of 2 with the tool, 1 without, pass"
    without = finished_line("ab" * 16, Headline(1, None, 2), "inconclusive")
    assert without == f"finished {'ab' * 16}: 1 of 2 with the tool, no baseline, inconclusive"
    assert_plain(with_baseline, without)


def test_a_hosted_run_needs_nothing_of_the_pipeline() -> None:
    """Imported alone, in a fresh interpreter, `hosted_run` brings no pipeline module with it."""
    probe = (
        "import sys, eval_runner.service.requests.hosted_run; "
        "print('eval_runner.service.requests.pipeline' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "False"
