"""The sealed artifact envelope body and the 3188 tag rules (wire.md §15)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from eval_runner.contracts.envelope import (
    ARTIFACT_MARKER,
    MAX_CONTENT_CHARS,
    MAX_PLAINTEXT_BYTES,
    Envelope,
    Route,
    build,
    check_content,
    route,
    tags,
)
from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.refs import ArtifactRef
from eval_runner.contracts.report import report_ref
from eval_runner.contracts.strict_json import canonical, read
from tests.support.report_envelopes import sealed_report
from tests.support.sample_reports import AT, hex_of, report

T = hex_of("trainer")
MAILBOX = hex_of("mailbox")


def test_a_sealed_report_names_the_report_ref_and_round_trips() -> None:
    envelope = sealed_report()
    data, ref = report_ref(report())
    assert envelope.artifact == ref
    assert envelope.inline_bytes() == data
    plaintext = envelope.to_bytes()
    assert plaintext == canonical(read(plaintext))
    assert Envelope.parse_bytes(plaintext) == envelope
    assert build(ref, report().to_json(), AT, AT + 1) == Envelope(ref, report().to_json(), AT, AT + 1).to_bytes()


def test_an_envelope_without_inline_bytes_names_them_only() -> None:
    ref = ArtifactRef.of_bytes(b"binary", "application/octet-stream", "openagents.example.v1")
    envelope = Envelope.parse_bytes(build(ref, None, 100, 200))
    assert envelope.inline is None
    assert envelope.inline_bytes() is None


@pytest.mark.parametrize(
    ("edit", "code", "path"),
    [
        (lambda v: v["inline"].update(verdict="fail"), Code.IDENTITY_MISMATCH, "inline"),
        (lambda v: v["artifact"].update(size=v["artifact"]["size"] + 1), Code.IDENTITY_MISMATCH, "inline"),
        (lambda v: v.update(inline=[]), Code.MALFORMED, "inline"),
        (lambda v: v.update(inline="{}"), Code.MALFORMED, "inline"),
        (lambda v: v["artifact"].pop("schema"), Code.MALFORMED, "artifact.schema"),
        (lambda v: v.update(retain_until=v["issued_at"]), Code.MALFORMED, "retain_until"),
        (lambda v: v.update(issued_at=-1), Code.MALFORMED, "issued_at"),
        (lambda v: v.update(extra=1), Code.UNSUPPORTED_FEATURE, "extra"),
        (lambda v: v.update(v="openagents.artifact-envelope.v2"), Code.UNSUPPORTED_VERSION, "v"),
        (lambda v: v.update(requires=["x"]), Code.UNSUPPORTED_FEATURE, "requires"),
        (lambda v: v.pop("inline"), Code.MALFORMED, "inline"),
        (lambda v: v.update(meta="note"), Code.MALFORMED, "meta"),
    ],
)
def test_body_rules(edit: Callable[[Any], object], code: Code, path: str) -> None:
    value = sealed_report().to_json()
    edit(value)
    with pytest.raises(ContractError) as caught:
        Envelope.parse(value)
    assert (caught.value.code, caught.value.path) == (code, path)


def test_meta_is_kept_for_the_bytes() -> None:
    value = sealed_report().to_json()
    value["meta"] = {"note": 1}
    assert canonical(Envelope.parse(value).to_json()) == canonical(value)


def test_a_plaintext_nip44_cannot_carry_is_refused() -> None:
    big = {"text": "x" * MAX_PLAINTEXT_BYTES}
    with pytest.raises(ContractError) as caught:
        Envelope.of_inline(big, "openagents.example.v1", 1, 2).to_bytes()
    assert caught.value.code is Code.LIMIT_EXCEEDED


def test_tags_in_reference_order_and_route() -> None:
    written = tags(T, MAILBOX)
    assert written == [["p", T], ["h", MAILBOX], ["t", ARTIFACT_MARKER]]
    assert route(written) == Route(recipient=T, mailbox=MAILBOX)
    assert route([written[2], written[0], written[1]]) == Route(recipient=T, mailbox=MAILBOX)


@pytest.mark.parametrize(
    ("event_tags", "code"),
    [
        ([["p", T], ["h", MAILBOX]], Code.MALFORMED),
        ([["p", T], ["t", ARTIFACT_MARKER]], Code.MALFORMED),
        ([["h", MAILBOX], ["t", ARTIFACT_MARKER]], Code.MALFORMED),
        ([["p", T], ["p", T], ["h", MAILBOX], ["t", ARTIFACT_MARKER]], Code.UNSUPPORTED_FEATURE),
        ([["p", T], ["h", MAILBOX], ["h", MAILBOX], ["t", ARTIFACT_MARKER]], Code.UNSUPPORTED_FEATURE),
        ([["p", T], ["h", MAILBOX], ["t", ARTIFACT_MARKER], ["e", MAILBOX]], Code.UNSUPPORTED_FEATURE),
        ([["p", T], ["h", MAILBOX], ["t", ARTIFACT_MARKER], ["t", "other"]], Code.MALFORMED),
        ([["p", T], ["h", MAILBOX], ["t", ARTIFACT_MARKER], ["t", ARTIFACT_MARKER]], Code.MALFORMED),
        ([["p", T, "wss://relay"], ["h", MAILBOX], ["t", ARTIFACT_MARKER]], Code.MALFORMED),
        ([["p", T.upper()], ["h", MAILBOX], ["t", ARTIFACT_MARKER]], Code.MALFORMED),
        ([["p", T], ["h", "short"], ["t", ARTIFACT_MARKER]], Code.MALFORMED),
        ([["p", T], ["h", MAILBOX], ["t", ARTIFACT_MARKER, "x"]], Code.MALFORMED),
        ([["p", T], ["h", MAILBOX], []], Code.MALFORMED),
        ([["p", T], ["h", MAILBOX], [3, ARTIFACT_MARKER]], Code.MALFORMED),
        ("p", Code.MALFORMED),
    ],
)
def test_tag_rules(event_tags: Any, code: Code) -> None:
    with pytest.raises(ContractError) as caught:
        route(event_tags)
    assert caught.value.code is code


def test_content_bound() -> None:
    check_content("A" * MAX_CONTENT_CHARS)
    with pytest.raises(ContractError) as caught:
        check_content("A" * (MAX_CONTENT_CHARS + 1))
    assert caught.value.code is Code.LIMIT_EXCEEDED
