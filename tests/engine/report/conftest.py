"""The report tests' suite on disk: `TWO_CASES` written under the test's own directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.report_inputs import TWO_CASES, write_cases


@pytest.fixture
def evals(tmp_path: Path) -> Path:
    return write_cases(tmp_path / "evals", TWO_CASES)
