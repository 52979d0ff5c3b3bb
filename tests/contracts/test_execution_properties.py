"""Property tests for the execution-side contracts (execute/control bodies, hosted input, draft, answers).

Two properties: a valid document survives parse → to_json with the same JCS bytes (the fingerprint and
every digest over it depend on that), and whatever JSON arrives — arbitrary values, or a valid document
with one key dropped, one key added or one value replaced anywhere in its tree — a parser returns a
record or raises ContractError, never another exception.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eval_runner.contracts.answers import (
    AcceptedBody,
    CancelResult,
    ProgressBody,
    ReplayRecord,
    ReplayResult,
    ResultBody,
    StatusResult,
    parse_answer,
    read_answer,
)
from eval_runner.contracts.case_id import CASE_ID, RESERVED, case_id
from eval_runner.contracts.draft import Draft
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.execution import Binding, ControlBody, ExecuteBody, fingerprint, open_body
from eval_runner.contracts.hosted import RUNNER, PublishInput, RunInput, build_execute_body, parse_input
from eval_runner.contracts.outputs import Headline, PublishOutput, RunOutput, parse_output
from eval_runner.contracts.refs import ArtifactRef, EventRef
from eval_runner.contracts.strict_json import MAX_SAFE_INTEGER, JsonValue, canonical, digest_bytes
from tests.support.execution_answers import accepted, completed_run, progress, refusal, unknown
from tests.support.execution_bodies import EXPIRATION, body, control
from tests.support.hosted_inputs import chat, published

fast = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Any code point, lone surrogates included: a decoded JSON string can hold one before the strict reader's check.
TEXT = st.text(alphabet=st.characters(exclude_categories=()), max_size=16)
KEYS = TEXT | st.sampled_from(["v", "type", "meta", "draft", "token", "Secret", "after_seq", "validates", "code"])
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | TEXT
    | st.sampled_from(["draft", "execute", "status", "replay", "cancel", "run", "publish", "result", "0" * 64])
)
JSON = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4), max_leaves=20
)
# Values a canonical document can hold: safe integers, finite floats.
SAFE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
IDS = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=128)


def execute(value: JsonValue) -> object:
    return ExecuteBody.parse(value, expiration=EXPIRATION)


def opened(value: JsonValue) -> object:
    return open_body(json.dumps(value), EXPIRATION)


PARSERS: list[Callable[[JsonValue], object]] = [
    execute,
    ControlBody.parse,
    Draft.parse,
    parse_input,
    RunInput.parse,
    PublishInput.parse,
    parse_answer,
    ResultBody.parse,
    AcceptedBody.parse,
    ProgressBody.parse,
    StatusResult.parse,
    ReplayResult.parse,
    CancelResult.parse,
    parse_output,
    lambda value: case_id(value, "id"),
]


def valid_documents() -> list[tuple[Callable[[JsonValue], object], JsonValue]]:
    root = ArtifactRef.of_bytes(b"root", "application/json")
    binding = Binding("req-1", 1, "req-1")
    return [
        (execute, body(parent={"run": "p", "step": "s", "iteration": 1, "attempt": 1}, meta={"a": [1]})),
        (execute, build_execute_body(RUNNER, "req-1", chat(2), 1_790_000_000).raw),
        (ControlBody.parse, control("replay", after_seq=None, max_records=4)),
        (ControlBody.parse, control("cancel", reason="stop")),
        (parse_input, published(check="ab" * 32)),
        (parse_input, chat(3)),
        (parse_input, published(subject="draft", draft=chat(1)["draft"], validates=None)),
        (
            parse_input,
            {"v": "openagents.ext-eval-hosted.v1", "action": "publish", "report": completed_run()["artifacts"][0]},
        ),
        (Draft.parse, chat(2)["draft"]),
        (parse_answer, completed_run()),
        (parse_answer, refusal()),
        (parse_answer, unknown()),
        (parse_answer, accepted()),
        (parse_answer, progress()),
        (parse_answer, StatusResult(binding, "running", root, None, True).to_json()),
        (parse_answer, ReplayResult(binding, (ReplayRecord(0, "sha256:" + "1" * 64),), 1, True, False).to_json()),
        (parse_answer, CancelResult(binding, False, "cancelled", True).to_json()),
        (parse_output, completed_run()["output"]),
        (parse_output, PublishOutput(EventRef("1" * 64, "2" * 64, 3184), EventRef("3" * 64, RUNNER, 3189)).to_json()),
    ]


VALID = valid_documents()


def only_contract_errors(parse: Callable[[JsonValue], object], value: JsonValue) -> None:
    try:
        parsed = parse(value)
    except ContractError as error:
        code = error.code
        assert isinstance(code, Code)
        return
    # Whatever a parser accepts, it gives back with the same JCS bytes (when the value has any: the
    # generators also make infinities and unsafe integers, which no strict reader lets through).
    to_json = getattr(parsed, "to_json", None)
    if to_json is None:
        return
    try:
        expected = canonical(value)
    except ContractError:
        return
    assert canonical(to_json()) == expected


@fast
@given(value=JSON, index=st.integers(min_value=0, max_value=len(PARSERS) - 1))
def test_arbitrary_json_raises_only_contract_errors(value: JsonValue, index: int) -> None:
    only_contract_errors(PARSERS[index], value)


@fast
@given(text=st.text(alphabet=st.characters(exclude_categories=()), max_size=200) | st.binary(max_size=200))
def test_arbitrary_plaintext_raises_only_contract_errors(text: str | bytes) -> None:
    with contextlib.suppress(ContractError):
        open_body(text, EXPIRATION)
    with contextlib.suppress(ContractError):
        read_answer(text)


def containers(value: JsonValue, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Paths of every object and array in a document, the root included."""
    found: list[tuple[str | int, ...]] = []
    if isinstance(value, dict):
        found.append(path)
        for key, item in value.items():
            found.extend(containers(item, (*path, key)))
    elif isinstance(value, list):
        found.append(path)
        for index, item in enumerate(value):
            found.extend(containers(item, (*path, index)))
    return found


@st.composite
def mutated(draw: st.DrawFn) -> tuple[Callable[[JsonValue], object], JsonValue]:
    parse, original = draw(st.sampled_from(VALID))
    value = copy.deepcopy(original)
    path = draw(st.sampled_from(containers(value)))
    node: Any = value
    for step in path:
        node = node[step]
    operation = draw(st.sampled_from(["drop", "add", "replace"]))
    if isinstance(node, dict):
        keys = sorted(node)
        if operation == "add" or not keys:
            node[draw(KEYS)] = draw(JSON)
        elif operation == "drop":
            del node[draw(st.sampled_from(keys))]
        else:
            node[draw(st.sampled_from(keys))] = draw(JSON)
    else:
        if operation == "add" or not node:
            node.insert(draw(st.integers(min_value=0, max_value=len(node))), draw(JSON))
        elif operation == "drop":
            del node[draw(st.integers(min_value=0, max_value=len(node) - 1))]
        else:
            node[draw(st.integers(min_value=0, max_value=len(node) - 1))] = draw(JSON)
    return parse, value


@fast
@given(case=mutated())
def test_mutated_documents_raise_only_contract_errors(case: tuple[Callable[[JsonValue], object], JsonValue]) -> None:
    parse, value = case
    only_contract_errors(parse, value)


def test_every_valid_document_parses() -> None:
    for parse, value in VALID:
        only_contract_errors(parse, value)
        parse(value)


# -- generated valid documents keep their JCS bytes ------------------------------------------------------

ARTIFACTS = st.builds(
    lambda data, media, schema: ArtifactRef.of_bytes(data, media, schema).to_json(),
    st.binary(max_size=8),
    st.sampled_from(["application/json", "application/wasm", "text/markdown"]),
    st.none() | st.sampled_from(["openagents.ext-eval-hosted.v1", "x.v1"]),
)
BOUNDS = st.dictionaries(
    st.sampled_from(["wall_ms", "output_bytes", "jobs", "spend_microunits"]),
    st.integers(min_value=0, max_value=MAX_SAFE_INTEGER),
)
PARENTS = st.fixed_dictionaries(
    {
        "run": IDS,
        "step": IDS,
        "iteration": st.integers(min_value=0, max_value=MAX_SAFE_INTEGER),
        "attempt": st.integers(min_value=1, max_value=2**32 - 1),
    }
)


@st.composite
def execute_bodies(draw: st.DrawFn) -> dict[str, Any]:
    deadline = draw(st.integers(min_value=0, max_value=2**40))
    value: dict[str, Any] = {
        "v": "openagents.execution.v1",
        "requires": [],
        "type": "execute",
        "request": draw(IDS),
        "attempt": draw(st.integers(min_value=1, max_value=2**32 - 1)),
        "run": draw(IDS),
        "target": {"id": "ab" * 32 + ":pkg/op", "artifact": draw(ARTIFACTS)},
        "lock": draw(ARTIFACTS),
        "input": draw(SAFE),
        "context": draw(ARTIFACTS),
        "requirements": draw(ARTIFACTS),
        "bounds": draw(BOUNDS),
        "deadline": deadline,
        "retain_until": deadline + draw(st.integers(min_value=1, max_value=2**40)),
    }
    if draw(st.booleans()):
        value["parent"] = draw(PARENTS)
    if draw(st.booleans()):
        value["meta"] = draw(st.dictionaries(st.text(max_size=8), SAFE, max_size=3))
    return value


@fast
@given(value=execute_bodies())
def test_a_parsed_execute_body_keeps_its_jcs_bytes(value: dict[str, Any]) -> None:
    parsed = ExecuteBody.parse(value, expiration=str(value["deadline"]))
    assert canonical(parsed.to_json()) == canonical(value)
    assert fingerprint(parsed) == digest_bytes(canonical(value))


@fast
@given(
    kind=st.sampled_from(["status", "replay", "cancel"]),
    after=st.none() | st.integers(min_value=0, max_value=MAX_SAFE_INTEGER),
    records=st.integers(min_value=1, max_value=256),
    reason=st.text(min_size=1, max_size=256),  # at most 1,024 UTF-8 bytes
    meta=st.none() | st.dictionaries(st.text(max_size=8), SAFE, max_size=3),
)
def test_a_parsed_control_keeps_its_jcs_bytes(
    kind: str, after: int | None, records: int, reason: str, meta: dict[str, Any] | None
) -> None:
    extras: dict[str, dict[str, Any]] = {
        "status": {},
        "replay": {"after_seq": after, "max_records": records},
        "cancel": {"reason": reason},
    }
    extra = extras[kind]
    if meta is not None:
        extra["meta"] = meta
    value = control(kind, **extra)
    assert canonical(ControlBody.parse(value).to_json()) == canonical(value)


NAMES = st.from_regex(CASE_ID, fullmatch=True).filter(lambda name: name not in RESERVED)
BLANKLESS = st.text(min_size=1, max_size=40).filter(lambda text: text.strip() != "")


@st.composite
def drafts(draw: st.DrawFn) -> dict[str, Any]:
    made = draw(st.booleans())
    uses = draw(st.lists(st.sampled_from([f"{'ab' * 32}:pkg/c{n}" for n in range(12)]), max_size=8, unique=True))
    tool: dict[str, Any] = {
        "name": draw(st.text(min_size=1, max_size=80).filter(lambda text: text.strip() != "")),
        "summary": draw(st.text(max_size=400)),
        "catalog": None if made else {"id": "cd" * 32 + ":pkg/tool", "artifact": draw(ARTIFACTS)},
        "skill": draw(BLANKLESS) if made else None,
        "uses": uses if made else [],
    }
    ids = draw(st.lists(NAMES, max_size=5, unique=True))
    cases = []
    for ident in ids:
        names = sorted(draw(st.lists(NAMES.filter(lambda name: len(name) <= 64), min_size=1, max_size=4, unique=True)))
        cases.append(
            {
                "id": ident,
                "kind": draw(st.sampled_from(["should-fire", "should-not-fire"])),
                "prompt": draw(BLANKLESS),
                "graders": [{"name": name, "text": draw(BLANKLESS)} for name in names],
            }
        )
    return {"v": "openagents.eval-draft.v1", "tool": tool, "cases": cases}


@fast
@given(value=drafts())
def test_a_parsed_draft_keeps_its_jcs_bytes(value: dict[str, Any]) -> None:
    assert canonical(Draft.parse(value).to_json()) == canonical(value)


@fast
@given(
    value=drafts(),
    runs=st.integers(min_value=1, max_value=3),
    check=st.none() | st.just("ef" * 32),
    validates=st.sampled_from(["absent", "null"]),
)
def test_a_parsed_hosted_input_keeps_its_jcs_bytes(
    value: dict[str, Any], runs: int, check: str | None, validates: str
) -> None:
    draft_suite = bool(value["cases"])
    run = published(subject="draft", draft=value, runs=runs, check=check)
    if draft_suite:
        run["suite"] = "draft"
        run["draft"]["cases"] = run["draft"]["cases"][:8]
    if validates == "null":
        run["validates"] = None
    assert canonical(parse_input(run).to_json()) == canonical(run)


@fast
@given(
    outcome=st.sampled_from(["completed-run", "completed-publish", "refused", "failed", "cancelled", "unknown"]),
    ident=IDS,
    attempt=st.integers(min_value=1, max_value=2**32 - 1),
    message=st.text(max_size=500),
    passed=st.integers(min_value=0, max_value=8),
    baseline=st.none() | st.integers(min_value=0, max_value=8),
    notes=st.lists(st.text(max_size=200), max_size=4),
)
def test_built_results_parse_back_to_themselves(
    outcome: str, ident: str, attempt: int, message: str, passed: int, baseline: int | None, notes: list[str]
) -> None:
    binding = Binding(ident, attempt, ident)
    root = ArtifactRef.of_bytes(ident.encode(), "application/json")
    report = ArtifactRef.of_bytes(message.encode(), "application/json", "openagents.eval-report.v1")
    run = RunOutput(report, EventRef("1" * 64, RUNNER, 3188), Headline(passed, baseline, 8), "fail", tuple(notes))
    built = {
        "completed-run": lambda: ResultBody.completed(binding, root, run),
        "completed-publish": lambda: ResultBody.completed(
            binding, root, PublishOutput(EventRef("2" * 64, "3" * 64, 3184), EventRef("4" * 64, RUNNER, 3189))
        ),
        "refused": lambda: ResultBody.refused(binding, Code.BUSY, message),
        "failed": lambda: ResultBody.failed(binding, root, message),
        "cancelled": lambda: ResultBody.cancelled(binding, root),
        "unknown": lambda: ResultBody.unknown(binding, root),
    }[outcome]()
    value = built.to_json()
    assert parse_answer(value) == built
    assert read_answer(canonical(value)) == built
