"""The hosted profile `openagents.ext-eval-hosted.v1` (wire.md §5.3–5.4, runner.md §10): what a phone sends.

A hosted request is an ordinary execute body whose `target`, `lock`, `context` and `requirements` are
four fixed documents, ArtifactRefs over their JCS bytes; anything else is refused `not_admitted`. The
documents are built here from the bounds they state (8 tests, 3 runs, 2 arms, 64 KiB drafts), so changing
a bound changes the digests, never silently one without the other. Its `input` is a run or a publish;
`parse_input` raises the reference's codes (`hosted.rs`) and `hosted_refusal_code` turns them into the
answer's (§7.1; decisions.md, "The execution-side contracts").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from eval_runner.contracts import shape
from eval_runner.contracts.draft import MAX_DRAFT_BYTES, Draft
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.execution import EXECUTION_SCHEMA, ExecuteBody, ident
from eval_runner.contracts.refs import ArtifactRef, DefinitionRef, EventRef
from eval_runner.contracts.strict_json import JsonValue, canonical

HOSTED_SCHEMA = "openagents.ext-eval-hosted.v1"
REPORT_SCHEMA = "openagents.eval-report.v1"
MEDIA_JSON = "application/json"
#: The production runner's public key (wire.md §21).
RUNNER = "a7cff3ee1ff0209f971b9f24673db310ab858899c9d9a99b640e6cb29b1753f0"
#: `<runner>:ext-eval/run` is the only target the runner runs.
PROGRAM = "ext-eval/run"
RELEASE_KIND = 3184
SEALED_KIND = 3188
RESULT_KIND = 3189
DEADLINE_SECONDS = 3_600
RETAIN_SECONDS = 604_800
MAX_CASES = 8
MAX_RUNS = 3
ARMS = 2
EFFECTS = ["read", "write"]

PROGRAM_DOCUMENT: dict[str, JsonValue] = {
    "v": HOSTED_SCHEMA,
    "program": "ext-eval",
    "runs": "openagents ext eval run, in the run sandbox",
    "input": HOSTED_SCHEMA,
    "bounds": {"cases": MAX_CASES, "runs": MAX_RUNS, "arms": ARMS, "draft_bytes": MAX_DRAFT_BYTES},
    "effects": EFFECTS,
}
LOCK_DOCUMENT: dict[str, JsonValue] = {"v": HOSTED_SCHEMA, "lock": "ext-eval", "program": PROGRAM_DOCUMENT}
CONTEXT_DOCUMENT: dict[str, JsonValue] = {"v": HOSTED_SCHEMA, "context": []}
REQUIREMENTS_DOCUMENT: dict[str, JsonValue] = {
    "v": HOSTED_SCHEMA,
    "effects": EFFECTS,
    "disclosure": "the report is sealed to the requester until the requester publishes it",
}


def document_ref(document: JsonValue) -> ArtifactRef:
    """A fixed document's reference: its JCS bytes, `application/json`, the hosted schema."""
    return ArtifactRef.of_bytes(canonical(document), MEDIA_JSON, HOSTED_SCHEMA)


PROGRAM_REF = document_ref(PROGRAM_DOCUMENT)
LOCK_REF = document_ref(LOCK_DOCUMENT)
CONTEXT_REF = document_ref(CONTEXT_DOCUMENT)
REQUIREMENTS_REF = document_ref(REQUIREMENTS_DOCUMENT)


def target(runner: str) -> DefinitionRef:
    """The `target` of a request to `runner`: its `ext-eval` program."""
    return DefinitionRef(id=f"{shape.hex64(runner, 'runner')}:{PROGRAM}", artifact=PROGRAM_REF)


def check_target(found: DefinitionRef, runner: str) -> None:
    """Admission step 1: the runner runs only its own program (id and artifact digest; §5.3)."""
    expected = target(runner)
    if found.id != expected.id or found.artifact.digest != expected.artifact.digest:
        raise shape.fail("target", "this runner runs only its ext-eval program", Code.NOT_ADMITTED)


def check_requirements(found: ArtifactRef) -> None:
    """Admission step 2: read and sandbox write only, i.e. exactly the hosted requirements document."""
    if found.digest != REQUIREMENTS_REF.digest:
        raise shape.fail("requirements", "the hosted runner grants read and sandbox write only", Code.NOT_ADMITTED)


def hosted_refusal_code(code: Code) -> Code:
    """The code the runner answers for a contract error in `input` (§7.1): limits, not-admitted, or malformed."""
    if code in (Code.LIMIT_EXCEEDED, Code.TOO_LARGE):
        return Code.TOO_LARGE
    if code is Code.NOT_ADMITTED:
        return Code.NOT_ADMITTED
    return Code.MALFORMED


def hosted_refusal(error: ContractError) -> tuple[Code, str]:
    """The refusal (code, message) for an input that did not parse; the message keeps the contract code."""
    return hosted_refusal_code(error.code), error.detail


Draftable = Literal["draft"]


def _serialised_size(value: JsonValue, path: str) -> int:
    """Compact JSON length, as the reference's `serde_json::to_vec` measures the draft."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        raise shape.fail(path, "is not JSON") from None
    return len(text.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True, slots=True)
class RunInput:
    """`action: "run"`: a suite (a release or the draft's cases) against a tool (a definition or the draft's)."""

    suite: EventRef | Draftable
    subject: DefinitionRef | Draftable
    draft: Draft | None
    runs: int
    check: str | None = None
    validates: str | None = None
    #: Whether the (newer, optional) `validates` key was sent, null or not.
    has_validates: bool = False

    @property
    def needs_draft(self) -> bool:
        return self.suite == "draft" or self.subject == "draft"

    def turns(self, cases: int) -> int:
        """Case runs planned across both arms: tests × runs × 2 (progress's `planned`)."""
        return cases * self.runs * ARMS

    @classmethod
    def parse(cls, value: JsonValue, path: str = "input") -> RunInput:
        found = shape.closed(
            value,
            path,
            ("v", "action", "suite", "subject", "draft", "runs", "baseline", "check"),
            ("validates",),
            unknown=Code.UNSUPPORTED_FEATURE,
        )
        suite: EventRef | Draftable = "draft"
        if found["suite"] != "draft":
            suite = EventRef.parse(found["suite"], shape.at(path, "suite"), kind=RELEASE_KIND)
        subject: DefinitionRef | Draftable = "draft"
        if found["subject"] != "draft":
            subject = DefinitionRef.parse(found["subject"], shape.at(path, "subject"))
        runs_path = shape.at(path, "runs")
        runs = shape.integer(found["runs"], runs_path, low=0)
        if runs == 0:
            raise shape.fail(runs_path, "at least 1")
        if runs > MAX_RUNS:
            raise shape.fail(runs_path, f"the hosted runner runs at most {MAX_RUNS} per arm", Code.LIMIT_EXCEEDED)
        if found["baseline"] is not True:
            raise shape.fail(shape.at(path, "baseline"), "the hosted runner always runs both arms", Code.LIMIT_EXCEEDED)
        draft = _draft(
            found["draft"], shape.at(path, "draft"), suite == "draft" or subject == "draft", suite == "draft"
        )
        check = None
        if found["check"] is not None:
            check = shape.hex64(found["check"], shape.at(path, "check"), "null or a 64-hex event id")
        validates = None
        if found.get("validates") is not None:
            validates = shape.hex64(found["validates"], shape.at(path, "validates"), "null or a 64-hex event id")
            if check is not None:
                raise shape.fail(shape.at(path, "validates"), "a run is a check or a validation, never both")
        return cls(
            suite=suite,
            subject=subject,
            draft=draft,
            runs=runs,
            check=check,
            validates=validates,
            has_validates="validates" in found,
        )

    def to_json(self) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {
            "v": HOSTED_SCHEMA,
            "action": "run",
            "suite": self.suite if isinstance(self.suite, str) else self.suite.to_json(),
            "subject": self.subject if isinstance(self.subject, str) else self.subject.to_json(),
            "draft": None if self.draft is None else self.draft.to_json(),
            "runs": self.runs,
            "baseline": True,
            "check": self.check,
        }
        if self.has_validates or self.validates is not None:
            out["validates"] = self.validates
        return out


def _draft(value: JsonValue, path: str, needed: bool, suite: bool) -> Draft | None:
    """The draft exactly when a side is the draft; a draft suite holds 1–8 tests."""
    if value is None:
        if needed:
            raise shape.fail(path, "the draft is missing")
        return None
    if not needed:
        raise shape.fail(path, "only a draft suite or a draft subject sends a draft; it must be null")
    if _serialised_size(value, path) > MAX_DRAFT_BYTES:
        raise shape.fail(path, "at most 64 KiB", Code.LIMIT_EXCEEDED)
    draft = Draft.parse(value, path)
    if suite and not draft.cases:
        raise shape.fail(shape.at(path, "cases"), "a draft suite has at least one test")
    if suite and len(draft.cases) > MAX_CASES:
        raise shape.fail(
            shape.at(path, "cases"),
            f"the hosted runner runs at most {MAX_CASES} tests, and this set has {len(draft.cases)}",
            Code.LIMIT_EXCEEDED,
        )
    return draft


@dataclass(frozen=True, slots=True)
class PublishInput:
    """`action: "publish"`: the report a completed run of this trainer returned."""

    report: ArtifactRef

    @classmethod
    def parse(cls, value: JsonValue, path: str = "input") -> PublishInput:
        found = shape.closed(value, path, ("v", "action", "report"), unknown=Code.UNSUPPORTED_FEATURE)
        report = ArtifactRef.parse(found["report"], shape.at(path, "report"))
        if report.schema != REPORT_SCHEMA:
            raise shape.fail(
                shape.at(path, "report.schema"), f"must be {REPORT_SCHEMA!r}: a run's report", Code.IDENTITY_MISMATCH
            )
        return cls(report=report)

    def to_json(self) -> dict[str, JsonValue]:
        return {"v": HOSTED_SCHEMA, "action": "publish", "report": self.report.to_json()}


HostedInput = RunInput | PublishInput


def parse_input(value: JsonValue, path: str = "input") -> HostedInput:
    """A hosted input: version first, then the action's closed shape (§5.4)."""
    found = shape.obj(value, path)
    shape.literal(found.get("v"), shape.at(path, "v"), HOSTED_SCHEMA, Code.UNSUPPORTED_VERSION)
    action = shape.choice(found.get("action"), shape.at(path, "action"), ("run", "publish"), Code.UNSUPPORTED_FEATURE)
    if action == "run":
        return RunInput.parse(value, path)
    return PublishInput.parse(value, path)


def build_execute_body(runner: str, request_id: str, input: HostedInput | JsonValue, now: int) -> ExecuteBody:
    """The execute body a phone sends at `now` (runner.md §10.1): deadline an hour on, kept a week past it.

    The input is checked first, so a client never signs a request the runner would refuse as malformed.
    Sign it with the tags `request_tags(runner, body.deadline)`.
    """
    ident(request_id, "request")
    value = input.to_json() if isinstance(input, RunInput | PublishInput) else input
    parse_input(value)
    deadline = shape.integer(now, "now", low=0) + DEADLINE_SECONDS
    body: dict[str, JsonValue] = {
        "v": EXECUTION_SCHEMA,
        "requires": [],
        "type": "execute",
        "request": request_id,
        "attempt": 1,
        "run": request_id,
        "target": target(runner).to_json(),
        "lock": LOCK_REF.to_json(),
        "input": value,
        "context": CONTEXT_REF.to_json(),
        "requirements": REQUIREMENTS_REF.to_json(),
        "bounds": {"wall_ms": DEADLINE_SECONDS * 1_000},
        "deadline": deadline,
        "retain_until": deadline + RETAIN_SECONDS,
    }
    return ExecuteBody.parse(body, expiration=str(deadline))


def request_tags(runner: str, deadline: int) -> list[list[str]]:
    """A request's only tags: one `p` (the runner) and the `expiration` equal to its deadline (§5.1)."""
    return [["p", shape.hex64(runner, "runner")], ["expiration", str(deadline)]]
