"""One admitted run, from `queued` to its result at every alias (runner.md §14).

The pipeline admits a run and hands it a `RunContext`, the collaborators it works with (ledger, answers,
suite runner, slots, quota, stop switches, usage), so this module needs nothing of the pipeline. Progress
notes and the result are each recorded in the ledger before they are sent: what the ledger holds is what
every alias, and any later retransmission, gets.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from eval_runner.contracts.answers import ProgressBody, ResultBody
from eval_runner.contracts.outputs import MAX_NOTE_CHARS, MAX_NOTES, Headline, RunOutput
from eval_runner.service.ledger.claims import Claim, Job, LedgerError, ResultConflictError
from eval_runner.service.ledger.store import Ledger
from eval_runner.service.metrics import NO_METRICS, Metrics
from eval_runner.service.requests.admission import InputFacts, RunPlan
from eval_runner.service.requests.opening import OpenedExecute
from eval_runner.service.requests.quota import Quota, Ticket
from eval_runner.service.requests.reply import Answers, SealError, answer_text
from eval_runner.service.requests.suites import SuiteError, SuiteResult, SuiteRunner
from eval_runner.service.usage import Record, UsageLog, arrival_time

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Arrival:
    """When a request arrived (unix ms) and how large its ciphertext was: the usage record's clock and size."""

    ms: int
    bytes_in: int


class UsageKeeper:
    """Appends the one usage record of each answered request (runner.md §19.1); a failure only logs."""

    def __init__(
        self, usage_log: UsageLog, clock: Callable[[], float] = time.time, metrics: Metrics = NO_METRICS
    ) -> None:
        self.usage_log = usage_log
        self._clock = clock
        self.metrics = metrics

    def keep(
        self,
        opened: OpenedExecute,
        arrival: Arrival,
        facts: InputFacts,
        *,
        outcome: str,
        code: str | None = None,
        tests: int | None = None,
        turns: int | None = None,
        verdict: str | None = None,
        subject_passed: int | None = None,
        baseline_passed: int | None = None,
        result: str | None = None,
        report: str | None = None,
    ) -> None:
        """`result` is the `3189` a publish published, or the one a check or validation cites (else the
        input's); `report` the published report's digest when a publish rewrote it."""
        record = Record(
            time=arrival_time(arrival.ms),
            key=opened.principal,
            request=opened.event.id,
            action=facts.action,
            subject=facts.subject,
            suite=facts.suite,
            tests=tests,
            runs=facts.runs,
            turns=turns,
            outcome=outcome,
            code=code,
            verdict=verdict,
            subject_passed=subject_passed,
            baseline_passed=baseline_passed,
            result=result if result is not None else facts.result,
            report=report,
            total_ms=max(0, int(self._clock() * 1000) - arrival.ms),
            bytes_in=arrival.bytes_in,
        )
        self.usage_log.keep(record)
        self.metrics.answered(record)  # the usage record is what "answered" means, for the metrics too


@dataclass(frozen=True, slots=True)
class RunContext:
    """What a run works with, shared by every run of one pipeline: the ledger, the answers it sends, the
    suite runner, the suite slots (`EVAL_RUNNER_JOBS`), the quota, the stop switches by claim key (a cancel
    sets one), and the usage log."""

    ledger: Ledger
    answers: Answers
    suite_runner: SuiteRunner
    slots: asyncio.Semaphore
    quota: Quota
    stops: dict[str, asyncio.Event]
    usage: UsageKeeper


def finished_line(key_name: str, headline: Headline, verdict: str) -> str:
    """The `finished` log line (runner.md §20): `1 without` when the baseline arm ran, `no baseline` when not."""
    baseline = "no baseline" if headline.baseline_passed is None else f"{headline.baseline_passed} without"
    return f"finished {key_name}: {headline.subject_passed} of {headline.total} with the tool, {baseline}, {verdict}"


class ProgressStream:
    """A claim's progress notes, in order: each recorded in the ledger (seq 0, 1, …), then sent as a
    `27020` to the claim's first execute event. Notes queue up, so the suite never waits on the relay."""

    def __init__(self, context: RunContext, claim: Claim, planned: int) -> None:
        self._context = context
        self._claim = claim
        self._planned = planned
        self._seq = len(claim.progress)  # a run taken from a fleet's queue goes on after its `queued` note
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[tuple[str, int] | None] = asyncio.Queue()
        self._worker = self._loop.create_task(self._send_all())

    def note(self, status: str, completed: int) -> None:
        """Queue a note; safe from the event loop and from any other thread."""
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is self._loop:
            self._queue.put_nowait((status, completed))
        else:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, (status, completed))

    def completed(self, count: int) -> None:
        """The suite runner's `progress` callback: `count` case runs have finished (call it from any thread)."""
        self.note("running", count)

    async def close(self) -> None:
        """Send what is queued, then stop."""
        self._queue.put_nowait(None)
        await self._worker

    def cancel(self) -> None:
        self._worker.cancel()

    async def _send_all(self) -> None:
        context, claim = self._context, self._claim
        while (item := await self._queue.get()) is not None:
            status, completed = item
            try:
                await asyncio.to_thread(context.ledger.record_progress, claim.key, self._seq, status)
            except LedgerError as error:
                logger.error("ledger: %s", error)
                continue
            body = ProgressBody(claim.binding, self._seq, status, min(max(completed, 0), self._planned), self._planned)
            self._seq += 1
            await context.answers.feedback(claim.principal, claim.execute_event, body.to_json())


def hosted_notes(notes: tuple[str, ...]) -> tuple[str, ...]:
    """The notes a result may carry: the first four, any over 200 characters dropped."""
    return tuple(note for note in notes[:MAX_NOTES] if len(note) <= MAX_NOTE_CHARS)


class HostedRun:
    """One admitted run, from `queued` to its result at every alias (runner.md §14)."""

    def __init__(
        self,
        context: RunContext,
        opened: OpenedExecute,
        arrival: Arrival,
        plan: RunPlan,
        claim: Claim,
        ticket: Ticket,
        stop: asyncio.Event,
        *,
        queued: bool = False,
        slot_held: bool = False,
    ) -> None:
        """`queued`: taken from a fleet's queue, its job and `queued` note already recorded; `slot_held`:
        the taker holds a suite slot for it already (released when the run ends)."""
        self.queued = queued
        self.slot_held = slot_held
        self.context = context
        self.opened = opened
        self.arrival = arrival
        self.plan = plan
        self.claim = claim
        self.ticket = ticket
        self.stop = stop
        self.facts = InputFacts(
            action=plan.action,
            subject=plan.subject.definition.id,
            suite=plan.suite_word,
            runs=plan.runs,
            result=plan.check if plan.check is not None else plan.validates,
        )
        self.job = Job(
            key=claim.key,
            action="run",
            principal=claim.principal,
            request=answer_text(opened.event.to_json()),
            status="running",
            check=plan.check,
            validates=plan.validates,
        )

    async def run(self) -> None:
        progress = ProgressStream(self.context, self.claim, self.plan.turns)
        try:
            await self._run(progress)
        finally:
            progress.cancel()
            self.plan.close()
            self.context.stops.pop(self.claim.key, None)

    async def _run(self, progress: ProgressStream) -> None:
        context, claim, plan = self.context, self.claim, self.plan
        if not self.queued:
            await self._save_job(self.job)
            progress.note("queued", 0)
        suite: SuiteResult | None = None
        failure: str | None = None
        if await self._slot():
            try:
                logger.info(
                    "running %s for %s: %d tests, %d runs per arm%s",
                    claim.key_name,
                    claim.principal[:12],
                    plan.tests,
                    plan.runs,
                    _suffix(plan.action, marginal=plan.defaults is not None),
                )
                progress.note("running", 0)
                base = await asyncio.to_thread(context.ledger.results_base, claim.key)
                suite = await context.suite_runner.run(
                    plan, progress=progress.completed, cancel=self.stop, results_base=base
                )
            except (SuiteError, LedgerError) as error:
                failure = str(error)
            except Exception as error:  # a suite runner's bug fails the run rather than keep the slot
                failure = f"{type(error).__name__}: {error}"
            finally:
                context.slots.release()
        await progress.close()
        if self.stop.is_set() or (suite is not None and suite.cancelled):
            await self._cancelled(suite)
        elif failure is not None or suite is None:
            why = failure if failure is not None else "the suite runner returned nothing"
            logger.warning("run %s failed: %s", claim.key_name, why)
            await asyncio.to_thread(context.quota.give_back, self.ticket)
            await self._failed(why, suite)
        else:
            await self._completed(suite)

    async def _slot(self) -> bool:
        """A suite slot, or False when the stop switch is set first (the run then never starts)."""
        if self.slot_held:
            if self.stop.is_set():
                self.context.slots.release()
                return False
            return True
        if self.stop.is_set():
            return False
        acquire = asyncio.ensure_future(self.context.slots.acquire())
        stopped = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait({acquire, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not acquire.done():
                acquire.cancel()
        try:
            await acquire
        except asyncio.CancelledError:
            if not acquire.cancelled():
                raise
            return False
        if self.stop.is_set():
            self.context.slots.release()
            return False
        return True

    async def _cancelled(self, suite: SuiteResult | None) -> None:
        results = None if suite is None or suite.results is None else str(suite.results)
        await self._save_job(replace(self.job, status="cancelled", results=results))
        result = ResultBody.cancelled(self.claim.binding, self.claim.record)
        await self._finish("cancelled", result)

    async def _failed(self, why: str, suite: SuiteResult | None) -> None:
        results = None if suite is None or suite.results is None else str(suite.results)
        await self._save_job(replace(self.job, status="failed", results=results))
        await self._finish("failed", ResultBody.failed(self.claim.binding, self.claim.record, why))

    async def _completed(self, suite: SuiteResult) -> None:
        claim = self.claim
        try:
            sealed = await self.context.answers.seal(
                claim.principal, claim.mailbox, suite.report, suite.report_ref, claim.retain_until
            )
        except SealError as error:
            logger.warning("run %s failed: %s", claim.key_name, error)
            await self._failed(str(error), suite)
            return
        results = None if suite.results is None else str(suite.results)
        job = replace(self.job, status="completed", results=results, report=suite.report_ref, sealed=sealed)
        await self._save_job(job)
        headline = suite.headline
        logger.info(finished_line(claim.key_name, headline, suite.verdict))
        output = RunOutput(suite.report_ref, sealed, headline, suite.verdict, hosted_notes(suite.notes))
        await self._finish(
            "completed",
            ResultBody.completed(claim.binding, claim.record, output),
            verdict=suite.verdict,
            subject_passed=headline.subject_passed,
            baseline_passed=headline.baseline_passed,
        )

    async def _save_job(self, job: Job) -> None:
        try:
            await asyncio.to_thread(self.context.ledger.save_job, job)
        except LedgerError as error:
            logger.error("ledger: %s", error)

    async def _finish(
        self,
        outcome: str,
        result: ResultBody,
        *,
        verdict: str | None = None,
        subject_passed: int | None = None,
        baseline_passed: int | None = None,
    ) -> None:
        """Usage record, the terminal observation in the ledger, then the result to every alias (§14 step 9)."""
        context, claim, plan = self.context, self.claim, self.plan
        context.usage.keep(
            self.opened,
            self.arrival,
            self.facts,
            outcome=outcome,
            code=result.code,
            tests=plan.tests,
            turns=plan.turns,
            verdict=verdict,
            subject_passed=subject_passed,
            baseline_passed=baseline_passed,
        )
        context.stops.pop(claim.key, None)
        try:
            stored: str | None = await asyncio.to_thread(
                context.ledger.finish, claim.key, outcome, answer_text(result.to_json())
            )
        except ResultConflictError as error:
            logger.warning("result for %s: %s", claim.key_name, error.message)
            stored = None
        except LedgerError as error:  # not durable, so not sent: a retransmission gets what the ledger holds
            logger.error("ledger: %s", error)
            return
        try:
            settled = await asyncio.to_thread(context.ledger.lookup, claim.key)
        except LedgerError as error:
            logger.error("ledger: %s", error)
            return
        if settled is None:
            return
        payload = stored if stored is not None else settled.result
        if payload is None:
            return
        for alias in settled.aliases:
            await context.answers.result(claim.principal, alias, payload)


def _suffix(action: str, *, marginal: bool = False) -> str:
    plain = ", marginal over the defaults" if marginal else ""
    return {"check": ", a check", "validation": ", a validation"}.get(action, plain)
