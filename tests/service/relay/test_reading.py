"""A relay connection reads everything the relay sends, whether or not the runner has got to it yet.

A relay that cannot write to a slow reader drops what falls behind (nostr-sdk's LocalRelay keeps 1,024
events per connection), so a burst of requests must leave the relay at once even while the runner is busy:
here the stand-in relay sends 2,000 request-sized events (~10 MB, past what the kernel's socket buffers
hold) to a connection nobody reads from, and every send completes; then every frame is there, in order.
"""

from __future__ import annotations

import asyncio

from eval_runner.nostr import RelayEvent, SecretKey, sign
from eval_runner.service.relay.connection import RelayConnection
from tests.support.stand_in_relay import BOUND, StandInRelay

BURST = 2_000


async def test_a_burst_is_read_off_the_socket_before_anyone_asks_for_it() -> None:
    secret = SecretKey.generate()
    events = [
        sign(secret, 25_920, [["p", "ab" * 32]], f"{index:05d}" + "x" * 5_000, 1_700_000_000) for index in range(BURST)
    ]
    async with StandInRelay(challenge=False) as relay:
        connection = await RelayConnection.open(relay.url, secret, challenge_wait=0.05)
        try:
            served = await relay.accept()
            async with asyncio.timeout(BOUND):  # with reading throttled, the relay's sends block here
                for event in events:
                    await served.deliver(event)
            received = [await connection.next_frame() for _ in events]
        finally:
            connection.dispose()
    assert all(isinstance(frame, RelayEvent) for frame in received)
    assert [frame.event.id for frame in received if isinstance(frame, RelayEvent)] == [event.id for event in events]
