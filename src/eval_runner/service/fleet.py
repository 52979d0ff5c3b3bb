"""A runner's part in a fleet on one PostgreSQL ledger: keep its lease, and answer for runners that died.

Every third of the lease (`EVAL_RUNNER_LEASE_MS`) the runner renews its lease and recovers the claims of
runners whose lease lapsed (`PostgresLedger.heartbeat`); each claim that recovery settled `unknown` is
answered here, to its requester's first execute event, from the stored result — never rerun. A runner
that finds its own lease lapsed (it was paused or cut off longer than the lease) stops at once: another
runner may already have answered its runs `unknown`, and a result of its own would contradict that.
A cancel taken by another runner is recorded in the shared claim; the run's holder finds it at its next
heartbeat and stops the run (so a cancel reaches it within a third of the lease).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping

from eval_runner.service.ledger.claims import LedgerError, key_name
from eval_runner.service.ledger.postgres import PostgresLedger
from eval_runner.service.requests.reply import Answers

logger = logging.getLogger(__name__)


async def beat(ledger: PostgresLedger, answers: Answers, stops: Mapping[str, asyncio.Event]) -> None:
    """One heartbeat: renew, recover, answer the recovered, and stop the runs here that another runner was
    told to cancel. Raises `LedgerError` when our lease lapsed."""
    settled = await asyncio.to_thread(ledger.heartbeat, int(time.time()))
    for claim in settled:
        logger.info("recovered %s of a runner whose lease lapsed: answered unknown", claim.key_name)
        if claim.result is not None:
            await answers.result(claim.principal, claim.execute_event, claim.result)
    for key in await asyncio.to_thread(ledger.cancelled_here):
        stop = stops.get(key)
        if stop is not None and not stop.is_set():
            stop.set()
            logger.info("cancelling %s", key_name(key))


async def _keep(
    ledger: PostgresLedger,
    answers: Answers,
    stops: Mapping[str, asyncio.Event],
    stop: asyncio.Event,
    hurry: asyncio.Event,
) -> None:
    period = ledger.lease_ms / 3000
    failures = 0
    while True:
        await asyncio.sleep(period)
        try:
            await beat(ledger, answers, stops)
            failures = 0
        except LedgerError as error:
            lapsed = "lease lapsed" in error.message
            failures += 1
            logger.error("ledger: %s", error.message)
            if lapsed or failures >= 3:  # three missed beats: the lease is gone by now
                logger.error("ledger: this runner's lease is lost; stopping")
                hurry.set()
                stop.set()
                return


@contextlib.asynccontextmanager
async def lease_kept(
    ledger: PostgresLedger,
    answers: Answers,
    stops: Mapping[str, asyncio.Event],
    stop: asyncio.Event,
    hurry: asyncio.Event,
) -> AsyncIterator[None]:
    """Heartbeats for as long as the block runs; the first answers what died while this runner was away.
    `stops` are the runs' stop switches by claim key (the pipeline's)."""
    await beat(ledger, answers, stops)
    task = asyncio.get_running_loop().create_task(_keep(ledger, answers, stops, stop, hurry))
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
