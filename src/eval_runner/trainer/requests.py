"""What a trainer sends (wire.md §5): the hosted input built from what a person has at hand, the execute
body, and the request record a trainer keeps (`eval_runner.trainer.client` sends it and reads the answers).

A person has an extension directory or a DefinitionRef, and a draft file or a local `evals/` directory.
The subject is resolved as the runner's catalog resolves it (runner.md §11.1), so it names exactly what
the runner admits; a local test set is loaded with every rule of the case format and turned into a draft
of its `prompt.md` and `graders/*.md` texts, byte for byte (fixtures and `case.toml` cannot travel in a
draft, so leaving them behind is a warning, never silent). Everything is checked as the runner checks
it before anything is signed, so a malformed request is a local error, not a round trip.

A request keeps its body: a retransmission signs a new event over the *same* body, which the runner
answers from its ledger and never runs twice, and a control needs the body's request, attempt and run.
`Request.to_json` is what a trainer keeps on disk for that; it holds no key material.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from eval_runner.contracts.draft import DRAFT_SCHEMA, Draft, DraftTool
from eval_runner.contracts.errors import ContractError
from eval_runner.contracts.execution import Binding, ExecuteBody
from eval_runner.contracts.hosted import (
    REPORT_SCHEMA,
    HostedInput,
    PublishInput,
    RunInput,
    build_execute_body,
)
from eval_runner.contracts.refs import ArtifactRef, DefinitionRef, EventRef
from eval_runner.contracts.strict_json import JsonValue, read
from eval_runner.engine.testset.cases import Case, load_suite
from eval_runner.engine.testset.catalog import CatalogError, resolve_extension
from eval_runner.engine.testset.foreign import FormatError
from eval_runner.engine.testset.formats import EVALS_DIR, found_formats, load_test_set
from eval_runner.engine.testset.frontmatter import TestSetError
from eval_runner.engine.testset.skills import is_skill_dir
from eval_runner.errors import CodedError
from eval_runner.nostr import Event, NostrError, PublicKey

REQUEST_RECORD: Final = "eval-runner.trainer-request.v1"
#: A draft tool's name and summary bounds (wire.md §5.5).
MAX_TOOL_NAME: Final = 80
MAX_TOOL_SUMMARY: Final = 400


class TrainerError(CodedError):
    """Why the trainer could not ask or read. `code`: `input` (a request it will not build), `relay`
    (unreachable, refused, timed out, lost), `report` (the sealed report is missing or does not check),
    `worker_absent` (a control heard nothing)."""


# -- what goes in a request ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CatalogTool:
    """A catalog tool as a request names it: its DefinitionRef, the name and summary a draft's tool
    carries, and the tool's own test set when it came from an extension directory."""

    definition: DefinitionRef
    name: str
    summary: str = ""
    evals: Path | None = None
    #: The extension directory when its test set is in a format `engine/testset/formats.py` reads (our
    #: case directories under `evals/`, `evals/evals.json`, a Vally `eval.yaml`), and its skill's name.
    test_set: Path | None = None
    skill_name: str | None = None

    def draft_tool(self) -> DraftTool:
        return DraftTool(name=self.name, summary=self.summary, catalog=self.definition, skill=None, uses=())


def subject_ref(text: str) -> CatalogTool:
    """`--subject`: a DefinitionRef as JSON text, or the path of a file holding one."""
    if text.lstrip().startswith("{"):
        data = text.encode("utf-8")
    else:
        try:
            data = Path(text).read_bytes()
        except OSError as error:
            raise TrainerError("input", f"the subject {text}: {error.strerror or error}") from None
    try:
        definition = DefinitionRef.parse(read(data), "subject")
    except ContractError as error:
        raise TrainerError("input", f"the subject: {error.detail}") from None
    slug = definition.id.split(":", 1)[1].split("/", 1)[0]
    return CatalogTool(definition, slug)


def extension_tool(root: Path) -> CatalogTool:
    """`--extension`: the tool's DefinitionRef resolved from its directory as the runner's catalog resolves
    it (runner.md §11.1), so the subject names exactly what the runner admits."""
    try:
        tool = resolve_extension(root)
    except CatalogError as error:
        raise TrainerError("input", error.message) from None
    evals = root / (tool.package.eval_dir or EVALS_DIR)
    # A package naming its own eval directory keeps it; otherwise the test set may be in any format.
    formats = found_formats(root) if tool.package.eval_dir in (None, EVALS_DIR) else []
    return CatalogTool(
        tool.definition,
        tool.name[:MAX_TOOL_NAME],
        tool.package.summary[:MAX_TOOL_SUMMARY],
        evals if evals.is_dir() else None,
        test_set=root if formats else None,
        skill_name=tool.name if is_skill_dir(root) else None,
    )


def read_draft(path: Path) -> Draft:
    """`--draft`: an `openagents.eval-draft.v1` file, checked as the runner checks it."""
    try:
        return Draft.parse(read(path.read_bytes()), "draft")
    except OSError as error:
        raise TrainerError("input", f"{path}: {error.strerror or error}") from None
    except ContractError as error:
        raise TrainerError("input", f"{path}: {error.detail}") from None


@dataclass(frozen=True, slots=True)
class SuiteDraft:
    """A local test set as a draft, and what it had to leave behind."""

    draft: Draft
    warnings: tuple[str, ...]


def draft_case(case: Case) -> tuple[dict[str, JsonValue], list[str]]:
    """One loaded case as a draft case (its `prompt.md` and `graders/*.md` texts, exactly), and warnings
    for what a draft cannot carry: fixtures and `case.toml`."""
    graders = sorted((Path(grader.name).stem, grader.data.decode("utf-8")) for grader in case.files.graders)
    value: dict[str, JsonValue] = {
        "id": case.name,
        "kind": case.kind.value,
        "prompt": case.files.prompt.decode("utf-8"),
        "graders": [{"name": name, "text": text} for name, text in graders],
    }
    warnings = []
    if case.fixtures:
        count = len(case.fixtures)
        warnings.append(
            f"{case.name}: its fixtures ({count} file{'s' if count != 1 else ''}) stay behind; "
            "a draft carries only prompt.md and graders/*.md, so the run starts in an empty directory"
        )
    if case.files.case_toml is not None:
        warnings.append(f"{case.name}: case.toml stays behind; a draft carries only prompt.md and graders/*.md")
    return value, warnings


def suite_draft(evals: Path, tool: DraftTool) -> SuiteDraft:
    """`--suite`: a local evals directory, loaded with every rule of the case format, as a draft for `tool`."""
    try:
        suite = load_suite(evals)
    except TestSetError as error:
        raise TrainerError("input", f"{evals}: {error}") from None
    return _draft(suite.cases, tool, evals, ())


def extension_draft(root: Path, tool: DraftTool, *, skill_name: str | None = None) -> SuiteDraft:
    """`--extension DIR` alone: the directory's test set in whichever format it is (`engine/testset/formats.py`,
    as `eval run` reads it), as a draft for `tool`; what the reading had to say comes back as warnings."""
    try:
        loaded = load_test_set(root, skill_name=skill_name)
    except TestSetError as error:
        where = root if isinstance(error, FormatError) else root / EVALS_DIR
        raise TrainerError("input", f"{where}: {error}") from None
    return _draft(loaded.suite.cases, tool, root, loaded.notices)


def _draft(cases: Sequence[Case], tool: DraftTool, where: Path, notices: Sequence[str]) -> SuiteDraft:
    try:
        drafted = [draft_case(case) for case in cases]
    except UnicodeDecodeError:
        raise TrainerError("input", f"{where}: a case file is not UTF-8 text") from None
    value = {"v": DRAFT_SCHEMA, "tool": tool.to_json(), "cases": [case for case, _ in drafted]}
    try:
        draft = Draft.parse(value, "draft")
    except ContractError as error:
        raise TrainerError("input", f"{where}: {error.detail}") from None
    return SuiteDraft(draft, (*notices, *(warning for _, found in drafted for warning in found)))


def run_input(draft: Draft, *, subject: DefinitionRef | None = None, runs: int = 1) -> RunInput:
    """A run of the draft's tests against `subject` (a catalog tool) or, without one, the draft's own tool."""
    value = RunInput(suite="draft", subject="draft" if subject is None else subject, draft=draft, runs=runs)
    try:
        return RunInput.parse(value.to_json())
    except ContractError as error:
        raise TrainerError("input", error.detail) from None


def published_run_input(
    release: EventRef,
    subject: DefinitionRef,
    *,
    runs: int = 1,
    check: str | None = None,
    validates: str | None = None,
) -> RunInput:
    """A run of the published test set `release` (its `3184` pointer) against the catalog tool `subject`;
    with `check`, a rerun of that published result (its own test set); with `validates`, a second test set
    on the tool that result tested (wire.md §5.4.1)."""
    value = RunInput(suite=release, subject=subject, draft=None, runs=runs, check=check, validates=validates)
    try:
        return RunInput.parse(value.to_json())
    except ContractError as error:
        raise TrainerError("input", error.detail) from None


def new_request_id() -> str:
    """A fresh logical request id: 32 random hex characters, as the reference phone makes them."""
    return secrets.token_hex(16)


def build_request(
    runner: str,
    value: HostedInput | JsonValue,
    *,
    request_id: str | None = None,
    now: int | None = None,
    checked: bool = True,
) -> ExecuteBody:
    """The execute body for `value` (deadline an hour on). Unchecked, the input goes in as given, as a
    hand-made client might send what the builder refuses (a test of the runner's refusals)."""
    ident = new_request_id() if request_id is None else request_id
    when = int(time.time()) if now is None else now
    try:
        if checked:
            return build_execute_body(runner, ident, value, when)
        placeholder = PublishInput(ArtifactRef.of_bytes(b"{}", "application/json", REPORT_SCHEMA))
        body = build_execute_body(runner, ident, placeholder, when).to_json()
        body["input"] = value.to_json() if isinstance(value, RunInput | PublishInput) else value
        return ExecuteBody.parse(body, expiration=str(body["deadline"]))
    except ContractError as error:
        raise TrainerError("input", error.detail) from None


# -- a request and its answers ------------------------------------------------------------------------


@dataclass(slots=True)
class Request:
    """One logical request: its body (kept so a retransmission re-signs it unchanged) and every event
    that carried it, first the original. `accepted_event` is the event the runner accepted."""

    runner: str
    body: ExecuteBody
    events: list[Event] = field(default_factory=list)
    accepted_event: str | None = None
    #: The report a completed run returned (what `trainer publish` names), once known.
    report: ArtifactRef | None = None

    @property
    def id(self) -> str:
        return self.body.request

    @property
    def binding(self) -> Binding:
        return self.body.binding

    @property
    def target(self) -> str:
        """The execute event a control names: the accepted one, else the first sent."""
        if self.accepted_event is not None:
            return self.accepted_event
        if not self.events:
            raise TrainerError("input", f"request {self.id} was never sent")
        return self.events[0].id

    def to_json(self) -> dict[str, JsonValue]:
        """What a trainer keeps to retransmit or control this request later (no key material)."""
        return {
            "v": REQUEST_RECORD,
            "runner": self.runner,
            "body": self.body.to_json(),
            "events": [event.to_json() for event in self.events],
            "accepted_event": self.accepted_event,
            **({} if self.report is None else {"report": self.report.to_json()}),
        }

    @classmethod
    def from_json(cls, value: JsonValue) -> Request:
        try:
            if not isinstance(value, dict) or value.get("v") != REQUEST_RECORD:
                raise TrainerError("input", f"not a {REQUEST_RECORD} record")
            body = value["body"]
            parsed = ExecuteBody.parse(body, expiration=str(body.get("deadline")) if isinstance(body, dict) else None)
            events = [Event.from_json(item) for item in value["events"]]
            runner = PublicKey.parse(value["runner"]).to_hex()
            accepted = value.get("accepted_event")
            report = None if value.get("report") is None else ArtifactRef.parse(value["report"], "report")
        except (ContractError, NostrError, KeyError, TypeError) as error:
            raise TrainerError("input", f"a saved request that does not read: {error}") from None
        return cls(runner, parsed, events, accepted if isinstance(accepted, str) else None, report)
