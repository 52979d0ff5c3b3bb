"""`/healthz` follows the requests subscription as systemd's watchdog does: unhealthy until the relay
confirms it, healthy while probes are answered, unhealthy once the relay goes silent and the listener gives
the connection up, healthy again after the reconnect's subscription. The relay is the scripted stand-in the
liveness tests use; the endpoint is the real one, asked over HTTP.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp

from eval_runner.nostr import SecretKey
from eval_runner.service.metrics import RunnerMetrics, serving
from eval_runner.service.relay.liveness import Liveness, RelayListener
from eval_runner.service.settings import Limits, MetricsListen
from tests.support.captured_logs import captured_logs
from tests.support.stand_in_relay import BOUND, Deliveries, StandInConnection, StandInRelay

PROBE = 0.2


async def health(http: aiohttp.ClientSession, base: str) -> int:
    async with http.get(f"{base}/healthz") as response:
        return response.status


async def metric(http: aiohttp.ClientSession, base: str, line_start: str) -> str:
    async with http.get(f"{base}/metrics") as response:
        text = await response.text()
    found = [line for line in text.splitlines() if line.startswith(line_start)]
    assert len(found) == 1, (line_start, text)
    return found[0].rsplit(" ", 1)[1]


@asynccontextmanager
async def watched_listener(url: str, metrics: RunnerMetrics, secret: SecretKey) -> AsyncIterator[None]:
    """A listener wired to the metrics as `serve` wires it; its reconnect back-off returns at once."""

    async def no_wait(_: float) -> None:
        return None

    listener = RelayListener(
        url,
        secret,
        deliver=Deliveries(),
        since=lambda: int(time.time()),
        notifier=metrics.notifier(None),
        liveness=Liveness(probe=PROBE, renew=3600),
        sleep=no_wait,
        on_end=metrics.relay_ended,
        on_probe=metrics.probe_answered,
    )
    task = asyncio.create_task(listener.run_forever())
    try:
        yield
    finally:
        listener.stop()
        await asyncio.wait_for(task, BOUND)


async def subscribed(relay: StandInRelay, runner: str) -> StandInConnection:
    connection = await relay.accept()
    connection.answer_probes = True
    await connection.authenticate(runner)
    await connection.expect_subscription(runner)
    # The listener sends a probe only once the one before was answered and handled, so two answered mean
    # the first proof reached the metrics.
    await connection.wait_probes_answered(2)
    return connection


async def test_healthz_turns_unhealthy_when_the_relay_goes_silent_and_healthy_after_the_reconnect() -> None:
    secret = SecretKey.generate()
    runner = secret.public_key().to_hex()
    metrics = RunnerMetrics(Limits(), probe=PROBE)
    with captured_logs() as logs:
        async with (
            StandInRelay() as relay,
            serving(metrics, MetricsListen("127.0.0.1", 0)) as base,
            aiohttp.ClientSession() as http,
            watched_listener(relay.url, metrics, secret),
        ):
            assert await health(http, base) == 503  # not subscribed yet
            first = await subscribed(relay, runner)
            assert await health(http, base) == 200
            assert await metric(http, base, 'eval_runner_relay_state{eval_runner_relay_state="subscribed"}') == "1.0"
            assert float(await metric(http, base, "eval_runner_relay_probe_round_trip_seconds_count")) >= 1

            first.answer_probes = False  # the relay goes silent: the socket stays open, nothing answers
            await logs.wait_for("the relay stopped answering")
            assert await health(http, base) == 503
            assert await metric(http, base, "eval_runner_relay_reconnects_total") == "1.0"
            assert await metric(http, base, 'eval_runner_relay_state{eval_runner_relay_state="reconnecting"}') == "1.0"

            await subscribed(relay, runner)
            assert await health(http, base) == 200
            assert await metric(http, base, 'eval_runner_relay_state{eval_runner_relay_state="subscribed"}') == "1.0"
