"""NIP-98 upload authorization (wire.md §19.2) and the NIP-42 AUTH event."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json

import pytest

from eval_runner.nostr import (
    Event,
    Nip98Error,
    SecretKey,
    auth_event,
    authorization_event,
    authorization_header,
    sign,
    verify_authorization,
)
from eval_runner.nostr.nip98 import header_value

URL = "https://relay.example.com/upload"
BODY = b"suite bytes\n"
BODY_HASH = hashlib.sha256(BODY).hexdigest()
NOW = 1_800_000_000


def _event_of(header: str) -> dict[str, object]:
    value = json.loads(base64.b64decode(header.split(" ", 1)[1], validate=True))
    assert isinstance(value, dict)
    return value


def _refused(header: str, *, url: str = URL, method: str = "PUT", body_hash: str = BODY_HASH, now: int = NOW) -> str:
    with pytest.raises(Nip98Error) as caught:
        verify_authorization(header, url, method, body_hash, now)
    return caught.value.code


def test_header_shape(alice: SecretKey) -> None:
    header = authorization_header(alice, URL, "PUT", BODY, NOW)
    assert header.startswith("Nostr ")
    value = _event_of(header)
    assert value["kind"] == 27235
    assert value["content"] == ""
    assert value["tags"] == [["u", URL], ["method", "PUT"], ["payload", BODY_HASH]]
    assert value["created_at"] == NOW
    Event.from_json(value).verify()


def test_build_then_verify(alice: SecretKey) -> None:
    header = authorization_header(alice, URL, "PUT", BODY, NOW)
    verified = verify_authorization(header, URL, "PUT", BODY_HASH, NOW + 5)
    assert verified.pubkey == alice.public_key().to_hex()
    assert verified.event_id == _event_of(header)["id"]
    assert verified.created_at == NOW


@pytest.mark.parametrize("offset", [-60, 60])
def test_window_edges_are_inside(alice: SecretKey, offset: int) -> None:
    header = authorization_header(alice, URL, "PUT", BODY, NOW + offset)
    assert verify_authorization(header, URL, "PUT", BODY_HASH, NOW).pubkey == alice.public_key().to_hex()


@pytest.mark.parametrize("offset", [-61, 61, -3600])
def test_outside_window_is_expired(alice: SecretKey, offset: int) -> None:
    assert _refused(authorization_header(alice, URL, "PUT", BODY, NOW + offset)) == "expired"


def test_request_mismatches(alice: SecretKey) -> None:
    header = authorization_header(alice, URL, "PUT", BODY, NOW)
    assert _refused(header, url=URL + "?x=1") == "url_mismatch"
    assert _refused(header, url="https://relay.example.com/upload/") == "url_mismatch"
    assert _refused(header, method="POST") == "method_mismatch"
    assert _refused(header, method="put") == "method_mismatch"
    assert _refused(header, body_hash=hashlib.sha256(b"other").hexdigest()) == "payload_mismatch"


def test_unpadded_base64_is_accepted(alice: SecretKey) -> None:
    header = authorization_header(alice, URL + "/x", "PUT", BODY, NOW)
    unpadded = header.rstrip("=")
    assert unpadded != header, "pick a URL whose header needs padding"
    assert verify_authorization(unpadded, URL + "/x", "PUT", BODY_HASH, NOW).pubkey == alice.public_key().to_hex()


def test_scheme_is_case_insensitive(alice: SecretKey) -> None:
    header = authorization_header(alice, URL, "PUT", BODY, NOW)
    assert verify_authorization("nostr " + header[6:], URL, "PUT", BODY_HASH, NOW).event_id


@pytest.mark.parametrize(
    ("header", "code"),
    [
        ("", "missing"),
        ("Nostr", "missing"),
        ("Bearer abc", "missing"),
        ("Nostr !!!!", "malformed"),
        ("Nostr " + base64.b64encode(b"not json").decode(), "malformed"),
        ("Nostr " + base64.b64encode(b"\xff\xfe").decode(), "malformed"),
        ("Nostr " + base64.b64encode(b'{"kind":27235}').decode(), "invalid_event"),
        ("Nostr " + "A" * 20_000, "malformed"),
    ],
)
def test_unusable_headers(header: str, code: str) -> None:
    assert _refused(header) == code


def test_bad_signature_is_refused(alice: SecretKey, bob: SecretKey) -> None:
    event = authorization_event(alice, URL, "PUT", BODY_HASH, NOW)
    forged = dataclasses.replace(event, pubkey=bob.public_key().to_hex())
    forged = dataclasses.replace(forged, id=forged.computed_id())
    assert _refused(header_value(forged)) == "invalid_event"
    assert _refused(header_value(dataclasses.replace(event, content="x"))) == "invalid_event"


def test_wrong_kind_and_tag_multiplicity(alice: SecretKey) -> None:
    tags = [["u", URL], ["method", "PUT"], ["payload", BODY_HASH]]
    assert _refused(header_value(sign(alice, 24242, tags, "", NOW))) == "wrong_kind"
    assert _refused(header_value(sign(alice, 27235, tags[:2], "", NOW))) == "malformed"
    assert _refused(header_value(sign(alice, 27235, [*tags, ["u", URL]], "", NOW))) == "malformed"


def test_payload_must_be_hex_when_building(alice: SecretKey) -> None:
    with pytest.raises(Nip98Error):
        authorization_event(alice, URL, "PUT", "sha256:" + BODY_HASH, NOW)


def test_nip42_auth_event(alice: SecretKey) -> None:
    event = auth_event(alice, "wss://relay.example.com", "challenge-123", NOW)
    event.verify()
    assert event.kind == 22242
    assert event.content == ""
    assert event.tags == (("relay", "wss://relay.example.com"), ("challenge", "challenge-123"))
    assert event.created_at == NOW
    assert event.pubkey == alice.public_key().to_hex()
