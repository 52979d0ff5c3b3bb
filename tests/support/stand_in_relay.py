"""A stand-in relay the test drives frame by frame, and a recorder to await what the listener delivered.

`StandInRelay` is a websockets server in the test process. Each connection the runner opens is
queued for the test (`accept`); by default it is challenged at once (`["AUTH", <challenge>]`) as
relay.openagents.com does. Everything the runner sends is read by a background reader into a queue
(`recv`), so the relay can also go silent: it keeps reading and never answers. With
`answer_probes` set, a connection answers liveness probes (`REQ alive-…` → `EOSE`) by itself and
counts them. Every frame in and out is numbered in one relay-wide `journal`, so tests can assert
the order of things across connections.

Awaits in here are bounded by `BOUND` only as a failure bound; nothing sleeps to synchronise.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Self

import nostr_sdk as sdk
from websockets.asyncio.server import Server, ServerConnection, serve

from eval_runner.nostr import AuthResponse, Event, Filter, SecretKey, parse_client_frame, sign

BOUND = 10.0
REQUEST_KIND = 25920


@dataclass(frozen=True, slots=True)
class Entry:
    seq: int
    connection: int
    direction: str  # "in" (runner → relay) or "out"
    frame: list[Any]


class StandInConnection:
    """One runner connection as the relay sees it."""

    def __init__(self, relay: StandInRelay, ws: ServerConnection, number: int) -> None:
        self.relay = relay
        self.ws = ws
        self.number = number
        self.challenge: str | None = None
        self.answer_probes = False
        self.probes_answered = 0
        self.closed = asyncio.Event()
        self._frames: asyncio.Queue[list[Any] | None] = asyncio.Queue()
        self._probe_answered = asyncio.Event()

    async def send(self, frame: list[Any]) -> None:
        self.relay.record(self.number, "out", frame)
        await self.ws.send(json.dumps(frame))

    async def recv(self, within: float = BOUND) -> list[Any] | None:
        """The runner's next frame (probes excluded when they are answered automatically); None once closed."""
        async with asyncio.timeout(within):
            return await self._frames.get()

    async def recv_until(self, kind: str, sub_id: str | None = None) -> list[Any]:
        """Read frames until one of `kind` (and `sub_id`), returning it; fails if the socket closes first."""
        while True:
            frame = await self.recv()
            assert frame is not None, f"connection {self.number} closed while waiting for {kind}"
            if frame[0] == kind and (sub_id is None or frame[1] == sub_id):
                return frame

    async def authenticate(self, runner: str, *, accept: bool = True) -> Event:
        """Read the runner's AUTH answer, check it (signature, pubkey, relay, challenge), answer OK."""
        frame = await self.recv()
        assert frame is not None, "closed before its AUTH"
        assert frame[0] == "AUTH", f"expected AUTH first, got {frame}"
        parsed = parse_client_frame(json.dumps(frame))
        assert isinstance(parsed, AuthResponse)
        event = parsed.event
        event.verify()
        assert event.kind == 22242
        assert event.pubkey == runner
        assert ("relay", self.relay.url) in event.tags
        assert ("challenge", self.challenge) in event.tags
        assert event.content == ""
        await self.send(["OK", event.id, accept, "" if accept else "restricted: not you"])
        return event

    async def expect_subscription(self, runner: str, *, since: int | None = None, eose: bool = True) -> dict[str, Any]:
        """Read the runner's `REQ jobs`, check its filter, and confirm it with EOSE (unless told not to)."""
        frame = await self.recv_until("REQ")
        assert frame[1] == "jobs", frame
        assert len(frame) == 3, frame
        filter_json = frame[2]
        assert filter_json["kinds"] == [REQUEST_KIND]
        assert filter_json["#p"] == [runner]
        assert "limit" not in filter_json
        if since is not None:
            assert filter_json["since"] == since, (filter_json, since)
        if eose:
            await self.send(["EOSE", "jobs"])
        return dict(filter_json)

    async def deliver(self, event: Event, sub_id: str = "jobs") -> None:
        await self.send(["EVENT", sub_id, event.to_json()])

    async def wait_probes_answered(self, count: int) -> None:
        async with asyncio.timeout(BOUND):
            while self.probes_answered < count:
                self._probe_answered.clear()
                await self._probe_answered.wait()

    async def close(self) -> None:
        await self.ws.close()

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                frame = json.loads(message)
                self.relay.record(self.number, "in", frame)
                if self.answer_probes and str(frame[1]).startswith("alive-"):
                    if frame[0] == "REQ":
                        await self.send(["EOSE", frame[1]])
                        self.probes_answered += 1
                        self._probe_answered.set()
                    continue
                self._frames.put_nowait(frame)
        except Exception:
            pass
        finally:
            self._frames.put_nowait(None)
            self.closed.set()


class LoopbackRelayServer:
    """A WebSocket server on a free loopback port for a stand-in relay: `url` once entered, closed (within
    `BOUND`) on exit. Subclasses answer each connection in `_handle`."""

    url: str = ""
    _server: Server | None = None

    async def _handle(self, ws: ServerConnection) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        self._server = await serve(self._handle, "127.0.0.1", 0, compression=None, ping_interval=None)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        async with asyncio.timeout(BOUND):
            await self._server.wait_closed()


class StandInRelay(LoopbackRelayServer):
    """A websockets relay on loopback whose every connection the test drives."""

    def __init__(self, *, challenge: bool = True) -> None:
        self.challenge = challenge
        self.url = ""
        self.journal: list[Entry] = []
        self.connections: list[StandInConnection] = []
        self._incoming: asyncio.Queue[StandInConnection] = asyncio.Queue()
        self._server: Server | None = None
        self._seq = itertools.count(1)
        self._numbers = itertools.count(1)

    def record(self, connection: int, direction: str, frame: list[Any]) -> None:
        self.journal.append(Entry(next(self._seq), connection, direction, frame))

    def seq_of(self, connection: int, direction: str, head: list[Any]) -> int:
        """The journal number of the first frame on `connection` starting with `head`."""
        for entry in self.journal:
            if entry.connection == connection and entry.direction == direction and entry.frame[: len(head)] == head:
                return entry.seq
        raise AssertionError(f"no {direction} frame {head} on connection {connection}")

    async def accept(self, within: float = BOUND) -> StandInConnection:
        async with asyncio.timeout(within):
            return await self._incoming.get()

    async def _handle(self, ws: ServerConnection) -> None:
        connection = StandInConnection(self, ws, next(self._numbers))
        self.connections.append(connection)
        if self.challenge:
            connection.challenge = f"challenge-{connection.number}"
            await connection.send(["AUTH", connection.challenge])
        self._incoming.put_nowait(connection)
        await connection._read()


class Deliveries:
    """The listener's `deliver` callback: records every event handed over, in order, without deduping."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._grew = asyncio.Event()

    async def __call__(self, event: Event) -> None:
        self.events.append(event)
        self._grew.set()

    def count(self, event: Event) -> int:
        return sum(1 for seen in self.events if seen.id == event.id)

    async def wait_for(self, *events: Event) -> None:
        async with asyncio.timeout(BOUND):
            while not all(self.count(event) for event in events):
                self._grew.clear()
                await self._grew.wait()


def request(runner: str, text: str, created_at: int | None = None, phone: SecretKey | None = None) -> Event:
    """A kind 25920 addressed to `runner` (content need not be a real sealed body: the listener never opens it)."""
    secret = phone if phone is not None else SecretKey.generate()
    when = int(time.time()) if created_at is None else created_at
    return sign(secret, REQUEST_KIND, [["p", runner]], text, when)


def frame_text(event: Event) -> str:
    """The EVENT message for `event`, written independently of the code under test."""
    return json.dumps(["EVENT", event.to_json()], ensure_ascii=False, separators=(",", ":"))


def sized_event(secret: SecretKey, frame_bytes: int) -> Event:
    """A kind 1 event whose EVENT message is exactly `frame_bytes` bytes long."""
    base = sign(secret, 1, [], "", 1_700_000_000)
    filler = frame_bytes - len(frame_text(base).encode())
    event = sign(secret, 1, [], "x" * filler, 1_700_000_000)
    assert len(frame_text(event).encode()) == frame_bytes
    return event


def unused_port_url() -> str:
    """A loopback ws:// URL where nothing listens (connections are refused at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"ws://127.0.0.1:{port}"


@asynccontextmanager
async def local_relay(*, nip42: bool = False) -> AsyncIterator[str]:
    """nostr-sdk's LocalRelay in process (an independent relay implementation), rate limits raised."""
    builder = (
        sdk.LocalRelayBuilder().addr("127.0.0.1").rate_limit(sdk.RateLimit(max_reqs=1000, notes_per_minute=1_000_000))
    )
    if nip42:
        builder = builder.nip42(sdk.LocalRelayBuilderNip42(mode=sdk.LocalRelayBuilderNip42Mode.BOTH))
    relay = builder.build()
    await relay.run()
    try:
        yield str(await relay.url())
    finally:
        relay.shutdown()


def stored_filter(event: Event) -> Filter:
    return Filter.build(ids=[event.id])
