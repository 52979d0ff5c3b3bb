"""Blossom upload authorizations (nostr/blossom.py): BUD-02's 24242 and the relay's 27235, read before the body."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eval_runner.nostr import SecretKey, authorization_event, sign
from eval_runner.nostr.blossom import (
    BLOSSOM_AUTH_KIND,
    BlossomAuthError,
    read_upload_authorization,
    upload_event,
    upload_header,
)
from eval_runner.nostr.nip98 import header_value, read_authorization

UPLOAD_URL = "https://blobs.example.com/upload"
BODY_HASH = hashlib.sha256(b"suite bytes").hexdigest()
NOW = 1_800_000_000


def _code(header: str, *, now: int = NOW, url: str = UPLOAD_URL) -> str:
    with pytest.raises(BlossomAuthError) as caught:
        read_upload_authorization(header, url, now)
    return caught.value.code


def _bud02(secret: SecretKey, tags: list[list[str]], *, created_at: int = NOW, kind: int = BLOSSOM_AUTH_KIND) -> str:
    return header_value(sign(secret, kind, tags, "Upload blob", created_at))


def test_a_bud02_upload_authorization_reads_back(alice: SecretKey) -> None:
    header = upload_header(alice, BODY_HASH, NOW, NOW + 300)
    read = read_upload_authorization(header, UPLOAD_URL, NOW)
    assert (read.scheme, read.pubkey, read.hashes, read.valid_until) == (
        "bud02",
        alice.public_key().to_hex(),
        (BODY_HASH,),
        NOW + 300,
    )
    sent = json.loads(base64.b64decode(header.removeprefix("Nostr ")))
    assert read.event_id == sent["id"]
    assert sent["kind"] == 24_242
    assert sent["tags"] == [["t", "upload"], ["x", BODY_HASH], ["expiration", str(NOW + 300)]]


def test_a_nip98_upload_authorization_reads_back_with_its_payload(alice: SecretKey) -> None:
    header = header_value(authorization_event(alice, UPLOAD_URL, "PUT", BODY_HASH, NOW))
    read = read_upload_authorization(header, UPLOAD_URL, NOW + 60)
    assert (read.scheme, read.hashes, read.valid_until) == ("nip98", (BODY_HASH,), NOW + 60)
    verified, payload = read_authorization(header, UPLOAD_URL, "PUT", NOW)
    assert (verified.pubkey, payload) == (alice.public_key().to_hex(), BODY_HASH)


UPLOAD, X, EXPIRES = ["t", "upload"], ["x", BODY_HASH], ["expiration", str(NOW + 60)]


@pytest.mark.parametrize(
    ("tags", "code"),
    [
        ([["t", "get"], X, EXPIRES], "wrong_verb"),
        ([UPLOAD, UPLOAD, X, EXPIRES], "wrong_verb"),
        ([X, EXPIRES], "wrong_verb"),
        ([UPLOAD, X], "malformed"),
        ([UPLOAD, X, ["expiration", "soon"]], "malformed"),
        ([UPLOAD, X, ["expiration", "-5"]], "malformed"),
        ([UPLOAD, X, ["expiration", str(NOW)]], "expired"),
        ([UPLOAD, X, ["expiration", str(NOW + 86_401)]], "too_long"),
        ([UPLOAD, EXPIRES], "no_payload"),
        ([UPLOAD, ["x", BODY_HASH.upper()], EXPIRES], "no_payload"),
        ([UPLOAD, X, EXPIRES, ["server", "other.example"]], "wrong_server"),
    ],
)
def test_a_bud02_authorization_is_refused_for_each_broken_rule(
    alice: SecretKey, tags: list[list[str]], code: str
) -> None:
    assert _code(_bud02(alice, tags)) == code


def test_a_bud02_authorization_from_the_future_is_refused_past_the_skew(alice: SecretKey) -> None:
    tags = [["t", "upload"], ["x", BODY_HASH], ["expiration", str(NOW + 600)]]
    assert _code(_bud02(alice, tags, created_at=NOW + 61)) == "not_yet_valid"
    assert read_upload_authorization(_bud02(alice, tags, created_at=NOW + 60), UPLOAD_URL, NOW).scheme == "bud02"


@pytest.mark.parametrize("server", ["blobs.example.com", "https://blobs.example.com/", "BLOBS.example.com"])
def test_a_server_tag_naming_this_host_is_taken(alice: SecretKey, server: str) -> None:
    tags = [
        ["t", "upload"],
        ["x", BODY_HASH],
        ["expiration", str(NOW + 60)],
        ["server", "a.example"],
        ["server", server],
    ]
    assert read_upload_authorization(_bud02(alice, tags), UPLOAD_URL, NOW).hashes == (BODY_HASH,)


def test_every_x_tag_is_a_hash_the_body_may_have(alice: SecretKey) -> None:
    other = hashlib.sha256(b"other").hexdigest()
    tags = [UPLOAD, ["x", other], X, EXPIRES]
    assert read_upload_authorization(_bud02(alice, tags), UPLOAD_URL, NOW).hashes == (other, BODY_HASH)


def test_blossom_cli_style_unpadded_base64_is_read(alice: SecretKey) -> None:
    header = upload_header(alice, BODY_HASH, NOW, NOW + 60).rstrip("=")
    assert read_upload_authorization(header, UPLOAD_URL, NOW).scheme == "bud02"


@pytest.mark.parametrize(
    ("url", "method", "payload", "created_at", "code"),
    [
        ("https://blobs.example.com/other", "PUT", BODY_HASH, NOW, "url_mismatch"),
        (UPLOAD_URL, "POST", BODY_HASH, NOW, "method_mismatch"),
        (UPLOAD_URL, "PUT", BODY_HASH, NOW - 61, "expired"),
        (UPLOAD_URL, "PUT", BODY_HASH, NOW + 61, "expired"),
    ],
)
def test_a_nip98_authorization_is_refused_for_each_broken_rule(
    alice: SecretKey, url: str, method: str, payload: str, created_at: int, code: str
) -> None:
    assert _code(header_value(authorization_event(alice, url, method, payload, created_at))) == code


@pytest.mark.parametrize(
    "tags",
    [
        [["u", UPLOAD_URL], ["method", "PUT"]],
        [["u", UPLOAD_URL], ["method", "PUT"], ["payload", "not-a-hash"]],
        [["u", UPLOAD_URL], ["method", "PUT"], ["payload", BODY_HASH], ["payload", BODY_HASH]],
    ],
)
def test_a_nip98_authorization_without_one_well_formed_payload_is_refused(
    alice: SecretKey, tags: list[list[str]]
) -> None:
    assert _code(header_value(sign(alice, 27_235, tags, "", NOW))) == "no_payload"


def test_other_kinds_and_bad_signatures_are_refused(alice: SecretKey) -> None:
    assert _code(_bud02(alice, [["t", "upload"]], kind=1)) == "wrong_kind"
    value = upload_event(alice, BODY_HASH, NOW, NOW + 60).to_json()
    value["content"] = "changed"
    forged = "Nostr " + base64.b64encode(json.dumps(value).encode()).decode()
    assert _code(forged) == "invalid_event"
    assert _code("Bearer abc") == "missing"


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=300))
def test_any_header_text_is_refused_with_the_one_error(text: str) -> None:
    with pytest.raises(BlossomAuthError):
        read_upload_authorization(text, UPLOAD_URL, NOW)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
_EVENTISH = st.fixed_dictionaries(
    {},
    optional={
        "id": st.text(max_size=70) | st.just("0" * 64),
        "pubkey": st.text(max_size=70) | st.just("0" * 64),
        "created_at": st.integers() | _JSON,
        "kind": st.sampled_from([24_242, 27_235, 1]) | _JSON,
        "tags": st.lists(st.lists(st.text(max_size=70), max_size=3), max_size=4) | _JSON,
        "content": st.text(max_size=20) | _JSON,
        "sig": st.text(max_size=130) | st.just("0" * 128),
    },
)


@settings(max_examples=400, deadline=None)
@given(_EVENTISH, st.booleans())
def test_any_base64_json_is_refused_with_the_one_error(value: dict[str, object], pad: bool) -> None:
    token = base64.b64encode(json.dumps(value).encode()).decode()
    with pytest.raises(BlossomAuthError):
        read_upload_authorization(f"Nostr {token if pad else token.rstrip('=')}", UPLOAD_URL, NOW)
