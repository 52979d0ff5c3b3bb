"""The 3189 publication: a correctly built, signed result passes every reader check, and each rule of
§16.2/§16.3 broken once (then re-signed, so only that rule fails) is refused with the reference's code."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from eval_runner.contracts.errors import Code, ContractError
from eval_runner.contracts.publication import (
    MAX_EVENT_MESSAGE_BYTES,
    MAX_REQUEST_BYTES,
    PUBLICATION_KIND,
    Citation,
    Cites,
    check_relay_size,
    check_request,
    publication,
    read_publication,
    request_size,
    verified_trainer,
)
from eval_runner.contracts.refs import EventRef
from eval_runner.contracts.report import MAX_REPORT_BYTES, Report
from eval_runner.contracts.strict_json import JsonValue, canonical, digest_bytes, read
from eval_runner.nostr.event import Event, sign
from tests.support.publication_events import RUNNER, key, pubkey, report_bytes, signed
from tests.support.sample_reports import AT, Spec, hex_of, report


def request(trainer: str = "trainer", worker: str = RUNNER, content: str = "ciphertext") -> Event:
    return sign(key(trainer), 25920, [["p", worker]], content, AT - 700)


def requester(asked: Event) -> EventRef:
    return EventRef(id=asked.id, pubkey=asked.pubkey, kind=asked.kind)


def hosted(asked: Event | None = None) -> tuple[Event, Event]:
    asked = asked or request()
    data = report_bytes(Spec(evaluator=RUNNER, requester=requester(asked)))
    return signed(publication(data, request=asked)), asked


def resign(event: Event, edit: Callable[[list[list[str]], dict[str, Any]], object], label: str = "runner") -> Event:
    """The same event with tags/content edited, signed again so only the edited rule can fail."""
    tags = [list(tag) for tag in event.tags]
    content = read(event.content)
    edit(tags, content)
    return sign(key(label), event.kind, tags, canonical(content).decode(), event.created_at)


def refused(event: Event) -> ContractError:
    with pytest.raises(ContractError) as caught:
        read_publication(event)
    return caught.value


def test_a_built_publication_passes_every_reader_check() -> None:
    data = report_bytes()
    event = signed(publication(data))
    result = read_publication(event)
    assert result.report_bytes == data
    assert result.report_ref.digest == digest_bytes(data)
    assert result.report == Report.parse_bytes(data)
    assert result.evaluator == RUNNER == result.trainer
    assert result.suite_release.id == hex_of("suite-release")
    assert result.subject_release is not None
    assert result.subject == result.report.subject.definition
    assert (result.cites, result.request, result.supersedes) == (None, None, ())
    assert [list(tag) for tag in event.tags] == [
        ["t", "oa:eval:v1"],
        ["t", "oa:ext-eval:v1"],
        ["x", digest_bytes(data).removeprefix("sha256:")],
        ["e", hex_of("suite-release"), "", "suite"],
        ["e", hex_of("subject-release"), "", "subject"],
    ]
    assert event.content == canonical(read(event.content)).decode()
    assert read(event.content)["meta"] == {"ext_eval_report": data.decode()}


def test_a_hosted_publication_carries_its_request_and_credits_the_trainer() -> None:
    event, asked = hosted()
    result = read_publication(event)
    assert result.request == asked
    assert result.trainer == pubkey("trainer")
    assert verified_trainer(result) == pubkey("trainer")
    assert event.tags[-2:] == (("e", asked.id, "", "request"), ("p", pubkey("trainer")))


def test_a_hosted_result_without_the_inline_request_needs_a_held_copy() -> None:
    asked = request()
    data = report_bytes(Spec(evaluator=RUNNER, requester=requester(asked)))
    result = read_publication(signed(publication(data)))
    assert result.request is None
    assert verified_trainer(result, (asked,)) == pubkey("trainer")
    with pytest.raises(ContractError) as caught:
        verified_trainer(result)
    assert caught.value.code is Code.CONTENT_UNAVAILABLE
    with pytest.raises(ContractError) as caught:
        verified_trainer(result, (request("mallory"),))
    assert caught.value.code is Code.CONTENT_UNAVAILABLE


@pytest.mark.parametrize("marker", list(Cites))
def test_a_citation_is_read_back(marker: Cites) -> None:
    cited = Citation(marker, hex_of("original"))
    result = read_publication(signed(publication(report_bytes(), cites=cited)))
    assert result.cites == cited


def swap_marker(tags: list[list[str]], _: object) -> None:
    tags[1][1] = "oa:xp:run:v1"


def drop(predicate: Callable[[list[str]], bool]) -> Callable[[list[list[str]], object], None]:
    def edit(tags: list[list[str]], _: object) -> None:
        tags[:] = [tag for tag in tags if not predicate(tag)]

    return edit


def add(tag: list[str]) -> Callable[[list[list[str]], object], None]:
    return lambda tags, _: tags.append(tag)


def content_edit(edit: Callable[[dict[str, Any]], object]) -> Callable[[list[list[str]], dict[str, Any]], object]:
    return lambda _, content: edit(content)


def tampered_report(content: dict[str, Any]) -> None:
    content["meta"]["ext_eval_report"] = content["meta"]["ext_eval_report"].replace('"pass"', '"fail"')


PLAIN_RULES: list[tuple[str, Callable[[list[list[str]], dict[str, Any]], object], Code]] = [
    ("marker swapped", swap_marker, Code.IDENTITY_MISMATCH),
    ("marker missing", drop(lambda t: t == ["t", "oa:ext-eval:v1"]), Code.IDENTITY_MISMATCH),
    ("extra oa marker", add(["t", "oa:kb:entry:v1"]), Code.IDENTITY_MISMATCH),
    ("x missing", drop(lambda t: t[0] == "x"), Code.IDENTITY_MISMATCH),
    ("x mismatch", lambda tags, _: tags[2].__setitem__(1, "0" * 64), Code.IDENTITY_MISMATCH),
    ("x twice", lambda tags, _: tags.append(list(tags[2])), Code.IDENTITY_MISMATCH),
    ("suite e tag missing", drop(lambda t: t[-1] == "suite"), Code.MALFORMED),
    ("suite e tag other id", lambda tags, _: tags[3].__setitem__(1, hex_of("another")), Code.IDENTITY_MISMATCH),
    ("suite e tag twice", lambda tags, _: tags.append(list(tags[3])), Code.MALFORMED),
    ("unmarked e tag", add(["e", hex_of("loose")]), Code.UNSUPPORTED_FEATURE),
    ("e tag other marker", add(["e", hex_of("loose"), "", "reply"]), Code.UNSUPPORTED_FEATURE),
    ("e tag bad id", add(["e", "nothex", "", "check"]), Code.MALFORMED),
    ("subject e tag missing", drop(lambda t: t[-1] == "subject"), Code.IDENTITY_MISMATCH),
    (
        "two citations",
        lambda tags, _: tags.extend([["e", hex_of("a"), "", "check"], ["e", hex_of("b"), "", "validates"]]),
        Code.MALFORMED,
    ),
    ("p tag without a requester", add(["p", pubkey("trainer")]), Code.IDENTITY_MISMATCH),
    ("request e tag without a requester", add(["e", hex_of("r"), "", "request"]), Code.IDENTITY_MISMATCH),
    ("report digest mismatch", content_edit(tampered_report), Code.IDENTITY_MISMATCH),
    ("report missing", content_edit(lambda c: c["meta"].pop("ext_eval_report")), Code.CONTENT_UNAVAILABLE),
    ("report not a string", content_edit(lambda c: c["meta"].update(ext_eval_report={})), Code.CONTENT_UNAVAILABLE),
    ("meta extra key", content_edit(lambda c: c["meta"].update(note="x")), Code.UNSUPPORTED_FEATURE),
    ("body extra key", content_edit(lambda c: c.update(note="x")), Code.UNSUPPORTED_FEATURE),
    ("body version", content_edit(lambda c: c.update(v="openagents.eval-publication.v2")), Code.UNSUPPORTED_VERSION),
    ("body requires", content_edit(lambda c: c.update(requires=["x"])), Code.UNSUPPORTED_FEATURE),
    ("report schema", content_edit(lambda c: c["report"].update(schema="x.v1")), Code.IDENTITY_MISMATCH),
    ("subject not the report's", content_edit(lambda c: c["subject"].pop("event")), Code.IDENTITY_MISMATCH),
    ("subject not a definition", content_edit(lambda c: c.update(subject={})), Code.MALFORMED),
    (
        "supersedes another kind",
        content_edit(lambda c: c.update(supersedes=[{"id": hex_of("o"), "pubkey": RUNNER, "kind": 3184}])),
        Code.IDENTITY_MISMATCH,
    ),
    ("supersedes not a list", content_edit(lambda c: c.update(supersedes={})), Code.MALFORMED),
]


@pytest.mark.parametrize(("edit", "code"), [rule[1:] for rule in PLAIN_RULES], ids=[rule[0] for rule in PLAIN_RULES])
def test_each_rule_refuses(edit: Callable[[list[list[str]], dict[str, Any]], object], code: Code) -> None:
    event = signed(publication(report_bytes()))
    read_publication(resign(event, lambda _t, _c: None))  # re-signing alone changes nothing
    assert refused(resign(event, edit)).code is code


def test_supersedes_pointers_are_read() -> None:
    earlier = EventRef(id=hex_of("earlier"), pubkey=RUNNER, kind=PUBLICATION_KIND)
    edit = content_edit(lambda c: c.update(supersedes=[earlier.to_json()]))
    assert read_publication(resign(signed(publication(report_bytes())), edit)).supersedes == (earlier,)


def test_the_kind_and_signature_are_checked_first() -> None:
    event = signed(publication(report_bytes()))
    assert refused(sign(key("runner"), 1, event.tags, event.content, AT)).code is Code.IDENTITY_MISMATCH
    edited = event.content.replace("eval-publication.v1", "eval-publication.v2")
    assert edited != event.content
    assert refused(replace(event, content=edited)).code is Code.IDENTITY_MISMATCH
    assert refused(replace(event, sig="00" * 64)).code is Code.IDENTITY_MISMATCH


def test_a_signer_who_is_not_the_evaluator_is_refused() -> None:
    event = signed(publication(report_bytes()), label="mallory")
    error = refused(event)
    assert (error.code, error.path) == (Code.IDENTITY_MISMATCH, "pubkey")


def with_report(content: dict[str, Any], tags: list[list[str]], text: str) -> None:
    digest = digest_bytes(text.encode())
    content["report"].update(digest=digest, size=len(text.encode()))
    content["meta"]["ext_eval_report"] = text
    for tag in tags:
        if tag[0] == "x":
            tag[1] = digest.removeprefix("sha256:")


def test_a_report_over_64_kib_is_refused_before_its_digest() -> None:
    value: dict[str, JsonValue] = report(Spec(evaluator=RUNNER)).to_json()
    value["meta"]["note"] = "x" * MAX_REPORT_BYTES
    text = canonical(value).decode()
    with pytest.raises(ContractError) as caught:
        publication(text.encode())
    assert caught.value.code is Code.LIMIT_EXCEEDED
    event = resign(signed(publication(report_bytes())), lambda tags, content: with_report(content, tags, text))
    error = refused(event)
    assert (error.code, error.path) == (Code.LIMIT_EXCEEDED, "meta.ext_eval_report")


def test_a_report_without_a_suite_release_cannot_be_published() -> None:
    data = report_bytes(Spec(evaluator=RUNNER, suite_release=None))
    with pytest.raises(ContractError) as caught:
        publication(data)
    assert caught.value.code is Code.MALFORMED
    forged = resign(
        signed(publication(report_bytes())), lambda tags, content: with_report(content, tags, data.decode())
    )
    assert refused(forged).code is Code.MALFORMED


def test_a_report_without_a_published_subject_carries_no_subject_tag() -> None:
    event = signed(publication(report_bytes(Spec(evaluator=RUNNER, subject_release=None))))
    assert read_publication(event).subject_release is None
    assert not [tag for tag in event.tags if tag[-1] == "subject"]
    assert refused(resign(event, add(["e", hex_of("subject-release"), "", "subject"]))).code is Code.IDENTITY_MISMATCH


HOSTED_RULES: list[tuple[str, Callable[[list[list[str]], dict[str, Any]], object], Code]] = [
    ("p tag dropped", drop(lambda t: t[0] == "p"), Code.IDENTITY_MISMATCH),
    ("request e tag dropped", drop(lambda t: t[-1] == "request"), Code.IDENTITY_MISMATCH),
    ("second p tag", add(["p", pubkey("mallory")]), Code.IDENTITY_MISMATCH),
    (
        "forged request signature",
        content_edit(lambda c: c["meta"]["ext_eval_request"].update(content="other ciphertext")),
        Code.IDENTITY_MISMATCH,
    ),
    (
        "another trainer's request",
        content_edit(lambda c: c["meta"].update(ext_eval_request=request("mallory").to_json())),
        Code.IDENTITY_MISMATCH,
    ),
    (
        "request not an event",
        content_edit(lambda c: c["meta"]["ext_eval_request"].pop("sig")),
        Code.MALFORMED,
    ),
]


@pytest.mark.parametrize(("edit", "code"), [rule[1:] for rule in HOSTED_RULES], ids=[rule[0] for rule in HOSTED_RULES])
def test_each_hosted_rule_refuses(edit: Callable[[list[list[str]], dict[str, Any]], object], code: Code) -> None:
    event, _ = hosted()
    assert refused(resign(event, edit)).code is code


def test_a_request_sent_to_another_worker_is_refused() -> None:
    elsewhere = request(worker=pubkey("someone-else"))
    data = report_bytes(Spec(evaluator=RUNNER, requester=requester(elsewhere)))
    with pytest.raises(ContractError) as caught:
        publication(data, request=elsewhere)
    assert caught.value.code is Code.IDENTITY_MISMATCH
    good, _ = hosted()
    forged = resign(
        signed(publication(data)),
        content_edit(lambda c: c["meta"].update(ext_eval_request=elsewhere.to_json())),
    )
    assert refused(forged).code is Code.IDENTITY_MISMATCH
    assert read_publication(good).request is not None


def test_only_a_hosted_result_carries_a_request() -> None:
    asked = request()
    with pytest.raises(ContractError) as caught:
        publication(report_bytes(), request=asked)
    assert caught.value.code is Code.IDENTITY_MISMATCH
    smuggled = resign(
        signed(publication(report_bytes())),
        content_edit(lambda c: c["meta"].update(ext_eval_request=asked.to_json())),
    )
    assert refused(smuggled).code is Code.IDENTITY_MISMATCH


def test_an_inline_request_over_96_kib_is_refused() -> None:
    asked = request(content="A" * MAX_REQUEST_BYTES)
    assert request_size(asked) > MAX_REQUEST_BYTES
    data = report_bytes(Spec(evaluator=RUNNER, requester=requester(asked)))
    with pytest.raises(ContractError) as caught:
        check_request(Report.parse_bytes(data), asked)
    assert caught.value.code is Code.LIMIT_EXCEEDED
    event = resign(
        signed(publication(data)),
        content_edit(lambda c: c["meta"].update(ext_eval_request=asked.to_json())),
    )
    assert refused(event).code is Code.LIMIT_EXCEEDED


def test_a_bad_citation_id_is_refused_by_the_builder() -> None:
    with pytest.raises(ContractError) as caught:
        publication(report_bytes(), cites=Citation(Cites.CHECK, "not-an-id"))
    assert caught.value.code is Code.MALFORMED


def test_a_result_the_relay_cannot_hold_is_too_large() -> None:
    event, _ = hosted()
    check_relay_size(event)
    # A 64 KiB report and a 96 KiB request fit the wire rules but not one relay frame.
    asked = request(content="A" * (MAX_REQUEST_BYTES - 600))
    value: dict[str, JsonValue] = report(Spec(evaluator=RUNNER, requester=requester(asked))).to_json()
    value["meta"]["note"] = "x" * (MAX_REPORT_BYTES - len(canonical(value)) - 20)
    big = signed(publication(canonical(value), request=asked))
    assert len(big.content) > MAX_EVENT_MESSAGE_BYTES
    read_publication(big)
    with pytest.raises(ContractError) as caught:
        check_relay_size(big)
    assert caught.value.code is Code.TOO_LARGE
