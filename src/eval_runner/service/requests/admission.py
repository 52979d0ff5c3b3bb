"""Admitting an execute request and building its run plan (runner.md §9.5, §10.2–10.3, §11.3–11.4).

Every refusal here is answered before anything is reserved or run, so the checks come in the reference's
order, each with its code and words. A plan owns its staging directory from the moment it is made: a
refusal after that removes it, and whoever runs the plan calls `close()` when done. A published test set,
and the published result a check or a validation names, come through `published` (which needs the relay
and the blob store; without them a published test set is refused as before).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from eval_runner.contracts.draft import Draft, made_slug
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.execution import ExecuteBody
from eval_runner.contracts.hosted import (
    HostedInput,
    PublishInput,
    RunInput,
    check_requirements,
    check_target,
    hosted_refusal,
    parse_input,
)
from eval_runner.contracts.refs import EventRef
from eval_runner.contracts.strict_json import JsonValue
from eval_runner.engine.testset.adopted import AdoptedDefaults
from eval_runner.engine.testset.cases import Operation, Suite, load_suite
from eval_runner.engine.testset.catalog import Catalog, NotAdmittedError, Subject, Tool
from eval_runner.engine.testset.drafts import write_draft
from eval_runner.engine.testset.frontmatter import TestSetError
from eval_runner.service.blobs.bucket import BlobStorage
from eval_runner.service.config import admission_closed
from eval_runner.service.relay.connection import RelayClient
from eval_runner.service.requests.opening import REQUEST_KIND, OpenedExecute
from eval_runner.service.requests.published import PublishedSuites
from eval_runner.service.requests.refusal import RefusalError as RefusalError  # re-exported: callers catch it here
from eval_runner.service.settings import os_error_text

CLOSED: Final = "the hosted runner isn't taking new runs right now; try again later"
LOW_DISK: Final = "the hosted runner is short of disk space right now; try again later"
NOT_A_CATALOG_TOOL: Final = "the hosted runner tests catalog tools and tools made in chat only"
NO_PUBLISHED_SUITES: Final = "this runner does not take published test sets yet; send the tests as a draft"
NO_TESTS: Final = "the test set has no tests"
CHECK_NEEDS_RELEASE: Final = "a check reruns a published test set"
VALIDATION_NEEDS_RELEASE: Final = "a validation runs a published second test set"
STAGING_PREFIX: Final = "eval-runner-suite-"
EVALS_DIR: Final = "evals"
DRAFT_COMPONENT: Final = "suite"
MAX_TESTS: Final = 8
#: What a hosted case may ask for; anything else (exec, network) is never granted.
HOSTED_OPERATIONS: Final = frozenset({Operation.READ, Operation.WRITE})

ToolRelease = Callable[[Tool], Awaitable[EventRef]]
#: Coder's defaults as of now (runner.md §12), read once per admitted run; never raises.
DefaultsSource = Callable[[], Awaitable[AdoptedDefaults | None]]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class InputFacts:
    """What a usage record says about a request from its input alone (runner.md §19.1): `unread` when the
    input does not parse; `subject` absent for a draft subject; `suite` a release id or `draft`; `result`
    the published result a check or a validation cites."""

    action: str = "unread"
    subject: str | None = None
    suite: str | None = None
    runs: int | None = None
    result: str | None = None


def run_action(check: str | None, validates: str | None) -> str:
    """The usage log's action of a run: a check, a validation, or a plain run (`check` wins if both)."""
    if check is not None:
        return "check"
    return "run" if validates is None else "validation"


def input_facts(value: JsonValue) -> InputFacts:
    """The usage facts of an input, as far as it parses."""
    try:
        found = parse_input(value)
    except ContractError:
        return InputFacts()
    if isinstance(found, PublishInput):
        return InputFacts(action="publish")
    return InputFacts(
        action=run_action(found.check, found.validates),
        subject=None if isinstance(found.subject, str) else found.subject.id,
        suite="draft" if isinstance(found.suite, str) else found.suite.id,
        runs=found.runs,
        result=found.check if found.check is not None else found.validates,
    )


@dataclass(frozen=True, slots=True)
class Authorship:
    """Who the suite and the report name: the suite's `<author>:<package>/<component>`, the evaluator
    (this runner), the suite's release (None for a draft), and the request that asked for the run."""

    author: str
    package: str
    component: str
    evaluator: str
    suite_release: EventRef | None
    requester: EventRef

    @property
    def suite_id(self) -> str:
        return f"{self.author}:{self.package}/{self.component}"


@dataclass(frozen=True, slots=True)
class RunPlan:
    """An admitted run, everything decided (runner.md §10.3). It owns `staging`; call `close()` after the run.

    `suite` was loaded from `evals` (inside `staging`); `subject` is what the subject arm admits, named
    by the tool's own DefinitionRef even when the request named a Wasm guest; `tool` is the catalog tool
    it is, if any. `turns` = tests × runs × 2 is both the quota's count and progress's `planned`.
    """

    staging: Path
    evals: Path
    suite: Suite
    subject: Subject
    tool: Tool | None
    runs: int
    turns: int
    authorship: Authorship
    check: str | None = None
    validates: str | None = None
    draft: Draft | None = None
    #: Coder's defaults both arms admit, read at admission (None: the baseline admits nothing).
    defaults: AdoptedDefaults | None = None

    @property
    def tests(self) -> int:
        return len(self.suite.cases)

    @property
    def action(self) -> str:
        return run_action(self.check, self.validates)

    @property
    def suite_word(self) -> str:
        """The usage log's `suite`: the release's event id, or `draft`."""
        release = self.authorship.suite_release
        return "draft" if release is None else release.id

    def close(self) -> None:
        """Remove the staging directory (idempotent)."""
        shutil.rmtree(self.staging, ignore_errors=True)


class Admission:
    """Checks execute requests against this runner and its catalog, and plans the runs it admits."""

    def __init__(
        self,
        *,
        runner: str,
        catalog: Catalog,
        state: Path,
        temp_root: Path,
        tool_release: ToolRelease | None = None,
        disk_floor: int = 0,
        blobs: BlobStorage | None = None,
        relay: RelayClient | None = None,
        defaults: DefaultsSource | None = None,
    ) -> None:
        self._defaults = defaults
        # Where a published test set's release and files come from (without both, published sets are refused).
        self.blobs = blobs
        self.relay = relay
        self._published = (
            None if blobs is None or relay is None else PublishedSuites(relay=relay, blobs=blobs, state=state)
        )
        self.runner = runner
        self.catalog = catalog
        self.state = state
        self.temp_root = temp_root
        self._tool_release = tool_release
        self._disk_floor = disk_floor
        self._short_of_disk = False

    def _disk_ok(self) -> bool:
        """Is there more free space where the ledger lives than the floor? Says so in the log when that
        changes, once each way."""
        try:
            found = os.statvfs(self.state)
        except OSError:
            return True  # not knowing is no reason to refuse; the ledger's own write will say
        free = found.f_bavail * found.f_frsize
        short = free < self._disk_floor
        if short != self._short_of_disk:
            self._short_of_disk = short
            if short:
                logger.warning(
                    "low disk: %s has %d MiB free, below the floor of %d MiB; new runs are refused until there is more",
                    self.state,
                    free >> 20,
                    self._disk_floor >> 20,
                )
            else:
                logger.info("disk: %s has %d MiB free again; admitting new runs", self.state, free >> 20)
        return not short

    def check_request(self, body: ExecuteBody) -> HostedInput:
        """Admission steps 1–4 (§9.5): target, requirements, input, the switch (and the disk floor)."""
        try:
            check_target(body.target, self.runner)
            check_requirements(body.requirements)
        except ContractError as error:
            raise RefusalError(error.code, f"{error.path}: {error.message}") from None
        try:
            found = parse_input(body.input)
        except ContractError as error:
            raise RefusalError(*hosted_refusal(error)) from None
        if admission_closed(self.state):
            raise RefusalError(Code.NOT_ADMITTED, CLOSED)
        if not self._disk_ok():
            raise RefusalError(Code.UNAVAILABLE, LOW_DISK)
        return found

    async def admit(self, opened: OpenedExecute) -> RunPlan | PublishInput:
        """Admit `opened` and plan its run, or raise `RefusalError` (its staging already removed). A publish
        comes back as its input: whether the trainer has that finished run is the ledger's (`publish`)."""
        found = self.check_request(opened.body)
        if isinstance(found, PublishInput):
            return found
        requester = EventRef(id=opened.event.id, pubkey=opened.principal, kind=REQUEST_KIND)
        plan = await self.plan(found, requester)
        if plan.tool is not None and self._tool_release is not None:
            try:
                release = await self._tool_release(plan.tool)
            except Exception as error:  # only logged: the run goes ahead under the bare definition
                logger.warning("%s has no release: %s", plan.tool.name, error)
            else:
                definition = dataclasses.replace(plan.subject.definition, event=release)
                plan = dataclasses.replace(plan, subject=dataclasses.replace(plan.subject, definition=definition))
        if self._defaults is not None:  # step 9: read now, after the tool's release, and frozen into the plan
            try:
                plan = dataclasses.replace(plan, defaults=await self._defaults())
            except BaseException:
                plan.close()
                raise
        return plan

    async def plan(self, run: RunInput, requester: EventRef) -> RunPlan:
        """Build the plan of an admitted run input (§10.3): the subject, the staging directory, the suite
        (written from the draft, or a release materialized), and the checks on its tests."""
        subject = self._subject(run, requester.pubkey)
        tool = next((tool for tool in self.catalog.tools if tool.subject.definition == subject.definition), None)
        try:
            staging = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix=STAGING_PREFIX, dir=self.temp_root))
        except OSError as error:
            raise RefusalError(Code.UNAVAILABLE, f"staging the test set: {os_error_text(error)}") from None
        try:
            return await self._staged(run, requester, subject, tool, staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def _subject(self, run: RunInput, requester: str) -> Subject:
        if not isinstance(run.subject, str):
            named = self.catalog.find(run.subject)
            if named is None:
                raise RefusalError(Code.NOT_ADMITTED, NOT_A_CATALOG_TOOL)
            return named.subject
        if run.draft is None:
            raise RefusalError(Code.MALFORMED, "the draft is missing")
        try:
            return self.catalog.draft_subject(run.draft.tool, requester)
        except NotAdmittedError as error:
            raise RefusalError(Code.NOT_ADMITTED, error.message) from None

    async def _staged(
        self, run: RunInput, requester: EventRef, subject: Subject, tool: Tool | None, staging: Path
    ) -> RunPlan:
        if isinstance(run.suite, str):
            if run.draft is None:
                raise RefusalError(Code.MALFORMED, "the draft is missing")
            evals = staging / EVALS_DIR
            suite = await asyncio.to_thread(_draft_suite, run.draft, evals)
            authorship = Authorship(
                author=self.runner,
                package=f"{made_slug(run.draft.tool.name)}-tests",
                component=DRAFT_COMPONENT,
                evaluator=self.runner,
                suite_release=None,
                requester=requester,
            )
        else:
            if self._published is None:
                raise RefusalError(Code.NOT_ADMITTED, NO_PUBLISHED_SUITES)
            staged = await self._published.stage(run.suite, staging)
            evals, suite, materialized = staged.evals, staged.suite, staged.materialized
            authorship = Authorship(
                author=materialized.author,
                package=materialized.package,
                component=materialized.component,
                evaluator=self.runner,
                suite_release=materialized.release,
                requester=requester,
            )
        _check_tests(suite)
        released = authorship.suite_release
        if run.check is not None:
            if released is None or self._published is None:
                raise RefusalError(Code.NOT_ADMITTED, CHECK_NEEDS_RELEASE)
            await self._published.check_cites(run.check, released, subject.definition)
        if run.validates is not None:
            if released is None or self._published is None:
                raise RefusalError(Code.NOT_ADMITTED, VALIDATION_NEEDS_RELEASE)
            await self._published.validation_cites(run.validates, released, subject.definition)
        return RunPlan(
            staging=staging,
            evals=evals,
            suite=suite,
            subject=subject,
            tool=tool,
            runs=run.runs,
            turns=run.turns(len(suite.cases)),
            authorship=authorship,
            check=run.check,
            validates=run.validates,
            draft=run.draft,
        )


def _draft_suite(draft: Draft, evals: Path) -> Suite:
    """The draft's cases written under `evals` and loaded (blocking)."""
    try:
        write_draft(draft.cases, evals)
        return load_suite(evals)
    except TestSetError as error:
        raise RefusalError(Code.MALFORMED, str(error)) from None
    except OSError as error:
        raise RefusalError(Code.UNAVAILABLE, f"staging the test set: {os_error_text(error)}") from None


def _check_tests(suite: Suite) -> None:
    """Step 4–5: at least one test, at most eight, none asking for more than reading and writing."""
    if not suite.cases:
        raise RefusalError(Code.MALFORMED, NO_TESTS)
    if len(suite.cases) > MAX_TESTS:
        raise RefusalError(
            Code.TOO_LARGE, f"the hosted runner runs at most {MAX_TESTS} tests, and this set has {len(suite.cases)}"
        )
    for case in suite.cases:
        if not set(case.run.allowed_operations) <= HOSTED_OPERATIONS:
            raise RefusalError(
                Code.NOT_ADMITTED,
                f"the test {case.name} asks to run commands or reach the network, which the hosted runner never allows",
            )
