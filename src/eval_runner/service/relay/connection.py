"""The relay wire: one authenticated WebSocket (`RelayConnection`) and one-shot operations on it (`RelayClient`).

runner.md §7.1 is the contract: connect, answer NIP-42 when challenged, publish and wait for the
relay's `OK`, query `["REQ","q",…]` until `EOSE` keeping only events whose id and signature verify,
each operation bounded at 20 s (`the relay didn't answer in time`). The long-lived pieces build on
the same connection: the requests subscription with its liveness probes (`service.liveness`) and
the persistent answer writer (`service.publisher`).

Choices where the spec is silent (each keeps the reference's behaviour on its production relay):

* NIP-42 both ways. relay.openagents.com challenges as soon as the socket opens, and the reference
  refuses a relay that doesn't. We wait `challenge_wait` (0.25 s) for that first challenge and
  authenticate before sending anything, as the reference does; a relay that says nothing first is
  used as an open relay, and a challenge it sends later (nostr-sdk's LocalRelay challenges only at
  the first REQ, then answers `CLOSED … "auth-required: …"`) is answered whenever it arrives.
  `RelayConnection.next_frame` surfaces the relay's verdict as an `Authenticated` record so each
  caller can resend, once, what the relay refused with `auth-required:`.
* No WebSocket keepalive pings and no permessage-deflate: liveness is the application-level probe
  of runner.md §8 (a front end may answer pings for a dead relay, and a relay that ignores pings
  would be dropped every 40 s), and compression buys nothing on 128 KB messages while costing
  latency on every answer.
* An `EVENT` message over 128,000 bytes is refused before any I/O (`too_large`), measured on the
  exact text that would be sent (wire.md §20).
* Reading is never throttled (websockets' `max_queue=None`; its default stops reading at 16 unread
  messages). A relay drops what a slow reader falls behind on (nostr-sdk's LocalRelay keeps 1,024 events
  per connection), so under a burst of requests the runner takes them all into memory at once, where the
  listener hands each to its own task anyway. With 2,000 sent back to back over LocalRelay on 2 cores
  (bench/service.py) the default lost 5-15 % in most runs; this way most runs lose none, and a host loaded
  past its cores still loses a few percent, which the relay never delivered.
* A query also drops events that don't match its filter (nostr-sdk's relay client documents that
  relays send such events); the reference keeps any event whose signature verifies.
* Closing a socket never delays the caller: the close handshake runs in the background, bounded.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, TypeVar

import websockets
from websockets.asyncio.client import ClientConnection, connect

from eval_runner.contracts.publication import MAX_EVENT_MESSAGE_BYTES
from eval_runner.errors import CodedError
from eval_runner.nostr import (
    AuthChallenge,
    AuthResponse,
    ClientEvent,
    ClientFrame,
    Closed,
    Eose,
    Event,
    Filter,
    FrameError,
    Ok,
    RelayEvent,
    RelayFrame,
    Req,
    SecretKey,
    auth_event,
    encode,
    parse_relay_frame,
)

OPERATION_BOUND: Final = 20.0
CONNECT_BOUND: Final = 15.0
CHALLENGE_WAIT: Final = 0.25
CLOSE_BOUND: Final = 2.0
MAX_MESSAGE_BYTES: Final = MAX_EVENT_MESSAGE_BYTES
MAX_INCOMING_BYTES: Final = 1 << 20
AUTH_REQUIRED: Final = "auth-required:"
QUERY_ID: Final = "q"

TIMED_OUT: Final = "the relay didn't answer in time"
SOCKET_CLOSED: Final = "the relay closed the socket"
AUTH_REFUSED: Final = "NIP-42 authentication refused"


class RelayError(CodedError):
    """A relay operation that failed. `code` is for branching, `str()` is the sentence to log.

    Codes: `unreachable` (no socket), `closed` (the socket ended), `timeout`, `auth_refused`,
    `refused` (`OK false`), `query_closed` (`CLOSED` on a query), `too_large` (refused locally).
    """


@dataclass(frozen=True, slots=True)
class Authenticated:
    """The relay's verdict on our NIP-42 answer, surfaced in-band by `RelayConnection.next_frame`."""

    accepted: bool
    message: str


Frame = RelayFrame | Authenticated
T = TypeVar("T")

_background: set[asyncio.Task[None]] = set()


def event_frame(event: Event) -> str:
    """The exact `["EVENT", …]` text to send; `too_large` above 128,000 bytes (wire.md §20)."""
    text = encode(ClientEvent(event))
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_MESSAGE_BYTES:
        raise RelayError("too_large", f"the event message is {size} bytes; the relay takes at most {MAX_MESSAGE_BYTES}")
    return text


def closed_text(error: websockets.ConnectionClosed) -> str:
    """What to say when the socket ended: a clean close is the relay's doing, anything else is its error."""
    if isinstance(error, websockets.ConnectionClosedOK) or error.rcvd is not None:
        reason = error.rcvd.reason if error.rcvd is not None else ""
        return f"{SOCKET_CLOSED}: {reason}" if reason else SOCKET_CLOSED
    return f"socket: {error}"


class RelayConnection:
    """One WebSocket to the relay, authenticated when challenged. One reader at a time calls `next_frame`.

    Open with `RelayConnection.open` (bound it with `asyncio.timeout`). Every `["AUTH", challenge]`
    is answered inside `next_frame`; the relay's `OK` on that answer comes out as `Authenticated`.
    Frames that are not text, not JSON or not a relay frame this client knows are skipped.
    """

    __slots__ = ("_auth_id", "_buffer", "_secret", "_ws", "authenticated", "challenged", "url")

    def __init__(self, url: str, secret: SecretKey, ws: ClientConnection) -> None:
        self.url = url
        self._secret = secret
        self._ws = ws
        self._buffer: deque[Frame] = deque()
        self._auth_id: str | None = None
        self.challenged = False
        self.authenticated = False

    @classmethod
    async def open(cls, url: str, secret: SecretKey, *, challenge_wait: float = CHALLENGE_WAIT) -> RelayConnection:
        """Connect and, if the relay challenges first, authenticate before returning (runner.md §7.1)."""
        try:
            ws = await connect(
                url,
                open_timeout=None,
                ping_interval=None,
                compression=None,
                close_timeout=CLOSE_BOUND,
                max_size=MAX_INCOMING_BYTES,
                max_queue=None,
            )
        except (OSError, websockets.WebSocketException) as error:
            raise RelayError("unreachable", f"cannot reach the relay: {error}") from None
        connection = cls(url, secret, ws)
        try:
            await connection._first_frames(challenge_wait)
        except BaseException:
            connection.dispose()
            raise
        return connection

    async def _first_frames(self, challenge_wait: float) -> None:
        try:
            async with asyncio.timeout(challenge_wait):
                message = await self._recv()
        except TimeoutError:
            return  # an open relay, or one that challenges later
        first = await self._interpret(message)
        if not self.challenged:
            if first is not None:
                self._buffer.append(first)
            return
        # Challenged first: nothing of ours goes out until the relay has ruled on the answer.
        verdict = first
        while not isinstance(verdict, Authenticated):
            if verdict is not None:
                self._buffer.append(verdict)
            verdict = await self._interpret(await self._recv())
        if not verdict.accepted:
            raise RelayError("auth_refused", f"{AUTH_REFUSED}: {verdict.message}" if verdict.message else AUTH_REFUSED)

    async def _recv(self) -> str | bytes:
        try:
            return await self._ws.recv()
        except websockets.ConnectionClosed as error:
            raise RelayError("closed", closed_text(error)) from None

    async def _interpret(self, message: str | bytes) -> Frame | None:
        """A message as a frame, or None for one to skip. AUTH challenges are answered here."""
        if not isinstance(message, str):
            return None
        try:
            frame = parse_relay_frame(message, MAX_INCOMING_BYTES)
        except FrameError:
            return None
        if isinstance(frame, AuthChallenge):
            await self._answer(frame.challenge)
            return None
        if isinstance(frame, Ok) and frame.event_id == self._auth_id:
            self._auth_id = None
            self.authenticated = frame.accepted
            return Authenticated(frame.accepted, frame.message)
        return frame

    async def _answer(self, challenge: str) -> None:
        answer = auth_event(self._secret, self.url, challenge, int(time.time()))
        self.challenged = True
        self._auth_id = answer.id
        await self.send(AuthResponse(answer))

    async def next_frame(self) -> Frame:
        """The next frame the relay sent; raises `RelayError("closed", …)` once the socket ends."""
        if self._buffer:
            return self._buffer.popleft()
        while True:
            frame = await self._interpret(await self._recv())
            if frame is not None:
                return frame

    @property
    def auth_pending(self) -> bool:
        """A challenge has been answered and the relay has not ruled yet."""
        return self._auth_id is not None

    def may_retry_after_auth(self, message: str) -> bool:
        """Whether a refusal saying `auth-required:` will be worth resending once the relay accepts us."""
        return message.startswith(AUTH_REQUIRED) and (self.auth_pending or self.authenticated)

    async def send(self, frame: ClientFrame) -> None:
        await self.send_text(encode(frame))

    async def send_text(self, text: str) -> None:
        try:
            await self._ws.send(text)
        except websockets.ConnectionClosed as error:
            raise RelayError("closed", closed_text(error)) from None

    def dispose(self) -> None:
        """Close in the background; the caller never waits on a relay that may not answer the close."""
        task = asyncio.get_running_loop().create_task(self._close())
        _background.add(task)
        task.add_done_callback(_background.discard)

    async def _close(self) -> None:
        try:
            async with asyncio.timeout(CLOSE_BOUND + 1):
                await self._ws.close()
        except Exception:  # noqa: S110 - nothing to do about a socket that won't close cleanly
            pass
        finally:
            transport = self._ws.transport
            if transport is not None and not transport.is_closing():
                transport.abort()


def request_frame(sub_id: str, filter_: Filter) -> Req:
    return Req(sub_id, (filter_,))


async def publish_on(connection: RelayConnection, event: Event, text: str) -> None:
    """Send `text` (the event's EVENT frame) and read until the relay's OK on it (runner.md §7.1)."""
    await connection.send_text(text)
    retried = False
    refusal: Ok | None = None
    while True:
        frame = await connection.next_frame()
        if isinstance(frame, Authenticated):
            if refusal is None:
                continue
            if not frame.accepted:
                raise RelayError("auth_refused", AUTH_REFUSED)
            await connection.send_text(text)
            refusal = None
        elif isinstance(frame, Ok) and frame.event_id == event.id:
            if frame.accepted:
                return
            if not retried and connection.may_retry_after_auth(frame.message):
                retried = True
                if connection.authenticated:
                    await connection.send_text(text)
                else:
                    refusal = frame
                continue
            raise RelayError("refused", f"the relay refused {event.kind}: {frame.message}")


async def query_on(connection: RelayConnection, filter_: Filter, sub_id: str = QUERY_ID) -> list[Event]:
    """`REQ` on `sub_id` until its `EOSE`; only events that verify and match the filter are kept."""
    request = encode(request_frame(sub_id, filter_))
    await connection.send_text(request)
    found: dict[str, Event] = {}
    retried = False
    waiting_for_auth = False
    while True:
        frame = await connection.next_frame()
        if isinstance(frame, Authenticated):
            if waiting_for_auth:
                if not frame.accepted:
                    raise RelayError("auth_refused", AUTH_REFUSED)
                waiting_for_auth = False
                found.clear()
                await connection.send_text(request)
        elif isinstance(frame, RelayEvent) and frame.sub_id == sub_id:
            event = frame.event
            if event.id not in found and filter_.matches(event) and event.is_valid():
                found[event.id] = event
        elif isinstance(frame, Eose) and frame.sub_id == sub_id:
            return list(found.values())
        elif isinstance(frame, Closed) and frame.sub_id == sub_id:
            if not retried and connection.may_retry_after_auth(frame.message):
                retried = True
                if connection.authenticated:
                    found.clear()
                    await connection.send_text(request)
                else:
                    waiting_for_auth = True
                continue
            raise RelayError("query_closed", f"the relay closed the query: {frame.message}")


class RelayClient:
    """The reference's wire: every operation opens its own socket, all of it bounded (20 s).

    Good for rare operations (releases, reading defaults). Answers go through `Publisher`, which
    keeps one connection warm.
    """

    def __init__(
        self,
        url: str,
        secret: SecretKey,
        *,
        bound: float = OPERATION_BOUND,
        challenge_wait: float = CHALLENGE_WAIT,
    ) -> None:
        self.url = url
        self._secret = secret
        self._bound = bound
        self._challenge_wait = challenge_wait

    async def publish(self, event: Event) -> None:
        """Publish and wait for `OK true`; `RelayError` otherwise. An oversize frame never leaves."""
        text = event_frame(event)
        await self._bounded(lambda connection: publish_on(connection, event, text))

    async def query(self, filter_: Filter) -> list[Event]:
        """Stored events matching `filter_`, each verified (id and signature)."""
        return await self._bounded(lambda connection: query_on(connection, filter_))

    async def _bounded(self, operation: Callable[[RelayConnection], Awaitable[T]]) -> T:
        connection: RelayConnection | None = None
        try:
            async with asyncio.timeout(self._bound):
                connection = await RelayConnection.open(self.url, self._secret, challenge_wait=self._challenge_wait)
                return await operation(connection)
        except TimeoutError:
            raise RelayError("timeout", TIMED_OUT) from None
        finally:
            if connection is not None:
                connection.dispose()
