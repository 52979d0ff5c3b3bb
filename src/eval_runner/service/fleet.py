"""A runner's part in a fleet on one PostgreSQL ledger: keep its lease, and answer for runners that died.

Every third of the lease (`EVAL_RUNNER_LEASE_MS`) the runner renews its lease and recovers the claims of
runners whose lease lapsed (`PostgresLedger.heartbeat`); each claim that recovery settled `unknown` is
answered here, to its requester's first execute event, from the stored result — never rerun. A runner
that finds its own lease lapsed (it was paused or cut off longer than the lease) stops at once: another
runner may already have answered its runs `unknown`, and a result of its own would contradict that.
A heartbeat that does not finish within its period (a stuck database, a cut network) counts as missed,
so three in a row stop the runner as surely as three failed ones.
A cancel taken by another runner is recorded in the shared claim; the run's holder finds it at its next
heartbeat and stops the run (so a cancel reaches it within a third of the lease).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from eval_runner.service.ledger.claims import Claim, LedgerError, key_name
from eval_runner.service.ledger.postgres import LeaseLostError, PostgresLedger
from eval_runner.service.requests.reply import Answers

logger = logging.getLogger(__name__)


class _Renewal:
    """The ledger's half of a heartbeat (renew, recover, read the cancels), in a thread. One that outlives
    its bound is not started again: the next beat awaits the same one, so the claims it settled `unknown`
    are still answered and a stuck database is never asked twice at once."""

    def __init__(self, ledger: PostgresLedger) -> None:
        self._ledger = ledger
        self._pending: asyncio.Future[tuple[tuple[Claim, ...], tuple[str, ...]]] | None = None

    async def take(self, within: float | None) -> tuple[tuple[Claim, ...], tuple[str, ...]]:
        """The settled claims and the cancelled keys; `TimeoutError` when not done `within` seconds."""
        if self._pending is None:
            self._pending = asyncio.ensure_future(asyncio.to_thread(self._both))
            self._pending.add_done_callback(_retrieved)
        pending = self._pending
        try:
            return await asyncio.wait_for(asyncio.shield(pending), within)
        finally:
            if pending.done():
                self._pending = None

    def _both(self) -> tuple[tuple[Claim, ...], tuple[str, ...]]:
        settled = self._ledger.heartbeat(int(time.time()))
        return settled, self._ledger.cancelled_here()


def _retrieved(future: asyncio.Future[Any]) -> None:
    """A renewal left pending when the runner stopped fails unheard, not as an unretrieved exception."""
    if not future.cancelled():
        future.exception()


async def beat(
    ledger: PostgresLedger,
    answers: Answers,
    stops: Mapping[str, asyncio.Event],
    *,
    renewal: _Renewal | None = None,
    within: float | None = None,
) -> None:
    """One heartbeat: renew, recover, answer the recovered, and stop the runs here that another runner was
    told to cancel. Raises `LeaseLostError` when our lease lapsed, `LedgerError` when the database failed,
    `TimeoutError` when the ledger's half took longer than `within` seconds."""
    settled, cancelled = await (renewal or _Renewal(ledger)).take(within)
    for claim in settled:
        logger.info("recovered %s of a runner whose lease lapsed: answered unknown", claim.key_name)
        if claim.result is not None:
            await answers.result(claim.principal, claim.execute_event, claim.result)
    for key in cancelled:
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
    renewal = _Renewal(ledger)
    failures = 0
    while True:
        await asyncio.sleep(period)
        try:
            await beat(ledger, answers, stops, renewal=renewal, within=period)
            failures = 0
        except (LedgerError, TimeoutError) as error:
            lapsed = isinstance(error, LeaseLostError)
            failures += 1
            if isinstance(error, LedgerError):
                logger.error("ledger: %s", error.message)
            else:
                logger.error("ledger: the heartbeat did not finish within %.1f s", period)
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
