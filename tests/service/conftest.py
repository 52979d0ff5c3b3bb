"""Fixtures the service's tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.captured_logs import LogLines, captured_logs


@pytest.fixture
def logs() -> Iterator[LogLines]:
    """The runner's log lines while the test runs (the `eval_runner` logger's messages)."""
    with captured_logs() as lines:
        yield lines
