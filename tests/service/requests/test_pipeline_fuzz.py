"""Fuzz of the request pipeline: thousands of spoiled requests through `Pipeline.handle`, none of them a crash.

Each test runs one service (the pipeline `serve` builds, over a real ledger, quota and usage log, with the
stand-in suite runner and a publisher that records everything sent: `tests.support.direct_pipeline`)
and keeps it across its examples, so state builds up as in a real runner. Per example:

* a request that fails to open (runner.md §9.2, wire.md §6; decided with the same clock by
  `open_request`, and for the plain cases by an independent check here) is dropped: logged `dropped …`,
  and nothing at all is published;
* one that opens is answered, only to its signer and e-tagged to it, with answers that bind as a phone
  binds them: exactly one result, either the run (accepted first, the sealed 3188 before the result) or
  a typed refusal whose code is one the hosted runner uses (wire.md §7.6), with the code admission's
  order gives when target, requirements or input are wrong (§7.1); `unavailable` never comes (nothing
  here is unavailable, so it would mean planning broke);
* nothing escapes `handle`, no claim keeps a slot, no staging directory is left.

After the fuzz the same service still serves a valid request end to end, every answered request (and
nothing else) is one usage record, and no log line holds the runner's secret key or the door key.
"""

from __future__ import annotations

import itertools
import json
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nostr_sdk as sdk
from hypothesis import HealthCheck, assume, given, settings

from eval_runner.contracts.answers import (
    AcceptedBody,
    Answer,
    CancelResult,
    ProgressBody,
    ReplayResult,
    ResultBody,
    StatusResult,
)
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.execution import ExecuteBody
from eval_runner.contracts.hosted import check_requirements, check_target, hosted_refusal_code, parse_input
from eval_runner.contracts.strict_json import JsonValue, canonical
from eval_runner.nostr import Event, PublicKey, SecretKey, compute_id, conversation_key, encrypt, sign, tag_values
from eval_runner.nostr.nip44 import EXTENDED_MAX_PLAINTEXT
from eval_runner.service.requests.opening import (
    SEEN_IDS,
    WINDOW_FUTURE,
    WINDOW_PAST,
    DropError,
    OpenedExecute,
    open_request,
)
from eval_runner.service.usage import read
from tests.support.direct_pipeline import DirectPipeline, open_answer
from tests.support.plain_words import assert_plain
from tests.support.request_mutations import (
    PLACEHOLDER,
    Addressing,
    BodySpoiling,
    ControlSpoiling,
    EventSpoiling,
    base_body,
    body_spoilings,
    control_spoilings,
    event_spoilings,
    written,
)

REQUEST_KIND = 25_920
SEALED_KIND = 3_188
#: The refusal codes the hosted runner answers with (wire.md §7.6, runner.md §9.8).
HOSTED_CODES = frozenset(
    {
        Code.NOT_ADMITTED,
        Code.TOO_LARGE,
        Code.MALFORMED,
        Code.UNAVAILABLE,
        Code.OVER_QUOTA,
        Code.IDEMPOTENCY_CONFLICT,
        Code.STALE,
        Code.BUSY,
        Code.LIMIT_EXCEEDED,
        Code.CANNOT_ENFORCE,
        Code.CONTENT_UNAVAILABLE,
        Code.REVOKED,
    }
)
FUZZ = settings(deadline=None, suppress_health_check=list(HealthCheck))


def sealed(sender: SecretKey, runner: str, text: str, tags: list[list[str]], created_at: int) -> Event:
    """A 25920 carrying `text` encrypted to `runner` (the extended NIP-44 size a phone may send)."""
    key = conversation_key(sender, PublicKey.parse(runner))
    return sign(sender, REQUEST_KIND, tags, encrypt(text, key, max_len=EXTENDED_MAX_PLAINTEXT), created_at)


def verified(event: Event) -> bool:
    """Id and signature, by nostr-sdk (an independent implementation)."""
    try:
        return bool(sdk.Event.from_json(json.dumps(event.to_json())).verify())
    except Exception:
        return False


def expected_refusal(body: ExecuteBody, runner: str) -> Code | None:
    """The code admission's first three steps give (§7.1), or None when target, requirements and input pass."""
    try:
        check_target(body.target, runner)
        check_requirements(body.requirements)
    except ContractError:
        return Code.NOT_ADMITTED
    try:
        parse_input(body.input)
    except ContractError as error:
        return hosted_refusal_code(error.code)
    return None


@dataclass
class Fuzz:
    """One service under fuzz, and what it must have recorded by the end."""

    service: DirectPipeline
    trainer: SecretKey = field(default_factory=SecretKey.generate)
    stranger: SecretKey = field(default_factory=SecretKey.generate)
    usage_expected: set[str] = field(default_factory=set)
    outcomes: dict[str, int] = field(default_factory=dict)
    #: The ids the runner has handled, as §9.1 keeps them: the last 1,024 whose id and signature verified.
    seen: OrderedDict[str, None] = field(default_factory=OrderedDict)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    @property
    def at(self) -> Addressing:
        service = self.service
        return Addressing(service.runner, service.catalog.tools[0].definition.to_json(), service.now)

    def fresh_request(self) -> str:
        return f"req-fuzz-{next(self._ids)}"

    def tally(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def deliver(self, event: Event, sender: SecretKey | None) -> list[Answer]:
        """Deliver `event`; check it was dropped, or answered and bound, as the rules say. Returns the answers."""
        service = self.service
        if event.id in self.seen:
            lines = len(service.logs.lines)
            assert service.deliver(event) == [], "an event handled before is ignored"
            assert service.logs.lines[lines:] == []
            self.tally("seen before")
            return []
        try:
            opened = open_request(event, service.secret, service.now)
        except DropError:
            opened = None
        if opened is not None or (event.kind == REQUEST_KIND and event.is_valid()):
            self.seen[event.id] = None
            if len(self.seen) > SEEN_IDS:
                self.seen.popitem(last=False)
        before = None
        if isinstance(opened, OpenedExecute):
            key = service.ledger.key(opened.principal, opened.body.request, opened.body.attempt)
            before = service.ledger.lookup(key)
        lines = len(service.logs.lines)
        published = service.deliver(event)
        logged = service.logs.lines[lines:]
        assert_plain(*logged)
        assert service.ledger.active_slots() == 0, "no claim keeps a slot once its run has answered"
        assert list(service.config.temp_root.iterdir()) == [], "no staging is left behind"
        if opened is None:
            assert published == [], f"a request that doesn't open is never answered: {published}"
            assert any(line.startswith(f"dropped {event.id[:12]}: ") for line in logged), logged
            self.tally("dropped")
            return []
        assert sender is not None, "only the trainer's own seal opens"
        assert opened.principal == sender.public_key().to_hex()
        assert all(tag_values(sent, "p") == (opened.principal,) for sent in published), "answers go to the signer"
        answers = [sent for sent in published if sent.kind != SEALED_KIND]
        assert all(sent.kind in (26_920, 27_020) for sent in answers)
        assert all(tag_values(sent, "e") == (event.id,) for sent in answers), "every answer names this event"
        read_back = [open_answer(sent, sender) for sent in answers]
        assert [sent.kind for sent in answers][-1:] == [26_920], "the last answer is the result"
        assert [sent.kind for sent in answers].count(26_920) == 1, "exactly one result"
        binding = opened.body.binding
        assert all((a.binding.request, a.binding.attempt) == (binding.request, binding.attempt) for a in read_back)
        final = read_back[-1]
        if not isinstance(opened, OpenedExecute):
            self.tally(type(final).__name__ if not isinstance(final, ResultBody) else f"control {final.code}")
            assert len(read_back) == 1
            if isinstance(final, ResultBody):
                self._refusal(event, opened.principal, final, logged)
            else:
                assert isinstance(final, StatusResult | ReplayResult | CancelResult)
            return read_back
        assert isinstance(final, ResultBody)
        retransmitted = before is not None and before.fingerprint == opened.fingerprint
        if not retransmitted:
            self.usage_expected.add(event.id)
        if final.outcome == "refused":
            self._refusal(event, opened.principal, final, logged)
            expected = None if before is not None else expected_refusal(opened.body, service.runner)
            if expected is not None:
                assert final.code == expected.value, (final.code, final.message)
            if before is not None and not retransmitted:
                assert final.code == Code.IDEMPOTENCY_CONFLICT.value
            self.tally(f"refused {final.code}")
            return read_back
        self.tally(f"ran: {final.outcome}")
        if retransmitted:
            assert len(read_back) == 1, "a retransmission of finished work gets the stored result alone"
            return read_back
        assert before is None
        assert expected_refusal(opened.body, service.runner) is None
        assert final.outcome == "completed", (final.outcome, final.code, final.message)
        assert isinstance(read_back[0], AcceptedBody)
        assert all(isinstance(answer, ProgressBody) for answer in read_back[1:-1])
        kinds = [sent.kind for sent in published]
        assert kinds.count(SEALED_KIND) == 1
        assert kinds.index(SEALED_KIND) < kinds.index(26_920), "the sealed report goes out before the result"
        return read_back

    def _refusal(self, event: Event, principal: str, result: ResultBody, logged: list[str]) -> None:
        assert (result.dispatched, result.output, result.record) == (False, None, None)
        assert result.code in HOSTED_CODES, result.code
        assert result.code != Code.UNAVAILABLE, f"nothing is unavailable here; planning broke? {result.message}"
        assert result.message
        assert_plain(result.message)
        assert f"refused {event.id[:12]} from {principal[:12]}: {result.code}: {result.message}" in logged

    def finish(self) -> None:
        """The service still serves a valid request end to end; usage and logs are as they must be."""
        service = self.service
        phone = SecretKey.generate()
        body = base_body("admissible", self.at, "req-after-the-fuzz")
        event = sealed(phone, service.runner, canonical(body).decode(), self.tags_for(body), service.now)
        answers = self.deliver(event, phone)
        assert [type(answer) for answer in answers] == [AcceptedBody] + [ProgressBody] * 6 + [ResultBody]
        found = read(service.state / "usage")
        assert found.unreadable == 0
        assert {record.request for record in found.records} == self.usage_expected
        assert len(found.records) == len(self.usage_expected), "one usage record per answered request"
        for line in service.logs.lines:
            for secret in service.secrets():
                assert secret not in line, "a log line holds a secret"
        assert_plain(*service.logs.lines)
        assert any(line.startswith("finished ") for line in service.logs.lines)

    def tags_for(self, body: dict[str, JsonValue]) -> list[list[str]]:
        return [["p", self.service.runner], ["expiration", str(body["deadline"])]]


# -- 1. spoiled events -----------------------------------------------------------------------------


def spoil_event(fuzz: Fuzz, spoiling: EventSpoiling) -> tuple[Event, str]:
    """The spoiled event, and the hex key its content was sealed by."""
    service = fuzz.service
    body = base_body(spoiling.base, fuzz.at, fuzz.fresh_request())
    body["run"] = body["request"]
    event = sealed(fuzz.trainer, service.runner, canonical(body).decode(), fuzz.tags_for(body), service.now)
    fields: dict[str, Any] = {**event.to_json(), "tags": [list(tag) for tag in event.tags]}
    for edit in spoiling.edits:
        edit.change(fields)
    tags = tuple(tuple(tag) for tag in fields["tags"])
    kind, created_at, content = fields["kind"], fields["created_at"], fields["content"]
    if spoiling.signing == "trainer":
        return sign(fuzz.trainer, kind, tags, content, created_at), event.pubkey
    if spoiling.signing == "stranger":
        return sign(fuzz.stranger, kind, tags, content, created_at), event.pubkey
    if spoiling.signing == "rehash":
        fields["id"] = compute_id(fields["pubkey"], created_at, kind, tags, content)
    spoiled = Event(fields["id"], fields["pubkey"], created_at, kind, tags, content, fields["sig"])
    return spoiled, event.pubkey


def must_drop(event: Event, runner: str, sealer: str, deadline: int, now: int) -> bool:
    """What plainly fails to open, decided without the code under test."""
    age = now - event.created_at
    expiration = next((tag[1] for tag in event.tags if tag[:1] == ("expiration",) and len(tag) > 1), None)
    return (
        event.kind != REQUEST_KIND
        or not verified(event)
        or tag_values(event, "p") != (runner,)
        or not -WINDOW_FUTURE <= age <= WINDOW_PAST
        or event.pubkey != sealer
        or expiration != str(deadline)
    )


def test_spoiled_events_are_dropped_unanswered_or_answered_to_their_signer(tmp_path: Path) -> None:
    with DirectPipeline(tmp_path) as service:
        fuzz = Fuzz(service)

        @settings(FUZZ, max_examples=1_500)
        @given(spoiling=event_spoilings(service.runner))
        def one(spoiling: EventSpoiling) -> None:
            event, sealer = spoil_event(fuzz, spoiling)
            plain = must_drop(event, service.runner, sealer, fuzz.at.deadline, service.now)
            sender = fuzz.trainer if event.pubkey == fuzz.trainer.public_key().to_hex() else None
            answers = fuzz.deliver(event, sender)
            assert not (plain and answers), "an event that plainly fails to open was answered"

        one()
        assert fuzz.outcomes["dropped"] > 1_000, fuzz.outcomes
        assert sum(count for outcome, count in fuzz.outcomes.items() if outcome != "dropped") > 50, fuzz.outcomes
        fuzz.finish()


# -- 2. spoiled bodies, properly sealed -----------------------------------------------------------


def spoil_body(fuzz: Fuzz, spoiling: BodySpoiling) -> Event:
    """The spoiled body (its placeholder request id made fresh) sealed to the runner in a 25920."""
    body = spoiling.body
    if isinstance(body, dict):
        fresh = fuzz.fresh_request()
        for name in ("request", "run"):
            if body.get(name) == PLACEHOLDER:
                body[name] = fresh
    text = spoiling.text()
    assume(len(text.encode()) <= EXTENDED_MAX_PLAINTEXT)  # no phone can send more
    tags = [["p", fuzz.service.runner], ["expiration", spoiling.expiration]]
    return sealed(fuzz.trainer, fuzz.service.runner, text, tags, fuzz.service.now)


def test_spoiled_bodies_are_dropped_or_answered_with_one_typed_result(tmp_path: Path) -> None:
    with DirectPipeline(tmp_path) as service:
        fuzz = Fuzz(service)

        @settings(FUZZ, max_examples=1_500)
        @given(spoiling=body_spoilings(fuzz.at))
        def one(spoiling: BodySpoiling) -> None:
            fuzz.deliver(spoil_body(fuzz, spoiling), fuzz.trainer)

        one()
        refused = sum(count for outcome, count in fuzz.outcomes.items() if outcome.startswith("refused"))
        assert refused > 300, fuzz.outcomes
        assert fuzz.outcomes["dropped"] > 300, fuzz.outcomes
        assert fuzz.outcomes.get("ran: completed", 0) > 10, fuzz.outcomes  # ~30 on average; random draws vary
        fuzz.finish()


# -- 3. spoiled controls --------------------------------------------------------------------------


def test_spoiled_controls_are_dropped_or_answered_once(tmp_path: Path) -> None:
    with DirectPipeline(tmp_path) as service:
        fuzz = Fuzz(service)
        other = Fuzz(service, trainer=SecretKey.generate())
        served: dict[str, Event] = {}
        for owner in (fuzz, fuzz, other):
            body = base_body("admissible", fuzz.at, fuzz.fresh_request())
            body["run"] = body["request"]
            event = sealed(owner.trainer, service.runner, canonical(body).decode(), fuzz.tags_for(body), service.now)
            owner.deliver(event, owner.trainer)
            served[str(body["request"])] = event
        fuzz.usage_expected |= other.usage_expected
        mine = [request for request, event in served.items() if event.pubkey == fuzz.trainer.public_key().to_hex()]
        theirs = next(event for event in served.values() if event.pubkey != fuzz.trainer.public_key().to_hex())

        @settings(FUZZ, max_examples=1_000)
        @given(spoiling=control_spoilings(mine))
        def one(spoiling: ControlSpoiling) -> None:
            own = served[spoiling.request].id
            targets = {
                "own": [own],
                "other": [theirs.id],
                "random": [compute_id(own, 0, 0, (), spoiling.target)],
                "none": [],
                "two": [own, own],
                "upper": [own.upper()],
            }[spoiling.target]
            tags = [["p", service.runner], *(["e", target] for target in targets)]
            text = written(spoiling.body)
            assume(len(text.encode()) <= EXTENDED_MAX_PLAINTEXT)
            fuzz.deliver(sealed(fuzz.trainer, service.runner, text, tags, service.now), fuzz.trainer)

        one()
        assert fuzz.outcomes["dropped"] > 300, fuzz.outcomes
        # a plain status is one example per request (hypothesis never repeats one), so it is rarer
        assert fuzz.outcomes.get("StatusResult", 0) > 0, fuzz.outcomes
        for answered in ("ReplayResult", "CancelResult", f"control {Code.NOT_ADMITTED.value}"):
            assert fuzz.outcomes.get(answered, 0) > 5, fuzz.outcomes
        fuzz.finish()
