"""`Event.verify` remembers signatures it checked (the runner verifies each request twice); what it remembers
must never vouch for anything but the exact event it checked."""

from __future__ import annotations

import dataclasses

import pytest

from eval_runner.nostr import Event, EventError, SecretKey, sign

SIGNER = SecretKey.parse("33" * 32)


def checked() -> Event:
    event = sign(SIGNER, 25_920, [["p", "44" * 32]], "a sealed request", 1_800_000_000)
    event.verify()
    event.verify()  # the second check is answered from memory
    return event


def refusal(event: Event) -> str:
    with pytest.raises(EventError) as caught:
        event.verify()
    return caught.value.code


def test_a_remembered_event_with_other_fields_is_still_refused() -> None:
    event = checked()
    assert refusal(dataclasses.replace(event, content="another request")) == "invalid_id"
    assert refusal(dataclasses.replace(event, created_at=event.created_at + 1)) == "invalid_id"
    assert refusal(dataclasses.replace(event, tags=(("p", "55" * 32),))) == "invalid_id"


def test_a_remembered_id_with_another_signature_or_signer_is_still_refused() -> None:
    event = checked()
    other = sign(SIGNER, 1, [], "other", 1_800_000_000)
    assert refusal(dataclasses.replace(event, sig=other.sig)) == "invalid_signature"
    assert refusal(dataclasses.replace(event, sig="0" * 128)) == "invalid_signature"
    moved = dataclasses.replace(event, pubkey=SecretKey.parse("66" * 32).public_key().to_hex())
    assert refusal(moved) == "invalid_id"
    assert refusal(dataclasses.replace(moved, id=moved.computed_id())) == "invalid_signature"


def test_a_refused_signature_stays_refused() -> None:
    event = dataclasses.replace(checked(), sig="1" * 128)
    assert refusal(event) == "invalid_signature"
    assert refusal(event) == "invalid_signature"
