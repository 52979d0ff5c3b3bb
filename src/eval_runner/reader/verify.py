"""Verify a published result from its id: the `3189` from the relay through the reader checks of wire.md §16.3
(`contracts.publication.read_publication`, in the reference's order), the trainer credited from the inline
signed request (§17), its test set's release found on the relay, every file of it fetched from the blob store
and checked, and the released `suite.json` digest equal to the suite the report names. Then, for a result that
cites another, what it is to that one (a check confirms or disputes; a validation is independent or not).

The checks run in that order and stop at the first that fails, which the `Verification` names; the relation to
a cited result is shown, never a reason to fail (the cited result may be gone). Nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Final, Protocol

from eval_runner.contracts import shape
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.package import RELEASE_KIND, Release, read_release
from eval_runner.contracts.publication import PUBLICATION_KIND, Publication, read_publication
from eval_runner.contracts.refs import EventRef
from eval_runner.errors import CodedError
from eval_runner.nostr import Event, Filter
from eval_runner.reader.credit import Credit, credit, trainer_of
from eval_runner.service.blobs.bucket import BlobStorage
from eval_runner.service.relay.connection import RelayError
from eval_runner.service.releases.materialize import Bounds, MaterializedSuite, MaterializeError, materialize


class Step(StrEnum):
    """The reader's checks, in the order they run."""

    FOUND = "on the relay"
    READ = "reader checks"
    TRAINER = "trainer credit"
    SUITE_RELEASE = "suite release"
    SUITE_FILES = "suite files"
    SUITE_DIGEST = "suite digest"
    SUBJECT_RELEASE = "subject release"


STEPS: Final = tuple(Step)

#: (path prefix, words in the message, the §16.3 rule a reader-check failure broke), first match wins.
_RULES: Final = (
    ("kind", "", "kind 3189"),
    ("sig", "", "id and signature"),
    ("tags", "markers", "t markers"),
    ("tags", "x tag", "x tag"),
    ("meta.ext_eval_report", "bytes are not", "report bytes vs digest"),
    ("meta.ext_eval_report", "", "inline report"),
    ("meta.ext_eval_request", "", "inline request"),
    ("request", "", "inline request"),
    ("pubkey", "", "signer is the evaluator"),
    ("subject", "", "subject deep-equal"),
    ("report.suite.event", "", "suite release named"),
    ("tags", "", "e and p tags"),
    ("report", "", "report"),
)


class ReaderError(CodedError):
    """What stopped a reading before any check could say yes or no: `relay` (unreachable, refused, timed out)
    or `input` (an id that is not 64 hex)."""


class Relay(Protocol):
    """What the reader asks of a relay (`service.relay.connection.RelayClient` is one)."""

    async def query(self, filter_: Filter) -> list[Event]: ...


@dataclass(frozen=True, slots=True)
class Check:
    """One check: its step, whether it held (None: not run, an earlier one failed), and what it found."""

    step: Step
    passed: bool | None
    detail: str


@dataclass(frozen=True, slots=True)
class Cited:
    """The result a checked result cites, and what the checked one is to it (None when it could not be read)."""

    id: str
    marker: str
    original: Publication | None
    credit: Credit | None
    note: str


@dataclass(slots=True)
class Verification:
    """A reading of one published result: every check in order, and what they found."""

    result_id: str
    checks: list[Check] = field(default_factory=list)
    publication: Publication | None = None
    trainer: str | None = None
    suite_release: Release | None = None
    subject_release: Release | None = None
    suite: MaterializedSuite | None = None
    cited: Cited | None = None

    @property
    def valid(self) -> bool:
        return len(self.checks) == len(STEPS) and all(check.passed for check in self.checks)

    @property
    def failed(self) -> Check | None:
        """The first check that failed."""
        return next((check for check in self.checks if check.passed is False), None)

    def _passed(self, step: Step, detail: str) -> None:
        self.checks.append(Check(step, True, detail))

    def _fail(self, step: Step, detail: str) -> Verification:
        self.checks.append(Check(step, False, detail))
        self.checks += [Check(later, None, "not run") for later in STEPS[STEPS.index(step) + 1 :]]
        return self


async def query(relay: Relay, filter_: Filter) -> list[Event]:
    """The stored events `filter_` matches; `ReaderError("relay")` when the relay can't say."""
    try:
        return await relay.query(filter_)
    except RelayError as error:
        raise ReaderError("relay", f"asking the relay: {error}") from None


def rule_of(error: ContractError) -> str:
    """The reader-check rule (wire.md §16.3) a contract error from `read_publication` broke, in a few words."""
    for prefix, words, rule in _RULES:
        if error.path.startswith(prefix) and words in error.message:
            return rule
    return "body"


class Reader:
    """Reads published results from `relay` and their test sets from `blobs`."""

    def __init__(self, relay: Relay, blobs: BlobStorage, *, bounds: Bounds | None = None) -> None:
        self.relay = relay
        self.blobs = blobs
        self.bounds = bounds or Bounds()

    async def events(self, filter_: Filter) -> list[Event]:
        return await query(self.relay, filter_)

    async def event(self, event_id: str, kind: int, author: str | None = None) -> Event | None:
        """The stored event with that id and kind (and signer, when given), or None."""
        found = await self.events(
            Filter.build(ids=[event_id], kinds=[kind], authors=None if author is None else [author])
        )
        return next((item for item in found if item.id == event_id), None)

    async def release(self, pointer: EventRef) -> tuple[Event, Release] | str:
        """A `3184` by its pointer, and the release it reads as; or why not."""
        event = await self.event(pointer.id, RELEASE_KIND, pointer.pubkey)
        if event is None:
            return f"the release {pointer.id} by {pointer.pubkey} isn't on the relay"
        try:
            return event, read_release(event)
        except ContractError as error:
            return f"the release {pointer.id} doesn't read: {error.detail}"

    async def verify(self, result_id: str, staging: Path) -> Verification:
        """Every check of a published result, in order; its test set is written to `<staging>/evals`."""
        try:
            ident = shape.hex64(result_id, "RESULT_ID", "the 64-hex id of a published result (3189)")
        except ContractError as error:
            raise ReaderError("input", error.detail) from None
        found = Verification(ident)
        event = await self.event(ident, PUBLICATION_KIND)
        if event is None:
            return found._fail(Step.FOUND, f"no result (kind {PUBLICATION_KIND}) with that id on the relay")
        found._passed(Step.FOUND, f"signed by {event.pubkey} at {event.created_at}")
        try:
            result = read_publication(event)
        except ContractError as error:
            return found._fail(Step.READ, f"{rule_of(error)}: {error.detail}")
        found.publication = result
        found._passed(Step.READ, "every rule of wire.md §16.3, in order")
        trainer = trainer_of(result)
        if trainer is None:
            return found._fail(
                Step.TRAINER, f"{Code.CONTENT_UNAVAILABLE.value}: the hosted result's signed request is not carried"
            )
        found.trainer = trainer
        hosted = result.report.ext_eval.requester is not None
        found._passed(
            Step.TRAINER,
            f"credits {trainer} " + ("(the inline signed request checks)" if hosted else "(not hosted: the evaluator)"),
        )
        read = await self.release(result.suite_release)
        if isinstance(read, str):
            return found._fail(Step.SUITE_RELEASE, read)
        suite_event, release = read
        found.suite_release = release
        found._passed(Step.SUITE_RELEASE, f"{release.package} {release.version}")
        try:
            suite = await materialize(suite_event, self.blobs, staging, bounds=self.bounds)
        except MaterializeError as error:
            return found._fail(Step.SUITE_FILES, f"{error.code}: {error.message}")
        found.suite = suite
        found._passed(Step.SUITE_FILES, f"every file fetched and checked ({suite.suite_id})")
        if suite.suite_digest != result.report.suite.digest:
            return found._fail(
                Step.SUITE_DIGEST,
                f"the released suite.json is {suite.suite_digest}, the report ran {result.report.suite.digest}",
            )
        found._passed(Step.SUITE_DIGEST, f"the report ran the released suite ({suite.suite_digest})")
        if result.subject_release is None:
            found._passed(Step.SUBJECT_RELEASE, "the tool has no release (the result names none)")
        else:
            tool = await self.release(result.subject_release)
            if isinstance(tool, str):
                return found._fail(Step.SUBJECT_RELEASE, tool)
            subject = found.subject_release = tool[1]
            found._passed(Step.SUBJECT_RELEASE, f"{subject.package} {subject.version}")
        found.cited = await self.cited(result, release, found.subject_release)
        return found

    async def cited(self, result: Publication, suite: Release | None, subject: Release | None) -> Cited | None:
        """What `result` is to the result it cites, when it cites one."""
        if result.cites is None:
            return None
        marker, ident = result.cites.marker.value, result.cites.id
        event = await self.event(ident, PUBLICATION_KIND)
        if event is None:
            return Cited(ident, marker, None, None, "the cited result isn't on the relay")
        try:
            original = read_publication(event)
        except ContractError as error:
            return Cited(ident, marker, None, None, f"the cited result doesn't read: {error.detail}")
        found = credit(original, result, suite_release=suite, subject_release=subject)
        return Cited(ident, marker, original, found, found.why)
