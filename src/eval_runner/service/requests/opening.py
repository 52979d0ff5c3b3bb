"""Opening a delivered `25920`: what the runner will ever look at, and what it drops without a word.

An event that fails to open is dropped silently (runner.md §9.2, wire.md §6): logged
`dropped <id12>: <why>`, never answered, never recorded, because nothing about it proves who sent it
(a forged signature, a request meant for another worker, a replay from outside the window, bytes that
don't decrypt to a request). Everything that opens has a verified signer, the principal, and a body the
execution contracts accept; only then can a refusal be answered to someone.

The checks run in the reference's order: kind, id and signature, the `p` tags (exactly one, ours), the
`created_at` window (600 s back, 300 s ahead), NIP-44 decryption under the conversation key of our
secret and the signer (plaintext up to 256 KiB, the extended form a phone may send), then the body
(`contracts.execution.open_body`: JSON object, version, no credential-named key, type, shape). A
control must also carry exactly one `e` tag, the 64-hex id of the execute event it controls. The
deadline is *not* checked here: a retransmission of known work must still get its recorded answer.

`SeenIds` is the first step of all (§9.1): the last 1,024 event ids handled, so a request delivered on
two connections is handled once. It is asked before any check; unlike the reference, an id is only
remembered once its event's id and signature verify (as the requests listener does), so a forgery that
carries a genuine event's id is dropped each time it comes and can never shadow the genuine event.

Pure: no I/O; the time is a parameter.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from eval_runner.contracts.errors import ContractError
from eval_runner.contracts.execution import MAX_PLAINTEXT_BYTES, ControlBody, ExecuteBody, fingerprint, open_body
from eval_runner.errors import EvalRunnerError
from eval_runner.nostr import ConversationKeys, Event, NostrError, PublicKey, SecretKey, first_tag_value, tag_values
from eval_runner.nostr.keys import is_lower_hex

REQUEST_KIND: Final = 25_920
WINDOW_PAST: Final = 600
WINDOW_FUTURE: Final = 300
SEEN_IDS: Final = 1_024


class SeenIds:
    """A bounded FIFO of the event ids handled last (runner.md §9.1).

    `seen` is asked first, before any check; `remember` is called once the event's id and signature
    verified (a forged event is dropped every time it comes, and never hides the genuine one)."""

    __slots__ = ("_capacity", "_ids")

    def __init__(self, capacity: int = SEEN_IDS) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def seen(self, event_id: str) -> bool:
        return event_id in self._ids

    def remember(self, event_id: str) -> None:
        """Remember `event_id`, evicting the oldest past the capacity."""
        self._ids[event_id] = None
        self._ids.move_to_end(event_id)
        if len(self._ids) > self._capacity:
            self._ids.popitem(last=False)

    def first_time(self, event_id: str) -> bool:
        """True the first time `event_id` is offered (and remember it); False after."""
        if self.seen(event_id):
            return False
        self.remember(event_id)
        return True

    def __len__(self) -> int:
        return len(self._ids)


class DropError(EvalRunnerError):
    """The event does not open: drop it, log `reason`, answer nothing. `verified` says whether its id and
    signature held (only then is its id worth remembering: a forgery may carry a genuine event's id)."""

    def __init__(self, reason: str, *, verified: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.verified = verified


@dataclass(frozen=True, slots=True)
class OpenedExecute:
    """An execute request that opened: the event, its verified signer, the body and its fingerprint."""

    event: Event
    principal: str
    body: ExecuteBody
    fingerprint: str

    @property
    def bytes_in(self) -> int:
        """The request's size as the usage log counts it: the length of its ciphertext."""
        return len(self.event.content.encode("utf-8"))


@dataclass(frozen=True, slots=True)
class OpenedControl:
    """A control (status, replay, cancel) that opened; `target` is its `e` tag, the execute event it names."""

    event: Event
    principal: str
    body: ControlBody
    target: str


Opened = OpenedExecute | OpenedControl


def drop_line(event_id: str, reason: str) -> str:
    """The log line of a dropped event (runner.md §20)."""
    return f"dropped {event_id[:12]}: {reason}"


def open_request(event: Event, secret: SecretKey, now: int, keys: ConversationKeys | None = None) -> Opened:
    """Open `event` as a request to the runner holding `secret` at unix time `now`; `DropError` if it doesn't."""
    if event.kind != REQUEST_KIND:
        raise DropError(f"kind {event.kind} is not an execution request ({REQUEST_KIND})", verified=False)
    try:
        event.verify()
    except NostrError as error:
        raise DropError(str(error), verified=False) from None
    runner = secret.public_key().to_hex()
    addressed = tag_values(event, "p")
    if addressed != (runner,):
        raise DropError(f"the p tags name {_list(addressed)}, not exactly this runner")
    age = now - event.created_at
    if age > WINDOW_PAST:
        raise DropError(f"stale: created {age} s ago; the window is {WINDOW_PAST} s")
    if -age > WINDOW_FUTURE:
        raise DropError(f"stale: created {-age} s ahead; the window is {WINDOW_FUTURE} s")
    try:
        sender = PublicKey.parse(event.pubkey)
        cache = keys if keys is not None else ConversationKeys(1)
        plaintext = cache.decrypt(secret, sender, event.content, max_len=MAX_PLAINTEXT_BYTES)
    except NostrError as error:
        raise DropError(str(error)) from None
    try:
        body = open_body(plaintext, first_tag_value(event, "expiration"))
    except ContractError as error:
        raise DropError(error.detail) from None
    if isinstance(body, ExecuteBody):
        return OpenedExecute(event=event, principal=event.pubkey, body=body, fingerprint=fingerprint(body))
    targets = tag_values(event, "e")
    if len(targets) != 1 or not is_lower_hex(targets[0], 64):
        raise DropError(f"a control names exactly one execute event in an e tag; this one has {_list(targets)}")
    return OpenedControl(event=event, principal=event.pubkey, body=body, target=targets[0])


def _list(values: tuple[str, ...]) -> str:
    """Tag values for a log line, each cut to 12 characters: they are the sender's text, not ours."""
    return "[" + ", ".join(value[:12] for value in values) + "]"
