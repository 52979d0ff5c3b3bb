"""NIP-01 events: the id preimage, signing and verification, tampering, strict shape parsing."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from typing import Any

import pytest

from eval_runner.nostr import Event, EventError, SecretKey, compute_id, first_tag_value, sign, tag_values

PK = "c6047f9441ed7d6d3045406e95c07cd85c778e4b8cef3ca7abac09b95c709ee5"  # secret 2; alice is secret 1


def test_id_preimage_escaping_matches_nip01() -> None:
    content = 'a\nb"c\\d\x01e\u2028é\t\x7f'
    tags = [["p", "x\ry"], ["t"]]
    expected = '[0,"' + PK + '",7,25920,[["p","x\\ry"],["t"]],"a\\nb\\"c\\\\d\\u0001e\u2028é\\t\x7f"]'
    assert compute_id(PK, 7, 25920, tags, content) == hashlib.sha256(expected.encode("utf-8")).hexdigest()


def test_sign_then_verify(alice: SecretKey) -> None:
    event = sign(alice, 25920, [["p", PK], ["expiration", "1700003600"]], "body", 1_700_000_000)
    assert event.pubkey == alice.public_key().to_hex()
    assert event.id == event.computed_id()
    assert len(event.sig) == 128
    event.verify()
    assert event.is_valid()
    assert event.tags == (("p", PK), ("expiration", "1700003600"))


def test_json_round_trip(alice: SecretKey) -> None:
    event = sign(alice, 1, (("e", "x", "relay", "reply"),), "hi ✓", 5)
    value = event.to_json()
    assert value["tags"] == [["e", "x", "relay", "reply"]]
    assert Event.from_json(value) == event


@pytest.fixture
def signed(alice: SecretKey) -> Event:
    return sign(alice, 25920, [["p", PK], ["t", "run"]], "secret stuff", 1_700_000_000)


def _resigned_id(event: Event) -> Event:
    return dataclasses.replace(event, id=event.computed_id())


@pytest.mark.parametrize(
    ("tamper", "code"),
    [
        (lambda e: dataclasses.replace(e, id="0" * 64), "invalid_id"),
        (lambda e: dataclasses.replace(e, content=e.content + "!"), "invalid_id"),
        (lambda e: dataclasses.replace(e, tags=(*e.tags, ("p", PK))), "invalid_id"),
        (lambda e: dataclasses.replace(e, tags=e.tags[::-1]), "invalid_id"),
        (lambda e: dataclasses.replace(e, created_at=e.created_at + 1), "invalid_id"),
        (lambda e: dataclasses.replace(e, kind=26920), "invalid_id"),
        (lambda e: _resigned_id(dataclasses.replace(e, content="other")), "invalid_signature"),
        (lambda e: _resigned_id(dataclasses.replace(e, pubkey=PK)), "invalid_signature"),
        (lambda e: dataclasses.replace(e, sig=e.sig[:-1] + ("0" if e.sig[-1] != "0" else "1")), "invalid_signature"),
        (lambda e: dataclasses.replace(e, sig="zz" * 64), "invalid_signature"),
        (lambda e: _resigned_id(dataclasses.replace(e, pubkey="ff" * 32)), "invalid_signature"),
    ],
)
def test_tampering_fails(signed: Event, tamper: Callable[[Event], Event], code: str) -> None:
    tampered = tamper(signed)
    assert tampered != signed
    with pytest.raises(EventError) as caught:
        tampered.verify()
    assert caught.value.code == code
    assert not tampered.is_valid()


def _with(**changes: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda value: {**value, **changes}


def _without(key: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda value: {k: v for k, v in value.items() if k != key}


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (_without("sig"), "sig"),
        (_without("tags"), "tags"),
        (_with(id="A" * 64), "id"),
        (_with(id="a" * 63), "id"),
        (_with(id=None), "id"),
        (_with(pubkey="0x" + "a" * 62), "pubkey"),
        (_with(sig="a" * 64), "sig"),
        (_with(created_at=True), "created_at"),
        (_with(created_at=1.0), "created_at"),
        (_with(created_at=-1), "created_at"),
        (_with(created_at=2**64), "created_at"),
        (_with(kind=65_536), "kind"),
        (_with(kind="1"), "kind"),
        (_with(tags={"p": "x"}), "tags"),
        (_with(tags=[["p", "x"], []]), "tags[1]"),
        (_with(tags=[["p", 1]]), "tags[0][1]"),
        (_with(tags=["p"]), "tags[0]"),
        (_with(tags=[["p", "\ud800"]]), "tags[0][1]"),
        (_with(content=None), "content"),
        (_with(content="\udfff"), "content"),
    ],
)
def test_from_json_rejects_bad_shapes(
    signed: Event, mutate: Callable[[dict[str, Any]], dict[str, Any]], path: str
) -> None:
    with pytest.raises(EventError) as caught:
        Event.from_json(mutate(signed.to_json()))
    assert (caught.value.code, caught.value.path) == ("malformed", path)


@pytest.mark.parametrize("value", [None, [], "event", 7])
def test_from_json_needs_an_object(value: object) -> None:
    with pytest.raises(EventError) as caught:
        Event.from_json(value)
    assert (caught.value.code, caught.value.path) == ("malformed", "")


def test_unknown_keys_are_ignored(signed: Event) -> None:
    assert Event.from_json({**signed.to_json(), "seen_on": ["wss://x"]}) == signed


@pytest.mark.parametrize(
    ("kind", "tags", "content", "created_at"),
    [
        (-1, [], "", 0),
        (65_536, [], "", 0),
        (1, [[]], "", 0),
        (1, [["p", 3]], "", 0),
        (1, ["p"], "", 0),
        (1, [], "\ud800", 0),
        (1, [], "", True),
        (True, [], "", 0),
    ],
)
def test_sign_refuses_what_could_not_be_parsed_back(
    alice: SecretKey, kind: Any, tags: Any, content: Any, created_at: Any
) -> None:
    with pytest.raises(EventError) as caught:
        sign(alice, kind, tags, content, created_at)
    assert caught.value.code == "malformed"


def test_tag_values(signed: Event, alice: SecretKey) -> None:
    event = sign(alice, 1, [["p", "a"], ["e", "x"], ["p", "b", "relay"], ["p"]], "", 0)
    assert tag_values(event, "p") == ("a", "b")
    assert tag_values(event, "q") == ()
    assert first_tag_value(event, "e") == "x"
    assert first_tag_value(event, "t") is None
    assert first_tag_value(signed, "t") == "run"
