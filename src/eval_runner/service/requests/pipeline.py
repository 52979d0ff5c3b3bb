"""The request pipeline: every delivered `25920`, from the relay to its last answer (runner.md §9, §14).

`Pipeline.handle` is the listener's `deliver` callback. In the spec's order: seen-id dedupe, opening (what
can't be proven is dropped, never answered), controls, retransmissions, admission and the plan, quota, and
the ledger's reservation, committed before `accepted` is sent; then the run goes to `hosted_run` with a
`RunContext`. Every request answered, admitted or refused, is one usage record.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from typing import TypeVar

from eval_runner.contracts.answers import ResultBody
from eval_runner.contracts.errors import Code
from eval_runner.contracts.execution import Binding
from eval_runner.contracts.hosted import PublishInput
from eval_runner.engine.testset.catalog import Catalog
from eval_runner.nostr import ConversationKeys, Event, SecretKey
from eval_runner.service.blobs.bucket import BlobStorage
from eval_runner.service.config import Config
from eval_runner.service.ledger.claims import (
    CONFLICT_MESSAGE,
    Claim,
    Job,
    LedgerError,
    Refusal,
    ResultConflictError,
    Retransmission,
)
from eval_runner.service.ledger.queued import QueueRecords
from eval_runner.service.ledger.store import Ledger
from eval_runner.service.metrics import NO_METRICS, Metrics
from eval_runner.service.relay.connection import RelayClient
from eval_runner.service.requests.admission import (
    Admission,
    DefaultsSource,
    InputFacts,
    RefusalError,
    RunPlan,
    ToolRelease,
    input_facts,
)
from eval_runner.service.requests.hosted_run import Arrival, HostedRun, RunContext, UsageKeeper
from eval_runner.service.requests.opening import (
    DropError,
    OpenedControl,
    OpenedExecute,
    SeenIds,
    drop_line,
    open_request,
)
from eval_runner.service.requests.publish import PublishError, Publishing, crash_point, failed_line, published_line
from eval_runner.service.requests.quota import OverQuotaError, Quota, Ticket, quota_for
from eval_runner.service.requests.reply import Answers, EventPublisher, answer_text
from eval_runner.service.requests.run_queue import RunQueue
from eval_runner.service.requests.suites import Progress, SuiteError, SuiteResult, SuiteRunner
from eval_runner.service.settings import Limits
from eval_runner.service.usage import UsageLog, usage_log_for

CONTROL_NOT_FOUND = "no run of yours matches this control"
UNDISPATCHED = "the claim couldn't be dispatched"
UNPLANNED = "the runner couldn't plan this run; try again later"
T = TypeVar("T")

logger = logging.getLogger(__name__)


class Pipeline:
    """Handles every request delivered to this runner. Create one per runner; `handle` is `deliver`."""

    def __init__(
        self,
        *,
        secret: SecretKey,
        ledger: Ledger,
        admission: Admission,
        suite_runner: SuiteRunner,
        publisher: EventPublisher,
        quota: Quota,
        usage: UsageLog,
        limits: Limits,
        clock: Callable[[], float] = time.time,
        metrics: Metrics = NO_METRICS,
    ) -> None:
        self.runner = secret.public_key().to_hex()
        self.metrics = metrics
        self._secret = secret
        self.ledger = ledger
        self.admission = admission
        self.suite_runner = suite_runner
        self.quota = quota
        self.usage = usage
        self.limits = limits
        self.clock = clock
        self._keys = ConversationKeys()
        self.answers = Answers(secret, publisher, keys=self._keys, clock=clock)
        self._seen = SeenIds()
        self.stops: dict[str, asyncio.Event] = {}
        self._usage = UsageKeeper(usage, clock, metrics)
        self._context = RunContext(
            ledger=ledger,
            answers=self.answers,
            suite_runner=suite_runner,
            slots=metrics.suite_slots(limits.jobs),
            quota=quota,
            stops=self.stops,
            usage=self._usage,
        )
        self._tasks: set[asyncio.Task[None]] = set()
        self.publishing = Publishing(
            secret=secret, ledger=ledger, relay=admission.relay, blobs=admission.blobs, publisher=publisher
        )
        #: A fleet's queue of admitted runs (service/requests/run_queue.py); None: runs wait for a slot here.
        self.queue = (
            RunQueue(
                ledger=ledger,
                secret=secret,
                keys=self._keys,
                admission=admission,
                context=self._context,
                tasks=self._tasks,
            )
            if isinstance(ledger, QueueRecords) and ledger.shared
            else None
        )

    @classmethod
    def from_config(
        cls,
        config: Config,
        *,
        secret: SecretKey,
        ledger: Ledger,
        catalog: Catalog,
        suite_runner: SuiteRunner,
        publisher: EventPublisher,
        blobs: BlobStorage | None = None,
        relay: RelayClient | None = None,
        tool_release: ToolRelease | None = None,
        clock: Callable[[], float] = time.time,
        defaults: DefaultsSource | None = None,
        metrics: Metrics = NO_METRICS,
    ) -> Pipeline:
        """The pipeline `serve` runs: state, temp root, quota, usage log and limits from the configuration."""
        runner = secret.public_key().to_hex()
        return cls(
            secret=secret,
            ledger=ledger,
            admission=Admission(
                runner=runner,
                catalog=catalog,
                state=config.state,
                temp_root=config.temp_root,
                tool_release=tool_release,
                disk_floor=config.disk.floor,
                blobs=blobs,
                relay=relay,
                defaults=defaults,
            ),
            suite_runner=suite_runner,
            publisher=publisher,
            quota=quota_for(config.quota_file, ledger),
            usage=usage_log_for(config.usage_dir, ledger),
            limits=config.limits,
            clock=clock,
            metrics=metrics,
        )

    # -- the way in ----------------------------------------------------------------------------

    async def handle(self, event: Event) -> None:
        """Handle one delivered event (runner.md §9)."""
        if self._seen.seen(event.id):
            return
        now = self.clock()
        try:
            opened = open_request(event, self._secret, int(now), self._keys)
        except DropError as error:
            if error.verified:
                self._seen.remember(event.id)
            logger.info(drop_line(event.id, error.reason))
            self.metrics.dropped(error.reason, verified=error.verified)
            return
        self._seen.remember(event.id)
        if self.ledger.shared and not await self._taken(event.id):
            return
        if isinstance(opened, OpenedControl):
            await self._control(opened)
        else:
            await self._execute(opened, Arrival(int(now * 1000), opened.bytes_in))

    async def _taken(self, event_id: str) -> bool:
        """In a fleet every runner receives every event: True for the one that takes it to answer."""
        try:
            return await self._ledger(self.ledger.take_event, event_id)
        except LedgerError as error:  # not knowing whether another runner has it: leave it (a resend comes)
            logger.error("ledger: %s", error)
            return False

    async def wait_idle(self) -> None:
        """Wait until every run this pipeline started has sent its result."""
        if self.queue is not None:
            await self.queue.finished()
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def aclose(self) -> None:
        """Stop every run in flight (a restart will answer them `unknown`) and wait for them to end."""
        if self.queue is not None:
            self.queue.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _ledger(self, call: Callable[..., T], *args: object, **kwargs: object) -> T:
        return await asyncio.to_thread(call, *args, **kwargs)

    async def _lookup(self, key: str) -> Claim | None:
        """The claim for `key`: read on the loop when no write holds the ledger, else in a thread. Every request
        is looked up, and under a flood a thread hop per lookup cost a third of the runner's time."""
        done, claim = self.ledger.lookup_now(key)
        return claim if done else await self._ledger(self.ledger.lookup, key)

    # -- controls (§9.3) -----------------------------------------------------------------------

    async def _control(self, opened: OpenedControl) -> None:
        body = opened.body
        try:
            claim = await self._ledger(
                self.ledger.find_for_control, body.request, body.attempt, body.run, opened.target, opened.principal
            )
            if claim is None:
                raise LedgerError(CONTROL_NOT_FOUND, Code.NOT_ADMITTED)
            if body.type == "status":
                answer = (await self._ledger(self.ledger.status, claim.key)).to_json()
            elif body.type == "replay":
                after = body.after_seq
                records = body.max_records if body.max_records is not None else 1
                answer = (await self._ledger(self.ledger.replay, claim.key, after, records)).to_json()
            else:
                answer = (await self._ledger(self.ledger.request_cancel, claim.key, body.reason)).to_json()
        except LedgerError as error:
            logger.info(refused_line(opened.event.id, opened.principal, error.code, error.message))
            refusal = ResultBody.refused(Binding(body.request, body.attempt, ""), error.code, error.message)
            await self.answers.result(opened.principal, opened.event.id, refusal.to_json())
            return
        await self.answers.result(opened.principal, opened.event.id, answer)
        if body.type == "cancel":
            stop = self.stops.get(claim.key)
            if stop is not None and not stop.is_set():
                stop.set()
                logger.info("cancelling %s", claim.key_name)
            if self.queue is not None:  # still waiting in a fleet's queue: answered cancelled now
                await self.queue.cancel_queued(claim.key)

    # -- executes (§9.4–9.7) -------------------------------------------------------------------

    async def _execute(self, opened: OpenedExecute, arrival: Arrival) -> None:
        body = opened.body
        key = self.ledger.key(opened.principal, body.request, body.attempt)
        try:
            existing = await self._lookup(key)
        except LedgerError as error:
            logger.error("ledger: %s", error)
            await self.refuse(opened, arrival, Code.UNAVAILABLE, error.message)
            return
        if existing is not None:
            await self._retransmitted(opened, arrival, existing)
            return
        try:
            plan = await self.admission.admit(opened)
        except RefusalError as refusal:
            await self.refuse(opened, arrival, refusal.code, refusal.message)
            return
        except Exception as error:  # a bug in planning must not leave the phone waiting for an answer
            logger.error("planning %s failed: %s: %s", opened.event.id[:12], type(error).__name__, error)
            await self.refuse(opened, arrival, Code.UNAVAILABLE, UNPLANNED)
            return
        if isinstance(plan, PublishInput):
            await self._claim_publish(opened, arrival, plan, key)
            return
        admitted = False
        try:
            admitted = await self._reserve(opened, arrival, plan, key)
        finally:
            if not admitted:
                plan.close()

    async def _retransmitted(self, opened: OpenedExecute, arrival: Arrival, claim: Claim) -> None:
        if claim.fingerprint != opened.fingerprint:
            await self.refuse(opened, arrival, Code.IDEMPOTENCY_CONFLICT, CONFLICT_MESSAGE)
            return
        try:
            claim = await self._ledger(self.ledger.add_alias, claim.key, opened.event.id)
        except LedgerError as error:
            logger.error("ledger: %s", error)
            return
        if claim.result is not None:
            await self.answers.result(opened.principal, opened.event.id, claim.result)

    async def _reserve(self, opened: OpenedExecute, arrival: Arrival, plan: RunPlan, key: str) -> bool:
        """Quota, reservation, durable claim, `accepted`, and the run's task; True once the run owns the plan."""
        now = int(self.clock())
        try:
            ticket = await asyncio.to_thread(
                self.quota.take, opened.principal, plan.turns, check=plan.check is not None, now=now, limits=self.limits
            )
        except OverQuotaError as error:
            await self.refuse(opened, arrival, Code.OVER_QUOTA, error.message)
            return False
        mailbox = secrets.token_hex(32)
        try:
            prepared = await self._ledger(
                self.ledger.prepare,
                opened.body,
                opened.event.id,
                opened.principal,
                now,
                mailbox,
                created_at=opened.event.created_at,
            )
        except LedgerError as error:
            prepared = Refusal(error.code, error.message)
        if not isinstance(prepared, Claim):
            await asyncio.to_thread(self.quota.give_back, ticket)
            if isinstance(prepared, Refusal):
                await self.refuse(opened, arrival, prepared.code, prepared.message)
            elif prepared.claim.result is not None:  # the same request, raced in on another event
                await self.answers.result(opened.principal, opened.event.id, prepared.claim.result)
            return False
        stop = asyncio.Event()
        self.stops[key] = stop
        try:
            accepted = await self._ledger(self.ledger.acknowledge, key)
        except LedgerError as error:
            return await self._undispatched(opened, arrival, ticket, key, error.message)
        try:
            await self._ledger(self.ledger.intend, key)
        except LedgerError:
            return await self._undispatched(opened, arrival, ticket, key, UNDISPATCHED)
        await self.answers.feedback(opened.principal, opened.event.id, accepted.to_json())
        self.metrics.accepted(self.clock() - arrival.ms / 1000)
        if self.queue is not None:  # a fleet: the run waits in the shared queue for any runner's slot
            self.stops.pop(key, None)
            if await self.queue.enqueue(opened, arrival, plan, prepared, ticket):
                return True
            self.stops[key] = stop
        run = HostedRun(self._context, opened, arrival, plan, prepared, ticket, stop)
        task = asyncio.get_running_loop().create_task(run.run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _undispatched(
        self, opened: OpenedExecute, arrival: Arrival, ticket: Ticket, key: str, reason: str
    ) -> bool:
        """Acknowledge or intend failed: roll back what can be, give the quota back, answer (§9.7 step 3)."""
        self.stops.pop(key, None)
        await asyncio.to_thread(self.quota.give_back, ticket)
        try:
            await self._ledger(self.ledger.rollback, key)
            claim = await self._ledger(self.ledger.lookup, key)
        except LedgerError as failure:
            logger.error("ledger: %s", failure)
            claim = None
        if claim is not None and claim.result is not None:  # settled by a cancel before dispatch
            facts = input_facts(opened.body.input)
            self._usage.keep(opened, arrival, facts, outcome=claim.outcome or "cancelled")
            await self.answers.result(opened.principal, opened.event.id, claim.result)
            return False
        await self.refuse(opened, arrival, Code.UNAVAILABLE, reason)
        return False

    # -- publishing (§15) ---------------------------------------------------------------------

    async def _claim_publish(self, opened: OpenedExecute, arrival: Arrival, found: PublishInput, key: str) -> None:
        """Admit a publish (the trainer's own finished run, §9.5 step 5), claim it, send `accepted`, publish.

        No quota, and no dispatch intent: every step of a publish can be taken again without a second `3189`,
        so a restart rolls an unfinished publish's claim back (where a run's becomes `unknown`, runner.md §6)
        and its retransmission is admitted afresh and finishes it.
        """
        try:
            job = await self.publishing.find_run(opened.principal, found)
        except RefusalError as refusal:
            await self.refuse(opened, arrival, refusal.code, refusal.message)
            return
        try:
            prepared = await self._ledger(
                self.ledger.prepare,
                opened.body,
                opened.event.id,
                opened.principal,
                int(self.clock()),
                secrets.token_hex(32),
                created_at=opened.event.created_at,
            )
        except LedgerError as error:
            prepared = Refusal(error.code, error.message)
        if isinstance(prepared, Refusal):
            await self.refuse(opened, arrival, prepared.code, prepared.message)
            return
        if isinstance(prepared, Retransmission):  # the same request, raced in on another event
            if prepared.claim.result is not None:
                await self.answers.result(opened.principal, opened.event.id, prepared.claim.result)
            return
        try:
            accepted = await self._ledger(self.ledger.acknowledge, key)
        except LedgerError as error:
            try:
                await self._ledger(self.ledger.rollback, key)
            except LedgerError as failure:
                logger.error("ledger: %s", failure)
            await self.refuse(opened, arrival, Code.UNAVAILABLE, error.message)
            return
        await self.answers.feedback(opened.principal, opened.event.id, accepted.to_json())
        task = asyncio.get_running_loop().create_task(self._publish(opened, arrival, prepared, job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _publish(self, opened: OpenedExecute, arrival: Arrival, claim: Claim, job: Job) -> None:
        """Publish, then the usage record, the result in the ledger, and the answer to every alias (§15 9–10)."""
        published = None
        try:
            published = await self.publishing.publish(job)
        except PublishError as error:
            logger.warning(failed_line(job.key_name, error.code, error.message))
            result = ResultBody.failed(claim.binding, claim.record, error.message, code=error.code.value)
        except Exception as error:  # a bug must not leave the phone waiting: the publish fails plainly
            message = f"{type(error).__name__}: {error}"
            logger.warning(failed_line(job.key_name, Code.UNAVAILABLE, message))
            result = ResultBody.failed(claim.binding, claim.record, message, code=Code.UNAVAILABLE.value)
        else:
            logger.info(published_line(job.key_name, claim.principal, published))
            result = ResultBody.completed(claim.binding, claim.record, published.output)
        self._usage.keep(
            opened,
            arrival,
            InputFacts(action="publish"),
            outcome=result.outcome,
            code=result.code,
            result=None if published is None else published.output.result.id,
            report=None if published is None or not published.rewritten else published.report.digest,
        )
        try:
            await self._ledger(self.ledger.finish, claim.key, result.outcome, answer_text(result.to_json()))
        except ResultConflictError as error:  # settled meanwhile (a cancel): the stored result stands
            logger.warning("result for %s: %s", claim.key_name, error.message)
        except LedgerError as error:  # not durable, so not sent: a retransmission gets what the ledger holds
            logger.error("ledger: %s", error)
            return
        crash_point("answering")
        try:
            settled = await self._ledger(self.ledger.lookup, claim.key)
        except LedgerError as error:
            logger.error("ledger: %s", error)
            return
        if settled is None or settled.result is None:
            return
        for alias in settled.aliases:
            await self.answers.result(claim.principal, alias, settled.result)

    # -- refusing (§9.8) and usage (§19.1) -----------------------------------------------------

    async def refuse(self, opened: OpenedExecute, arrival: Arrival, code: Code, message: str) -> None:
        """Log, record and answer a refusal of an execute request."""
        logger.info(refused_line(opened.event.id, opened.principal, code, message))
        self._usage.keep(opened, arrival, input_facts(opened.body.input), outcome="refused", code=code.value)
        refusal = ResultBody.refused(opened.body.binding, code, message)
        await self.answers.result(opened.principal, opened.event.id, refusal.to_json())


def refused_line(event_id: str, principal: str, code: Code, message: str) -> str:
    """The `refused` log line (runner.md §20)."""
    return f"refused {event_id[:12]} from {principal[:12]}: {code}: {message}"


__all__ = [
    "Arrival",
    "Pipeline",
    "Progress",
    "RunContext",
    "SuiteError",
    "SuiteResult",
    "SuiteRunner",
]
