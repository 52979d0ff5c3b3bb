"""What the runner sends: answers (27020 feedback, 26920 results) and the sealed report (3188).

Every answer is one signed event whose content is the NIP-44 encryption of the answer's JCS text to its
recipient (runner.md §9.9, wire.md §9–§10), so a stored result goes out byte for byte to every alias. A
failed answer is only logged (`answer to <id12>: <error>`): a retransmission gets it from the ledger. A
failed seal raises `SealError`, which fails the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final, Protocol

from eval_runner.contracts import envelope
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.hosted import REPORT_SCHEMA, SEALED_KIND
from eval_runner.contracts.refs import ArtifactRef, EventRef
from eval_runner.contracts.strict_json import JsonValue, canonical, read
from eval_runner.errors import EvalRunnerError
from eval_runner.nostr import ConversationKeys, Event, NostrError, PublicKey, SecretKey, sign
from eval_runner.nostr.nip44 import STANDARD_MAX_PLAINTEXT

FEEDBACK_KIND: Final = 27_020
RESULT_KIND: Final = 26_920

logger = logging.getLogger(__name__)


class EventPublisher(Protocol):
    """Where events go: `service.publisher.Publisher` (waits for the relay's OK) or a test's stand-in."""

    async def publish(self, event: Event) -> None: ...


class SealError(EvalRunnerError):
    """The report could not be sealed or published; `str()` is the failure result's message."""


def answer_text(payload: JsonValue | str) -> str:
    """The compact JSON an answer carries: a stored result's text as it is, anything else as JCS."""
    return payload if isinstance(payload, str) else canonical(payload).decode("utf-8")


def answer_event(
    secret: SecretKey,
    kind: int,
    recipient: PublicKey,
    event_id: str,
    payload: JsonValue | str,
    now: int,
    keys: ConversationKeys | None = None,
) -> Event:
    """A signed answer of `kind` to `recipient` about `event_id` (raises `NostrError` on a bad argument)."""
    cache = keys if keys is not None else ConversationKeys(1)
    content = cache.encrypt(secret, recipient, answer_text(payload), max_len=STANDARD_MAX_PLAINTEXT)
    return sign(secret, kind, [["p", recipient.to_hex()], ["e", event_id]], content, now)


def seal_event(
    secret: SecretKey,
    recipient: PublicKey,
    mailbox: str,
    report: bytes,
    report_ref: ArtifactRef,
    now: int,
    retain_until: int,
    keys: ConversationKeys | None = None,
) -> Event:
    """The `3188` sealing `report` (its JCS bytes, named by `report_ref`) to `recipient` under `mailbox`.

    Raises `ContractError` when the report is not the artifact its reference names or the envelope is
    past NIP-44's standard size, `NostrError` when it cannot be encrypted.
    """
    if report_ref.schema != REPORT_SCHEMA:
        raise ContractError(Code.IDENTITY_MISMATCH, "artifact.schema", f"a sealed report is {REPORT_SCHEMA!r}")
    if not report_ref.matches(report):
        raise ContractError(Code.IDENTITY_MISMATCH, "artifact", "the report's bytes are not the artifact it names")
    inline = read(report)
    if not isinstance(inline, dict):
        raise ContractError(Code.MALFORMED, "inline", "a report is a JSON object")
    body = envelope.build(report_ref, inline, now, max(retain_until, now + 1))
    tags = envelope.tags(recipient.to_hex(), mailbox)
    cache = keys if keys is not None else ConversationKeys(1)
    content = cache.encrypt(secret, recipient, body.decode("utf-8"), max_len=STANDARD_MAX_PLAINTEXT)
    envelope.check_content(content)
    return sign(secret, SEALED_KIND, tags, content, now)


class Answers:
    """Signs, encrypts and publishes the runner's answers and sealed reports."""

    def __init__(
        self,
        secret: SecretKey,
        publisher: EventPublisher,
        *,
        keys: ConversationKeys | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._secret = secret
        self._publisher = publisher
        self._keys = keys if keys is not None else ConversationKeys()
        self._clock = clock
        self.runner = secret.public_key().to_hex()

    async def send(self, kind: int, recipient: str, event_id: str, payload: JsonValue | str) -> bool:
        """Answer `event_id` to `recipient`; True once the relay took it. Failures are logged, never raised."""
        try:
            to = PublicKey.parse(recipient)
        except NostrError:
            return False  # not an x-only key: nobody to answer (runner.md §9.9)
        try:
            event = answer_event(self._secret, kind, to, event_id, payload, int(self._clock()), self._keys)
            await self._publisher.publish(event)
        except Exception as error:  # a relay error, an oversize answer: logged, the ledger still holds the answer
            logger.warning("answer to %s: %s", event_id[:12], error)
            return False
        return True

    async def feedback(self, recipient: str, event_id: str, payload: JsonValue) -> bool:
        """A `27020` (accepted, progress)."""
        return await self.send(FEEDBACK_KIND, recipient, event_id, payload)

    async def result(self, recipient: str, event_id: str, payload: JsonValue | str) -> bool:
        """A `26920` (a result, a refusal, a control's answer)."""
        return await self.send(RESULT_KIND, recipient, event_id, payload)

    async def seal(
        self, recipient: str, mailbox: str, report: bytes, report_ref: ArtifactRef, retain_until: int
    ) -> EventRef:
        """Seal `report` to `recipient` and publish it before returning the `3188`'s pointer; `SealError` if not."""
        try:
            event = seal_event(
                self._secret,
                PublicKey.parse(recipient),
                mailbox,
                report,
                report_ref,
                int(self._clock()),
                retain_until,
                self._keys,
            )
        except (ContractError, NostrError) as error:
            raise SealError(f"sealing the report: {error}") from None
        try:
            await self._publisher.publish(event)
        except Exception as error:
            raise SealError(f"publishing the sealed report: {error}") from None
        return EventRef(id=event.id, pubkey=event.pubkey, kind=SEALED_KIND)
