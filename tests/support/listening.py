"""A `RelayListener` running its reconnect loop for a test, with everything it does recorded (its log lines
through `captured_logs`).

The back-off sleep is injected: it records the delay and returns at once (or stops the loop after a
given number), so reconnects happen without waiting and the delays can be asserted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from eval_runner.nostr import SecretKey
from eval_runner.service.relay.liveness import Ended, Liveness, RelayListener
from eval_runner.service.relay.notify import Notifier
from tests.support.captured_logs import LogLines, captured_logs
from tests.support.stand_in_relay import BOUND, Deliveries, StandInConnection, StandInRelay

SINCE = 1_700_000_000


@dataclass
class Run:
    listener: RelayListener
    runner: str
    logs: LogLines = field(default_factory=LogLines)
    deliveries: Deliveries = field(default_factory=Deliveries)
    ends: list[Ended] = field(default_factory=list)
    sleeps: list[float] = field(default_factory=list)
    since: list[int] = field(default_factory=lambda: [SINCE])


@asynccontextmanager
async def listening(
    url: str,
    *,
    probe: float = 3600.0,
    renew: float = 3600.0,
    notifier: Notifier | None = None,
    stop_after_sleeps: int | None = None,
) -> AsyncIterator[Run]:
    """A listener in its reconnect loop; the back-off sleep is recorded and returns at once."""
    secret = SecretKey.generate()
    deliveries = Deliveries()
    ends: list[Ended] = []
    sleeps: list[float] = []
    since = [SINCE]

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if stop_after_sleeps is not None and len(sleeps) >= stop_after_sleeps:
            listener.stop()

    listener = RelayListener(
        url,
        secret,
        deliver=deliveries,
        since=lambda: since[0],
        notifier=notifier,
        liveness=Liveness(probe=probe, renew=renew),
        sleep=sleep,
        on_end=ends.append,
    )
    with captured_logs() as logs:
        run = Run(listener, secret.public_key().to_hex(), logs, deliveries, ends, sleeps, since)
        task = asyncio.create_task(listener.run_forever())
        try:
            yield run
        finally:
            listener.stop()
            await asyncio.wait_for(task, BOUND)


async def subscribe(relay: StandInRelay, run: Run, *, answer_probes: bool = False) -> StandInConnection:
    connection = await relay.accept()
    connection.answer_probes = answer_probes
    await connection.authenticate(run.runner)
    await connection.expect_subscription(run.runner, since=run.since[0])
    return connection
