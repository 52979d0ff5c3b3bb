"""A stand-in for the engine's suite runner, so the pipeline's tests need no agent, door or sandbox.

It obeys the `SuiteRunner` protocol: it counts the runs it is asked for (a test proves a retransmission
never reruns), calls `progress` once per case run of the plan (tests × runs × 2), makes a results
directory under `results_base`, and returns a report built the way the engine builds one
(`tests.support.sample_reports`), naming this runner as evaluator and the request as requester, as
JCS bytes with their ArtifactRef. Other behaviours, set per instance through `mode`:

* `"block"`: wait until the test calls `release()` (or the stop switch is set), then complete;
* `"wait_cancel"`: wait for the stop switch, then return a result marked cancelled;
* `"fail"`: raise `SuiteError`;
* `"threads"`: call `progress` from worker threads, as an engine running cases in threads might.
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import replace
from pathlib import Path

from eval_runner.contracts.outputs import Headline
from eval_runner.contracts.report import Verdict, report_ref
from eval_runner.service.requests.admission import RunPlan
from eval_runner.service.requests.pipeline import Progress, SuiteError, SuiteResult
from tests.support.sample_reports import Spec, report

FAILURE = "the door refused every call: 401 Unauthorized"
NOTES = ("Faster: 12.0 s against 30.0 s per run",)


class StandInSuiteRunner:
    def __init__(self, mode: str = "complete") -> None:
        self.mode = mode
        self.plans: list[RunPlan] = []
        self._started = asyncio.Condition()
        self._release = asyncio.Event()

    @property
    def runs(self) -> int:
        return len(self.plans)

    def release(self) -> None:
        """Let every blocked run go on."""
        self._release.set()

    async def wait_started(self, count: int) -> None:
        """Until `count` runs have started (bounded by the caller)."""
        async with self._started:
            await self._started.wait_for(lambda: len(self.plans) >= count)

    async def run(self, plan: RunPlan, *, progress: Progress, cancel: asyncio.Event, results_base: Path) -> SuiteResult:
        async with self._started:
            self.plans.append(plan)
            self._started.notify_all()
        assert plan.evals.is_dir(), "the plan's staging is alive while it runs"
        if self.mode == "fail":
            raise SuiteError(FAILURE)
        if self.mode == "wait_cancel":
            await cancel.wait()
            return replace(self._result(plan, results_base), cancelled=True)
        if self.mode == "block":
            waiting = asyncio.ensure_future(self._release.wait())
            stopping = asyncio.ensure_future(cancel.wait())
            await asyncio.wait({waiting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            stopping.cancel()
        for completed in range(1, plan.turns + 1):
            if self.mode == "threads":
                await asyncio.to_thread(progress, completed)
                continue
            step = progress(completed)
            if inspect.isawaitable(step):
                await step
        return self._result(plan, results_base)

    def _result(self, plan: RunPlan, results_base: Path) -> SuiteResult:
        results = results_base / f"run-{len(self.plans)}"
        results.mkdir()
        built = report(
            Spec(
                evaluator=plan.authorship.evaluator,
                verdict=Verdict.PASS,
                requester=plan.authorship.requester,
                subject_release=plan.subject.definition.event,
            )
        )
        data, ref = report_ref(built)
        headline = built.ext_eval.headline
        return SuiteResult(
            report=data,
            report_ref=ref,
            headline=Headline(headline.subject_passed, headline.baseline_passed, headline.total),
            verdict=built.verdict.value,
            notes=NOTES,
            results=results,
        )
