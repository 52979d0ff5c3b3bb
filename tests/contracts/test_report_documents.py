"""Partition, limitations, runs and arm locks: the engine's bytes, their refs, and their rules."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.report_documents import (
    LOCK_SCHEMA,
    PARTITION_SCHEMA,
    AgentPin,
    ArmLock,
    Limitations,
    Partition,
    RunArm,
    RunsDocument,
)
from eval_runner.contracts.strict_json import canonical, digest_bytes, read
from tests.support.report_documents import AGENT, entry, subject_lock
from tests.support.sample_reports import hex_of


def test_partition_bytes_are_the_engines_pretty_json() -> None:
    data, ref = Partition(development=("map-repo", "say-hello")).ref()
    assert (
        data
        == (
            json.dumps(
                {
                    "development": ["map-repo", "say-hello"],
                    "excluded": [],
                    "held_out": [],
                    "requires": [],
                    "v": PARTITION_SCHEMA,
                },
                indent=2,
            )
            + "\n"
        ).encode()
    )
    assert ref.matches(data)
    assert ref.schema == PARTITION_SCHEMA
    assert Partition.parse(read(data)) == Partition(development=("map-repo", "say-hello"))


def test_partition_keeps_calibration_and_meta_only_when_present() -> None:
    value = Partition(development=("a", "b"), held_out=("c",), calibration=("a",), meta={"m": 1}).to_json()
    assert canonical(Partition.parse(value).to_json()) == canonical(value)
    assert "calibration" not in Partition(development=("a",)).to_json()


@pytest.mark.parametrize(
    ("edit", "code"),
    [
        (lambda v: v.update(held_out=["a"]), Code.CONFLICT),
        (lambda v: v.update(development=["a", "a"]), Code.CONFLICT),
        (lambda v: v.update(excluded=["results"]), Code.MALFORMED),
        (lambda v: v.update(calibration=["a", "a"]), Code.CONFLICT),
        (lambda v: v.update(extra=[]), Code.UNSUPPORTED_FEATURE),
        (lambda v: v.update(v="openagents.eval-partition.v2"), Code.UNSUPPORTED_VERSION),
        (lambda v: v.pop("excluded"), Code.MALFORMED),
    ],
)
def test_partition_rules(edit: Callable[[Any], object], code: Code) -> None:
    value = Partition(development=("a", "b")).to_json()
    edit(value)
    with pytest.raises(ContractError) as caught:
        Partition.parse(value)
    assert caught.value.code is code


def test_limitations_round_trip_and_rules() -> None:
    limitations = Limitations(("No baseline arm ran, so the report claims no change.",), "1 run did not finish")
    data, ref = limitations.ref()
    assert ref.matches(data)
    assert Limitations.parse(read(data)) == limitations
    for bad, code in (([""], Code.MALFORMED), (["x" * 4097], Code.LIMIT_EXCEEDED), ([1], Code.MALFORMED)):
        value = limitations.to_json()
        value["limitations"] = bad
        with pytest.raises(ContractError) as caught:
            Limitations.parse(value)
        assert caught.value.code is code
    with pytest.raises(ContractError) as caught:
        Limitations(("x",), "").ref()
    assert caught.value.code is Code.MALFORMED


def test_runs_document_round_trips() -> None:
    runs = RunsDocument((entry(), entry(attempt=2), entry(RunArm.BASELINE)))
    data, ref = runs.ref()
    assert ref.matches(data)
    assert RunsDocument.parse(read(data)) == runs


@pytest.mark.parametrize(
    ("edit", "code"),
    [
        (lambda v: v["runs"].append(v["runs"][0]), Code.CONFLICT),
        (lambda v: v["runs"][0].update(arm="comparison"), Code.UNSUPPORTED_FEATURE),
        (lambda v: v["runs"][0].update(outcome="errored"), Code.UNSUPPORTED_FEATURE),
        (lambda v: v["runs"][0].update(outcome=None), Code.MALFORMED),
        (lambda v: v["runs"][0].update(attempt=0), Code.MALFORMED),
        (lambda v: v["runs"][0].update(case="../x"), Code.MALFORMED),
        (lambda v: v["runs"][0].update(receipts=[{}]), Code.MALFORMED),
        (lambda v: v["runs"][0].update(seconds=1), Code.UNSUPPORTED_FEATURE),
    ],
)
def test_runs_document_rules(edit: Callable[[Any], object], code: Code) -> None:
    value = RunsDocument((entry(),)).to_json()
    edit(value)
    with pytest.raises(ContractError) as caught:
        RunsDocument.parse(value)
    assert caught.value.code is code


def test_locks_round_trip_and_change_digest_with_the_agent() -> None:
    for lock in (subject_lock(), ArmLock(arm=RunArm.BASELINE, agent=AGENT)):
        data, ref = lock.ref()
        assert ref.schema == LOCK_SCHEMA
        assert ArmLock.parse_bytes(data) == lock
        assert data.endswith(b"}\n")
    baseline = ArmLock(arm=RunArm.BASELINE, agent=AGENT)
    redeployed = ArmLock(arm=RunArm.BASELINE, agent=AgentPin(digest=digest_bytes(b"coder 2"), size=7))
    assert baseline.ref()[1].digest != redeployed.ref()[1].digest
    assert "definition" not in baseline.to_json()


def test_a_lock_keeps_its_defaults_record() -> None:
    lock = ArmLock(arm=RunArm.BASELINE, agent=AGENT, defaults={"release": {"id": hex_of("d")}})
    assert ArmLock.parse(lock.to_json()).defaults == {"release": {"id": hex_of("d")}}


@pytest.mark.parametrize(
    ("start", "edit", "code"),
    [
        (subject_lock, lambda v: v.pop("definition"), Code.MALFORMED),
        (subject_lock, lambda v: v.update(arm="both"), Code.UNSUPPORTED_FEATURE),
        (subject_lock, lambda v: v["programs"][0].update(slug="Not A Slug"), Code.MALFORMED),
        (subject_lock, lambda v: v["agent"].update(size=-1), Code.MALFORMED),
        (subject_lock, lambda v: v.update(requires=["x"]), Code.UNSUPPORTED_FEATURE),
        (
            lambda: ArmLock(arm=RunArm.BASELINE, agent=AGENT),
            lambda v: v.update(definition={}),
            Code.UNSUPPORTED_FEATURE,
        ),
        (
            lambda: ArmLock(arm=RunArm.BASELINE, agent=AGENT),
            lambda v: v.update(programs=[{"slug": "demo", "digest": digest_bytes(b""), "size": 0}]),
            Code.MALFORMED,
        ),
    ],
)
def test_lock_rules(start: Callable[[], ArmLock], edit: Callable[[Any], object], code: Code) -> None:
    value = start().to_json()
    edit(value)
    with pytest.raises(ContractError) as caught:
        ArmLock.parse(value)
    assert caught.value.code is code
