"""Property tests for the report-side parsers: whatever JSON arrives, a parser either returns a record
whose JCS bytes are the input's, or raises ContractError; never another exception.

Inputs are arbitrary JSON values and valid documents mutated once (a key dropped, a key added, a value
replaced anywhere in the tree), which reach far more of each parser than random values alone.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eval_runner.contracts.case_manifest import CaseManifest
from eval_runner.contracts.envelope import Envelope, route
from eval_runner.contracts.errors import ContractError
from eval_runner.contracts.ext_eval import ExtEval
from eval_runner.contracts.package import Manifest
from eval_runner.contracts.publication import publication, read_publication
from eval_runner.contracts.report import Report
from eval_runner.contracts.report_documents import ArmLock, Limitations, Partition, RunsDocument
from eval_runner.contracts.strict_json import MAX_SAFE_INTEGER, JsonValue, canonical, read
from eval_runner.contracts.suite import Suite
from eval_runner.nostr.event import sign
from tests.support.publication_events import RUNNER, key, report_bytes, signed
from tests.support.reference_files import load
from tests.support.report_documents import entry, subject_lock
from tests.support.report_envelopes import sealed_report
from tests.support.sample_reports import Spec, report
from tests.support.suite_packages import built

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    # Integral floats at 2^53 and beyond have no strict-JSON round trip (docs/decisions.md).
    | st.floats(min_value=-(2.0**53) + 1, max_value=2.0**53 - 1)
    | st.text(max_size=12)
    | st.sampled_from(["subject", "baseline", "should-fire", "sha256:" + "0" * 64, "0" * 64, "content", "pass"])
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)

Parser = Callable[[JsonValue], Any]

PARSERS: dict[str, tuple[Parser, Callable[[], JsonValue]]] = {
    "ext_eval": (ExtEval.parse, lambda: load("eval-ext/ext-eval/valid/reliance-and-defaults.json")),
    "case_manifest": (CaseManifest.parse, lambda: load("eval-ext/eval-case/valid/two-cases.json")),
    "report": (Report.parse, lambda: report().to_json()),
    "envelope": (Envelope.parse, lambda: sealed_report().to_json()),
    "partition": (Partition.parse, lambda: Partition(("a", "b"), ("c",)).to_json()),
    "limitations": (Limitations.parse, lambda: Limitations(("x",), None).to_json()),
    "runs": (RunsDocument.parse, lambda: RunsDocument((entry(),)).to_json()),
    "lock": (ArmLock.parse, lambda: subject_lock().to_json()),
    "suite": (Suite.parse, lambda: built()[0].to_json()),
    "manifest": (Manifest.parse, lambda: built()[5].to_json()),
}
VALID = {name: start() for name, (_, start) in PARSERS.items()}


def containers(value: JsonValue) -> list[JsonValue]:
    """Every object and array in the tree, the root first."""
    found = [value]
    for child in value.values() if isinstance(value, dict) else value if isinstance(value, list) else ():
        found.extend(containers(child))
    return [item for item in found if isinstance(item, dict | list)]


@st.composite
def mutated(draw: st.DrawFn, document: JsonValue) -> JsonValue:
    """A copy of a valid document with one key dropped, one key added, or one value replaced."""
    value = copy.deepcopy(document)
    target = draw(st.sampled_from(containers(value)))
    replacement = draw(JSON)
    if isinstance(target, dict):
        keys = sorted(target)
        action = draw(st.sampled_from(["drop", "add", "replace"] if keys else ["add"]))
        if action == "add":
            target[draw(st.text(max_size=8))] = replacement
        else:
            chosen = draw(st.sampled_from(keys))
            if action == "drop":
                del target[chosen]
            else:
                target[chosen] = replacement
    elif target:
        target[draw(st.integers(0, len(target) - 1))] = replacement
    else:
        target.append(replacement)
    return value


def check(parse: Parser, value: JsonValue) -> None:
    try:
        record = parse(value)
    except ContractError:
        return
    # Accepted: the record writes back the same JCS bytes, and reading those again is stable.
    assert canonical(record.to_json()) == canonical(value)
    assert parse(read(canonical(record.to_json()))) == record


def test_every_starting_document_is_valid() -> None:
    for name, (parse, _) in PARSERS.items():
        assert canonical(parse(VALID[name]).to_json()) == canonical(VALID[name])


@given(name=st.sampled_from(sorted(PARSERS)), value=JSON)
def test_arbitrary_json_only_ever_raises_contract_error(name: str, value: JsonValue) -> None:
    check(PARSERS[name][0], value)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(sorted(PARSERS)))
def test_mutated_documents_only_ever_raise_contract_error(data: st.DataObject, name: str) -> None:
    check(PARSERS[name][0], data.draw(mutated(VALID[name])))


@given(JSON)
def test_tag_lists_only_ever_raise_contract_error(tags: JsonValue) -> None:
    with contextlib.suppress(ContractError):
        route(tags)


PUBLISHED = signed(publication(report_bytes(Spec(evaluator=RUNNER))))


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_publications_only_ever_raise_contract_error(data: st.DataObject) -> None:
    content = data.draw(mutated(read(PUBLISHED.content)))
    try:
        event = sign(key("runner"), PUBLISHED.kind, PUBLISHED.tags, canonical(content).decode(), 1)
        result = read_publication(event)
    except ContractError:
        return
    assert result.report_bytes == read(PUBLISHED.content)["meta"]["ext_eval_report"].encode()
