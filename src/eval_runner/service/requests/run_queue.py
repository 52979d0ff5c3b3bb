"""Admitted runs of a fleet wait in the shared ledger's queue and run on whichever runner has a free slot.

The runner that admits a run (quota, claim, `accepted`) puts it in the queue (`QueueRecords.enqueue`: its
job, its `queued` note and its place, one transaction) and forgets its plan. Every runner keeps taking the
oldest queued run while it has a free suite slot, woken at once by its own enqueues and by a slot of its
own coming free, and otherwise looking every `POLL` seconds. So a run waits for the fleet's first free
slot, not its admitter's, and a runner that dies leaves its queued runs to the others.

The taker rebuilds the run from what is stored, never from the admitter's memory: the signed execute
event opens again under the key every runner holds (`open_request`, at the event's own `created_at`, so
the freshness window it already passed is not asked again); its input is planned again (`Admission.plan`:
a draft is written out again, a published test set comes again from its release by digest); and what a
second admission might decide differently is taken from the row (`plan`): the tool's release, coder's
defaults as read at admission (the lock's bytes, the adopted tools by definition), and the quota ticket.
The switch and the disk floor are not asked again: the run was accepted. A run that cannot be rebuilt
fails with the reason (it was accepted, so it is answered, never refused); one whose rebuilding broke
unforeseen (a bug) fails `UNREBUILT` the same way, and its slot is given back. A run whose request's deadline
passed while it waited is never run: it fails with `DEADLINE_PASSED`, its quota given back, as admission
would have refused it `stale` had it arrived then. Progress and the result come from the runner that runs
it, to the requester's first execute event and every alias.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from typing import Any, Final

from eval_runner.contracts.answers import ProgressBody, ResultBody
from eval_runner.contracts.errors import ContractError
from eval_runner.contracts.hosted import RunInput, parse_input
from eval_runner.contracts.refs import DefinitionRef, EventRef
from eval_runner.contracts.strict_json import JsonValue
from eval_runner.engine.testset.adopted import AdoptedDefaults
from eval_runner.errors import EvalRunnerError
from eval_runner.nostr import ConversationKeys, Event, NostrError, SecretKey
from eval_runner.service.ledger.claims import Claim, Job, LedgerError, ResultConflictError
from eval_runner.service.ledger.queued import Queued, QueueRecords, Taken
from eval_runner.service.requests.admission import Admission, RefusalError, RunPlan, input_facts
from eval_runner.service.requests.hosted_run import Arrival, HostedRun, RunContext
from eval_runner.service.requests.opening import REQUEST_KIND, DropError, OpenedExecute, open_request
from eval_runner.service.requests.quota import Ticket
from eval_runner.service.requests.reply import answer_text

#: Seconds between looks at the queue while this runner has a free slot and nothing woke it.
POLL: Final = 0.25
#: The failed result of a queued run whose request's deadline passed before a runner took it.
DEADLINE_PASSED: Final = "the request's deadline passed while it waited in the queue"
#: The failed result of a queued run whose rebuilding broke unforeseen (a bug): it is answered, not left.
UNREBUILT: Final = "the runner couldn't plan this queued run"

logger = logging.getLogger(__name__)


class RebuildError(EvalRunnerError):
    """A queued run could not be rebuilt here; `why` is the failed result's message."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why
        #: The request, when it opened again (its usage record is then kept) and its quota ticket.
        self.opened: OpenedExecute | None = None
        self.ticket: Ticket | None = None


def plan_text(plan: RunPlan, ticket: Ticket) -> str:
    """What a second admission might decide differently, as the queue row keeps it (JSON text)."""
    release = plan.subject.definition.event
    defaults = plan.defaults
    document: dict[str, JsonValue] = {
        "release": None if release is None else release.to_json(),
        "defaults": None
        if defaults is None
        else {
            "release": defaults.release.to_json(),
            "lock": defaults.lock.hex(),
            "subjects": [held.definition.to_json() for held in defaults.subjects],
        },
        "ticket": {"day": ticket.day, "trainer": ticket.trainer, "run": ticket.run, "turns": ticket.turns},
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


class RunQueue:
    """This runner's side of the fleet's queue: enqueue what it admits, take what it has slots for."""

    def __init__(
        self,
        *,
        ledger: QueueRecords,
        secret: SecretKey,
        keys: ConversationKeys,
        admission: Admission,
        context: RunContext,
        tasks: set[asyncio.Task[None]],
        poll: float = POLL,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ledger = ledger
        self._secret = secret
        self._keys = keys
        self.admission = admission
        self.context = context
        self._tasks = tasks
        self.poll = poll
        #: Unix seconds, for the request's deadline (a test moves it past one).
        self.clock = clock
        self._wake = asyncio.Event()
        self._taking: asyncio.Task[None] | None = None

    # -- the admitter's side -------------------------------------------------------------------

    async def enqueue(
        self, opened: OpenedExecute, arrival: Arrival, plan: RunPlan, claim: Claim, ticket: Ticket
    ) -> bool:
        """Queue an accepted run and send its `queued` note; False (nothing queued) when the ledger failed,
        and the caller runs it here as a lone runner would. Closes the plan once queued."""
        job = Job(
            key=claim.key,
            action="run",
            principal=claim.principal,
            request=answer_text(opened.event.to_json()),
            status="running",
            check=plan.check,
            validates=plan.validates,
        )
        queued = Queued(claim.key, job.request, arrival.ms, arrival.bytes_in, plan_text(plan, ticket))
        try:
            noted = await asyncio.to_thread(self.ledger.enqueue, job, queued)
        except LedgerError as error:
            logger.error("ledger: %s; running %s here", error.message, claim.key_name)
            return False
        plan.close()
        logger.info("queued %s for %s", claim.key_name, claim.principal[:12])
        self._wake.set()
        body = ProgressBody(noted.binding, 0, "queued", 0, plan.turns)
        await self.context.answers.feedback(noted.principal, noted.execute_event, body.to_json())
        return True

    async def cancel_queued(self, key: str) -> None:
        """A cancel this runner took: if the run still waits in the queue, take it and answer it `cancelled`
        now (it needs no slot), rather than leave it until a slot comes free somewhere."""
        try:
            taken = await asyncio.to_thread(self.ledger.take, key)
        except LedgerError as error:
            logger.error("ledger: %s", error.message)
            return
        if taken is not None:
            self._start(taken, slot=False)

    # -- the taker's side ----------------------------------------------------------------------

    def start(self, stop: asyncio.Event) -> None:
        """Keep taking queued runs while a suite slot is free, until `stop`."""
        self._taking = asyncio.get_running_loop().create_task(self._keep_taking(stop))

    async def finished(self) -> None:
        """Until the taking has stopped (after `stop`), so every run it took is among the tasks."""
        if self._taking is not None:
            await asyncio.gather(self._taking, return_exceptions=True)

    def close(self) -> None:
        if self._taking is not None:
            self._taking.cancel()

    async def _keep_taking(self, stop: asyncio.Event) -> None:
        """Hold a free slot only while looking (so the slots-in-use gauge stays true), take the oldest queued
        run, and give the slot back to wait when there is none."""
        slots = self.context.slots
        stopped = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                acquired = asyncio.ensure_future(slots.acquire())
                await asyncio.wait({acquired, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if not acquired.done():
                    acquired.cancel()
                    await asyncio.gather(acquired, return_exceptions=True)
                    if not acquired.cancelled():
                        slots.release()
                    return
                if stop.is_set():
                    slots.release()
                    return
                self._wake.clear()
                taken = None
                try:
                    taken = await asyncio.to_thread(self.ledger.take)
                except LedgerError as error:
                    logger.error("ledger: %s", error.message)
                except BaseException:
                    slots.release()
                    raise
                if taken is None:
                    slots.release()
                    await _first(self._wake, stopped, self.poll)
                else:
                    self._start(taken, slot=True)
        finally:
            stopped.cancel()

    def wake(self) -> None:
        """Look at the queue now (a slot of ours came free, or we queued a run)."""
        self._wake.set()

    def _start(self, taken: Taken, *, slot: bool) -> None:
        task = asyncio.get_running_loop().create_task(self._run(taken, slot=slot))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, taken: Taken, *, slot: bool) -> None:
        """Rebuild and run a taken run; the slot taken for it goes back unless the run took it over, whatever
        broke (a run that cannot be rebuilt is still answered, and its claim settled)."""
        claim, queued = taken.claim, taken.queued
        arrival = Arrival(queued.arrival_ms, queued.bytes_in)
        held = slot
        try:
            try:
                opened, plan, ticket = await self._rebuild(queued, claim.deadline)
            except Exception as error:  # a bug in rebuilding must not leave the phone waiting for an answer
                failure = error if isinstance(error, RebuildError) else _unforeseen(claim.key_name, error)
                if held:
                    held = False
                    self.context.slots.release()
                await self._unbuilt(taken, arrival, failure, cancelled=claim.cancel_requested or not slot)
                return
            stop = asyncio.Event()
            if claim.cancel_requested or not slot:
                stop.set()
            self.context.stops[claim.key] = stop
            run = HostedRun(self.context, opened, arrival, plan, claim, ticket, stop, queued=True, slot_held=slot)
            held = False  # the run releases it when it ends
            await run.run()
        finally:
            if held:
                self.context.slots.release()
            self._wake.set()

    async def _rebuild(self, queued: Queued, deadline: int) -> tuple[OpenedExecute, RunPlan, Ticket]:
        try:
            document = json.loads(queued.plan)
            event = Event.from_json(json.loads(queued.request))
            opened = open_request(event, self._secret, event.created_at, self._keys)
        except (ValueError, NostrError, DropError) as error:
            raise RebuildError(f"the queued request does not open again: {error}") from None
        if not isinstance(opened, OpenedExecute):
            raise RebuildError("the queued request is not an execute request")
        try:
            return await self._replan(opened, document, deadline)
        except RebuildError as error:
            error.opened = opened
            raise

    async def _replan(
        self, opened: OpenedExecute, document: Any, deadline: int
    ) -> tuple[OpenedExecute, RunPlan, Ticket]:
        event = opened.event
        try:
            found = parse_input(opened.body.input)
            ticket_json = document["ticket"]
            ticket = Ticket(
                int(ticket_json["day"]),
                str(ticket_json["trainer"]),
                bool(ticket_json["run"]),
                int(ticket_json["turns"]),
            )
            release = None if document["release"] is None else EventRef.parse(document["release"], "release")
        except (ContractError, KeyError, TypeError, ValueError) as error:
            raise RebuildError(f"the queued run does not read: {error}") from None
        if not isinstance(found, RunInput):
            raise RebuildError("the queued request is not a run")
        if self.clock() >= deadline:  # as admission's `now ≥ deadline`; checked before anything is staged
            late = RebuildError(DEADLINE_PASSED)
            late.ticket = ticket
            raise late
        requester = EventRef(id=event.id, pubkey=opened.principal, kind=REQUEST_KIND)
        try:
            plan = await self.admission.plan(found, requester)
        except RefusalError as refusal:
            failure = RebuildError(refusal.message)
            failure.ticket = ticket
            raise failure from None
        except Exception as error:
            failure = _unforeseen(opened.event.id[:12], error)
            failure.ticket = ticket
            raise failure from None
        try:
            if release is not None:
                definition = dataclasses.replace(plan.subject.definition, event=release)
                plan = dataclasses.replace(plan, subject=dataclasses.replace(plan.subject, definition=definition))
            plan = dataclasses.replace(plan, defaults=self._defaults(document.get("defaults")))
        except BaseException as error:
            plan.close()
            if not isinstance(error, Exception):
                raise
            failure = error if isinstance(error, RebuildError) else _unforeseen(opened.event.id[:12], error)
            failure.ticket = ticket
            raise failure from None
        return opened, plan, ticket

    def _defaults(self, value: JsonValue) -> AdoptedDefaults | None:
        """Coder's defaults as admission read them: the release, the lock's bytes, the adopted tools (found
        in this runner's catalog by their definition; one missing fails the run)."""
        if value is None:
            return None
        subjects_json = value.get("subjects") if isinstance(value, dict) else None
        if not isinstance(value, dict) or not isinstance(subjects_json, list):
            raise RebuildError("the queued run's defaults do not read")
        try:
            wanted = [DefinitionRef.parse(item, "subject") for item in subjects_json]
            release = EventRef.parse(value["release"], "release")
            lock = bytes.fromhex(str(value["lock"]))
        except (ContractError, KeyError, TypeError, ValueError) as error:
            raise RebuildError(f"the queued run's defaults do not read: {error}") from None
        subjects = []
        for definition in wanted:
            held = next(
                (tool.subject for tool in self.admission.catalog.tools if tool.subject.definition == definition), None
            )
            if held is None:
                raise RebuildError(f"coder's default {definition.id} is not in this runner's catalog")
            subjects.append(held)
        return AdoptedDefaults(release=release, lock=lock, subjects=tuple(subjects))

    async def _unbuilt(self, taken: Taken, arrival: Arrival, error: RebuildError, *, cancelled: bool) -> None:
        """A taken run that could not be rebuilt: `failed` with the reason (or `cancelled`, when that was
        asked), its job, the quota given back, its usage record, and the result to every alias."""
        claim, context = taken.claim, self.context
        if cancelled:
            outcome, result = "cancelled", ResultBody.cancelled(claim.binding, claim.record)
        else:
            logger.warning("run %s failed: %s", claim.key_name, error.why)
            outcome, result = "failed", ResultBody.failed(claim.binding, claim.record, error.why)
        if error.ticket is not None:
            await asyncio.to_thread(context.quota.give_back, error.ticket)
        if error.opened is not None:
            context.usage.keep(error.opened, arrival, input_facts(error.opened.body.input), outcome=outcome)
        with contextlib.suppress(LedgerError):
            job = await asyncio.to_thread(context.ledger.job, claim.key)
            if job is not None:
                await asyncio.to_thread(context.ledger.save_job, dataclasses.replace(job, status=outcome))
        try:
            await asyncio.to_thread(context.ledger.finish, claim.key, outcome, answer_text(result.to_json()))
        except ResultConflictError:
            pass  # settled meanwhile: the stored result stands, and is the one answered
        except LedgerError as failure:
            logger.error("ledger: %s", failure.message)
            return
        try:
            settled = await asyncio.to_thread(context.ledger.lookup, claim.key)
        except LedgerError as failure:
            logger.error("ledger: %s", failure.message)
            return
        if settled is None or settled.result is None:
            return
        for alias in settled.aliases:
            await context.answers.result(claim.principal, alias, settled.result)


def _unforeseen(name: str, error: Exception) -> RebuildError:
    """An error rebuilding was not written to expect, logged (type and message: the request's event and
    the row hold no secret) and turned into the failed result `UNREBUILT`."""
    logger.error("rebuilding %s failed: %s: %s", name, type(error).__name__, error)
    return RebuildError(UNREBUILT)


async def _first(wake: asyncio.Event, stopped: asyncio.Future[Any], seconds: float) -> None:
    """Until `wake` is set, `stopped` is done, or `seconds` pass."""
    woken = asyncio.ensure_future(wake.wait())
    try:
        await asyncio.wait({woken, stopped}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        woken.cancel()
