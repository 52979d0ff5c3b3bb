"""The trainer's side of the wire, as a phone does it (wire.md §12), for tests over a real relay.

A `Trainer` connects with its own key, subscribes to everything addressed to it *before* it publishes
anything (ephemeral answers are never stored), builds request bodies with the hosted builders, encrypts
and signs them, and binds every answer before trusting it: kind 26920/27020, signed by the runner, id
and signature valid, `e` exactly the request it answers, `p` exactly the trainer, decrypted, execution
schema, and the request and attempt it was sent with. Signatures and decryption are checked with
nostr-sdk, an independent implementation, so the runner's wire is proven against someone else's code.

Everything the runner sends the trainer is kept in `received` (bound or not), in arrival order, so a
test can assert what was *not* sent. Waits are bounded by `BOUND`, as failure bounds only.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import nostr_sdk as sdk

from eval_runner.contracts.answers import (
    AcceptedBody,
    Answer,
    CancelResult,
    ProgressBody,
    ReplayResult,
    ResultBody,
    StatusResult,
    read_answer,
)
from eval_runner.contracts.draft import DRAFT_SCHEMA
from eval_runner.contracts.envelope import Envelope, route
from eval_runner.contracts.execution import EXECUTION_SCHEMA, Binding, ExecuteBody
from eval_runner.contracts.hosted import (
    HOSTED_SCHEMA,
    HostedInput,
    PublishInput,
    RunInput,
    build_execute_body,
    request_tags,
)
from eval_runner.contracts.refs import EventRef
from eval_runner.contracts.strict_json import JsonValue, canonical
from eval_runner.engine.testset.cases import load_case
from eval_runner.nostr import (
    ClientEvent,
    Eose,
    Event,
    Filter,
    Ok,
    PublicKey,
    RelayEvent,
    Req,
    SecretKey,
    conversation_key,
    encode,
    encrypt,
    sign,
    tag_values,
)
from eval_runner.service.relay.connection import RelayClient, RelayConnection, RelayError
from eval_runner.trainer.requests import draft_case
from tests.support.paths import EXAMPLE
from tests.support.stand_in_relay import BOUND

REQUEST_KIND = 25920
FEEDBACK_KIND = 27020
RESULT_KIND = 26920
SEALED_KIND = 3188
ANSWERS = "answers"


@dataclass(frozen=True, slots=True)
class Bound:
    """An answer that bound to one of our requests: the event that carried it and what it says."""

    event: Event
    answer: Answer


@dataclass
class Sent:
    """A request or control we published: its binding, and every answer bound to it, in arrival order."""

    event: Event
    binding: Binding
    answers: list[Bound] = field(default_factory=list)

    def of(self, kind: type[Any]) -> list[Any]:
        return [bound.answer for bound in self.answers if isinstance(bound.answer, kind)]

    @property
    def progress(self) -> list[ProgressBody]:
        return self.of(ProgressBody)

    @property
    def accepted(self) -> list[AcceptedBody]:
        return self.of(AcceptedBody)

    @property
    def results(self) -> list[ResultBody]:
        return self.of(ResultBody)


class Trainer:
    """One trainer key on one relay connection. Use `async with Trainer(url, runner) as trainer`."""

    def __init__(self, url: str, runner: str, secret: SecretKey | None = None) -> None:
        self.url = url
        self.runner = runner
        self.secret = secret if secret is not None else SecretKey.generate()
        self.pubkey = self.secret.public_key().to_hex()
        self.sent: dict[str, Sent] = {}
        self.received: list[Event] = []
        self.unbound: list[tuple[Event, str]] = []
        self._key = conversation_key(self.secret, PublicKey.parse(runner))
        self._connection: RelayConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._oks: dict[str, asyncio.Future[Ok]] = {}
        self._subscribed = asyncio.Event()
        self._grew = asyncio.Condition()

    async def __aenter__(self) -> Trainer:
        self._connection = await asyncio.wait_for(
            RelayConnection.open(self.url, self.secret, challenge_wait=0.05), BOUND
        )
        self._reader = asyncio.create_task(self._read())
        subscription = Filter.build(kinds=[FEEDBACK_KIND, RESULT_KIND, SEALED_KIND], tags={"p": [self.pubkey]})
        await self._connection.send(Req(ANSWERS, (subscription,)))
        await asyncio.wait_for(self._subscribed.wait(), BOUND)
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._reader is not None:
            self._reader.cancel()
        if self._connection is not None:
            self._connection.dispose()

    # -- building and sending ------------------------------------------------------------------

    def body(
        self, value: HostedInput | JsonValue, request_id: str, *, now: int | None = None, checked: bool = True
    ) -> ExecuteBody:
        """An execute body as the phone builds it (deadline an hour after `now`). Unchecked, the input goes in
        as given, as a hand-made client might send one the phone's builder refuses to build."""
        when = int(time.time()) if now is None else now
        if checked:
            return build_execute_body(self.runner, request_id, value, when)
        placeholder = run_input("draft", draft(chat_tool([])))
        body = build_execute_body(self.runner, request_id, placeholder, when).to_json()
        body["input"] = value if not isinstance(value, RunInput | PublishInput) else value.to_json()
        return ExecuteBody.parse(body, expiration=str(body["deadline"]))

    def seal(self, body: JsonValue, tags: list[list[str]], *, created_at: int | None = None) -> Event:
        """A 25920 carrying `body` encrypted to the runner, signed by this trainer."""
        content = encrypt(canonical(body).decode("utf-8"), self._key)
        return sign(self.secret, REQUEST_KIND, tags, content, int(time.time()) if created_at is None else created_at)

    def execute_event(self, body: ExecuteBody, *, created_at: int | None = None) -> Event:
        """A fresh signed event for `body` (a retransmission is another one for the same body)."""
        event = self.seal(body.to_json(), request_tags(self.runner, body.deadline), created_at=created_at)
        self.sent[event.id] = Sent(event, body.binding)
        return event

    def control_event(self, kind: str, target: Event, binding: Binding, **fields: JsonValue) -> Event:
        """A status/replay/cancel control naming the execute event `target`."""
        body: dict[str, JsonValue] = {
            "v": EXECUTION_SCHEMA,
            "requires": [],
            "type": kind,
            **binding.to_json(),
            **fields,
        }
        event = self.seal(body, [["p", self.runner], ["e", target.id]])
        self.sent[event.id] = Sent(event, binding)
        return event

    def expect(self, event: Event, binding: Binding) -> None:
        """Bind answers to an event this trainer made some other way (a tampered copy, say)."""
        self.sent[event.id] = Sent(event, binding)

    async def publish(self, event: Event) -> None:
        """Publish and wait for the relay's OK true."""
        assert self._connection is not None
        future: asyncio.Future[Ok] = asyncio.get_running_loop().create_future()
        self._oks[event.id] = future
        await self._connection.send_text(encode(ClientEvent(event)))
        ok = await asyncio.wait_for(future, BOUND)
        if not ok.accepted:
            raise RelayError("refused", ok.message)

    async def run(
        self, value: HostedInput | JsonValue, request_id: str, *, checked: bool = True
    ) -> tuple[Event, ExecuteBody]:
        """Build, sign and publish a request; returns the event and its body."""
        body = self.body(value, request_id, checked=checked)
        event = self.execute_event(body)
        await self.publish(event)
        return event, body

    # -- waiting -------------------------------------------------------------------------------

    async def wait(self, predicate: Callable[[], bool]) -> None:
        async with asyncio.timeout(BOUND), self._grew:
            await self._grew.wait_for(predicate)

    async def result(self, event: Event, count: int = 1) -> ResultBody:
        """The `count`-th result bound to `event`."""
        sent = self.sent[event.id]
        await self.wait(lambda: len(sent.results) >= count)
        return sent.results[count - 1]

    async def answer(self, event: Event, kind: type[Any]) -> Any:
        """The first answer of `kind` (StatusResult, ReplayResult, CancelResult, …) bound to `event`."""
        sent = self.sent[event.id]
        await self.wait(lambda: bool(sent.of(kind)))
        return sent.of(kind)[0]

    async def progress(self, event: Event, predicate: Callable[[list[ProgressBody]], bool]) -> list[ProgressBody]:
        sent = self.sent[event.id]
        await self.wait(lambda: predicate(sent.progress))
        return sent.progress

    def about(self, event_id: str) -> list[Event]:
        """Every event the runner sent this trainer that names `event_id` in an `e` tag."""
        return [event for event in self.received if event_id in tag_values(event, "e")]

    # -- the sealed report ---------------------------------------------------------------------

    async def open_sealed(self, pointer: EventRef) -> tuple[Event, Envelope]:
        """Fetch the 3188 from the relay as the phone does, check its tags, open it with this trainer's key."""
        client = RelayClient(self.url, self.secret, challenge_wait=0.05)
        found = await client.query(Filter.build(ids=[pointer.id], kinds=[SEALED_KIND]))
        assert [event.id for event in found] == [pointer.id]
        event = found[0]
        assert event.pubkey == pointer.pubkey == self.runner
        assert sdk.Event.from_json(json.dumps(event.to_json())).verify()
        assert route(event.tags).recipient == self.pubkey
        plaintext = sdk.nip44_decrypt(
            sdk.SecretKey.parse(self.secret.to_hex()), sdk.PublicKey.parse(self.runner), event.content
        )
        return event, Envelope.parse_bytes(plaintext.encode("utf-8"))

    # -- reading -------------------------------------------------------------------------------

    async def _read(self) -> None:
        assert self._connection is not None
        while True:
            try:
                frame = await self._connection.next_frame()
            except RelayError:
                return
            if isinstance(frame, Ok):
                future = self._oks.pop(frame.event_id, None)
                if future is not None and not future.done():
                    future.set_result(frame)
            elif isinstance(frame, Eose) and frame.sub_id == ANSWERS:
                self._subscribed.set()
            elif isinstance(frame, RelayEvent) and frame.sub_id == ANSWERS:
                async with self._grew:
                    self.received.append(frame.event)
                    self._bind(frame.event)
                    self._grew.notify_all()

    def _bind(self, event: Event) -> None:
        """wire.md §12 step 3, checked with nostr-sdk for the signature and the decryption."""
        if event.kind not in (FEEDBACK_KIND, RESULT_KIND):
            return
        reason = self._refusal(event)
        if reason is not None:
            self.unbound.append((event, reason))

    def _refusal(self, event: Event) -> str | None:
        if event.pubkey != self.runner:
            return "not signed by the runner"
        if not sdk.Event.from_json(json.dumps(event.to_json())).verify():
            return "id or signature invalid"
        targets = tag_values(event, "e")
        if len(targets) != 1 or targets[0] not in self.sent:
            return f"e tags {targets} name no request of ours"
        if tag_values(event, "p") != (self.pubkey,):
            return "p tags are not exactly this trainer"
        plaintext = sdk.nip44_decrypt(
            sdk.SecretKey.parse(self.secret.to_hex()), sdk.PublicKey.parse(self.runner), event.content
        )
        answer = read_answer(plaintext)
        sent = self.sent[targets[0]]
        binding = answer.binding
        if (binding.request, binding.attempt) != (sent.binding.request, sent.binding.attempt):
            return "the answer names another request"
        sent.answers.append(Bound(event, answer))
        return None


__all__ = [
    "AcceptedBody",
    "Bound",
    "CancelResult",
    "ProgressBody",
    "ReplayResult",
    "ResultBody",
    "Sent",
    "StatusResult",
    "Trainer",
]


# -- what a phone puts in a request ------------------------------------------------------------------

EXAMPLE_CASES = ("greeting", "overview")


def example_case(name: str, *, kind: str | None = None) -> dict[str, JsonValue]:
    """A draft case carrying the example's `evals/<name>` prompt and grader texts (fixtures stay behind),
    built as `eval-runner trainer run --suite` builds one (`eval_runner.trainer.requests.draft_case`)."""
    case, _ = draft_case(load_case(EXAMPLE / "evals" / name, name))
    return case if kind is None else case | {"kind": kind}


def asking_case(name: str, operations: list[str]) -> dict[str, JsonValue]:
    """A draft case whose prompt asks for `operations` (e.g. read and exec)."""
    listed = ", ".join(f'"{operation}"' for operation in operations)
    prompt = (
        '+++\nv = "openagents.eval-case.v1"\nkind = "should-fire"\n\n[run]\n'
        f"allowed_operations = [{listed}]\n+++\n\nList the files here.\n"
    )
    grader = '+++\ntype = "regex"\ntarget = "last_message"\n+++\n\nfiles\n'
    return {"id": name, "kind": "should-fire", "prompt": prompt, "graders": [{"name": "listed", "text": grader}]}


def catalog_tool(definition: JsonValue) -> dict[str, JsonValue]:
    """A draft's tool naming a catalog tool by its definition."""
    return {
        "name": "Codebase brief",
        "summary": "A repository brief.",
        "catalog": definition,
        "skill": None,
        "uses": [],
    }


def chat_tool(
    uses: list[str], skill: str | None = "When asked about a repository, name its main language."
) -> JsonValue:
    """A draft's tool made in chat from a skill and the catalog tools it turns on."""
    return {"name": "Brief the Layout!", "summary": "Made in chat.", "catalog": None, "skill": skill, "uses": uses}


def draft(tool: JsonValue, cases: list[dict[str, JsonValue]] | None = None) -> dict[str, JsonValue]:
    listed: list[JsonValue] = list(cases if cases is not None else [example_case(name) for name in EXAMPLE_CASES])
    return {"v": DRAFT_SCHEMA, "tool": tool, "cases": listed}


def run_input(
    subject: JsonValue,
    drafted: JsonValue,
    *,
    runs: int = 1,
    suite: JsonValue = "draft",
    check: str | None = None,
    validates: str | None = None,
) -> dict[str, JsonValue]:
    """A hosted run input (`subject` a DefinitionRef's JSON or `"draft"`)."""
    value: dict[str, JsonValue] = {
        "v": HOSTED_SCHEMA,
        "action": "run",
        "suite": suite,
        "subject": subject,
        "draft": drafted,
        "runs": runs,
        "baseline": True,
        "check": check,
    }
    if validates is not None:
        value["validates"] = validates
    return value
