"""The engine's side of a hosted run, as the pipeline sees it: the `SuiteRunner` protocol and its result.

The suite runner is the engine's (`engine.suite_run`); the service depends only on this protocol, so
either side can change without the other, and tests stand a runner in. `service.pipeline` re-exports
these names.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from eval_runner.contracts.outputs import Headline
from eval_runner.contracts.refs import ArtifactRef
from eval_runner.errors import EvalRunnerError
from eval_runner.service.requests.admission import RunPlan


class SuiteError(EvalRunnerError):
    """The suite errored: the run fails (`failed`, the first 400 characters of `str()`), the quota is given back."""


@dataclass(frozen=True, slots=True)
class SuiteResult:
    """What a finished suite run hands back (runner.md §14 step 7).

    `report` is the report's JCS bytes and `report_ref` their ArtifactRef (`application/json`,
    `openagents.eval-report.v1`); `headline`, `verdict` (`pass`/`fail`/`inconclusive`) and `notes`
    (≤ 4 of ≤ 200 characters) are what the result shows; `results` the results directory, if one was
    made; `cancelled` whether the run stopped on the cancel switch.
    """

    report: bytes
    report_ref: ArtifactRef
    headline: Headline
    verdict: str
    notes: tuple[str, ...] = ()
    results: Path | None = None
    cancelled: bool = False


Progress = Callable[[int], Awaitable[None] | None]


class SuiteRunner(Protocol):
    """Runs a plan's suite in both arms. `progress(completed)` is called once per finished case run
    (1, 2, … up to the plan's turns); `cancel` is the stop switch; the engine makes its results directory
    under `results_base`. Raises `SuiteError` when the suite errors."""

    async def run(
        self, plan: RunPlan, *, progress: Progress, cancel: asyncio.Event, results_base: Path
    ) -> SuiteResult: ...
