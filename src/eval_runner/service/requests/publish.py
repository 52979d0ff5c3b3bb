"""The publish action: a trainer's finished run made public as a signed `3189` (runner.md §15, wire.md §16.4).

Nothing is public until the trainer who ran it asks. Then, in the reference's order: the run's job is found
(admission: the same principal, a completed run, that report digest), its stored pointers are returned when
it was published before, its results directory is opened and checked (the report, `suite.json` and
`cases.json` are the ones it names, the cases load), a draft test set is released first (signed by this
runner, which authored it) and the report rewritten with `suite.event` — pretty JSON, so **its bytes and
digest change**, as the reference's do — then the `3189` is built by the contract's builder with the
trainer's signed request inline, an identical one already on the relay is reused, a new one is refused
past 125 KiB, checked by our own reader (`read_publication`) before it is recorded or sent, published, and
its pointers recorded on the run's job.

A publish is idempotent across a crash without being an "unknown" outcome: every step can be taken again.
The release reuses the identical `3184` on the relay; the rewritten report is written atomically, so a
report that names its release is published as it is; the signed `3189` is recorded on the job *before* it
goes to the relay, so a publish cut off after signing sends that same event again (the relay keeps one),
and before publishing the relay is asked for an identical `3189` by this runner. `EVAL_RUNNER_TEST_CRASH_AT`
(tests only; nothing happens when it is unset) makes the process SIGKILL itself at a named step.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.hosted import PublishInput, hosted_refusal_code
from eval_runner.contracts.outputs import PublishOutput
from eval_runner.contracts.package import RELEASE_KIND
from eval_runner.contracts.publication import (
    PUBLICATION_KIND,
    Citation,
    Cites,
    Unsigned,
    check_relay_size,
    publication,
    read_publication,
    report_ref_of,
)
from eval_runner.contracts.refs import ArtifactRef, EventRef
from eval_runner.contracts.report import Report
from eval_runner.contracts.strict_json import canonical, pretty, read
from eval_runner.contracts.suite import Suite as SuiteDocument
from eval_runner.engine.suite_run import gate_file
from eval_runner.engine.testset.cases import Suite, load_suite
from eval_runner.engine.testset.frontmatter import TestSetError
from eval_runner.errors import EvalRunnerError
from eval_runner.nostr import Event, EventError, Filter, SecretKey, sign
from eval_runner.service.blobs.bucket import BlobStorage
from eval_runner.service.ledger.claims import Job, LedgerError
from eval_runner.service.ledger.store import Ledger
from eval_runner.service.relay.connection import RelayError
from eval_runner.service.releases import ReleaseError, ReleaseRelay, release_suite, suite_release
from eval_runner.service.requests.quota import write_atomic
from eval_runner.service.requests.refusal import RefusalError
from eval_runner.service.requests.reply import EventPublisher
from eval_runner.service.settings import os_error_text

NO_FINISHED_RUN: Final = "no finished run of yours has that report"
NO_RESULTS: Final = "the run left no results"
NO_STORE: Final = "this runner has no relay and blob store to release the test set to"
TOO_LARGE: Final = "the result is too large for the relay to hold"
REPORT_FILE: Final = "report.json"
#: Test-only: the step at which the process SIGKILLs itself (see `crash_point`).
CRASH_AT: Final = "EVAL_RUNNER_TEST_CRASH_AT"
#: The steps `crash_point` names, in the order a publish reaches them.
CRASH_STEPS: Final = ("released", "signed", "published", "answering")

logger = logging.getLogger(__name__)


def crash_point(step: str) -> None:
    """Tests only: when `EVAL_RUNNER_TEST_CRASH_AT` names `step`, die here as a crash does (SIGKILL), so a
    test can stop a publish between two of its steps. Unset (always, outside tests) it does nothing."""
    if os.environ.get(CRASH_AT) == step:
        os.kill(os.getpid(), signal.SIGKILL)


class PublishError(EvalRunnerError):
    """A publish that could not be finished: the failed result's code and plain message."""

    def __init__(self, code: Code, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


@dataclass(frozen=True, slots=True)
class Published:
    """A finished publish: the pointers answered, the report the `3189` carries and the one the run sealed
    (they differ when a draft test set was released first and the report rewritten to name it)."""

    output: PublishOutput
    report: ArtifactRef
    sealed: ArtifactRef

    @property
    def rewritten(self) -> bool:
        return self.report.digest != self.sealed.digest


@dataclass(frozen=True, slots=True)
class Results:
    """A run's results directory as a publish reads it: the report's bytes, the report, and its test set."""

    report_path: Path
    report_bytes: bytes
    report: Report
    suite_document: SuiteDocument
    suite: Suite


def published_line(key_name: str, principal: str, published: Published) -> str:
    """The `published` log line (runner.md §20), and when the report was rewritten, its new digest."""
    line = f"published {key_name} for {principal[:12]}: result {published.output.result.id[:12]}"
    if published.rewritten:
        line += f"; its report names the test set's release, so its digest is now {published.report.digest}"
    return line


def failed_line(key_name: str, code: Code, message: str) -> str:
    """The `publish … failed` log line (runner.md §20)."""
    return f"publish {key_name} failed: {code}: {message}"


def read_results(directory: Path, run_report: ArtifactRef) -> Results:
    """Open a run's results (blocking): `report.json` (the sealed bytes, or the report a publish already
    rewrote with its suite's release), `artifacts/suite.json` and `artifacts/cases.json` as the report names
    them, and the cases under `suite/`. `PublishError` (`unavailable`) when any of it does not hold."""
    path = directory / REPORT_FILE
    try:
        data = path.read_bytes()
        suite_bytes = (directory / "artifacts" / "suite.json").read_bytes()
        cases_bytes = (directory / "artifacts" / "cases.json").read_bytes()
    except OSError as error:
        raise PublishError(Code.UNAVAILABLE, f"reading the run's results: {os_error_text(error)}") from None
    try:
        report = Report.parse_bytes(data)
        document = SuiteDocument.parse_bytes(suite_bytes)
    except ContractError as error:
        raise PublishError(Code.UNAVAILABLE, f"the run's results don't check: {error.detail}") from None
    if not run_report.matches(data) and not run_report.matches(sealed_bytes(data)):
        raise PublishError(Code.UNAVAILABLE, "the run's report.json is not the report it sealed")
    if not dataclasses.replace(report.suite, event=None).matches(suite_bytes):
        raise PublishError(Code.UNAVAILABLE, "the run's suite.json is not the test set its report names")
    if not document.cases.matches(cases_bytes):
        raise PublishError(Code.UNAVAILABLE, "the run's cases.json is not the one its suite.json names")
    try:
        suite = load_suite(directory / "suite")
    except TestSetError as error:
        raise PublishError(Code.UNAVAILABLE, f"the run's test set doesn't load: {error}") from None
    return Results(path, data, report, document, suite)


def sealed_bytes(data: bytes) -> bytes:
    """The sealed report's JCS bytes back from a report a publish rewrote (the same report without the
    suite's release), so a `report.json` that names a release is still proven to be the run's."""
    value = read(data)
    assert isinstance(value, dict)  # a parsed report is an object, and so is its suite
    assert isinstance(value["suite"], dict)
    value["suite"].pop("event", None)
    return canonical(value)


def rewritten_report(data: bytes, release: EventRef) -> bytes:
    """The report naming its suite's release: pretty JSON and a newline, as the reference writes it (so its
    digest differs from the sealed report's). `PublishError` when a reader would refuse it."""
    value = read(data)
    assert isinstance(value, dict)  # a parsed report is an object, and so is its suite
    assert isinstance(value["suite"], dict)
    value["suite"]["event"] = release.to_json()
    rewritten = pretty(value)
    try:
        Report.parse_bytes(rewritten)
    except ContractError as error:
        raise PublishError(hosted_refusal_code(error.code), f"the report naming its release: {error.detail}") from None
    return rewritten


def checked(event: Event) -> Event:
    """`event` if our own reader takes it (every check of wire.md §16.3); a result it refuses is never
    recorded or sent."""
    try:
        read_publication(event)
    except ContractError as error:
        raise PublishError(hosted_refusal_code(error.code), f"the result doesn't check: {error.detail}") from None
    return event


def citation(job: Job) -> Citation | None:
    """What the run's `3189` cites: the result it checked or validated, if any."""
    if job.check is not None:
        return Citation(Cites.CHECK, job.check)
    if job.validates is not None:
        return Citation(Cites.VALIDATES, job.validates)
    return None


def same_result(events: list[Event], runner: str, unsigned: Unsigned) -> Event | None:
    """The earliest (then lowest id) `3189` by this runner with exactly `unsigned`'s content and tags."""
    found = [
        event
        for event in events
        if event.pubkey == runner and event.kind == PUBLICATION_KIND and event.content == unsigned.content
        if tuple(tuple(tag) for tag in event.tags) == unsigned.tags and event.is_valid()
    ]
    return min(found, key=lambda event: (event.created_at, event.id), default=None)


class Publishing:
    """Publishes trainers' finished runs as `3189`s: one at a time per run, each step durable before the next."""

    def __init__(
        self,
        *,
        secret: SecretKey,
        ledger: Ledger,
        relay: ReleaseRelay | None,
        blobs: BlobStorage | None,
        publisher: EventPublisher | None = None,
    ) -> None:
        """`relay` answers the queries (and releases); the `3189` goes out through `publisher` (the answers'
        warm connection) when given, else through `relay`."""
        self._secret = secret
        self.runner = secret.public_key().to_hex()
        self.ledger = ledger
        self.relay = relay
        self.blobs = blobs
        self.publisher = publisher
        #: One turn per job a publish is under way or waiting for; dropped when its last user leaves.
        self._turns: dict[str, _Turn] = {}

    @property
    def under_way(self) -> tuple[str, ...]:
        """The job keys a publish is running or waiting for (none once every publish has finished)."""
        return tuple(self._turns)

    async def find_run(self, principal: str, found: PublishInput) -> Job:
        """Admission of a publish (§9.5 step 5): this principal's completed run with exactly that report."""
        try:
            job = await asyncio.to_thread(self.ledger.find_completed_run, principal, found.report.digest)
        except LedgerError as error:
            raise RefusalError(Code.UNAVAILABLE, error.message) from None
        if job is None:
            raise RefusalError(Code.NOT_ADMITTED, NO_FINISHED_RUN)
        return job

    async def publish(self, job: Job) -> Published:
        """Publish `job`'s report, or return what was published for it before (`PublishError` if not)."""
        turn = self._turns.setdefault(job.key, _Turn())
        turn.users += 1
        try:
            async with turn.lock:
                return await self._publish(job.key)
        finally:
            turn.users -= 1
            if turn.users == 0:  # no one else holds or waits on this lock: the next publish makes a new one
                del self._turns[job.key]

    async def _publish(self, key: str) -> Published:
        job = await self._job(key)
        if job.results is None or job.report is None:
            raise PublishError(Code.NOT_ADMITTED, NO_RESULTS)
        sealed = job.report
        if job.published is not None:  # published before: the same pointers, nothing new
            published = await asyncio.to_thread(_published_report, Path(job.results), sealed)
            return Published(job.published, published, sealed)
        results = await asyncio.to_thread(read_results, Path(job.results), job.report)
        report_bytes, release = results.report_bytes, results.report.suite.event
        if release is None:
            self._fits(job, report_bytes)  # before anything is released
            release = await self._release(results)
            crash_point("released")
            report_bytes = rewritten_report(report_bytes, release)
            try:
                await asyncio.to_thread(write_atomic, results.report_path, report_bytes)
            except OSError as error:
                raise PublishError(Code.UNAVAILABLE, f"rewriting the report: {os_error_text(error)}") from None
        event = checked(await self._result(job, report_bytes))  # a reused or recorded one is read again too
        output = PublishOutput(release, EventRef(event.id, event.pubkey, PUBLICATION_KIND))
        job = await self._job(key)  # as `_result` left it (the signed 3189 it recorded)
        await self._save(dataclasses.replace(job, published=output))
        return Published(output, report_ref_of(report_bytes), sealed)

    async def _job(self, key: str) -> Job:
        try:
            job = await asyncio.to_thread(self.ledger.job, key)
        except LedgerError as error:
            raise PublishError(Code.UNAVAILABLE, error.message) from None
        if job is None:
            raise PublishError(Code.NOT_ADMITTED, NO_RESULTS)
        return job

    async def _save(self, job: Job) -> None:
        try:
            await asyncio.to_thread(self.ledger.save_job, job)
        except LedgerError as error:
            raise PublishError(Code.UNAVAILABLE, f"recording the publish: {error.message}") from None

    async def _release(self, results: Results) -> EventRef:
        """Release the draft test set this runner authored (§16.1), reusing the identical release on the relay;
        it must be the very `suite.json` the report names."""
        if self.relay is None or self.blobs is None:
            raise PublishError(Code.UNAVAILABLE, NO_STORE)
        author, _, rest = results.suite_document.id.partition(":")
        package, _, component = rest.partition("/")
        if author != self.runner:
            raise PublishError(Code.NOT_ADMITTED, "the run's test set is not this runner's to release")
        try:
            release = suite_release(
                results.suite, author=author, package=package, component=component, gate_file=gate_file()
            )
        except ReleaseError as error:
            raise PublishError(Code.UNAVAILABLE, f"releasing the test set: {error}") from None
        if release.suite.digest != results.report.suite.digest:
            raise PublishError(
                Code.UNAVAILABLE, "the test set would be released as another suite.json than the report names"
            )
        try:
            released = await release_suite(release, secret=self._secret, blobs=self.blobs, relay=self.relay)
        except ReleaseError as error:
            raise PublishError(Code.UNAVAILABLE, f"releasing the test set: {error}") from None
        return released.event

    def _fits(self, job: Job, report_bytes: bytes) -> None:
        """Refuse, before a draft's test set is released, a publish whose rewritten report would pass the 64 KiB
        report bound or whose `3189` the relay's size. Both are computed with a stand-in release pointer: the
        rewrite is deterministic and a release id is always 64 hex, so the sizes are the real ones."""
        stand_in = EventRef("0" * 64, self.runner, RELEASE_KIND)
        unsigned = self._unsigned(job, rewritten_report(report_bytes, stand_in))
        try:
            check_relay_size(sign(self._secret, unsigned.kind, unsigned.tags, unsigned.content, int(time.time())))
        except ContractError:
            raise PublishError(Code.TOO_LARGE, TOO_LARGE) from None

    @staticmethod
    def _unsigned(job: Job, report_bytes: bytes) -> Unsigned:
        """The `3189`'s parts for `report_bytes`, with the trainer's signed request inline."""
        try:
            request = Event.from_json(read(job.request))
            return publication(report_bytes, cites=citation(job), request=request)
        except (ContractError, EventError) as error:
            detail = error.detail if isinstance(error, ContractError) else error.message
            code = hosted_refusal_code(error.code) if isinstance(error, ContractError) else Code.UNAVAILABLE
            raise PublishError(code, detail) from None

    async def _result(self, job: Job, report_bytes: bytes) -> Event:
        """The `3189` on the relay: an identical one reused, else the one recorded on the job, else one signed
        now and recorded before it is sent."""
        if self.relay is None:
            raise PublishError(Code.UNAVAILABLE, NO_STORE)
        unsigned = self._unsigned(job, report_bytes)
        digest_hex = report_ref_of(report_bytes).digest.removeprefix("sha256:")
        try:
            found = await self.relay.query(
                Filter.build(kinds=[PUBLICATION_KIND], authors=[self.runner], tags={"x": [digest_hex]})
            )
        except RelayError as error:
            raise PublishError(Code.UNAVAILABLE, f"asking the relay for the result: {error}") from None
        existing = same_result(found, self.runner, unsigned)
        if existing is not None:
            return existing
        event = self._recorded(job, unsigned)
        if event is None:
            event = sign(self._secret, unsigned.kind, unsigned.tags, unsigned.content, int(time.time()))
            try:
                check_relay_size(event)
            except ContractError:
                raise PublishError(Code.TOO_LARGE, TOO_LARGE) from None
            await self._save(dataclasses.replace(job, publishing=_event_text(checked(event))))
            crash_point("signed")
        try:
            await (self.publisher or self.relay).publish(event)
        except RelayError as error:
            raise PublishError(Code.UNAVAILABLE, f"publishing the result: {error}") from None
        crash_point("published")
        return event

    def _recorded(self, job: Job, unsigned: Unsigned) -> Event | None:
        """The `3189` a publish cut off after signing recorded, if it is still the one to send."""
        if job.publishing is None:
            return None
        try:
            event = Event.from_json(read(job.publishing))
        except (ContractError, EventError):
            return None
        return same_result([event], self.runner, unsigned)


@dataclass(slots=True)
class _Turn:
    """One job's publish lock and how many publishes hold or wait on it."""

    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    users: int = 0


def _published_report(directory: Path, sealed: ArtifactRef) -> ArtifactRef:
    """The report a publish published (the results' `report.json`), or the sealed one when it is gone."""
    try:
        return report_ref_of((directory / REPORT_FILE).read_bytes())
    except OSError:
        return sealed


def _event_text(event: Event) -> str:
    """A signed event as the JCS text the job keeps."""
    value = read(json.dumps(event.to_json()))
    return canonical(value).decode("utf-8")
