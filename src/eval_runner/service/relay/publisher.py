"""The answer writer: one warm, authenticated relay connection that every publish shares.

A socket per publish (the reference's way) costs a handshake and a challenge round trip before each answer;
`Publisher` keeps one connection up instead, pipelines publishes on it (each waits for the `OK` carrying its
event id, runner.md §7.1's rules and 20 s bound), probes it like the listener does, and sends a publish
again on the next connection when its connection died before the `OK`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Final

from eval_runner.nostr import Close, Closed, Eose, Event, Filter, Ok, Req, SecretKey
from eval_runner.service.relay.connection import (
    AUTH_REFUSED,
    CHALLENGE_WAIT,
    CONNECT_BOUND,
    OPERATION_BOUND,
    TIMED_OUT,
    Authenticated,
    RelayConnection,
    RelayError,
    event_frame,
)
from eval_runner.service.relay.liveness import PROBE_EVERY, PROBE_PREFIX, Backoff, stopped_answering

RETRY_FLOOR: Final = 1.0
NOTHING: Final = Filter(ids=("0" * 64,), limit=0)
CLOSED_PUBLISHER: Final = "the publisher is closed"

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Waiter:
    connection: RelayConnection
    text: str
    future: asyncio.Future[Ok | None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class Publisher:
    """Publishes events over one shared, self-healing connection. Use `async with Publisher(…) as writer`."""

    def __init__(
        self,
        url: str,
        secret: SecretKey,
        *,
        probe: float = PROBE_EVERY,
        bound: float = OPERATION_BOUND,
        connect_within: float = CONNECT_BOUND,
        challenge_wait: float = CHALLENGE_WAIT,
    ) -> None:
        self.url = url
        self._secret = secret
        self._probe = probe
        self._bound = bound
        self._connect_within = connect_within
        self._challenge_wait = challenge_wait
        self._connection: RelayConnection | None = None
        self._up = asyncio.Event()
        self._wanted = asyncio.Event()
        self._waiters: dict[str, list[_Waiter]] = {}
        self._keeper: asyncio.Task[None] | None = None
        self._closed = False
        self.connections = 0

    async def __aenter__(self) -> Publisher:
        self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def start(self) -> None:
        """Start connecting in the background (the first publish would, too)."""
        if self._keeper is None and not self._closed:
            self._keeper = asyncio.get_running_loop().create_task(self._keep())

    async def close(self) -> None:
        """Stop; publishes still waiting fail with `RelayError("closed", …)`."""
        self._closed = True
        self._up.set()  # wakes publishes waiting for a connection, to fail
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.cancel()
            try:
                await keeper
            except asyncio.CancelledError:
                if (task := asyncio.current_task()) is not None and task.cancelling():
                    raise
        for waiters in self._waiters.values():
            for waiter in waiters:
                if not waiter.future.done():
                    waiter.future.set_exception(RelayError("closed", CLOSED_PUBLISHER))
        self._waiters.clear()

    async def publish(self, event: Event) -> None:
        """Publish and wait for the relay's `OK true` (20 s bound); `RelayError` otherwise."""
        text = event_frame(event)
        if self._closed:
            raise RelayError("closed", CLOSED_PUBLISHER)
        self.start()
        try:
            async with asyncio.timeout(self._bound):
                while True:
                    answer = await self._attempt(await self._ready(), event.id, text)
                    if answer is None:
                        continue  # that connection died before its OK: send again on the next
                    if answer.accepted:
                        return
                    raise RelayError("refused", f"the relay refused {event.kind}: {answer.message}")
        except TimeoutError:
            raise RelayError("timeout", TIMED_OUT) from None

    async def _ready(self) -> RelayConnection:
        while True:
            if self._closed:
                raise RelayError("closed", CLOSED_PUBLISHER)
            if self._connection is not None:
                return self._connection
            self._wanted.set()
            await self._up.wait()

    async def _attempt(self, connection: RelayConnection, event_id: str, text: str) -> Ok | None:
        waiter = _Waiter(connection, text)
        waiters = self._waiters.setdefault(event_id, [])
        waiters.append(waiter)
        try:
            try:
                await connection.send_text(text)
            except RelayError:
                self._lost(connection)
                return None
            return await waiter.future
        finally:
            if waiter in waiters:
                waiters.remove(waiter)
            if not waiters and self._waiters.get(event_id) is waiters:
                del self._waiters[event_id]

    def _lost(self, connection: RelayConnection) -> None:
        """`connection` is dead: stop handing it out, and let its publishes move on."""
        if self._connection is connection:
            self._connection = None
            self._up.clear()
        for waiters in self._waiters.values():
            for waiter in waiters:
                if waiter.connection is connection and not waiter.future.done():
                    waiter.future.set_result(None)

    # the keeper

    async def _keep(self) -> None:
        backoff = Backoff()
        loop = asyncio.get_running_loop()
        delay = 0.0
        while True:
            if delay:
                await self._pause(loop, delay)
            try:
                async with asyncio.timeout(self._connect_within):
                    connection = await RelayConnection.open(self.url, self._secret, challenge_wait=self._challenge_wait)
            except (TimeoutError, RelayError) as error:
                why = str(error) if isinstance(error, RelayError) else TIMED_OUT
                delay = backoff.next()
                logger.warning("relay writer: %s; reconnecting in %d s", why, delay)
                continue
            backoff.reset()
            self.connections += 1
            self._connection = connection
            self._wanted.clear()
            self._up.set()
            try:
                why = await self._serve(connection)
            finally:
                self._lost(connection)
                connection.dispose()
            logger.warning("relay writer: %s; reconnecting", why)
            delay = 0.0

    async def _pause(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        start = loop.time()
        try:
            async with asyncio.timeout(delay):
                await self._wanted.wait()
        except TimeoutError:
            return
        rest = min(delay, RETRY_FLOOR) - (loop.time() - start)
        if rest > 0:
            await asyncio.sleep(rest)

    async def _serve(self, connection: RelayConnection) -> str:
        """Read the connection: match OKs to publishes, answer auth, probe. Returns why it ended."""
        loop = asyncio.get_running_loop()
        next_probe = loop.time() + self._probe
        outstanding: str | None = None
        probes = 0
        retried: set[str] = set()
        parked: set[str] = set()
        while True:
            now = loop.time()
            if now >= next_probe:
                if outstanding is not None:
                    return stopped_answering(self._probe)
                probes += 1
                outstanding = f"{PROBE_PREFIX}{probes}"
                next_probe = now + self._probe
                try:
                    await connection.send(Req(outstanding, (NOTHING,)))
                except RelayError as error:
                    return str(error)
            try:
                async with asyncio.timeout_at(next_probe):
                    frame = await connection.next_frame()
            except TimeoutError:
                continue
            except RelayError as error:
                return str(error)
            try:
                if isinstance(frame, Ok):
                    await self._answered(connection, frame, retried, parked)
                elif isinstance(frame, Authenticated):
                    await self._authenticated(connection, frame, parked)
                elif isinstance(frame, Eose | Closed) and frame.sub_id == outstanding:
                    outstanding = None
                    if isinstance(frame, Eose):
                        await connection.send(Close(frame.sub_id))
            except RelayError as error:
                return str(error)

    def _on(self, connection: RelayConnection, event_id: str) -> list[_Waiter]:
        return [
            waiter
            for waiter in self._waiters.get(event_id, ())
            if waiter.connection is connection and not waiter.future.done()
        ]

    async def _answered(self, connection: RelayConnection, ok: Ok, retried: set[str], parked: set[str]) -> None:
        waiters = self._on(connection, ok.event_id)
        if not waiters:
            return
        if not ok.accepted and ok.event_id not in retried and connection.may_retry_after_auth(ok.message):
            retried.add(ok.event_id)
            if connection.authenticated:
                await connection.send_text(waiters[0].text)
            else:
                parked.add(ok.event_id)
            return
        for waiter in waiters:
            waiter.future.set_result(ok)

    async def _authenticated(self, connection: RelayConnection, verdict: Authenticated, parked: set[str]) -> None:
        ids = list(parked)
        parked.clear()
        for event_id in ids:
            waiters = self._on(connection, event_id)
            if not waiters:
                continue
            if verdict.accepted:
                await connection.send_text(waiters[0].text)
            else:
                for waiter in waiters:
                    waiter.future.set_exception(RelayError("auth_refused", AUTH_REFUSED))
