"""The trainer client: ask a hosted runner "does this extension help?" and read its answer (wire.md §12).

A trainer is whoever signs the request: a person at `eval-runner trainer`, a script, a phone. The wire
gives it nothing for free. Job kinds are ephemeral, so an answer published before the trainer listens is
never seen: a request's answers are subscribed (`{"kinds":[26920,27020],"#p":[T],"#e":[ids]}`) and the
relay's `EOSE` awaited *before* the request is published. Anyone can publish an event tagged to a
trainer, so every answer is bound before it is trusted (§12 step 3): kind, the runner's signature, `e`
exactly one event of ours, `p` exactly us, decrypted, and the request and attempt we sent. Only
contiguous progress is shown; the first valid terminal result is the answer, and a later one that
differs is kept as a conflict, never silently preferred. Silence proves nothing about remote work, so a
run with no result reports `worker_absent` (nothing heard) or `worker_silent` (heard, then nothing).
The sealed report is read authenticated as the trainer, opened, and its inline JCS bytes checked
against the report the result names, so a verdict table is only built from what the runner vouched for.

Building requests is `eval_runner.trainer.requests` (re-exported here).

Choices where the spec is silent:
* An answer's type must match its kind: `accepted`/`progress` come as 27020, results and control
  results as 26920. A request binds `accepted`, `progress` and `result`; a control binds its own
  `*_result` or a refusal `result`. Anything else is not bound.
* A progress note repeating a seq already shown with the same body is a duplicate (ignored); any other
  repeat, a gap or a step back stops progress rendering for the request (§9.2).
* Each published event gets its own subscription (`answers`, `answers-2`, …) naming every event of its
  request, since progress goes to the event that created the claim and results to every alias.
* A control's `e` is the event that got `accepted` (the one that created the claim), else the first.
* A lost connection fails whatever waits on it (`TrainerError("relay")`); the caller may reconnect and
  retransmit, which the runner answers from its ledger.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final, TypeVar

from eval_runner.contracts import shape
from eval_runner.contracts.answers import (
    AcceptedBody,
    Answer,
    CancelResult,
    ProgressBody,
    ReplayResult,
    ResultBody,
    StatusResult,
)
from eval_runner.contracts.envelope import Envelope, check_content, route
from eval_runner.contracts.errors import ContractError
from eval_runner.contracts.execution import EXECUTION_SCHEMA, MAX_PLAINTEXT_BYTES, Binding, ControlBody, ExecuteBody
from eval_runner.contracts.hosted import SEALED_KIND, HostedInput, PublishInput, request_tags
from eval_runner.contracts.package import RELEASE_KIND, read_release
from eval_runner.contracts.publication import PUBLICATION_KIND, Publication, read_publication
from eval_runner.contracts.refs import ArtifactRef, EventRef
from eval_runner.contracts.report import Report
from eval_runner.contracts.strict_json import JsonValue, canonical
from eval_runner.nostr import (
    Close,
    Closed,
    Eose,
    Event,
    Filter,
    NostrError,
    Ok,
    PublicKey,
    RelayEvent,
    Req,
    SecretKey,
    conversation_key,
    decrypt,
    encode,
    encrypt,
    sign,
)
from eval_runner.service.relay.connection import (
    CHALLENGE_WAIT,
    OPERATION_BOUND,
    TIMED_OUT,
    Authenticated,
    RelayClient,
    RelayConnection,
    RelayError,
    event_frame,
)
from eval_runner.trainer.binding import FEEDBACK_KIND, RESULT_KIND, OnAnswer, RunAnswer, Unbound, bind
from eval_runner.trainer.requests import (
    CatalogTool,
    Request,
    SuiteDraft,
    TrainerError,
    build_request,
    draft_case,
    extension_tool,
    new_request_id,
    published_run_input,
    read_draft,
    run_input,
    subject_ref,
    suite_draft,
)

REQUEST_KIND: Final = 25_920
#: The reference trainer waits up to an hour for a run's result (§12 step 5).
WAIT_SECONDS: Final = 3_600.0
#: A publish releases a draft suite and signs one event: minutes at most, never a run's hour.
PUBLISH_SECONDS: Final = 300.0
WORKER_ABSENT: Final = "worker_absent"
WORKER_SILENT: Final = "worker_silent"
VERDICT_WORDS: Final = {"pass": "Better", "fail": "Worse", "inconclusive": "No clear change"}
CANCEL_REASON: Final = "the trainer stopped the run"
_RUN_TYPES = (AcceptedBody, ProgressBody, ResultBody)
#: What may answer each control: its own result, or a refusal.
_CONTROL_ANSWERS: dict[str, tuple[type[Answer], ...]] = {
    "status": (StatusResult, ResultBody),
    "replay": (ReplayResult, ResultBody),
    "cancel": (CancelResult, ResultBody),
}

T = TypeVar("T")


# -- the client ---------------------------------------------------------------------------------------

ControlAnswer = StatusResult | CancelResult | ReplayResult | ResultBody


@dataclass(slots=True)
class _Pending:
    """A frame awaiting the relay's word (OK or EOSE); resent once if refused before NIP-42 completed."""

    text: str
    future: asyncio.Future[None]
    retried: bool = False
    waiting_auth: bool = False


@dataclass(slots=True)
class _Control:
    future: asyncio.Future[ControlAnswer]
    answers: tuple[type[Answer], ...]


class Trainer:
    """One trainer key talking to one runner over one relay: `async with Trainer(url, secret, runner) as t`.

    One connection carries every subscription, publish and answer; a single reader binds what arrives.
    If the connection is lost, whatever is waiting raises `TrainerError("relay")`.
    """

    def __init__(
        self,
        relay_url: str,
        secret: SecretKey,
        runner_pubkey: str,
        *,
        challenge_wait: float = CHALLENGE_WAIT,
        bound: float = OPERATION_BOUND,
    ) -> None:
        self.url = relay_url
        self.runner = PublicKey.parse(runner_pubkey).to_hex()
        self.pubkey = secret.public_key().to_hex()
        #: Events addressed to us that did not bind, and why (never trusted, kept for inspection).
        self.unbound: list[Unbound] = []
        self._secret = secret
        self._key = conversation_key(secret, PublicKey.parse(self.runner))
        self._challenge_wait = challenge_wait
        self._bound = bound
        self._connection: RelayConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._lost: TrainerError | None = None
        self._lost_signal = asyncio.Event()
        self._oks: dict[str, _Pending] = {}
        self._subs: dict[str, _Pending] = {}
        self._sub_count = 0
        self._seen: set[str] = set()
        self._expected: dict[str, Binding] = {}
        self._runs: dict[str, RunAnswer] = {}
        self._controls: dict[str, _Control] = {}
        self._listening: dict[str, str] = {}
        self._delivered = asyncio.Event()

    async def __aenter__(self) -> Trainer:
        await self.connect()
        return self

    async def __aexit__(self, *_: object) -> None:
        self.close()

    async def connect(self) -> None:
        """Open the connection (answering NIP-42 when challenged) and start reading."""
        try:
            async with asyncio.timeout(self._bound):
                self._connection = await RelayConnection.open(
                    self.url, self._secret, challenge_wait=self._challenge_wait
                )
        except TimeoutError:
            raise TrainerError("relay", TIMED_OUT) from None
        except RelayError as error:
            raise TrainerError("relay", str(error)) from None
        self._reader = asyncio.get_running_loop().create_task(self._read())

    def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        if self._connection is not None:
            self._connection.dispose()

    # -- requests ---------------------------------------------------------------------------------

    def request(
        self, value: HostedInput | JsonValue, *, request_id: str | None = None, checked: bool = True
    ) -> Request:
        """A new request to this runner, not sent yet."""
        return Request(self.runner, build_request(self.runner, value, request_id=request_id, checked=checked))

    def follow(self, request: Request, on_answer: OnAnswer | None = None) -> RunAnswer:
        """The answer record of `request`; answers to its events bind to it from now on."""
        if request.runner != self.runner:
            raise TrainerError("input", f"request {request.id} was made for runner {request.runner}")
        answer = self._runs.get(request.id)
        if answer is None or answer.request is not request:
            answer = RunAnswer(request, on_answer)
            self._runs[request.id] = answer
        elif on_answer is not None:
            answer.on_answer = on_answer
        for event in request.events:
            self._expected[event.id] = request.binding
        return answer

    async def listen(self, request: Request) -> RunAnswer:
        """Subscribe to the answers to every event of `request` (awaiting the relay's EOSE)."""
        answer = self.follow(request)
        previous = self._listening.get(request.id)
        self._listening[request.id] = await self._subscribe([event.id for event in request.events])
        if previous is not None:
            self._subs.pop(previous, None)
            await self._send_text(encode(Close(previous)))
        return answer

    async def send(self, request: Request, *, now: int | None = None) -> Event:
        """Sign a fresh event over the request's unchanged body, subscribe to its answers, then publish it."""
        created = int(time.time()) if now is None else now
        if created >= request.body.deadline:
            raise TrainerError("input", f"request {request.id} expired at {request.body.deadline}; start a new run")
        plaintext = canonical(request.body.to_json()).decode("utf-8")
        content = encrypt(plaintext, self._key, max_len=MAX_PLAINTEXT_BYTES)
        event = sign(self._secret, REQUEST_KIND, request_tags(self.runner, request.body.deadline), content, created)
        request.events.append(event)
        await self.listen(request)
        await self._publish(event)
        return event

    async def wait(self, answer: RunAnswer, timeout: float = WAIT_SECONDS) -> RunAnswer:
        """Until the first terminal result, or `timeout` seconds: then `silence` says what was heard."""
        try:
            async with asyncio.timeout(timeout):
                await self._until(answer.finished.wait())
        except TimeoutError:
            answer.silence = WORKER_SILENT if answer.heard else WORKER_ABSENT
        return answer

    async def run(
        self,
        value: HostedInput | Request,
        *,
        on_answer: OnAnswer | None = None,
        timeout: float = WAIT_SECONDS,
    ) -> RunAnswer:
        """Send a run, or retransmit a kept `Request`, and wait for its result (§12 steps 1–5)."""
        request = value if isinstance(value, Request) else self.request(value)
        answer = self.follow(request, on_answer)
        await self.send(request)
        return await self.wait(answer, timeout)

    async def until(self, predicate: Callable[[], bool], timeout: float = OPERATION_BOUND) -> bool:
        """Wait until `predicate` holds, checked after every event the relay delivers (an answer bound or
        not); False if it still does not after `timeout` seconds."""
        try:
            async with asyncio.timeout(timeout):
                while not predicate():
                    self._delivered.clear()
                    await self._until(self._delivered.wait())
        except TimeoutError:
            return predicate()
        return True

    # -- controls ---------------------------------------------------------------------------------

    async def status(
        self, request_event_id: str, body: ExecuteBody | Binding, *, timeout: float = OPERATION_BOUND
    ) -> StatusResult | ResultBody:
        """Where the run the execute event `request_event_id` created stands; a refusal if the runner won't say."""
        found = await self.control("status", request_event_id, body, timeout=timeout)
        if not isinstance(found, StatusResult | ResultBody):
            raise TrainerError("input", "a status is answered by a status result")  # _CONTROL_ANSWERS rules it out
        return found

    async def cancel(
        self,
        request_event_id: str,
        body: ExecuteBody | Binding,
        *,
        reason: str = CANCEL_REASON,
        timeout: float = OPERATION_BOUND,
    ) -> CancelResult | ResultBody:
        """Ask the runner to stop the run. The `cancel_result` acknowledges the control, not a stop; the
        run's own `cancelled` result follows on its execute events (`listen` to them to see it)."""
        found = await self.control("cancel", request_event_id, body, {"reason": reason}, timeout=timeout)
        if not isinstance(found, CancelResult | ResultBody):
            raise TrainerError("input", "a cancel is answered by a cancel result")  # _CONTROL_ANSWERS rules it out
        return found

    async def control(
        self,
        kind: str,
        request_event_id: str,
        body: ExecuteBody | Binding,
        fields: Mapping[str, JsonValue] | None = None,
        *,
        timeout: float = OPERATION_BOUND,
    ) -> ControlAnswer:
        """Send a `status`/`replay`/`cancel` control naming the execute event `request_event_id` (§11) and
        return its first bound answer; `TrainerError("worker_absent")` if none comes within `timeout`."""
        binding = body if isinstance(body, Binding) else body.binding
        value: dict[str, JsonValue] = {"v": EXECUTION_SCHEMA, "requires": [], "type": kind, **binding.to_json()}
        value.update(fields or {})
        try:
            ControlBody.parse(value)
            target = shape.hex64(request_event_id, "request event id")
        except ContractError as error:
            raise TrainerError("input", error.detail) from None
        content = encrypt(canonical(value).decode("utf-8"), self._key)
        event = sign(self._secret, REQUEST_KIND, [["p", self.runner], ["e", target]], content, int(time.time()))
        control = _Control(asyncio.get_running_loop().create_future(), _CONTROL_ANSWERS[kind])
        self._controls[event.id] = control
        self._expected[event.id] = binding
        await self._subscribe([event.id])
        await self._publish(event)
        try:
            async with asyncio.timeout(timeout):
                return await self._until(control.future)
        except TimeoutError:
            raise TrainerError(WORKER_ABSENT, f"no answer to the {kind} within {timeout:g} s") from None

    # -- a published test set ---------------------------------------------------------------------

    async def suite_release(self, event_id: str) -> EventRef:
        """The pointer a run of the published test set `event_id` names (`{id, pubkey, kind: 3184}`): the
        `3184` read from the relay, whose signer is the pubkey, checked as a well-formed release first."""
        try:
            ident = shape.hex64(event_id, "--suite-release", "the 64-hex id of a 3184 release")
        except ContractError as error:
            raise TrainerError("input", error.detail) from None
        client = RelayClient(self.url, self._secret, bound=self._bound, challenge_wait=self._challenge_wait)
        try:
            found = await client.query(Filter.build(ids=[ident], kinds=[RELEASE_KIND]))
        except RelayError as error:
            raise TrainerError("relay", f"looking up the release {ident}: {error}") from None
        event = next((item for item in found if item.id == ident), None)
        if event is None:
            raise TrainerError("input", f"the release {ident} isn't on the relay")
        try:
            release = read_release(event)
        except ContractError as error:
            raise TrainerError("input", f"the release {ident} doesn't check: {error.detail}") from None
        return EventRef(id=release.id, pubkey=release.pubkey, kind=RELEASE_KIND)

    # -- publishing and published results --------------------------------------------------------

    async def publish(
        self, report: ArtifactRef, *, on_answer: OnAnswer | None = None, timeout: float = PUBLISH_SECONDS
    ) -> RunAnswer:
        """Ask the runner to publish the report a completed run of ours returned (wire.md §5.4.2): it
        releases a draft suite first, then signs a `3189` crediting us; `answer.published` holds both
        pointers. A second publish of the same report gets the same pointers and publishes nothing."""
        return await self.run(PublishInput(report), on_answer=on_answer, timeout=timeout)

    async def published_result(self, event_id: str) -> Publication:
        """A published result (`3189`) read from the relay through every reader check (wire.md §16.3)."""
        try:
            ident = shape.hex64(event_id, "RESULT_ID", "the 64-hex id of a published result (3189)")
        except ContractError as error:
            raise TrainerError("input", error.detail) from None
        client = RelayClient(self.url, self._secret, bound=self._bound, challenge_wait=self._challenge_wait)
        try:
            found = await client.query(Filter.build(ids=[ident], kinds=[PUBLICATION_KIND]))
        except RelayError as error:
            raise TrainerError("relay", f"looking up the result {ident}: {error}") from None
        event = next((item for item in found if item.id == ident), None)
        if event is None:
            raise TrainerError("input", f"the result {ident} isn't on the relay")
        try:
            return read_publication(event)
        except ContractError as error:
            raise TrainerError("input", f"the result {ident} doesn't check: {error.detail}") from None

    # -- the sealed report ------------------------------------------------------------------------

    async def fetch_report(self, sealed: EventRef, report: ArtifactRef) -> tuple[Report, bytes]:
        """Read the `3188` authenticated as this trainer, open it (§15) and check that its inline report is
        exactly `report`, the result's ArtifactRef. Returns the parsed report and its JCS bytes."""
        if sealed.pubkey != self.runner or sealed.kind != SEALED_KIND:
            raise TrainerError("report", "the result points at a sealed report another key signed")
        client = RelayClient(self.url, self._secret, bound=self._bound, challenge_wait=self._challenge_wait)
        try:
            found = await client.query(Filter.build(ids=[sealed.id], kinds=[SEALED_KIND]))
        except RelayError as error:
            raise TrainerError("relay", f"reading the sealed report: {error}") from None
        event = next((item for item in found if item.id == sealed.id and item.pubkey == self.runner), None)
        if event is None:
            raise TrainerError("report", f"the sealed report {sealed.id} isn't on the relay")
        try:
            if route(event.tags).recipient != self.pubkey:
                raise TrainerError("report", "the sealed report is sealed to another key")
            check_content(event.content)
            envelope = Envelope.parse_bytes(decrypt(event.content, self._key).encode("utf-8"))
            data = envelope.inline_bytes()
            if envelope.artifact != report or data is None or not report.matches(data):
                raise TrainerError("report", "the sealed report is not the report the result names")
            parsed = Report.parse_bytes(data)
        except (ContractError, NostrError) as error:
            raise TrainerError("report", f"the sealed report does not open: {error}") from None
        requester = parsed.ext_eval.requester
        if requester is not None and requester.pubkey != self.pubkey:
            raise TrainerError("report", "the report names another requester")
        return parsed, data

    # -- the wire ---------------------------------------------------------------------------------

    async def _until(self, waited: Awaitable[T]) -> T:
        """Await `waited` unless the connection is lost first (then raise why)."""
        target = asyncio.ensure_future(waited)
        lost = asyncio.ensure_future(self._lost_signal.wait())
        try:
            await asyncio.wait({target, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
            if not target.done():
                target.cancel()
        if target.done() and not target.cancelled():
            return target.result()
        assert self._lost is not None
        raise self._lost

    async def _send_text(self, text: str) -> None:
        if self._lost is not None:
            raise self._lost
        if self._connection is None:
            raise TrainerError("relay", "not connected; use `async with Trainer(…)`")
        try:
            await self._connection.send_text(text)
        except RelayError as error:
            raise TrainerError("relay", str(error)) from None

    async def _sent(self, pending: _Pending) -> None:
        """Send a pending frame and wait, bounded, for the relay's word on it."""
        await self._send_text(pending.text)
        try:
            async with asyncio.timeout(self._bound):
                await self._until(pending.future)
        except TimeoutError:
            raise TrainerError("relay", TIMED_OUT) from None

    async def _subscribe(self, event_ids: list[str]) -> str:
        self._sub_count += 1
        sub_id = "answers" if self._sub_count == 1 else f"answers-{self._sub_count}"
        answers = Filter.build(kinds=[RESULT_KIND, FEEDBACK_KIND], tags={"p": [self.pubkey], "e": event_ids})
        pending = _Pending(encode(Req(sub_id, (answers,))), asyncio.get_running_loop().create_future())
        self._subs[sub_id] = pending
        await self._sent(pending)
        return sub_id

    async def _publish(self, event: Event) -> None:
        try:
            text = event_frame(event)
        except RelayError as error:
            raise TrainerError("input", str(error)) from None
        pending = _Pending(text, asyncio.get_running_loop().create_future())
        self._oks[event.id] = pending
        try:
            await self._sent(pending)
        finally:
            self._oks.pop(event.id, None)

    async def _read(self) -> None:
        assert self._connection is not None
        try:
            while True:
                frame = await self._connection.next_frame()
                if isinstance(frame, Authenticated):
                    await self._authenticated(frame)
                elif isinstance(frame, Ok):
                    await self._ok(frame)
                elif isinstance(frame, Eose):
                    pending = self._subs.get(frame.sub_id)
                    if pending is not None and not pending.future.done():
                        pending.future.set_result(None)
                elif isinstance(frame, Closed):
                    await self._closed(frame)
                elif isinstance(frame, RelayEvent) and frame.sub_id in self._subs:
                    self._event(frame.event)
                    self._delivered.set()
        except RelayError as error:
            self._lose(TrainerError("relay", f"lost the relay: {error}"))
        except TrainerError as error:
            self._lose(error)

    def _lose(self, error: TrainerError) -> None:
        self._lost = error
        self._lost_signal.set()

    async def _refused(self, pending: _Pending, message: str, refusal: TrainerError) -> None:
        """A refused frame is resent once if the relay wanted NIP-42 first (runner.md §7.1); else it fails."""
        assert self._connection is not None
        if pending.retried or not self._connection.may_retry_after_auth(message):
            pending.future.set_exception(refusal)
            return
        pending.retried = True
        if self._connection.authenticated:
            await self._send_text(pending.text)
        else:
            pending.waiting_auth = True

    async def _authenticated(self, verdict: Authenticated) -> None:
        for pending in (*self._oks.values(), *self._subs.values()):
            if not pending.waiting_auth or pending.future.done():
                continue
            pending.waiting_auth = False
            if verdict.accepted:
                await self._send_text(pending.text)
            else:
                pending.future.set_exception(TrainerError("relay", f"NIP-42 authentication refused: {verdict.message}"))

    async def _ok(self, frame: Ok) -> None:
        pending = self._oks.get(frame.event_id)
        if pending is None or pending.future.done():
            return
        if frame.accepted:
            pending.future.set_result(None)
        else:
            refusal = TrainerError("relay", f"the relay refused the request: {frame.message}")
            await self._refused(pending, frame.message, refusal)

    async def _closed(self, frame: Closed) -> None:
        pending = self._subs.get(frame.sub_id)
        if pending is None:
            return
        refusal = TrainerError("relay", f"the relay closed the answers subscription: {frame.message}")
        if pending.future.done():
            self._lose(refusal)  # a live answer subscription ended: nothing more would arrive on it
        else:
            await self._refused(pending, frame.message, refusal)

    def _event(self, event: Event) -> None:
        if event.id in self._seen:
            return
        bound = bind(event, runner=self.runner, trainer=self.pubkey, expected=self._expected, key=self._key)
        if isinstance(bound, Unbound):
            self.unbound.append(bound)
            return
        self._seen.add(event.id)
        event_id, answer, plaintext = bound
        control = self._controls.get(event_id)
        if control is not None:
            if isinstance(answer, control.answers) and not control.future.done():
                control.future.set_result(answer)  # type: ignore[arg-type]
            return
        run = self._runs.get(answer.binding.request)
        if run is not None and isinstance(answer, _RUN_TYPES):
            run.take(event_id, answer, plaintext)


__all__ = [
    "WORKER_ABSENT",
    "WORKER_SILENT",
    "CatalogTool",
    "Request",
    "RunAnswer",
    "SuiteDraft",
    "Trainer",
    "TrainerError",
    "Unbound",
    "bind",
    "build_request",
    "draft_case",
    "extension_tool",
    "new_request_id",
    "published_run_input",
    "read_draft",
    "run_input",
    "subject_ref",
    "suite_draft",
]
