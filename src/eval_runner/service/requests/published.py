"""A request's published test set (runner.md §10.3 step 3, "Published"): its release from the relay, its files
materialized into the run's staging directory, and the proof that this runner rebuilds the released
`suite.json` byte for byte, so the report it writes names the very suite that was released; and the published
result a check or a validation names (steps 6–7), read from the relay as a reader reads it.

Refusals keep the reference's words. Where the reference refuses every materialization failure
`not_admitted`, the code here is the materializer's (a blob no store has, bytes that are not the listed blob,
a store out of reach, a package past the bounds), behind the same `that test set doesn't check:` words.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.package import RELEASE_KIND
from eval_runner.contracts.publication import PUBLICATION_KIND, Publication, read_publication
from eval_runner.contracts.refs import DefinitionRef, EventRef
from eval_runner.engine.suite_run import gate_file
from eval_runner.engine.testset.cases import Suite, load_suite
from eval_runner.engine.testset.documents import suite_documents
from eval_runner.engine.testset.frontmatter import TestSetError
from eval_runner.nostr import Filter
from eval_runner.service.blobs.bucket import BlobStorage
from eval_runner.service.relay.connection import RelayClient, RelayError
from eval_runner.service.releases.materialize import (
    Bounds,
    MaterializedSuite,
    MaterializeError,
    SuiteCache,
    materialize,
)
from eval_runner.service.requests.refusal import RefusalError

NOT_ON_RELAY: Final = "that test set's release isn't on the relay"
DOES_NOT_CHECK: Final = "that test set doesn't check: "
OTHER_RULES: Final = (
    "that test set was released under another version of the Gym's rules, so this runner can't reproduce it "
    "byte for byte"
)
SAME_SUITE: Final = "that would be a check: a validation runs a second test set, and "
ANOTHER_TOOL: Final = "the result to validate tested another tool"
CHECK_OTHER_SUITE: Final = "the result to check ran another test set"
CHECK_OTHER_TOOL: Final = "the result to check tested another tool"
#: Checked packages, by manifest digest, under the state directory.
SUITES_DIR: Final = "suites"


@dataclass(frozen=True, slots=True)
class StagedSuite:
    """A published test set in a run's staging directory, loaded, and what it was materialized as."""

    suite: Suite
    materialized: MaterializedSuite

    @property
    def evals(self) -> Path:
        return self.materialized.evals


class PublishedSuites:
    """Where published test sets come from: the relay (the `3184`), the blob store (its files) and the cache
    under the state directory (`<state>/suites`)."""

    def __init__(self, *, relay: RelayClient, blobs: BlobStorage, state: Path, bounds: Bounds | None = None) -> None:
        self.relay = relay
        self.blobs = blobs
        self.cache = SuiteCache(state / SUITES_DIR)
        self.bounds = bounds or Bounds()

    async def stage(self, pointer: EventRef, staging: Path) -> StagedSuite:
        """The release `pointer` names, materialized under `staging` and loaded; `RefusalError` otherwise."""
        try:
            found = await self.relay.query(Filter.build(ids=[pointer.id], kinds=[RELEASE_KIND]))
        except RelayError as error:
            raise RefusalError(Code.UNAVAILABLE, f"looking up that test set's release: {error}") from None
        event = next((item for item in found if item.id == pointer.id and item.pubkey == pointer.pubkey), None)
        if event is None:
            raise RefusalError(Code.NOT_ADMITTED, NOT_ON_RELAY)
        try:
            materialized = await materialize(event, self.blobs, staging, cache=self.cache, bounds=self.bounds)
        except MaterializeError as error:
            raise RefusalError(Code(error.code), DOES_NOT_CHECK + error.message) from None
        return await asyncio.to_thread(reproduced, materialized)

    async def cited(self, event_id: str, verb: str) -> Publication:
        """The published result (`3189`) a check or a validation names (runner.md §10.3 steps 6–7)."""
        try:
            found = await self.relay.query(Filter.build(ids=[event_id], kinds=[PUBLICATION_KIND]))
        except RelayError as error:
            raise RefusalError(Code.UNAVAILABLE, f"looking up the result to {verb}: {error}") from None
        event = next((item for item in found if item.id == event_id), None)
        if event is None:
            raise RefusalError(Code.NOT_ADMITTED, f"the result to {verb} isn't on the relay")
        try:
            return read_publication(event)
        except ContractError as error:
            raise RefusalError(Code.NOT_ADMITTED, f"the result to {verb} doesn't check: {error.detail}") from None

    async def check_cites(self, check: str, suite_release: EventRef, subject: DefinitionRef) -> None:
        """A check reruns the very test set the result ran (released, so its digest was reproduced when it was
        staged) on the very tool it tested: same definition id and bytes. Whether it counts (the subject locks
        equal, another trainer) is the readers' (wire.md §13.4, §17)."""
        cited = await self.cited(check, "check")
        if cited.suite_release.id != suite_release.id:
            raise RefusalError(Code.NOT_ADMITTED, CHECK_OTHER_SUITE)
        tested = cited.report.subject.definition
        if (tested.id, tested.artifact.digest) != (subject.id, subject.artifact.digest):
            raise RefusalError(Code.NOT_ADMITTED, CHECK_OTHER_TOOL)

    async def validation_cites(self, validates: str, suite_release: EventRef, subject: DefinitionRef) -> None:
        """A validation runs a second test set on the tool the result tested (independence is the readers')."""
        cited = await self.cited(validates, "validate")
        if cited.suite_release.id == suite_release.id:
            raise RefusalError(Code.NOT_ADMITTED, same_suite(suite_release))
        if cited.report.subject.definition.id != subject.id:
            raise RefusalError(Code.NOT_ADMITTED, ANOTHER_TOOL)


def same_suite(suite_release: EventRef) -> str:
    """The refusal of a validation that names the result's own test set: it names the set that was sent."""
    return f"{SAME_SUITE}the test set sent ({suite_release.id}) is the one that result ran"


def reproduced(materialized: MaterializedSuite) -> StagedSuite:
    """Load the materialized test set and require that its suite documents, built for the suite id it was
    released under, give back the released `suite.json` digest."""
    try:
        suite = load_suite(materialized.evals)
    except TestSetError as error:
        raise RefusalError(Code.MALFORMED, str(error)) from None
    try:
        documents = suite_documents(
            suite,
            author=materialized.author,
            package=materialized.package,
            component=materialized.component,
            gate_file=gate_file(),
        )
    except TestSetError as error:  # as the reference: this runner could not build what it would report
        raise RefusalError(Code.UNAVAILABLE, str(error)) from None
    if documents.suite.digest != materialized.suite_digest:
        raise RefusalError(Code.NOT_ADMITTED, OTHER_RULES)
    return StagedSuite(suite, materialized)
