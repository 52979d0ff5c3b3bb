"""What a test does when an outside part it drives (the real agents, PostgreSQL) is missing on this machine:
it skips with the reason, loudly — except under CI (`CI` set), which installs every such part (`.ci/run`,
`scripts/bootstrap`, `scripts/agents`), so there the test fails instead of passing by skipping."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI installs it, so this is a failure)")
    pytest.skip(reason)
