"""Binding what the runner says to what this trainer asked (wire.md §12 step 3): an answer is trusted only
when it is signed by the runner, names exactly one event of ours and exactly this trainer, opens under
our key, and names the same request and attempt; everything else is kept, unbound, with the reason
(decisions.md, "The trainer client"). `RunAnswer` collects one request's answers as they come.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from eval_runner.contracts.answers import AcceptedBody, Answer, ProgressBody, ResultBody, read_answer
from eval_runner.contracts.errors import ContractError
from eval_runner.contracts.execution import Binding
from eval_runner.contracts.outputs import PublishOutput, RunOutput
from eval_runner.contracts.strict_json import canonical, read
from eval_runner.nostr import Event, NostrError, decrypt, tag_values
from eval_runner.trainer.requests import Request

FEEDBACK_KIND: Final = 27_020
RESULT_KIND: Final = 26_920
_FEEDBACK_TYPES = (AcceptedBody, ProgressBody)

OnAnswer = Callable[[Answer], None]


@dataclass(slots=True)
class RunAnswer:
    """What the runner said about one request, as bound and rendered (§12 step 4). While the trainer stays
    connected, later answers keep landing here: a differing second result goes to `conflicts`."""

    request: Request
    on_answer: OnAnswer | None = None
    accepted: AcceptedBody | None = None
    progress: list[ProgressBody] = field(default_factory=list)
    progress_stopped: bool = False
    result: ResultBody | None = None
    conflicts: list[ResultBody] = field(default_factory=list)
    heard: int = 0
    silence: str | None = None
    _result_bytes: bytes = b""
    #: Set once the first terminal result is in.
    finished: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def output(self) -> RunOutput | None:
        found = None if self.result is None else self.result.output
        return found if isinstance(found, RunOutput) else None

    @property
    def published(self) -> PublishOutput | None:
        """A completed publish's pointers: the suite release and the `3189` result."""
        found = None if self.result is None else self.result.output
        return found if isinstance(found, PublishOutput) else None

    def take(self, event_id: str, answer: Answer, plaintext: str) -> None:
        """One bound answer to one of this request's events."""
        self.heard += 1
        if isinstance(answer, AcceptedBody):
            if self.accepted is None:
                self.accepted = answer
                self.request.accepted_event = event_id
                self._show(answer)
        elif isinstance(answer, ProgressBody):
            self._progress(answer)
        elif isinstance(answer, ResultBody):
            data = canonical(read(plaintext))
            if self.result is None:
                self.result, self._result_bytes = answer, data
                self._show(answer)
                self.finished.set()
            elif data != self._result_bytes and answer not in self.conflicts:
                self.conflicts.append(answer)

    def _progress(self, note: ProgressBody) -> None:
        if self.progress_stopped:
            return
        expected = len(self.progress)
        if note.seq == expected:
            self.progress.append(note)
            self._show(note)
        elif not (note.seq < expected and self.progress[note.seq] == note):
            self.progress_stopped = True

    def _show(self, answer: Answer) -> None:
        if self.on_answer is not None:
            self.on_answer(answer)


@dataclass(frozen=True, slots=True)
class Unbound:
    """An event addressed to us that did not bind, and why (§12 step 3)."""

    event: Event
    reason: str


def bind(
    event: Event, *, runner: str, trainer: str, expected: Mapping[str, Binding], key: bytes
) -> tuple[str, Answer, str] | Unbound:
    """§12 step 3 for one event: (the event of ours it answers, the answer, its plaintext), or why not."""
    if event.kind not in (FEEDBACK_KIND, RESULT_KIND):
        return Unbound(event, f"kind {event.kind} is not an answer")
    if event.pubkey != runner:
        return Unbound(event, "not signed by the runner")
    if not event.is_valid():
        return Unbound(event, "id or signature invalid")
    targets = tag_values(event, "e")
    if len(targets) != 1 or targets[0] not in expected:
        return Unbound(event, "its e tags name no event of ours")
    if tag_values(event, "p") != (trainer,) or sum(1 for tag in event.tags if tag[0] == "p") != 1:
        return Unbound(event, "its p tags are not exactly this trainer")
    try:
        plaintext = decrypt(event.content, key)
        answer = read_answer(plaintext)
    except (NostrError, ContractError) as error:
        return Unbound(event, f"does not open: {error}")
    if isinstance(answer, _FEEDBACK_TYPES) != (event.kind == FEEDBACK_KIND):
        return Unbound(event, f"a {type(answer).__name__} does not come as kind {event.kind}")
    want = expected[targets[0]]
    if (answer.binding.request, answer.binding.attempt) != (want.request, want.attempt):
        return Unbound(event, "it names another request or attempt")
    return targets[0], answer, plaintext
