"""The report: a complete constructed report round trips, and each §13.1 rule refuses once."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.refs import EventRef
from eval_runner.contracts.report import (
    MAX_MEASUREMENTS,
    MAX_REPORT_BYTES,
    REPORT_SCHEMA,
    Report,
    Verdict,
    report_ref,
)
from eval_runner.contracts.strict_json import JsonValue, canonical, digest_bytes, read
from tests.support.sample_reports import Spec, hex_of, report


def test_a_full_report_round_trips_and_its_digest_verifies() -> None:
    built = report()
    data, ref = report_ref(built)
    assert ref.schema == REPORT_SCHEMA
    assert ref.media_type == "application/json"
    assert ref.digest == digest_bytes(data)
    assert ref.size == len(data)
    assert data == canonical(read(data))
    parsed = Report.parse_bytes(data)
    assert parsed == built
    assert report_ref(parsed) == (data, ref)


def test_a_subject_only_report_is_inconclusive_and_round_trips() -> None:
    built = report(Spec(baseline=False, verdict=Verdict.INCONCLUSIVE))
    data, _ = report_ref(built)
    parsed = Report.parse_bytes(data)
    assert parsed.baseline is None
    assert parsed.coverage.baseline is None
    assert parsed.ext_eval.headline.baseline_passed is None


def test_trainer_is_the_requester_when_hosted() -> None:
    requester = EventRef(id=hex_of("request"), pubkey=hex_of("trainer"), kind=25920)
    assert report(Spec(requester=requester)).trainer == hex_of("trainer")
    assert report().trainer == hex_of("runner")


def test_other_meta_keys_are_kept_for_the_bytes() -> None:
    value = report().to_json()
    value["meta"]["note"] = {"anything": [1, 2.5, None]}
    parsed = Report.parse(value)
    assert parsed.meta_extra == {"note": {"anything": [1, 2.5, None]}}
    assert canonical(parsed.to_json()) == canonical(value)


def sample() -> dict[str, Any]:
    return report().to_json()


def subject_only() -> dict[str, Any]:
    return report(Spec(baseline=False, verdict=Verdict.INCONCLUSIVE)).to_json()


def measurement(value: dict[str, Any], index: int = 0) -> dict[str, Any]:
    found = value["measurements"][index]
    assert isinstance(found, dict)
    return found


def many_measurements(value: dict[str, Any]) -> None:
    value["measurements"] = [measurement(value)] * (MAX_MEASUREMENTS + 1)


RULES: list[tuple[str, Callable[[], dict[str, Any]], Callable[[Any], object], Code, str | None]] = [
    ("optimization key", sample, lambda v: v.update(optimization={}), Code.UNSUPPORTED_FEATURE, "optimization"),
    ("unknown key", sample, lambda v: v.update(score=1), Code.UNSUPPORTED_FEATURE, "score"),
    ("missing key", sample, lambda v: v.pop("runs"), Code.MALFORMED, "runs"),
    ("version", sample, lambda v: v.update(v="openagents.eval-report.v2"), Code.UNSUPPORTED_VERSION, "v"),
    ("requires", sample, lambda v: v.update(requires=["x"]), Code.UNSUPPORTED_FEATURE, "requires"),
    ("suite schema", sample, lambda v: v["suite"].update(schema="x.v1"), Code.IDENTITY_MISMATCH, "suite.schema"),
    ("suite no schema", sample, lambda v: v["suite"].pop("schema"), Code.IDENTITY_MISMATCH, "suite.schema"),
    (
        "suite event kind",
        sample,
        lambda v: v["suite"]["event"].update(kind=3189),
        Code.IDENTITY_MISMATCH,
        "suite.event.kind",
    ),
    ("partition", sample, lambda v: v["partition"].pop("digest"), Code.MALFORMED, "partition.digest"),
    (
        "subject event kind",
        sample,
        lambda v: v["subject"]["definition"]["event"].update(kind=1),
        Code.IDENTITY_MISMATCH,
        "subject.definition.event.kind",
    ),
    ("subject key", sample, lambda v: v["subject"].update(extra=1), Code.UNSUPPORTED_FEATURE, "subject.extra"),
    ("baseline shape", sample, lambda v: v["baseline"].pop("lock"), Code.MALFORMED, "baseline.lock"),
    ("evaluator", sample, lambda v: v.update(evaluator="local"), Code.MALFORMED, "evaluator"),
    ("time order", sample, lambda v: v.update(started_at=v["ended_at"] + 1), Code.MALFORMED, "started_at"),
    ("time negative", sample, lambda v: v.update(started_at=-1), Code.MALFORMED, "started_at"),
    (
        "coverage sum",
        sample,
        lambda v: v["coverage"]["subject"].update(failed=9),
        Code.IDENTITY_MISMATCH,
        "coverage.subject",
    ),
    (
        "coverage count key",
        sample,
        lambda v: v["coverage"]["subject"].update(skipped=0),
        Code.UNSUPPORTED_FEATURE,
        "coverage.subject.skipped",
    ),
    (
        "coverage negative",
        sample,
        lambda v: v["coverage"]["baseline"].update(excluded=-1),
        Code.MALFORMED,
        "coverage.baseline.excluded",
    ),
    (
        "coverage baseline null",
        sample,
        lambda v: v["coverage"].update(baseline=None),
        Code.IDENTITY_MISMATCH,
        "coverage.baseline",
    ),
    (
        "coverage baseline without baseline",
        subject_only,
        lambda v: v["coverage"].update(baseline=v["coverage"]["subject"]),
        Code.IDENTITY_MISMATCH,
        "coverage.baseline",
    ),
    (
        "baseline measurement without baseline",
        subject_only,
        lambda v: measurement(v).update(arm="baseline"),
        Code.IDENTITY_MISMATCH,
        "measurements[0].arm",
    ),
    (
        "comparison without baseline",
        subject_only,
        lambda v: measurement(v).update(arm="comparison"),
        Code.IDENTITY_MISMATCH,
        "measurements[0].arm",
    ),
    ("arm word", sample, lambda v: measurement(v).update(arm="both"), Code.UNSUPPORTED_FEATURE, "measurements[0].arm"),
    ("metric empty", sample, lambda v: measurement(v).update(metric=""), Code.MALFORMED, "measurements[0].metric"),
    (
        "metric long",
        sample,
        lambda v: measurement(v).update(metric="m" * 129),
        Code.MALFORMED,
        "measurements[0].metric",
    ),
    ("value text", sample, lambda v: measurement(v).update(value="2"), Code.MALFORMED, "measurements[0].value"),
    ("value bool", sample, lambda v: measurement(v).update(value=True), Code.MALFORMED, "measurements[0].value"),
    ("value nan", sample, lambda v: measurement(v).update(value=math.nan), Code.MALFORMED, "measurements[0].value"),
    ("value inf", sample, lambda v: measurement(v).update(value=math.inf), Code.MALFORMED, "measurements[0].value"),
    (
        "denominator",
        sample,
        lambda v: measurement(v).update(denominator=-1),
        Code.MALFORMED,
        "measurements[0].denominator",
    ),
    (
        "unknown count",
        sample,
        lambda v: measurement(v).update(unknown_count=0.5),
        Code.MALFORMED,
        "measurements[0].unknown_count",
    ),
    (
        "uncertainty",
        sample,
        lambda v: measurement(v).update(uncertainty="95%"),
        Code.MALFORMED,
        "measurements[0].uncertainty",
    ),
    (
        "evidence item",
        sample,
        lambda v: measurement(v).update(evidence=["runs.json"]),
        Code.MALFORMED,
        "measurements[0].evidence[0]",
    ),
    ("measurement key", sample, lambda v: measurement(v).update(unit="usd"), Code.UNSUPPORTED_FEATURE, None),
    ("too many measurements", sample, many_measurements, Code.LIMIT_EXCEEDED, "measurements"),
    ("verdict word", sample, lambda v: v.update(verdict="better"), Code.UNSUPPORTED_FEATURE, "verdict"),
    ("verdict without baseline", subject_only, lambda v: v.update(verdict="pass"), Code.IDENTITY_MISMATCH, "verdict"),
    ("meta not object", sample, lambda v: v.update(meta=[]), Code.MALFORMED, "meta"),
    ("meta without ext_eval", sample, lambda v: v["meta"].pop("ext_eval"), Code.MALFORMED, "meta.ext_eval"),
    (
        "headline follows baseline",
        sample,
        lambda v: v["meta"]["ext_eval"]["headline"].update(baseline_passed=None),
        Code.IDENTITY_MISMATCH,
        "meta.ext_eval.headline.baseline_passed",
    ),
    (
        "profile version",
        sample,
        lambda v: v["meta"]["ext_eval"].update(v="x"),
        Code.UNSUPPORTED_VERSION,
        "meta.ext_eval.v",
    ),
]


@pytest.mark.parametrize(
    ("start", "edit", "code", "path"), [rule[1:] for rule in RULES], ids=[rule[0] for rule in RULES]
)
def test_each_rule_refuses(
    start: Callable[[], dict[str, Any]], edit: Callable[[Any], object], code: Code, path: str | None
) -> None:
    value = start()
    Report.parse(value)  # the starting point is valid, so the edit is what is refused
    edit(value)
    with pytest.raises(ContractError) as caught:
        Report.parse(value)
    assert caught.value.code is code
    if path is not None:
        assert caught.value.path == path


def padded(size: int) -> dict[str, JsonValue]:
    """The sample report with an inert meta note making its JCS bytes exactly `size` long."""
    value = sample()
    value["meta"]["note"] = ""
    value["meta"]["note"] = "x" * (size - len(canonical(value)))
    assert len(canonical(value)) == size
    return value


def test_a_reader_takes_64_kib_and_refuses_one_byte_more() -> None:
    assert Report.parse_bytes(canonical(padded(MAX_REPORT_BYTES))).meta_extra["note"]
    with pytest.raises(ContractError) as caught:
        Report.parse_bytes(canonical(padded(MAX_REPORT_BYTES + 1)))
    assert caught.value.code is Code.LIMIT_EXCEEDED
    with pytest.raises(ContractError) as caught:
        report_ref(Report.parse(padded(MAX_REPORT_BYTES + 1)))
    assert caught.value.code is Code.LIMIT_EXCEEDED


def test_parse_bytes_is_strict_json() -> None:
    data = canonical(sample())
    with pytest.raises(ContractError) as caught:
        Report.parse_bytes(data[:-1] + b',"v":"again"}')
    assert caught.value.code is Code.MALFORMED


def test_report_ref_refuses_a_record_a_reader_would_refuse() -> None:
    built = report(Spec(baseline=False, verdict=Verdict.INCONCLUSIVE))
    with pytest.raises(ContractError) as caught:
        report_ref(replace(built, verdict=Verdict.PASS))
    assert caught.value.code is Code.IDENTITY_MISMATCH
