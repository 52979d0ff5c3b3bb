"""A stand-in relay that keeps every event, ephemeral ones included, for the catch-up test.

nostr-sdk's LocalRelay (like relay.openagents.com) keeps no ephemeral event, so a 25920 published while no
runner listens is gone. Some relays keep them for a while (the PyPI nostr-relay does, ecosystem.md §3.1),
and that is exactly when the runner's catch-up `since` matters: a request published while the runner was
down is delivered when it subscribes again. This relay is that kind, and nothing more: an open relay (no
NIP-42) on loopback that verifies and keeps every event, answers `OK`, answers a `REQ` with the kept
events its filters match (none for `limit` 0) then `EOSE`, and sends each new event to every open
subscription it matches. It counts the `REQ`s it was sent per subscription id, so a test can await a
subscription instead of sleeping, and keeps every REQ's filters so a test can check what was asked.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

from websockets.asyncio.server import Server, ServerConnection

from eval_runner.nostr import ClientEvent, Close, Event, Filter, Req, parse_client_frame
from tests.support.stand_in_relay import LoopbackRelayServer

BOUND = 30.0


class StandInStoringRelay(LoopbackRelayServer):
    """Use `async with StandInStoringRelay() as relay`; `relay.url` is its ws:// address."""

    def __init__(self) -> None:
        self.url = ""
        self.events: list[Event] = []
        self.reqs: Counter[str] = Counter()
        #: Every REQ's subscription id and filters, in arrival order.
        self.subscribed: list[tuple[str, tuple[Filter, ...]]] = []
        self._subscriptions: dict[ServerConnection, dict[str, tuple[Filter, ...]]] = {}
        self._server: Server | None = None
        self._changed = asyncio.Condition()

    async def wait_reqs(self, sub_id: str, count: int) -> None:
        """Until `count` REQs for `sub_id` have arrived (over any connection)."""
        async with asyncio.timeout(BOUND), self._changed:
            await self._changed.wait_for(lambda: self.reqs[sub_id] >= count)

    async def _handle(self, ws: ServerConnection) -> None:
        self._subscriptions[ws] = {}
        try:
            async for message in ws:
                await self._on(ws, parse_client_frame(str(message)))
        except Exception:  # a client going away mid-frame ends its connection, nothing else
            pass
        finally:
            self._subscriptions.pop(ws, None)

    async def _on(self, ws: ServerConnection, frame: Any) -> None:
        if isinstance(frame, ClientEvent):
            await self._publish(ws, frame.event)
        elif isinstance(frame, Req):
            self._subscriptions[ws][frame.sub_id] = frame.filters
            self.subscribed.append((frame.sub_id, frame.filters))
            for event in self.events:
                if any(item.limit != 0 and item.matches(event) for item in frame.filters):
                    await ws.send(json.dumps(["EVENT", frame.sub_id, event.to_json()]))
            await ws.send(json.dumps(["EOSE", frame.sub_id]))
            async with self._changed:
                self.reqs[frame.sub_id] += 1
                self._changed.notify_all()
        elif isinstance(frame, Close):
            self._subscriptions[ws].pop(frame.sub_id, None)

    async def _publish(self, ws: ServerConnection, event: Event) -> None:
        if not event.is_valid():
            await ws.send(json.dumps(["OK", event.id, False, "invalid: bad id or signature"]))
            return
        if all(kept.id != event.id for kept in self.events):
            self.events.append(event)
            for other, subscriptions in list(self._subscriptions.items()):
                for sub_id, filters in list(subscriptions.items()):
                    if any(item.matches(event) for item in filters):
                        await other.send(json.dumps(["EVENT", sub_id, event.to_json()]))
        await ws.send(json.dumps(["OK", event.id, True, ""]))
