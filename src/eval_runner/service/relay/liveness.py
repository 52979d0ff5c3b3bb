"""The requests subscription, kept honest: liveness probes, renewal on an overlapping connection, reconnect.

A socket can stay open on our side after the relay behind it is gone, and silence cannot tell an idle relay
from a dead one, so `RelayListener` asks (runner.md §8): a probe every period that the relay answers at once,
a connection whose probe goes unanswered is ended and reconnected with back-off, and before the relay's
request timeout the subscription moves to a successor connection subscribed before the old one closes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from eval_runner.nostr import Close, Closed, Eose, Event, Filter, RelayEvent, Req, SecretKey
from eval_runner.service.relay.connection import (
    CHALLENGE_WAIT,
    CONNECT_BOUND,
    TIMED_OUT,
    Authenticated,
    Frame,
    RelayConnection,
    RelayError,
)
from eval_runner.service.relay.notify import Notifier

REQUEST_KIND: Final = 25_920
JOBS: Final = "jobs"
PROBE_PREFIX: Final = "alive-"
PROBE_EVERY: Final = 30.0
RENEW_EVERY: Final = 2_700.0
DRAIN: Final = 5.0
RENEW_WITHIN: Final = 30.0
REQUEST_WINDOW: Final = 600
BACKOFF_FIRST: Final = 1
BACKOFF_CAP: Final = 60
SEEN: Final = 1_024

SUBSCRIBED: Final = "subscribed; requests arrive live from here"
RENEWED: Final = "renewed the requests subscription on a new connection"

logger = logging.getLogger(__name__)


def seconds_text(seconds: float) -> str:
    """Seconds as a plain number: whole ones without a decimal point (`30`, `2700`), else `0.3`."""
    return str(int(seconds)) if float(seconds).is_integer() else repr(float(seconds))


def requests_filter(runner: str, since: int) -> Filter:
    """`{"kinds":[25920],"#p":[runner],"since":since}`: the runner's requests (runner.md §8)."""
    return Filter.build(kinds=[REQUEST_KIND], tags={"p": [runner]}, since=max(0, since))


def probe_request(probe_id: str, filter_: Filter) -> Req:
    """A liveness probe: the same filter asking for nothing stored (`limit` 0), answered by `EOSE` at once."""
    return Req(probe_id, (dataclasses.replace(filter_, limit=0),))


def is_probe_id(sub_id: str) -> bool:
    return sub_id.startswith(PROBE_PREFIX)


def stopped_answering(probe: float) -> str:
    return f"the relay stopped answering: a liveness probe had no reply in {seconds_text(probe)} s"


def catch_up_since(now: int, newest_handled: int | None, window: int = REQUEST_WINDOW) -> int:
    """`since` for a (re)subscription: the newest handled request's time minus the request window.

    First start (nothing handled yet): now − window. A newest time ahead of our clock counts as now.
    """
    anchor = now if newest_handled is None else min(newest_handled, now)
    return max(0, anchor - window)


class Backoff:
    """Reconnect delays in whole seconds: 1, 2, 4, … capped at 60; `reset` after a good connection."""

    __slots__ = ("_cap", "_first", "_next")

    def __init__(self, first: int = BACKOFF_FIRST, cap: int = BACKOFF_CAP) -> None:
        self._first = first
        self._cap = cap
        self._next = first

    def reset(self) -> None:
        self._next = self._first

    def next(self) -> int:
        delay = self._next
        self._next = min(2 * delay, self._cap)
        return delay


@dataclass(frozen=True, slots=True)
class Liveness:
    """How often a probe goes out (and how long each may take), and how long a subscription is kept."""

    probe: float = PROBE_EVERY
    renew: float = RENEW_EVERY

    def __post_init__(self) -> None:
        if not (self.probe > 0 and self.renew > 0):
            raise ValueError("liveness periods are positive")


@dataclass(frozen=True, slots=True)
class Ended:
    """How one connection ended: whether it had been subscribed (resets the back-off), and why."""

    subscribed: bool
    why: str


@dataclass(frozen=True, slots=True)
class _Gone:
    why: str


@dataclass(frozen=True, slots=True)
class _SuccessorDone:
    task: asyncio.Task[tuple[RelayConnection, list[Event]]]


class _Stop:
    pass


_Item = tuple[RelayConnection | None, Frame | _Gone | _SuccessorDone | _Stop]


class RelayListener:
    """Listens for the runner's requests on one relay and hands each to `deliver` in its own task.

    `listen()` is one connection, until it ends; `run_forever()` is the service's reconnect loop;
    `stop()` ends either.
    """

    def __init__(
        self,
        url: str,
        secret: SecretKey,
        *,
        deliver: Callable[[Event], Awaitable[None]],
        since: Callable[[], int],
        notifier: Notifier | None = None,
        liveness: Liveness | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_end: Callable[[Ended], None] | None = None,
        on_probe: Callable[[float], None] | None = None,
        connect_within: float = CONNECT_BOUND,
        renew_within: float = RENEW_WITHIN,
        drain: float = DRAIN,
        challenge_wait: float = CHALLENGE_WAIT,
    ) -> None:
        self.url = url
        self._secret = secret
        self._runner = secret.public_key().to_hex()
        self._deliver = deliver
        self._since = since
        self._notifier = notifier if notifier is not None else Notifier(None)
        self._liveness = liveness if liveness is not None else Liveness()
        self._sleep = sleep
        self._on_end = on_end
        self._on_probe = on_probe  # each answered probe's round trip, in seconds (for metrics)
        self._connect_within = connect_within
        self._renew_within = renew_within
        self._drain = drain
        self._challenge_wait = challenge_wait
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._stop_event = asyncio.Event()
        self._listening: asyncio.Task[Ended] | None = None
        self._session: _Session | None = None

    # the reconnect loop

    async def run_forever(self) -> None:
        """Listen, and after each end log `relay: <why>; reconnecting in <n> s` and back off, until `stop()`."""
        backoff = Backoff()
        while not self._stopping:
            self._listening = asyncio.get_running_loop().create_task(self.listen())
            try:
                ended = await self._listening
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if self._stopping and (current is None or current.cancelling() == 0):
                    return
                raise
            finally:
                self._listening = None
            if self._on_end is not None:
                self._on_end(ended)
            if self._stopping:
                return
            if ended.subscribed:
                backoff.reset()
            delay = backoff.next()
            logger.warning("relay: %s; reconnecting in %d s", ended.why, delay)
            await self._pause(delay)

    def stop(self) -> None:
        """End the current connection and the reconnect loop. Deliveries already handed over keep running."""
        self._stopping = True
        self._stop_event.set()
        if self._session is not None:
            self._session.queue.put_nowait((None, _Stop()))
        if self._listening is not None:
            self._listening.cancel()

    async def _pause(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        sleeper = loop.create_task(_await(self._sleep(seconds)))
        stopper = loop.create_task(self._stop_event.wait())
        try:
            await asyncio.wait({sleeper, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            stopper.cancel()

    # one connection

    async def listen(self) -> Ended:
        """One connection: connect, subscribe, probe, renew, deliver; returns how it ended (runner.md §8)."""
        session = _Session(self)
        self._session = session
        try:
            if self._stopping:
                return Ended(False, "stopped")
            return await session.run()
        except RelayError as error:
            return Ended(session.subscribed, str(error))
        except Exception as error:  # a bug must not end the reconnect loop; it is logged by it
            return Ended(session.subscribed, f"{type(error).__name__}: {error}")
        finally:
            self._session = None
            session.close()

    def _filter(self) -> Filter:
        return requests_filter(self._runner, self._since())

    async def _open(self, within: float) -> RelayConnection:
        try:
            async with asyncio.timeout(within):
                return await RelayConnection.open(self.url, self._secret, challenge_wait=self._challenge_wait)
        except TimeoutError:
            raise RelayError("timeout", TIMED_OUT) from None

    async def _successor(self) -> tuple[RelayConnection, list[Event]]:
        """A new connection whose jobs subscription the relay confirmed, and the events before its EOSE."""
        try:
            async with asyncio.timeout(self._renew_within):
                connection = await RelayConnection.open(self.url, self._secret, challenge_wait=self._challenge_wait)
                try:
                    return connection, await self._confirm(connection)
                except BaseException:
                    connection.dispose()
                    raise
        except TimeoutError:
            raise RelayError("timeout", f"no subscription in {seconds_text(self._renew_within)} s") from None

    async def _confirm(self, connection: RelayConnection) -> list[Event]:
        await connection.send(Req(JOBS, (self._filter(),)))
        early: list[Event] = []
        retried = waiting_for_auth = False
        while True:
            frame = await connection.next_frame()
            if isinstance(frame, Authenticated):
                if waiting_for_auth:
                    if not frame.accepted:
                        raise RelayError("auth_refused", "NIP-42 authentication refused")
                    waiting_for_auth = False
                    await connection.send(Req(JOBS, (self._filter(),)))
            elif isinstance(frame, RelayEvent | Eose | Closed) and frame.sub_id == JOBS:
                if isinstance(frame, Eose):
                    return early
                if isinstance(frame, RelayEvent):
                    early.append(frame.event)
                elif not retried and connection.may_retry_after_auth(frame.message):
                    retried = True
                    waiting_for_auth = not connection.authenticated
                    if not waiting_for_auth:
                        await connection.send(Req(JOBS, (self._filter(),)))
                else:
                    raise RelayError("closed", f"the relay closed the jobs subscription: {frame.message}")

    def _hand_over(self, event: Event) -> None:
        """Deliver in a new task, once per verified event id across every connection."""
        if event.id in self._seen:
            return
        if event.is_valid():
            self._seen[event.id] = None
            if len(self._seen) > SEEN:
                self._seen.popitem(last=False)
        task = asyncio.get_running_loop().create_task(self._deliver_one(event))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver_one(self, event: Event) -> None:
        try:
            await self._deliver(event)
        except Exception as error:
            logger.error("relay: handling %s failed: %s: %s", event.id[:12], type(error).__name__, error)


async def _await(awaitable: Awaitable[None]) -> None:
    await awaitable


class _Session:
    """The state of one `listen()`: the current socket, sockets draining, the probe and the renewal."""

    def __init__(self, listener: RelayListener) -> None:
        self.listener = listener
        self.subscribed = False
        self.queue: asyncio.Queue[_Item] = asyncio.Queue()
        self.current: RelayConnection | None = None
        self.pumps: dict[RelayConnection, asyncio.Task[None]] = {}
        self.draining: dict[RelayConnection, float] = {}
        self.successor: asyncio.Task[tuple[RelayConnection, list[Event]]] | None = None
        self.outstanding: str | None = None
        self.probes = 0
        self.probe_sent = 0.0
        self.awaiting_auth = False
        self.retried_auth = False
        self.loop = asyncio.get_running_loop()
        self.next_probe = 0.0
        self.renew_at = 0.0

    async def run(self) -> Ended:
        listener = self.listener
        self.current = await listener._open(listener._connect_within)
        self._pump(self.current)
        await self.current.send(Req(JOBS, (listener._filter(),)))
        start = self.loop.time()
        self.next_probe = start + listener._liveness.probe
        self.renew_at = start + listener._liveness.renew
        while True:
            why = await self._due(self.loop.time())
            if why is not None:
                return Ended(self.subscribed, why)
            try:
                async with asyncio.timeout_at(self._deadline()):
                    connection, item = await self.queue.get()
            except TimeoutError:
                continue
            why = await self._on(connection, item)
            if why is not None:
                return Ended(self.subscribed, why)

    def _deadline(self) -> float:
        deadline = self.next_probe
        if self.subscribed and self.successor is None:
            deadline = min(deadline, self.renew_at)
        return min(deadline, *self.draining.values()) if self.draining else deadline

    async def _due(self, now: float) -> str | None:
        listener = self.listener
        assert self.current is not None
        if now >= self.next_probe:
            if self.outstanding is not None:
                return stopped_answering(listener._liveness.probe)
            self.probes += 1
            self.outstanding = f"{PROBE_PREFIX}{self.probes}"
            self.next_probe = now + listener._liveness.probe
            self.probe_sent = now
            await self.current.send(probe_request(self.outstanding, listener._filter()))
        if self.subscribed and self.successor is None and now >= self.renew_at:
            self.successor = self.loop.create_task(listener._successor())
            self.successor.add_done_callback(lambda task: self.queue.put_nowait((None, _SuccessorDone(task))))
        for connection, until in list(self.draining.items()):
            if now >= until:
                self._forget(connection)
        return None

    async def _on(self, connection: RelayConnection | None, item: Frame | _Gone | _SuccessorDone | _Stop) -> str | None:
        if isinstance(item, _Stop):
            return "stopped"
        if isinstance(item, _SuccessorDone):
            await self._renewed(item.task)
            return None
        if connection is None:
            return None
        if connection is self.current:
            return await self._on_current(connection, item)
        if connection in self.draining:
            self._on_draining(connection, item)
        return None

    async def _on_current(self, connection: RelayConnection, item: Frame | _Gone) -> str | None:
        listener = self.listener
        if isinstance(item, _Gone):
            return item.why
        if isinstance(item, Authenticated):
            if not item.accepted:
                return "NIP-42 authentication refused"
            if self.awaiting_auth:
                self.awaiting_auth = False
                await connection.send(Req(JOBS, (listener._filter(),)))
            return None
        sub_id = getattr(item, "sub_id", None)
        if sub_id is not None and sub_id == self.outstanding:
            if isinstance(item, Eose):
                await connection.send(Close(sub_id))
            if isinstance(item, Eose | Closed):
                self.outstanding = None
                listener._notifier.watchdog()
                if listener._on_probe is not None:
                    listener._on_probe(self.loop.time() - self.probe_sent)
            return None
        if sub_id != JOBS:
            return None
        if isinstance(item, RelayEvent):
            listener._hand_over(item.event)
        elif isinstance(item, Eose):
            logger.info(SUBSCRIBED)
            self.subscribed = True
            listener._notifier.ready()
            listener._notifier.watchdog()
        elif isinstance(item, Closed):
            if not self.retried_auth and connection.may_retry_after_auth(item.message):
                self.retried_auth = True
                self.awaiting_auth = not connection.authenticated
                if not self.awaiting_auth:
                    await connection.send(Req(JOBS, (listener._filter(),)))
                return None
            return f"the relay closed the subscription: {item.message}"
        return None

    def _on_draining(self, connection: RelayConnection, item: Frame | _Gone) -> None:
        if isinstance(item, _Gone):
            self._forget(connection)
        elif isinstance(item, RelayEvent) and item.sub_id == JOBS:
            self.listener._hand_over(item.event)
        elif isinstance(item, Closed) and item.sub_id == JOBS:
            self._forget(connection)

    async def _renewed(self, task: asyncio.Task[tuple[RelayConnection, list[Event]]]) -> None:
        listener = self.listener
        self.successor = None
        now = self.loop.time()
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            why = str(error) if isinstance(error, RelayError) else f"{type(error).__name__}: {error}"
            logger.warning("relay: renewing the subscription failed: %s; keeping the current connection", why)
            self.renew_at = now + listener._liveness.probe
            return
        fresh, early = task.result()
        old, self.current = self.current, fresh
        self._pump(fresh)
        if old is not None:
            try:
                await old.send(Close(JOBS))
            except RelayError:
                self._forget(old)
            else:
                self.draining[old] = now + listener._drain
        self.outstanding = None
        self.awaiting_auth = self.retried_auth = False
        self.next_probe = now + listener._liveness.probe
        self.renew_at = now + listener._liveness.renew
        logger.info(RENEWED)
        listener._notifier.watchdog()
        for event in early:
            listener._hand_over(event)

    def _pump(self, connection: RelayConnection) -> None:
        async def pump() -> None:
            try:
                while True:
                    self.queue.put_nowait((connection, await connection.next_frame()))
            except RelayError as error:
                self.queue.put_nowait((connection, _Gone(str(error))))

        self.pumps[connection] = self.loop.create_task(pump())

    def _forget(self, connection: RelayConnection) -> None:
        self.draining.pop(connection, None)
        pump = self.pumps.pop(connection, None)
        if pump is not None:
            pump.cancel()
        connection.dispose()

    def close(self) -> None:
        successor, self.successor = self.successor, None
        if successor is not None:
            if not successor.done():
                successor.cancel()
            elif not successor.cancelled() and successor.exception() is None:
                successor.result()[0].dispose()
        for connection in [*self.pumps, *self.draining]:
            self._forget(connection)
        if self.current is not None:
            self._forget(self.current)
